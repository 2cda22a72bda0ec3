# bench/no_stats_designs.py: corrections of dQ without per-row sums across key blocks. On a small state whose keys
# share a large component the forward's rounding reproduced in the backward (`consistent P`) makes the FP32 dS's
# row sums vanish, so its unrounded dS is far more accurate than baseline, and giving the rounding errors back
# against the group means helps; the FP16 family (session 24) far below baseline, with O's residual and the rounded
# l_i both needed, and dQ against K less its mean key helping where keys share a component; rows that see no key;
# the group means themselves, and the script's errors and table file. Part of
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


def test_fp16_family():
    nsd = script()
    q, k, v, do = small_state(shared=8.0)
    for causal in (False, True):
        base = nsd.designs(q, k, v, do, causal, groups=(4,))[0]
        rows = nsd.fp16_designs(q, k, v, do, causal)
        by = dict((name.split(" + listed")[0] + (" + listed" if " + listed" in name else ""), errs)
                  for name, *errs in rows)
        fp = by["fp16 backward"]
        assert base[0] == "baseline" and fp[0] < 0.2 * base[1] and fp[1] < 0.5 * base[2] and fp[2] < 0.5 * base[3]
        assert by["fp16 backward + listed"][0] < fp[0]  # the listed entries' rounding given back
        assert by["fp16 backward, delta from the BF16 O alone"][0] > 4 * fp[0]  # O's residual is needed
        assert by["fp16 backward, l summed unrounded + listed"][0] > by["fp16 backward + listed"][0]
        assert fp[0] < by["fp16 backward, dS by a packed multiply (two roundings)"][0] < 2 * fp[0]
        online = by["fp16 backward, the forward's running max per 64-key block"]
        assert abs(online[0] - fp[0]) < 0.05 * fp[0]  # the kernel's running max rounds as the final max does
        assert all(e is None or 0 < e < 1 for errs in by.values() for e in errs)
        # dQ against K less its mean key: the keys' shared component no longer multiplies the rounding errors
        assert by["fp16 backward, dQ against fp16(K - mean K)"][0] < 0.5 * fp[0]
        if causal:  # 64 keys: the band and the diagonal tile each hold every visible entry, so every eps comes back
            band = by["fp16 backward + eps of keys 0-3 and the 64 keys up to the diagonal (no lists)"][0]
            assert band < 0.5 * fp[0]
            assert by["fp16 backward + eps of keys 0-3 and the row's diagonal 64 x 64 tile (no lists)"][0] == band


def test_fp16_family_rows_that_see_no_key():
    # causal with Nq > Nk: the first 16 rows see no key (l = 0). Their dO'' is zero, as a kernel's would be; before
    # session 25 their dO / l set the head's power of two and every other row's dO'' underflowed (NaN on the C++
    # stress suite's masked-rows).
    nsd = script()
    _, k, v, _ = small_state(shared=8.0)
    g = torch.Generator().manual_seed(3)
    q, do = (torch.randn(1, 80, 2, 16, generator=g).bfloat16().float() for _ in range(2))
    by = dict((name, errs) for name, *errs in nsd.fp16_designs(q, k, v, do, True))
    assert all(e is None or 0 < e < 1 for errs in by.values() for e in errs)
    assert by["fp16 backward"][0] < 0.01


def test_errors_and_the_table_file(tmp_path, capsys):
    nsd = script()
    q, k, v, do = small_state()
    good = tmp_path / "s.safetensors"
    writer().write_state(str(good), {"q": q, "k": k, "v": v, "do": do}, {"causal": "true"})
    out = tmp_path / "t.md"
    nsd.main(["--state", str(good), "--group", "8", "--out", str(out)])
    text = out.read_text()
    assert text == capsys.readouterr().out and "eps by 8-key means" in text and not list(tmp_path.glob("t.md.tmp*"))
    assert "fp16 backward + listed eps" in text
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
