# scripts/sass_atomics.py (which global atomics each kernel's SASS issues, and the returning ones whose result is
# unused): on SASS written here in cuobjdump's layout, through a stand-in cuobjdump, the download of cuobjdump with a
# stand-in pip, and its refusals. Part of scripts/python_test.sh.
import os
import stat
import sys

import pytest

from script_loader import ROOT
from script_loader import load as load_script

sa = load_script("sass_atomics", ROOT / "scripts" / "sass_atomics.py")


def kernel(name, body):
    lines = [f"\t\tFunction : {name}", '\t.headerflags\t@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS"']
    for k, instr in enumerate(body):
        lines.append(f"        /*{16 * k:04x}*/                   {instr} ;   /* 0x000000000000 */")
        lines.append(" " * 77 + "/* 0x000fe20000000000 */")  # cuobjdump's second line of each instruction
    return "\n".join(lines) + "\n"


BODY_UNREAD = ["LDC R1, c[0x0][0x28]",
               "ATOMG.E.ADD.F32.FTZ.RN.STRONG.GPU PT, RZ, desc[UR4][R2.64], R5",
               "FFMA R4, R4, R5, R6", "IADD3 R7, R7, 0x1, RZ", "BAR.SYNC.DEFER_BLOCKING 0x0", "EXIT", "BRA 0x60"]
BODY_AT_EXIT = ["LDC R1, c[0x0][0x28]", "REDG.E.ADD.F32x2.FTZ.RN.STRONG.GPU desc[UR4][R2.64], R4",
                "ATOMG.E.ADD.STRONG.GPU PT, RZ, desc[UR4][R2.64], R5", "EXIT", "BRA 0x40"]
BODY_USED = ["@P0 ATOMG.E.ADD.STRONG.GPU PT, R6, desc[UR4][R2.64], R5", "ATOM.E.ADD.STRONG.GPU PT, R8, [R2.64], R5",
             "ATOMS.ADD RZ, [R3], R5", "EXIT"]
SASS = (kernel("_Z3badPf", BODY_UNREAD) + kernel("_Z4exitPf", BODY_AT_EXIT) + kernel("_Z4usedPf", BODY_USED)
        + kernel("_Z4nonePf", ["FADD R1, R1, R2", "EXIT"]))


@pytest.fixture
def sass(tmp_path):
    p = tmp_path / "k.sass"
    p.write_text(SASS)
    return p


def test_parse_keeps_each_kernels_instructions_in_order():
    ks = sa.parse(SASS)
    assert list(ks) == ["_Z3badPf", "_Z4exitPf", "_Z4usedPf", "_Z4nonePf"]
    assert ks["_Z3badPf"][1] == ("ATOMG.E.ADD.F32.FTZ.RN.STRONG.GPU", "PT, RZ, desc[UR4][R2.64], R5")
    assert ks["_Z4usedPf"][0][0] == "ATOMG.E.ADD.STRONG.GPU"  # the predicate guard is not the opcode
    assert ks["_Z4exitPf"][1][0] == "REDG.E.ADD.F32x2.FTZ.RN.STRONG.GPU"


def test_a_discarded_result_is_found_in_the_body_and_not_counted_at_exit():
    ks = sa.parse(SASS)
    counts, unread, at_exit = sa.summarize(ks["_Z3badPf"])
    assert (unread, at_exit) == (1, 0)  # EXIT is four instructions later: outside the window
    assert counts == {"ATOMG.E.ADD.F32.FTZ.RN.STRONG.GPU (result unused)": 1}
    counts, unread, at_exit = sa.summarize(ks["_Z4exitPf"])
    assert (unread, at_exit) == (0, 1)
    assert counts["REDG.E.ADD.F32x2.FTZ.RN.STRONG.GPU"] == 1
    counts, unread, at_exit = sa.summarize(ks["_Z4usedPf"])
    assert (unread, at_exit) == (0, 0)  # results in R6 and R8; ATOMS (shared memory) is not a global atomic
    assert counts == {"ATOMG.E.ADD.STRONG.GPU": 1, "ATOM.E.ADD.STRONG.GPU": 1}


def test_exit_status_and_lines(sass, capsys):
    assert sa.main(["--sass", str(sass)]) == 1
    out = capsys.readouterr().out
    assert "<-- 1 returning atomic(s) with the result unused" in out
    assert "3 kernel(s) listed, 1 with a returning atomic whose result is unused" in out
    assert "(1 at exit)" in out
    assert sa.main(["--sass", str(sass), "--kernels", "exit|used"]) == 0
    assert "2 kernel(s) listed, 0 with" in capsys.readouterr().out
    assert sa.main(["--sass", str(sass), "--all", "--kernels", "none"]) == 0
    assert "no global atomic" in capsys.readouterr().out


def fake_cuobjdump(tmp_path, script):
    p = tmp_path / "cuobjdump"
    p.write_text("#!/bin/sh\n" + script)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return p


def test_a_binary_goes_through_cuobjdump(tmp_path, sass, monkeypatch, capsys):
    binary = tmp_path / "app"
    binary.write_bytes(b"\x7fELF")
    monkeypatch.setenv("CUOBJDUMP", str(fake_cuobjdump(tmp_path, f'[ "$1" = -sass ] && cat "{sass}"\n')))
    assert sa.main([str(binary), "--kernels", "bad"]) == 1
    assert "1 kernel(s) listed, 1 with" in capsys.readouterr().out
    monkeypatch.setenv("CUOBJDUMP", str(fake_cuobjdump(tmp_path, 'echo "not an ELF" >&2; exit 1\n')))
    assert sa.main([str(binary)]) == 2
    err = capsys.readouterr().err
    assert f"cuobjdump -sass {binary} failed: not an ELF" in err


@pytest.mark.parametrize("argv, message", [
    ([], "give a BINARY or --sass FILE"),
    (["x", "--sass", "y"], "give a BINARY or --sass FILE"),
    (["--sass", "/nonexistent/k.sass"], "cannot read /nonexistent/k.sass"),
    (["/nonexistent/app"], "no file /nonexistent/app"),
    (["--sass", "SASS", "--kernels", "("], "--kernels is not a valid regex"),
])
def test_refusals(argv, message, sass, capsys):
    argv = [str(sass) if a == "SASS" else a for a in argv]
    assert sa.main(argv) == 2
    assert message in capsys.readouterr().err


def test_sass_without_a_kernel_is_refused(tmp_path, capsys):
    p = tmp_path / "empty.sass"
    p.write_text("Fatbin elf code:\n================\narch = sm_90a\n")
    assert sa.main(["--sass", str(p)]) == 2
    assert "no kernel" in capsys.readouterr().err


def test_without_cuobjdump_the_refusal_says_where_to_get_it(tmp_path, monkeypatch, capsys):
    binary = tmp_path / "app"
    binary.write_bytes(b"\x7fELF")
    monkeypatch.setattr(sa, "find_cuobjdump", lambda: None)
    assert sa.main([str(binary)]) == 2
    assert "nvidia-cuda-cuobjdump" in capsys.readouterr().err


FAKE_PIP = r'''import os, sys, zipfile
spec, into = sys.argv[-3], sys.argv[-1]
if "FAIL" in os.environ.get("FAKE_PIP", ""):
    sys.exit("ERROR: No matching distribution found for " + spec)
tool = "cuobjdump" if "cuobjdump" in spec else "nvdisasm"
os.makedirs(into, exist_ok=True)
with zipfile.ZipFile(os.path.join(into, "nvidia_" + tool + "-13.0-py3-none-any.whl"), "w") as z:
    z.writestr("nvidia/cu13/bin/" + tool, "#!/bin/sh\necho " + tool + "\n")
'''


def test_fetch_puts_both_tools_in_place(tmp_path, monkeypatch):
    pip = tmp_path / "pip.py"
    pip.write_text(FAKE_PIP)
    tools = tmp_path / "tools"
    monkeypatch.delenv("FAKE_PIP", raising=False)
    got = sa.fetch_cuobjdump(tools=str(tools), pip=(sys.executable, str(pip)))
    assert got == str(tools / "cuobjdump")
    assert sorted(os.listdir(tools)) == ["cuobjdump", "nvdisasm"]  # the temporary folder is gone
    for tool in ("cuobjdump", "nvdisasm"):
        assert os.access(tools / tool, os.X_OK)
        assert (tools / tool).read_text().endswith(f"echo {tool}\n")


def test_fetch_says_why_it_failed(tmp_path, monkeypatch, capsys):
    pip = tmp_path / "pip.py"
    pip.write_text(FAKE_PIP)
    monkeypatch.setenv("FAKE_PIP", "FAIL")
    assert sa.fetch_cuobjdump(tools=str(tmp_path / "tools"), pip=(sys.executable, str(pip))) is None
    err = capsys.readouterr().err
    assert "pip download nvidia-cuda-nvdisasm>=13,<14 failed" in err and "No matching distribution" in err
    assert not (tmp_path / "tools" / "cuobjdump").exists()
