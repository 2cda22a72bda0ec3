# The side-by-side benchmark's harness in --smoke mode (CPU, tiny shapes): it runs every implementation and writes
# a report with its environment. Part of scripts/python_test.sh; the real run is on the GPU machine.
import json

from script_loader import ROOT, load


def assert_refused(bench, tmp_path, option, value):
    """The harness refuses `option value` with a non-zero exit and writes no report."""
    bad = tmp_path / "bad.json"
    try:
        bench.main(["attention_bench.py", "--smoke", option, value, "--out", str(bad)])
    except SystemExit as e:
        assert e.code != 0
    else:
        raise AssertionError(f"{option} {value} was accepted")
    assert not bad.exists()


def test_smoke_run_writes_a_report(tmp_path):
    bench = load("attention_bench", ROOT / "bench" / "attention_bench.py")
    out = tmp_path / "report.json"
    bench.main(["attention_bench.py", "--smoke", "--out", str(out)])
    report = json.loads(out.read_text())
    assert {"date_utc", "command", "torch", "gproj", "default_projection"} <= set(report["env"])
    impls = {r["impl"] for r in report["results"]}
    assert impls == {"gproj-baseline", "gproj-fwdfix", "gproj-gproj", "gproj-pweighted", "gproj-thresh-lowrank",
                     "gproj-pweighted-det", "sdpa-math"}
    for r in report["results"]:
        assert "error" not in r, r
        assert r["fwd_tflops"] > 0 and r["bwd_tflops"] > 0
    with_overhead = {"gproj-gproj", "gproj-pweighted", "gproj-thresh-lowrank", "gproj-pweighted-det"}
    assert {r["impl"] for r in report["results"] if "gproj_bwd_overhead" in r} == with_overhead
    assert {r["impl"] for r in report["results"] if "gproj_step_overhead" in r} == with_overhead
    # the smoke shape (D = 64, N = 128) is outside the bar's shapes: a summary row each way, neither covered
    assert [(b["D"], b["N"], b["causal"]) for b in report["bar"]] == [(64, 128, False), (64, 128, True)]
    assert not any(b["covered"] for b in report["bar"])


def test_q_scale_is_recorded_and_checked(tmp_path):
    bench = load("attention_bench", ROOT / "bench" / "attention_bench.py")
    out = tmp_path / "report.json"
    bench.main(["attention_bench.py", "--smoke", "--q-scale", "4", "--out", str(out)])
    report = json.loads(out.read_text())
    assert report["results"] and all(r["q_scale"] == 4.0 for r in report["results"])
    assert_refused(bench, tmp_path, "--q-scale", "0")


def test_chain_is_recorded_and_checked(tmp_path, capsys):
    # --chain N times N calls queued back to back per timing (per call in the report); 1, the default, is one call
    # between two events. The printed table says which.
    bench = load("attention_bench", ROOT / "bench" / "attention_bench.py")
    out = tmp_path / "report.json"
    bench.main(["attention_bench.py", "--smoke", "--chain", "3", "--out", str(out)])
    report = json.loads(out.read_text())
    assert report["results"] and all(r["chain"] == 3 for r in report["results"])
    assert "3 calls queued back to back" in capsys.readouterr().out
    bench.main(["attention_bench.py", "--summary", str(out)])
    assert "3 calls queued back to back" in capsys.readouterr().out
    calls = []
    assert bench.timed(lambda: calls.append(1), "cpu", reps=2, warmup=1, chain=4) >= 0
    assert len(calls) == 1 + 2 * 4
    for bad in ("0", "65"):
        assert_refused(bench, tmp_path, "--chain", bad)


def _rows(D, N, causal, base, gp, flash=None):
    """Synthetic results of one shape: (fwd_ms, bwd_ms) per implementation."""
    out = [{"impl": "gproj-baseline", "fwd_ms": base[0], "bwd_ms": base[1]},
           {"impl": "gproj-gproj", "fwd_ms": gp[0], "bwd_ms": gp[1]}]
    if flash:
        out.append({"impl": "sdpa-flash_attention", "fwd_ms": flash[0], "bwd_ms": flash[1]})
    for r in out:
        r.update(D=D, N=N, causal=causal)
    return out


def test_bar_rows_compute_the_overheads_and_the_issue_bar():
    bench = load("attention_bench", ROOT / "bench" / "attention_bench.py")
    results = (_rows(128, 4096, False, (1.0, 2.0), (1.1, 2.04), (1.2, 3.0))      # +2% bwd, faster than flash
               + _rows(128, 8192, True, (1.0, 2.0), (1.0, 2.5), (1.2, 3.0))      # +25% bwd
               + _rows(128, 1024, False, (1.0, 2.0), (1.0, 4.0), (0.5, 1.0))     # outside the bar (N < 4k)
               + [{"impl": "gproj-gproj", "error": "unsupported", "D": 64, "N": 4096, "causal": False}])
    rows = bench.bar_rows(results)
    assert [(r["D"], r["N"], r["causal"]) for r in rows] == [(128, 1024, False), (128, 4096, False), (128, 8192, True)]
    r = rows[1]
    assert abs(r["bwd_overhead"] - 0.02) < 1e-12
    assert abs(r["step_overhead"] - (3.14 / 3.0 - 1)) < 1e-12
    assert abs(r["fwd_speedup_vs_flash"] - 1.2 / 1.1) < 1e-12 and abs(r["bwd_speedup_vs_flash"] - 3.0 / 2.04) < 1e-12
    assert r["covered"] and r["overhead_ok"] and r["flash_ok"]
    assert rows[2]["covered"] and not rows[2]["overhead_ok"] and rows[2]["flash_ok"]
    assert not rows[0]["covered"] and "overhead_ok" not in rows[0]
    verdict = bench.bar_verdict(rows)
    assert "2 shapes" in verdict and "NOT met (worst +25.0% at N = 8192, causal)" in verdict
    assert verdict.endswith("at least as fast as SDPA flash both ways: met")
    # only the covered shape that holds: met; none covered: said so
    assert "backward overhead <= 3%: met" in bench.bar_verdict(rows[:2])
    assert "no shape" in bench.bar_verdict(rows[:1])
    # without flash rows the flash part cannot hold
    no_flash = bench.bar_rows(_rows(128, 4096, False, (1.0, 2.0), (1.0, 2.0)))
    assert no_flash[0]["fwd_speedup_vs_flash"] is None and not no_flash[0]["flash_ok"]


def test_summary_prints_the_table_of_a_saved_report(tmp_path, capsys):
    bench = load("attention_bench", ROOT / "bench" / "attention_bench.py")
    rep = tmp_path / "r.json"
    rep.write_text(json.dumps({"results": _rows(128, 4096, True, (1.0, 2.0), (1.0, 2.2), (1.5, 3.0))}))
    bench.main(["attention_bench.py", "--summary", str(rep)])
    out = capsys.readouterr().out
    assert "+10.0%" in out and "not met: overhead" in out and "NOT met (worst +10.0% at N = 4096, causal)" in out
    for bad, text in ((tmp_path / "missing.json", None), (tmp_path / "trunc.json", '{"results": [')):
        if text is not None:
            bad.write_text(text)
        try:
            bench.main(["attention_bench.py", "--summary", str(bad)])
        except SystemExit as e:
            assert "cannot read the report" in str(e.code)
        else:
            raise AssertionError(f"{bad.name} was accepted")


def test_paired_overhead_alternates_and_compares_medians(monkeypatch):
    # paired_overhead times a and b in alternation (a b, b a, ...) and returns median(b) / median(a) - 1: a drift
    # over the run falls on both, so two equal calls measure ~0 however the clock drifts.
    bench = load("attention_bench", ROOT / "bench" / "attention_bench.py")
    order = []
    bench.paired_overhead(lambda: order.append("a"), lambda: order.append("b"), "cpu", pairs=3)
    assert order == ["a", "b", "b", "a", "a", "b"]
    fake_clock = iter([1.0, 1.2, 1.25, 1.05, 1.1, 1.32] * 2)  # one_timing's seconds in call order: b = 1.2 a
    monkeypatch.setattr(bench, "one_timing", lambda fn, device, chain=1: next(fake_clock))
    got = bench.paired_overhead(lambda: None, lambda: None, "cpu", pairs=3)
    assert abs(got - (1.25 / 1.05 - 1)) < 1e-12  # medians: a of (1.0, 1.05, 1.1), b of (1.2, 1.25, 1.32)


def test_the_bar_reads_the_paired_overhead_and_shows_the_control(tmp_path, capsys):
    bench = load("attention_bench", ROOT / "bench" / "attention_bench.py")
    results = _rows(128, 4096, False, (1.0, 2.0), (1.0, 2.1), (1.2, 3.0))  # rows: +5%
    results[1]["bwd_overhead_paired"] = 0.02
    results.append({"impl": "gproj-fwdfix", "fwd_ms": 1.1, "bwd_ms": 2.05, "bwd_overhead_paired": -0.004, "D": 128,
                    "N": 4096, "causal": False})
    rows = bench.bar_rows(results)
    assert abs(rows[0]["bwd_overhead"] - 0.02) < 1e-12 and abs(rows[0]["bwd_overhead_rows"] - 0.05) < 1e-12
    assert rows[0]["paired"] and rows[0]["control_overhead"] == -0.004 and rows[0]["overhead_ok"]
    rep = tmp_path / "r.json"
    rep.write_text(json.dumps({"results": results}))
    bench.main(["attention_bench.py", "--summary", str(rep)])
    out = capsys.readouterr().out
    assert "+2.0%   +5.0%   -0.4%" in out and "backward overhead <= 3%: met" in out and "in alternation" in out


def test_smoke_run_pairs_gproj_and_the_control_with_baseline(tmp_path):
    bench = load("attention_bench", ROOT / "bench" / "attention_bench.py")
    out = tmp_path / "report.json"
    bench.main(["attention_bench.py", "--smoke", "--out", str(out)])
    results = json.loads(out.read_text())["results"]
    assert {r["impl"] for r in results if "bwd_overhead_paired" in r} == {"gproj-gproj", "gproj-fwdfix"}
    bench.main(["attention_bench.py", "--smoke", "--pairs", "0", "--out", str(out)])
    assert not any("bwd_overhead_paired" in r for r in json.loads(out.read_text())["results"])
    assert_refused(bench, tmp_path, "--pairs", "-1")
