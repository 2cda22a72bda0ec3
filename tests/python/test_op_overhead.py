# bench/op_overhead.py (where the PyTorch op's backward time goes beyond its kernels) in --smoke mode on the CPU:
# it times both paths of every variant asked for and writes its report atomically; bad arguments are refused.
# Part of scripts/python_test.sh; the real run is on the GPU machine.
import json

import pytest

from script_loader import ROOT
from script_loader import load as load_script


def load():
    return load_script("op_overhead", ROOT / "bench" / "op_overhead.py")


def test_smoke_run_times_each_variant(tmp_path):
    out = tmp_path / "report.json"
    rows = load().main(["op_overhead.py", "--smoke", "--variants", "baseline", "gproj", "--out", str(out)])
    assert [r["variant"] for r in rows] == ["baseline", "gproj"]
    for r in rows:
        assert r["grad_ms"] > 0 and r["pipe_ms"] > 0 and r["op_ms"] > 0
        assert r["kernels_ms"] is None and r["gap_ms"] is None  # no device times on the CPU
        assert r["timeline"]["gpu_start_us"] is None
    report = json.loads(out.read_text())
    assert [r["variant"] for r in report["rows"]] == ["baseline", "gproj"]
    assert not list(tmp_path.glob("*.tmp.*"))


def test_sdpa_reference_row_and_traces(tmp_path):
    rows = load().main(["op_overhead.py", "--smoke", "--variants", "gproj", "--sdpa", "--trace", str(tmp_path)])
    assert [r["variant"] for r in rows] == ["gproj", "sdpa-math"]  # SDPA's MATH backend on the CPU
    assert rows[1]["op_ms"] is None and rows[1]["grad_ms"] > 0
    for name in ("trace_gproj_grad.json", "trace_sdpa_grad.json"):
        trace = json.loads((tmp_path / name).read_text())
        assert any(e.get("ph") == "X" for e in trace["traceEvents"])  # the host's events of one grad call
    assert not list(tmp_path.glob("*.tmp.*"))


@pytest.mark.parametrize("args", [["--variants", "nonsense"], ["--q-scale", "0"], ["--width", "100", "--dim", "64"]])
def test_bad_arguments_are_refused(tmp_path, args):
    out = tmp_path / "report.json"
    with pytest.raises(SystemExit) as e:
        load().main(["op_overhead.py", "--smoke", *args, "--out", str(out)])
    assert e.value.code != 0
    assert not out.exists()
