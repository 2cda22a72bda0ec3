#!/usr/bin/env python3
"""Could gproj's backward do without the P-weighted row statistics (P (K U), s_i and r_i summed per row across the
main kernel's key blocks, docs/gproj-overhead.md)? Each of those costs 60-80 us in the main kernel (sessions 21-22),
more than the 3% bar. This study asks which corrections that need no per-row sums across key blocks reach the dQ
bars, with the kernel's rounding points emulated in FP32 against float64 (docs/perf-notes.md, session 23):

- `delta exact`: delta_i = sum_j P_ij dP_ij from the backward's own P and dP (what the FP32 dS row sums need to be
  zero), no projection. Not available to a KV-outer kernel (a sum over every key block); it bounds the family.
- `center K`: the dQ product against bf16(K - mean K) with the exact delta: the uniform projection with one centre
  per head, no statistics at all.
- `delta from the forward's FP32 O`: what the forward could give the backward cheaply (O's BF16 residual); the
  forward's O used its rounded P, the backward's dS the exact one, so the two do not agree.
- `consistent P`: the forward's own rounding, made reproducible: the forward rounds P^ = exp2(S log2 e - M_i)
  against an integer running max (its rescaling then exact), so O = sum_j bf16(P^_ij) V_j / l_i with
  l_i = sum_j bf16(P^_ij); the backward takes P = bf16(P^) / l and delta = dO . O from O's FP32 value (O and its
  BF16 rounding residual). The FP32 dS then sums to zero per row without any sum across key blocks.
- `+ eps by G-key means`: on top of `consistent P`, each group of G keys inside a block gives its rows' rounding
  errors back against the group's mean key: dQ_i += sum_g (sum_{j in g} eps_ij) mean_{j in g} K_j, a sum the kernel
  could form inside one tile (no atomics, no pass after the kernel).
- `consistent P^ with dO' = bf16(dO / l)`: the same with the kernel's P left unnormalised (the forward's bf16(P^)
  itself) and dO scaled per row instead, so that dV needs no extra multiply.

- `fp16 backward` (session 24): the same consistency with every product of the backward in FP16 instead of BF16
  (11 significant bits, not 8): the forward rounds P^ to FP16 against its integer running max (P V with V in FP16,
  exact for BF16 values in range), l_i sums the rounded P^; the backward takes dO'' = fp16(dO / l * 2^b) with one
  power of two per head (max_i |dO_i / l_i| max_j |V_j| <= 2^14, so no product can overflow), dV = fp16(P^)^T dO'',
  dS'' = fp16(P^ (dP'' - delta'')) and dQ, dK from dS'' against Q, K in FP16. Variants: dS'' by one packed FP16
  multiply of fp16(P^) and fp16(dP'' - delta'') (two roundings, what saves the kernel a multiply per entry); l_i
  summed from the unrounded P^ (the FP32 row sums of dS then do not vanish); delta from the BF16 O alone or from
  an FP16 O (no residual); the forward's rounding done as a kernel does it (64-key blocks against the running
  integer max, rescaled by exact powers of two), which must agree with the backward's rounding against the final
  max; and the forward's P^ and V kept in BF16 with dO' = bf16(dO / l) (`consistent bf16 P^, fp16 dS`). Q, K and
  V are taken as exact in FP16, which holds when a tensor's nonzero magnitudes span less than ~2^31 (the two real
  states: at most 2^25.4).
- `+ listed eps`: the rounding errors of dS at the entries with P >= 1/16 (the lists thresh-lowrank keeps) given
  back to dQ exactly: dQ_i += sum_{listed j} eps_ij K_j, a post-pass over the lists. With causal masking also the
  same for every entry of a fixed band, with no lists: keys 0-3 and the 64 keys up to each row's diagonal, or keys
  0-3 and the row's diagonal 64 x 64 tile (the tile a KV-outer kernel masks): where trained causal heads put their
  large entries (a property of these states, not a rule).
- `dQ against fp16(K - mean K)` (session 25): in this family the FP32 dS sums to zero per row, so dQ_i =
  sum_j dS_ij (K_j - c) for any one key c per head; with c the head's mean key the rounding errors no longer
  multiply the keys' shared component. It costs a kernel nothing (its K copy is centred), alone and with the give-
  backs above. A row that sees no key (l_i = 0) takes dO'' = 0, as a kernel would.

The C++ stress suite runs here through the files `gproj stress --write DIR` writes (session 25):
`python3 bench/no_stats_designs.py $(for f in DIR/*.safetensors; do echo --state $f; done)`.

`pweighted` (the kernel's projection with the backward's statistics) and `baseline` are the references. dK and dV
are reported for the forms that change dS or P themselves (the group corrections only add to dQ). CPU only (torch);
~15 s per real state.

Usage: python3 bench/no_stats_designs.py [--state FILE ...] [--synthetic] [--group G ...] [--out FILE.md]"""
import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from row_entries import float64_reference, print_and_save, read_state  # noqa: E402

LOG2E = 1.4426950408889634


def bf16(x):
    return x.to(torch.bfloat16).float()


def group_means(k, g):
    """(..., Nk, D) -> the mean key of each run of g keys, repeated over its keys (the last run may be short)."""
    nk = k.shape[-2]
    out = torch.empty_like(k)
    for j0 in range(0, nk, g):
        out[..., j0:j0 + g, :] = k[..., j0:j0 + g, :].mean(-2, keepdim=True)
    return out


def err(x, ref):
    """The relative error of x against ref over the whole tensor."""
    return float((x - ref).norm() / ref.norm())


def float64_grads(q, k, v, do, causal):
    """row_entries.float64_reference of one state, and its float64 dQ, dK, dV (scaled as the kernels' outputs)."""
    ref = float64_reference(q, k, v, do, causal)
    dq64, dk64 = ref.scale * ref.ds64 @ ref.k, ref.scale * ref.ds64.transpose(-1, -2) @ ref.q
    return ref, dq64, dk64, ref.p64.transpose(-1, -2) @ ref.do


def designs(q, k, v, do, causal, groups=(8, 16, 64)):
    """dQ (and dK where dS changes) relative errors against float64 of each correction, for one state ((B, N, H, D)
    tensors, keys and values possibly with fewer heads). Returns a list of (name, dQ error, dK error or None, dV error
    or None)."""
    ref, dq64, dk64, dv64 = float64_grads(q, k, v, do, causal)
    scale, qh, k, v, do, p = ref.scale, ref.q, ref.k, ref.v, ref.do, ref.p

    def dq(ds_used, keys=k):
        return err(scale * ds_used @ keys, dq64)

    def dk(ds_used):
        return err(scale * ds_used.transpose(-1, -2) @ qh, dk64)

    def eps_groups(ds32, dsr, g):  # dQ with the rounding errors given back against g-key means
        mk = bf16(group_means(k.float(), g)).double()
        return err(scale * (dsr @ k + (ds32.double() - dsr) @ mk), dq64)

    dp = do.float() @ v.float().transpose(-1, -2)
    s32 = ref.s.float()
    rows = []
    # the kernel today: delta from the BF16 O
    dsb = bf16(p * (dp - (do.float() * bf16(p @ v.float())).sum(-1, keepdim=True))).double()
    dvb = err(bf16(p).double().transpose(-1, -2) @ do, dv64)
    rows.append(("baseline", dq(dsb), dk(dsb), dvb))
    r = dsb.sum(-1, keepdim=True)
    w = p.double() / p.double().sum(-1, keepdim=True).clamp_min(1e-300)
    rows.append(("pweighted (the backward's statistics)", dq(dsb - r * w), dk(dsb - r * w), dvb))
    # delta from the backward's own P and dP
    dsx = bf16(p * (dp - (p * dp).sum(-1, keepdim=True))).double()
    rows.append(("delta exact", dq(dsx), dk(dsx), dvb))
    kc = bf16(k.float() - k.float().mean(-2, keepdim=True)).double()
    rows.append(("delta exact, center K", dq(dsx, kc), None, None))
    # delta from the forward's FP32 O (through O and its residual; normalised by the sum of the rounded P it used)
    # with the backward's exact P: the FP32 dS still does not sum to zero, so even unrounded it leaks
    s2 = s32 * LOG2E
    pt = bf16(torch.exp2(s2 - s2.amax(-1, keepdim=True).nan_to_num(0.0, posinf=0.0, neginf=0.0))).nan_to_num(0.0)
    of = pt @ v.float() / pt.sum(-1, keepdim=True).clamp_min(1e-30)
    dsf = (p * (dp - (do.float() * (bf16(of) + bf16(of - bf16(of)))).sum(-1, keepdim=True))).double()
    rows.append(("delta from the forward's FP32 O, dS unrounded", dq(dsf), dk(dsf), dvb))
    # the forward's rounding against an integer running max, reproduced by the backward
    m = torch.ceil(s2.amax(-1, keepdim=True)).nan_to_num(0.0, posinf=0.0, neginf=0.0)
    ph = bf16(torch.exp2(s2 - m)).nan_to_num(0.0)
    pc = ph / ph.sum(-1, keepdim=True).clamp_min(1e-30)
    o = pc @ v.float()  # the forward's FP32 O; O + its BF16 residual carries it to ~2^-17
    delta = (do.float() * (bf16(o) + bf16(o - bf16(o)))).sum(-1, keepdim=True)
    ds = pc * (dp - delta)
    dsc = bf16(ds).double()
    dvc = err(bf16(pc).double().transpose(-1, -2) @ do, dv64)
    rows.append(("consistent P", dq(dsc), dk(dsc), dvc))
    rows.append(("consistent P, dS unrounded (this family's floor)", dq(ds.double()), dk(ds.double()), dvc))
    for g in groups:
        rows.append((f"consistent P + eps by {g}-key means", eps_groups(ds, dsc, g), None, None))
    # the same with dO' = bf16(dO / l) in the backward, so that the main kernel's P stays unnormalised (bf16(P^),
    # as the forward's): dV = bf16(P^)^T dO', dS = bf16(P^) (dO' V^T - dO' . O) (= P (dP - delta) in exact arithmetic)
    l = ph.sum(-1, keepdim=True)
    do1 = bf16(do.float() / l.clamp_min(1e-30))
    ds1 = ph * (do1 @ v.float().transpose(-1, -2) - (do1 * (bf16(o) + bf16(o - bf16(o)))).sum(-1, keepdim=True))
    dsr1 = bf16(ds1).double()
    dv1 = err(ph.double().transpose(-1, -2) @ do1.double(), dv64)
    rows.append(("consistent P^ with dO' = bf16(dO / l)", dq(dsr1), dk(dsr1), dv1))
    for g in groups:
        rows.append((f"consistent P^ with dO' + eps by {g}-key means",
                     eps_groups(ds1, dsr1, g), None, None))
    return rows


def fp16(x):
    return x.to(torch.float16).float()


def fp16_designs(q, k, v, do, causal, list_threshold=1.0 / 16):
    """The FP16 family (module docstring): rows (name, dQ error, dK error, dV error or None) as designs()."""
    ref, dq64, dk64, dv64 = float64_grads(q, k, v, do, causal)
    scale, qh, k, v, do = ref.scale, ref.q, ref.k, ref.v, ref.do
    s2 = ref.s.float() * LOG2E
    m = torch.ceil(s2.amax(-1, keepdim=True)).nan_to_num(0.0, posinf=0.0, neginf=0.0)
    e = torch.exp2(s2 - m).nan_to_num(0.0)
    vmax = v.float().norm(dim=-1, keepdim=True).amax(-2, keepdim=True)  # max_j |V_j| per head
    rows = []

    kc = fp16(k.float() - k.float().mean(-2, keepdim=True)).double()  # K less its head's mean key, as FP16 holds it
    nq, nk = e.shape[-2], e.shape[-1]
    i = torch.arange(nq).unsqueeze(-1) + (nk - nq)  # each row's last visible key (bottom-right causal alignment)
    j = torch.arange(nk).unsqueeze(0)
    bands = (("keys 0-3 and the 64 keys up to the diagonal", ((j < 4) | ((i - j >= 0) & (i - j < 64))).double()),
             ("keys 0-3 and the row's diagonal 64 x 64 tile", ((j < 4) | ((j // 64 == i // 64) & (j <= i))).double()))

    def form(name, ph, l, o_used, rnd_do, two_roundings=False, structural=False):
        """ph: the rounded P^ both passes use; l: the forward's row sums; o_used: the O delta is formed from. A row
        that sees no key (l = 0) gets dO'' = 0, as a kernel would give it."""
        dov = torch.where(l > 0, do.float() / l.clamp_min(1e-30), torch.zeros((), dtype=torch.float32))
        l = l.clamp_min(1e-30)
        # one power of two per head: every |dP''|, |delta''| <= 2^14 (with dO' in BF16 the kernel scales dS instead)
        bound = (dov.norm(dim=-1, keepdim=True).amax(-2, keepdim=True) * vmax).clamp_min(1e-30)
        sc = torch.exp2(14 - torch.ceil(torch.log2(bound)))
        do2 = rnd_do(dov * sc) if rnd_do is fp16 else rnd_do(dov) * sc
        dp2 = do2 @ v.float().transpose(-1, -2)
        d = dp2 - (do2 * o_used).sum(-1, keepdim=True)
        exact = ph * d
        ds = fp16(ph * fp16(d)) if two_roundings else fp16(exact)
        dsd, eps = ds.double() / sc, (exact.double() - ds.double()) / sc
        dv = err(ph.double().transpose(-1, -2) @ do2.double() / sc, dv64)
        rows.append((name, err(scale * dsd @ k, dq64), err(scale * dsd.transpose(-1, -2) @ qh, dk64), dv))
        listed = (ph >= list_threshold * l).double()
        listed_name = f"listed eps (P >= 1/{round(1 / list_threshold)}, {listed.sum(-1).mean():.1f} a row)"

        def give_backs(label, keys):  # the listed entries' eps, and with causal masking each fixed band's
            rows.append((f"{label} + {listed_name}", err(scale * (dsd + eps * listed) @ keys, dq64), None, None))
            if causal and structural:  # no lists: every entry of a fixed band of keys
                for what, band in bands:
                    rows.append((f"{label} + eps of {what} (no lists)", err(scale * (dsd + eps * band) @ keys, dq64),
                                 None, None))

        give_backs(name, k)
        if structural:  # dQ against K less its mean: the same gradient when dS's rows sum to zero, as here
            cn = f"{name}, dQ against fp16(K - mean K)"
            rows.append((cn, err(scale * dsd @ kc, dq64), None, None))
            give_backs(cn, kc)

    def fwd_o(ph, l):
        o = ph @ v.float() / l.clamp_min(1e-30)
        return o, bf16(o) + bf16(o - bf16(o))  # the forward's FP32 O; O and its BF16 residual carry it

    ph = fp16(e)
    l = ph.sum(-1, keepdim=True)
    o, o_res = fwd_o(ph, l)
    form("fp16 backward", ph, l, o_res, fp16, structural=True)
    # the forward as a kernel runs it: 64-key blocks, each rounded against the running integer max of the blocks so
    # far, the sums and O rescaled by exact powers of two; the backward rounds against the final max
    acc, lo, run = torch.zeros_like(o), torch.zeros_like(l), torch.full_like(l, -float("inf"))
    for j0 in range(0, s2.shape[-1], 64):
        blk = s2[..., j0:j0 + 64]
        new = torch.maximum(run, torch.ceil(blk.amax(-1, keepdim=True)))
        shift = torch.exp2(run - new).nan_to_num(0.0)
        pt = fp16(torch.exp2(blk - new)).nan_to_num(0.0)
        acc = acc * shift + pt @ v.float()[..., j0:j0 + 64, :]
        lo = lo * shift + pt.sum(-1, keepdim=True)
        run = new
    oo = acc / lo.clamp_min(1e-30)
    form("fp16 backward, the forward's running max per 64-key block", ph, lo, bf16(oo) + bf16(oo - bf16(oo)), fp16)
    form("fp16 backward, dS by a packed multiply (two roundings)", ph, l, o_res, fp16, two_roundings=True,
         structural=True)
    lu = e.sum(-1, keepdim=True)
    form("fp16 backward, l summed unrounded", ph, lu, fwd_o(ph, lu)[1], fp16)
    form("fp16 backward, delta from the BF16 O alone", ph, l, bf16(o), fp16)
    form("fp16 backward, delta from an FP16 O (no residual)", ph, l, fp16(o), fp16)
    pb = bf16(e)
    lb = pb.sum(-1, keepdim=True)
    form("consistent bf16 P^, dO' = bf16(dO / l), fp16 dS", pb, lb, fwd_o(pb, lb)[1], bf16)
    return rows


def synthetic_states(n=1024, d=64, h=4, seed=7):
    """Stress-like inputs (names after the C++ stress cases they imitate, not the same values): Gaussian; keys
    sharing a large component; an attention sink (4 equal keys every query aligns with) over V of mean -1."""
    out = []
    for name, kind in (("gaussian", None), ("shared-keys-like", "shared"), ("sink-vmean-like", "sink")):
        g = torch.Generator().manual_seed(seed)
        q, k, v, do = (torch.randn(1, n, h, d, generator=g) for _ in range(4))
        if kind == "shared":
            u = torch.randn(d, generator=g)
            k = k + 2.0 * math.sqrt(d) * u / u.norm()
        if kind == "sink":
            v = v - 1.0
            k[:, 1:4] = k[:, :1]
            q = q + 3.0 * k[:, :1] / k[:, :1].norm(dim=-1, keepdim=True)
        out.append((name, tuple(bf16(x) for x in (q, k, v, do)), True))
    return out


def table(results):
    lines = ["| state | correction | dQ error | dK error | dV error |", "|---|---|---|---|---|"]
    for state, rows in results:
        for name, *errs in rows:
            cells = " | ".join("" if e is None else f"{100 * e:.3f}%" for e in errs)
            lines.append(f"| {state} | {name} | {cells} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--state", action="append", default=[], help="a BF16 state with q, k, v, do (repeatable)")
    ap.add_argument("--synthetic", action="store_true", help="also the stress-like synthetic inputs")
    ap.add_argument("--group", action="append", type=int, help="G of the eps compensation (default 8 16 64)")
    ap.add_argument("--out", help="also write the table (Markdown) here")
    args = ap.parse_args(argv)
    groups = args.group or [8, 16, 64]
    if any(g < 1 for g in groups):
        sys.exit("no_stats_designs: --group must be >= 1 keys")
    if not args.state and not args.synthetic:
        sys.exit("no_stats_designs: give --state FILE and/or --synthetic")
    inputs = []
    for path in args.state:
        if not os.path.isfile(path):
            sys.exit(f"no_stats_designs: no state file {path}")
        inputs.append((path, None, None))
    if args.synthetic:
        inputs += synthetic_states()
    results = []
    for i, (name, tensors, causal) in enumerate(inputs):
        print(f"[{i + 1}/{len(inputs)}] {name} ...", file=sys.stderr, flush=True)
        if tensors is None:
            q, k, v, do, causal = read_state(name, names=("q", "k", "v", "do"))
            name = os.path.basename(name).removesuffix(".safetensors")
        else:
            q, k, v, do = tensors
        results.append((name, designs(q, k, v, do, causal, groups) + fp16_designs(q, k, v, do, causal)))
    print_and_save(table(results), args.out)


if __name__ == "__main__":
    main()
