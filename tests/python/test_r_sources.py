# bench/r_sources.py: r_i rebuilt without per-block sums. With every entry recomputed the rebuilt r_i is the
# kernel's (up to FP32 order), and the projection with it reaches the same dQ error; the reader's errors name the
# missing tensor and a truncated file; the table is written whole. Part of scripts/python_test.sh.
import pytest
import torch

from script_loader import ROOT, load


def writer():
    return load("attention_audit", ROOT / "examples" / "attention_audit.py")


def small_state(seed=0, shared=4.0):
    """q, k, v, do (1, 64, 2, 16), two query heads on one kv head, keys sharing a large component."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 64, 2, 16, generator=g)
    k = torch.randn(1, 64, 1, 16, generator=g) + shared
    v = torch.randn(1, 64, 1, 16, generator=g)
    do = torch.randn(1, 64, 2, 16, generator=g)
    return tuple(x.bfloat16().float() for x in (q, k, v, do))


def test_every_entry_recomputed_gives_the_kernels_r():
    rs = load("r_sources", ROOT / "bench" / "r_sources.py")
    q, k, v, do = small_state()
    for causal in (False, True):
        res = rs.rebuilt_r(q, k, v, do, causal, thresholds=[1e30])
        assert res["baseline"] > 2 * res["kernel_r"]  # the shared component leaks without the projection
        name, dist, err, per_row = res["rebuilt"][-1]
        assert "1e+30" in name and dist < 1e-2
        assert abs(err - res["kernel_r"]) <= 0.01 * res["kernel_r"]
        assert per_row > 0.9 * (64 if not causal else 32.5)  # (every visible entry, a few with P under 1e-30 aside)
        # the delta term alone leaves the rounding errors' share of r_i
        assert res["rebuilt"][0][1] > dist


def test_reader_errors_and_the_table_file(tmp_path, capsys):
    rs = load("r_sources", ROOT / "bench" / "r_sources.py")
    audit = writer()
    q, k, v, do = small_state()
    good = tmp_path / "s.safetensors"
    audit.write_state(str(good), {"q": q, "k": k, "v": v, "do": do}, {"causal": "false"})
    out = tmp_path / "t.md"
    rs.main(["--state", str(good), "--threshold", "16", "--out", str(out)])
    text = out.read_text()
    assert text == capsys.readouterr().out and "bf16(P) >= 1/16" in text and not list(tmp_path.glob("t.md.tmp*"))
    no_v = tmp_path / "no_v.safetensors"
    audit.write_state(str(no_v), {"q": q, "k": k, "do": do}, {"causal": "false"})
    with pytest.raises(SystemExit, match="'v' is missing"):
        rs.main(["--state", str(no_v)])
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(good.read_bytes()[:-100])
    with pytest.raises(SystemExit, match="truncated"):
        rs.main(["--state", str(cut)])
    with pytest.raises(SystemExit, match="threshold must be >= 1"):
        rs.main(["--state", str(good), "--threshold", "0.5"])
    with pytest.raises(SystemExit, match="no state file"):
        rs.main(["--state", str(tmp_path / "absent.safetensors")])
