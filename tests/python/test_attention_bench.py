# The side-by-side benchmark's harness in --smoke mode (CPU, tiny shapes): it runs every implementation and writes
# a report with its environment. Part of scripts/python_test.sh; the real run is on the GPU machine.
import json

from script_loader import ROOT, load


def test_smoke_run_writes_a_report(tmp_path):
    bench = load("attention_bench", ROOT / "bench" / "attention_bench.py")
    out = tmp_path / "report.json"
    bench.main(["attention_bench.py", "--smoke", "--out", str(out)])
    report = json.loads(out.read_text())
    assert {"date_utc", "command", "torch", "gproj"} <= set(report["env"])
    impls = {r["impl"] for r in report["results"]}
    assert impls == {"gproj-baseline", "gproj-fwdfix", "gproj-gproj", "gproj-pweighted", "sdpa-math"}
    for r in report["results"]:
        assert "error" not in r, r
        assert r["fwd_tflops"] > 0 and r["bwd_tflops"] > 0
    assert {r["impl"] for r in report["results"] if "gproj_bwd_overhead" in r} == {"gproj-gproj", "gproj-pweighted"}


def test_q_scale_is_recorded_and_checked(tmp_path):
    bench = load("attention_bench", ROOT / "bench" / "attention_bench.py")
    out = tmp_path / "report.json"
    bench.main(["attention_bench.py", "--smoke", "--q-scale", "4", "--out", str(out)])
    report = json.loads(out.read_text())
    assert report["results"] and all(r["q_scale"] == 4.0 for r in report["results"])
    try:
        bench.main(["attention_bench.py", "--smoke", "--q-scale", "0", "--out", str(tmp_path / "bad.json")])
    except SystemExit as e:
        assert e.code != 0
    else:
        raise AssertionError("--q-scale 0 was accepted")
    assert not (tmp_path / "bad.json").exists()
