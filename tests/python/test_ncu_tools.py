# The kernel-reading tools: bench/ncu_stall_top.py, bench/ncu_times.py, bench/ncu_limits.py and
# bench/ncu_opcode_mix.py, the readers of the GPU machine's ncu output (the stall summary of a source-page CSV, the
# per-kernel times and the baseline/gproj table of a times CSV, the limits table of raw-page reports, executed
# instructions by opcode side by side, two source pages summed per source line: bench/ncu_source_lines.py, a
# loop's regions between its synchronisation points: bench/ncu_loop_regions.py; compressed pages), and
# bench/sass_count.py (static opcode counts of a cuobjdump listing), on small files whose answers are known, and
# their refusals. Part of scripts/python_test.sh.
import pytest

from script_loader import ROOT
from script_loader import load as load_script


def load(name):
    return load_script(name, ROOT / "bench" / f"{name}.py")

def write_csv(path):
    lines = [
        '"Kernel Name","void k(Params)",',
        '"Address","Source","Warp Stall Sampling (All Samples)","stall_long_sb","stall_wait",'
        '"stall_long_sb (Not Issued)"',
        '"0x10","IADD3 R1, R2, R3","10","8","2","8"',
        '"0x20","HGMMA.64x64x16","60","0","60","0"',
        '"0x30","REDG.E.ADD","30","25","5","25"',
    ]
    path.write_text("\n".join(lines) + "\n")


def test_shares_and_top_sites(tmp_path):
    top = load("ncu_stall_top")
    f = tmp_path / "sass.csv"
    write_csv(f)
    total, reasons, sites = top.summarize(f, n=2)
    assert total == 100
    assert reasons == [("wait", pytest.approx(0.67)), ("long_sb", pytest.approx(0.33))]
    # the two largest, in address order, each with its two largest reasons ("Not Issued" columns left out)
    assert [(s[0], s[1], s[2]) for s in sites] == [(1, "0x20", pytest.approx(0.6)), (2, "0x30", pytest.approx(0.3))]
    assert sites[1][4] == [(25.0, "long_sb"), (5.0, "wait")]


def test_refuses_a_file_without_samples(tmp_path):
    f = tmp_path / "other.csv"
    f.write_text('"a","b"\n"1","2"\n')
    with pytest.raises(ValueError, match="not an ncu source-page CSV"):
        load("ncu_stall_top").summarize(f)


HEAD = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
        '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def write_times(path, kernels, phases=None):
    """kernels: [(name, ns)] of one warm-up and one timed call (the list is written twice); or phases: a list of
    such lists, each written twice in turn, as cuda_attention_bench runs them (the forward twice, then the
    backward twice)."""
    lines = ["==PROF== Connected", HEAD]
    seq = kernels + kernels if phases is None else [k for ph in phases for k in ph + ph]
    for n, (name, ns) in enumerate(seq):
        lines.append(f'"{n}","1","b","h","{name}","1","7","(1,1,1)","(1,1,1)","0","9.0","m","gpu__time_duration.sum",'
                     f'"ns","{ns:,}"')
    path.write_text("\n".join(lines) + "\n")


def test_timed_half_and_comparison(tmp_path, capsys):
    nt = load("ncu_times")
    write_times(tmp_path / "times_x_baseline.csv", [("void flash_fwd_wg_kernel<128, 0, 1>(P)", 1000),
                                                    ("void flash_bwd_wg_kernel<128, 0>(P)", 4000000),
                                                    ("void bwd_postprocess_dq_kernel<0>(P)", 50000)])
    write_times(tmp_path / "times_x_gproj.csv", [("void flash_fwd_wg_kernel<128, 1, 1>(P)", 1000),
                                                 ("void flash_bwd_wg_kernel<128, 1>(P)", 4400000),
                                                 ("void thresh_dq_kernel<128>(P)", 200000)])
    calls = nt.timed_calls(tmp_path / "times_x_gproj.csv")
    assert [us for _, us in calls] == [1.0, 4400.0, 200.0]  # the second call of each, in µs
    assert list(nt.by_kernel(calls, base_names=True, backward_only=True)) == ["flash_bwd_wg_kernel", "thresh_dq_kernel"]
    nt.print_compare(str(tmp_path))
    out = capsys.readouterr().out
    assert "## x (ncu µs, backward kernels)" in out
    assert "+400.0" in out and "-50.0" in out and "+200.0" in out  # main kernel, dQ conversion, dQ correction
    assert "(+13.6%)" in out  # 4600 against 4050


def test_missing_rows_are_reported(tmp_path, capsys):
    nt = load("ncu_times")
    (tmp_path / "times_y_baseline.csv").write_text("==PROF== no kernels\n")
    assert nt.timed_calls(tmp_path / "times_y_baseline.csv") is None
    nt.print_compare(str(tmp_path))
    assert "no ncu rows" in capsys.readouterr().out


# bench/sass_count.py: static opcode counts per function of a cuobjdump -sass listing, and OLD -> NEW changes.
SASS = """
	code for sm_90a
		Function : _Z6kernelAv
	.headerflags	@"EF_CUDA_SM90"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                   /* 0x00000a00ff017b82 */
        /*0010*/              @!P0 LDG.E.128 R4, desc[UR8][R2.64] ;        /* 0x0000000802048981 */
        /*0020*/                   LDG.E R6, desc[UR8][R2.64+0x10] ;       /* 0x0000100802067981 */
        /*0030*/                   EXIT ;                                   /* 0x000000000000794d */
		Function : _Z6kernelBv
        /*0000*/                   R2UR UR4, R0 ;                           /* 0x00000000000472ca */
        /*0010*/                   EXIT ;                                   /* 0x000000000000794d */
"""


def test_sass_counts_per_function(tmp_path, capsys):
    sc = load("sass_count")
    funcs = sc.functions(SASS)
    assert set(funcs) == {"_Z6kernelAv", "_Z6kernelBv"}
    assert funcs["_Z6kernelAv"] == {"LDC": 1, "LDG": 2, "EXIT": 1}  # the predicate and modifiers are not opcodes
    assert sum(funcs["_Z6kernelBv"].values()) == 2
    old = tmp_path / "old.sass"
    new = tmp_path / "new.sass"
    old.write_text(SASS)
    new.write_text(SASS.replace("        /*0020*/                   LDG.E R6, desc[UR8][R2.64+0x10] ;       /* 0x0000100802067981 */\n", ""))
    assert sc.main(["sass_count.py", str(old), str(new), "kernelA"]) == 0
    out = capsys.readouterr().out
    assert "4 -> 3 instructions; LDG -1" in out and "kernelB" not in out
    assert sc.main(["sass_count.py", str(new), "no_such_kernel"]) == 2


def test_sass_count_refuses_other_text():
    with pytest.raises(ValueError, match="not cuobjdump"):
        load("sass_count").functions("ptxas info: Used 80 registers")


def test_timed_calls_of_phases_run_twice_each(tmp_path):
    # The benchmark's real order: forward, forward, backward, backward. The second half of these launches would
    # hold the warm-up backward's last kernel too (the session-10 correction); each phase's second copy does not.
    nt = load("ncu_times")
    fwd = [("void flash_fwd_wg_kernel<128, 1, 1>(P)", 1000)]
    bwd = [("void bwd_preprocess_vec_kernel<128>(P)", 50000), ("void flash_bwd_wg_kernel<128, 1>(P)", 4400000),
           ("void bwd_postprocess_dkv_kernel<1>(P)", 100000)]
    write_times(tmp_path / "t.csv", None, phases=[fwd, bwd])
    calls = nt.timed_calls(tmp_path / "t.csv")
    assert [us for _, us in calls] == [1.0, 50.0, 4400.0, 100.0]
    assert nt.by_kernel(calls)["void bwd_postprocess_dkv_kernel<1>(P)"] == 100.0  # once, not 200


@pytest.mark.parametrize("names, blocks", [
    (list("aabcbc"), [(0, 1), (2, 2)]),
    (list("yxxyxx"), [(0, 3)]),           # a block that repeats a kernel inside it
    (list("xxxx"), [(0, 1), (2, 1)]),     # ambiguous, but the same kernels either way
    (list("abcab"), None),                # not phases run twice: the caller falls back with a warning
])
def test_doubled_blocks(names, blocks):
    assert load("ncu_times").doubled_blocks(names) == blocks


def write_raw_report(path, time_ns, red_requests, stall_gmma=None):
    """An `ncu --csv --page raw` report of one launch: header, units, one row (thousands separators as ncu)."""
    names = ["ID", "Kernel Name", "gpu__time_duration.sum", "smsp__inst_executed.sum", "lts__t_requests_op_red.sum",
             "lts__d_atomic_input_cycles_active.avg.pct_of_peak_sustained_elapsed"]
    units = ["", "", "ns", "inst", "request", "%"]
    values = ["0", "void k(Params)", f"{time_ns:,}", "1,012,177,127", f"{red_requests:,}", "23.58"]
    if stall_gmma is not None:
        names.append("smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio")
        units.append("")
        values.append(str(stall_gmma))
    rows = [names, units, values]
    path.write_text("\n".join(",".join(f'"{c}"' for c in r) for r in rows) + "\n")


def test_ncu_limits_tabulates_reports_side_by_side(tmp_path, capsys):
    nl = load("ncu_limits")
    write_raw_report(tmp_path / "baseline.csv", 3547136, 201326592, stall_gmma=0.27)
    write_raw_report(tmp_path / "gproj.csv", 3752400, 207618048)
    assert nl.main([str(tmp_path / "baseline.csv"), str(tmp_path / "gproj.csv")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["baseline", "gproj"]
    w = len(out[0]) - len(out[0].lstrip())  # the label column, as wide as the longest label plus two
    rows = {line[:w].strip(): line[w:].split() for line in out[1:]}
    assert rows["time (us)"] == ["3547.14", "3752.40"]  # ns -> µs
    assert rows["instructions (M)"] == ["1012.2", "1012.2"]
    assert rows["L2 red requests (M)"] == ["201.3", "207.6"]
    assert rows["L2 atomic unit %"] == ["23.58", "23.58"]
    assert rows["stall gmma"] == ["0.27", "-"]  # a metric one report lacks
    assert "tensor pipe %" not in rows  # rows no report has are left out


def test_ncu_limits_names_a_report_without_a_kernel_row(tmp_path, capsys):
    nl = load("ncu_limits")
    write_raw_report(tmp_path / "ok.csv", 1000, 8)
    (tmp_path / "failed.csv").write_text("==ERROR== the application returned an error\n")
    assert nl.main([str(tmp_path / "failed.csv"), str(tmp_path / "ok.csv")]) == 0
    captured = capsys.readouterr()
    assert "failed.csv: no kernel row" in captured.err
    assert captured.out.splitlines()[0].split() == ["ok"]
    assert nl.main([str(tmp_path / "failed.csv"), str(tmp_path / "missing.csv")]) == 1



def write_exec_csv(path, rows):
    """rows: [(source, executed)] as ncu's source page lists them (executed counts may carry thousands commas)."""
    lines = ['"Kernel Name","void k(Params)",', '"Address","Source","Warp Stall Sampling (All Samples)",'
             '"Instructions Executed"']
    lines += [f'"0x{16 * k:x}","{src}","0","{n}"' for k, (src, n) in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n")


def test_opcode_mix_adds_by_mnemonic_and_compares(tmp_path, capsys):
    mix = load("ncu_opcode_mix")
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    write_exec_csv(a, [("IMAD R1, R2, R3, RZ", "100"), ("HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8]", "50")])
    # a predicated instruction counts under its mnemonic; variants after the first '.' are one opcode
    write_exec_csv(b, [("IMAD R1, R2, R3, RZ", "100"), ("@!P0 IMAD.MOV.U32 R4, RZ, RZ, RZ", "1,000"),
                       ("HGMMA.64x16x16.F32.BF16 R24, gdesc[UR8]", "50"), ("FMNMX R1, R2, R3, !PT", "200")])
    assert mix.opcode_counts(b) == {"IMAD": 1100, "HGMMA": 50, "FMNMX": 200}
    assert mix.main([f"base={a}", f"new={b}", "--per", "50"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["opcode", "base", "new", "new-base"]
    # sorted by the difference: IMAD (+20 per 50), FMNMX (+4), HGMMA (0)
    assert [line.split()[0] for line in out[1:4]] == ["IMAD", "FMNMX", "HGMMA"]
    assert out[1].split()[1:] == ["2.0", "22.0", "20.0"]
    assert out[-1].split() == ["total", "3.0", "27.0", "24.0"]


def test_opcode_mix_sums_another_column(tmp_path, capsys):
    mix = load("ncu_opcode_mix")
    a = tmp_path / "a.csv"
    a.write_text("\n".join([
        '"Kernel Name","void k(Params)",',
        '"Address","Source","Instructions Executed","L1 Wavefronts Shared","L1 Wavefronts Shared Excessive"',
        '"0x10","STS.64 [R1], R2","100","400","200"',
        '"0x20","@P0 STS.64 [R3], R4","100","400","200"',
        '"0x30","HGMMA.64x16x16.F32.BF16 R24, gdesc[UR8]","10","50","0"',
        '"0x40","IMAD R1, R2, R3, RZ","300","",""',
    ]) + "\n")
    assert mix.opcode_counts(a, "L1 Wavefronts Shared Excessive") == {"STS": 400, "HGMMA": 0, "IMAD": 0}
    assert mix.main([f"x={a}", "--metric", "L1 Wavefronts Shared"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].split() == ["total", "850.0", "0.0"]
    with pytest.raises(ValueError, match="no 'L2 Nothing' column"):
        mix.opcode_counts(a, "L2 Nothing")


def test_opcode_mix_refuses_other_files_and_arguments(tmp_path):
    mix = load("ncu_opcode_mix")
    f = tmp_path / "other.csv"
    f.write_text('"a","b"\n"1","2"\n')
    with pytest.raises(ValueError, match="not an ncu source-page CSV"):
        mix.opcode_counts(f)
    with pytest.raises(SystemExit):
        mix.main(["no-label-here"])
    with pytest.raises(SystemExit):
        mix.main([f"x={f}", "--per", "0"])


# bench/ncu_source_lines.py: two kernels' source pages summed per line of a source file, through a line-info dump.
LINEINFO = """\t.text._Z1kILi1EEvv:
\t//## File "/r/src/cuda/a.cuh", line 7
        /*0000*/                   IADD3 R1, R2, R3, RZ ;
\t//## File "/r/src/cuda/b.cuh", line 3 inlined at "/r/src/cuda/a.cuh", line 9
        /*0010*/                   HGMMA.64x64x16.F32.BF16 R8, gdesc[UR4], R8 ;
\t.text._Z1kILi2EEvv:
\t//## File "/r/src/cuda/a.cuh", line 7
        /*0000*/                   IADD3 R1, R2, R3, RZ ;
        /*0010*/                   IADD3 R4, R2, R3, RZ ;
\t//## File "/r/src/cuda/a.cuh", line 9
        /*0020*/                   REDG.E.ADD.F32x2 desc[UR4][R2.64], R8 ;
"""


def write_page(path, rows):
    lines = ['"Kernel Name","void k()",',
             '"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed"']
    lines += [f'"0x{10 * i:x}","{src}","{smp}","{ex}"' for i, (src, smp, ex) in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n")


def test_source_lines_sum_per_outermost_line(tmp_path):
    mod = load("ncu_source_lines")
    sass = tmp_path / "k.sass"
    sass.write_text(LINEINFO)
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    write_page(a, [("IADD3 R1, R2, R3, RZ", 5, 100), ("HGMMA.64x64x16.F32.BF16 R8, gdesc[UR4], R8", 20, 10)])
    write_page(b, [("IADD3 R1, R2, R3, RZ", 6, 100), ("IADD3 R4, R2, R3, RZ", 1, 100),
                   ("@P0 REDG.E.ADD.F32x2 desc[UR4][R2.64], R8", 30, 50)])
    smp_a, ex_a = mod.per_line(a, mod.line_map(sass, "a.cuh", "ILi1E"))
    smp_b, ex_b = mod.per_line(b, mod.line_map(sass, "a.cuh", "ILi2E"))
    # the inlined HGMMA (b.cuh line 3) belongs to a.cuh line 9, where it was inlined
    assert dict(smp_a) == {7: 5.0, 9: 20.0} and dict(ex_a) == {7: 100.0, 9: 10.0}
    assert dict(smp_b) == {7: 7.0, 9: 30.0} and dict(ex_b) == {7: 200.0, 9: 50.0}


def test_source_lines_refuse_another_build(tmp_path):
    mod = load("ncu_source_lines")
    sass = tmp_path / "k.sass"
    sass.write_text(LINEINFO)
    page = tmp_path / "a.csv"
    write_page(page, [("IADD3 R1, R2, R3, RZ", 5, 100), ("FFMA R8, R1, R2, R3", 20, 10)])
    with pytest.raises(SystemExit, match="not the same build"):
        mod.per_line(page, mod.line_map(sass, "a.cuh", "ILi1E"))
    with pytest.raises(SystemExit, match="no kernel whose name contains"):
        mod.line_map(sass, "a.cuh", "ILi3E")


def test_a_compressed_page_reads_as_the_plain_one(tmp_path):
    # committed pages are xz-compressed (SRC.csv.xz): the same summary
    import lzma

    top = load("ncu_stall_top")
    f = tmp_path / "sass.csv"
    write_csv(f)
    packed = tmp_path / "sass.csv.xz"
    with lzma.open(packed, "wb") as g:
        g.write(f.read_bytes())
    assert top.summarize(packed, n=2) == top.summarize(f, n=2)


def test_loop_regions_cut_at_the_synchronisation_points(tmp_path, capsys):
    mod = load("ncu_loop_regions")
    page = tmp_path / "loop.csv"
    # a prologue run once a warp (4), then a loop of 100 iterations: two regions closed by a barrier and a wgmma
    # wait, and a tail; a barrier of the prologue (run 4 times) closes no region
    write_page(page, [("IADD3 R1, R2, R3, RZ", 1, 4), ("BAR.SYNC.DEFER_BLOCKING 0x0", 2, 4),
                      ("FFMA R1, R2, R3, R4", 10, 200), ("BAR.SYNC.DEFER_BLOCKING R0, 0x80", 5, 100),
                      ("HGMMA.64x64x16.F32 R8, gdesc[UR4], R8", 3, 100), ("WARPGROUP.DEPBAR.LE gsb0, 0x0", 40, 100),
                      ("STG.E [R2], R8", 1, 100)])
    rows, total, n = mod.regions(str(page))
    assert n == 100 and total == 62
    assert [(a, b, ins, smp) for a, b, ins, smp, _ in rows] == [
        (0, 3, 3.08, 18), (4, 5, 2.0, 43), (6, 6, 1.0, 1)]
    assert rows[1][4].startswith("WARPGROUP.DEPBAR") and rows[2][4] == "(end of the kernel)"
    mod.main([str(page), "--iterations", "50"])  # the loop count given: each region's instructions doubled
    assert "6.2" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="ncu_loop_regions: .*no 'Warp Stall Sampling"):
        other = tmp_path / "other.csv"
        other.write_text('"a","b"\n"1","2"\n')
        mod.main([str(other)])
