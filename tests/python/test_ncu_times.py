# bench/ncu_times.py: per-kernel times of the timed half of an ncu CSV, and the baseline/gproj comparison table,
# on small files whose answers are known. Part of scripts/python_test.sh.
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load():
    spec = importlib.util.spec_from_file_location("ncu_times", ROOT / "bench" / "ncu_times.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HEAD = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
        '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def write_times(path, kernels):
    """kernels: [(name, ns)] of one warm-up and one timed call (the list is written twice)."""
    lines = ["==PROF== Connected", HEAD]
    for n, (name, ns) in enumerate(kernels + kernels):
        lines.append(f'"{n}","1","b","h","{name}","1","7","(1,1,1)","(1,1,1)","0","9.0","m","gpu__time_duration.sum",'
                     f'"ns","{ns:,}"')
    path.write_text("\n".join(lines) + "\n")


def test_timed_half_and_comparison(tmp_path, capsys):
    nt = load()
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
    nt = load()
    (tmp_path / "times_y_baseline.csv").write_text("==PROF== no kernels\n")
    assert nt.timed_calls(tmp_path / "times_y_baseline.csv") is None
    nt.print_compare(str(tmp_path))
    assert "no ncu rows" in capsys.readouterr().out
