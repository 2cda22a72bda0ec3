# bench/no_stats_designs.py: corrections of dQ without per-row sums across key blocks. On a small state whose keys
# share a large component the forward's rounding reproduced in the backward (`consistent P`) makes the FP32 dS's
# row sums vanish, so its unrounded dS is far more accurate than baseline, and giving the rounding errors back
# against the group means helps; the group means themselves, and the script's errors and table file. Part of
# scripts/python_test.sh.
import pytest
import torch

from script_loader import ROOT, load

from test_r_sources import small_state, writer


def script():
    return load("no_stats_designs", ROOT / "bench" / "no_stats_designs.py")


def test_group_means():
    nsd = script()
    k = torch.randn(2, 3, 10, 4, generator=torch.Generator().manual_seed(1))
    assert torch.equal(nsd.group_means(k, 1), k)
    assert torch.allclose(nsd.group_means(k, 10), k.mean(-2, keepdim=True).expand_as(k))
    m = nsd.group_means(k, 4)  # runs of 4, 4 and a short one of 2
    assert torch.allclose(m[..., 8:, :], k[..., 8:, :].mean(-2, keepdim=True).expand(2, 3, 2, 4))
    assert torch.allclose(m[..., 4, :], k[..., 4:8, :].mean(-2))


def test_consistent_p_and_the_group_compensation():
    nsd = script()
    q, k, v, do = small_state(shared=8.0)
    for causal in (False, True):
        rows = dict((name, (dq, dk)) for name, dq, dk, _ in nsd.designs(q, k, v, do, causal, groups=(4, 64)))
        base = rows["baseline"][0]
        assert rows["pweighted (the backward's statistics)"][0] < 0.5 * base  # the leak the projection removes
        floor = rows["consistent P, dS unrounded (this family's floor)"][0]
        assert floor < 0.5 * base  # no delta error left: the FP32 dS sums to zero per row
        assert rows["consistent P + eps by 4-key means"][0] < rows["consistent P"][0]
        assert rows["consistent P + eps by 4-key means"][0] <= rows["consistent P + eps by 64-key means"][0] * 1.05
        assert all(e is None or e > 0 for _, e in rows.values())


def test_errors_and_the_table_file(tmp_path, capsys):
    nsd = script()
    q, k, v, do = small_state()
    good = tmp_path / "s.safetensors"
    writer().write_state(str(good), {"q": q, "k": k, "v": v, "do": do}, {"causal": "true"})
    out = tmp_path / "t.md"
    nsd.main(["--state", str(good), "--group", "8", "--out", str(out)])
    text = out.read_text()
    assert text == capsys.readouterr().out and "eps by 8-key means" in text and not list(tmp_path.glob("t.md.tmp*"))
    with pytest.raises(SystemExit, match="--group must be >= 1"):
        nsd.main(["--state", str(good), "--group", "0"])
    with pytest.raises(SystemExit, match="give --state"):
        nsd.main([])
    with pytest.raises(SystemExit, match="no state file"):
        nsd.main(["--state", str(tmp_path / "absent.safetensors")])
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(good.read_bytes()[:-100])
    with pytest.raises(SystemExit, match="truncated"):
        nsd.main(["--state", str(cut)])
