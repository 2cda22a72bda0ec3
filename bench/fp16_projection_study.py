#!/usr/bin/env python3
"""Session 42's design study: a GProj whose backward needs no per-block statistics product, no lists and no dK
pass (docs/design-fp16-projection.md). Three parts, each known on its own, combined:

- the consistent P of session 23: the forward rounds P^ = exp2(S log2 e - M_i) against an integer running max M_i
  (its rescaling exact), l_i sums the rounded P^, and the backward reproduces P = P^ / l_i, so that delta =
  dO . O agrees with the backward's P and the FP32 rows of dS sum to zero;
- the FP16 dS of session 24 (11 significant bits): dS is rounded once to FP16 after one power-of-two scale sigma
  per head (|dS| <= |dO_i| (|V_j| + |O_i|) <= 2^14 after it), and dQ, dK are formed against FP16 copies of K and Q
  (exact for BF16 values in range), the scale taken out at the end;
- thresh-lowrank's P-weighted projection, on dQ only and without the lists: dQ_i -= r_i / s_i (P (K U))_i U^T,
  r_i = sum_j fp16(dS)_ij (one ones column beside the dQ product), P (K U) and s_i from the forward (beside P V),
  U the top `rank` eigenvectors of K^T K per head. dK is not corrected: with the consistent P its remaining error
  is FP16 rounding, not the queries' shared component.

Forms (every output rounded to BF16 as the kernels write it; errors over the whole tensor against float64):

- `baseline`: today's rounding (FP32 P from LSE, delta from the BF16 O, BF16 dS).
- `pweighted`: baseline with the exact P-weighted projection on dQ and dK (today's gproj approaches it).
- `h16 ...`: the forward's P^ and V in FP16 (P V in FP16), delta from an FP16 copy of O, dV = bf16(P)^T dO (as
  baseline), dP = dO V^T from the BF16 inputs; then the dQ projection of the given rank, none, or exact (P K).
- `h16, bf16 P^ ...`: the same with the forward's P^ in BF16 (its P V stays a BF16 product).
- `h16, delta from bf16 O + residual ...`: O's FP32 value carried by O and its BF16 residual instead of an FP16 O.
- `h16 rank 6, 1/l on dO` (after `h16, dQ projection rank 6`; always rank 6, whatever --rank says): the backward
  of `h16` with the per-element 1/l_i moved from P to dO's side. dOh_i = fp16(dO_i (1/l_i) s_do), Vh = fp16(V s_v),
  Oh = fp16(O s_v), each scale one power of two per (batch, query head): s_v puts max |V| in [2^14, 2^15), s_do
  max |dO| in [2^13, 2^14) (one below the other copies' scales, since 1/l_i <= 2 could otherwise take |dOh| to
  2^16 > 65504); dP' = dOh Vh^T and delta' = dOh . Oh in FP32; dS' = fp16(sigma' fp16(P^) (dP' - delta')) with
  sigma' = sigma / (s_do s_v), which keeps h16's bound (fp16(P^)_ij / l_i = P_ij <= 1, so |dS'| <= 2^14 up to the
  copies' rounding) and makes dS = dS' / sigma, the scale taken out as in `h16`; dV = (fp16(P^)^T dOh) / s_do in
  FP32 (no bf16(P)); dQ, dK and the rank-6 projection (r_i from the rows of dS) as in `h16`. Its counts of dOh
  elements that overflow or flush to zero go to stderr.

Usage: python3 bench/fp16_projection_study.py --state FILE [--state FILE ...] [--rank R ...] [--out FILE.md]
(the C++ stress suite: `gproj stress --write DIR`, then every DIR/*.safetensors). CPU only (torch)."""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from row_entries import float64_reference, print_and_save, read_state  # noqa: E402

LOG2E = 1.4426950408889634


def bf16(x):
    return x.to(torch.bfloat16).float()


def fp16(x):
    return x.to(torch.float16).float()


def err(x, ref):
    return float((x - ref).norm() / ref.norm())


def forms(q, k, v, do, causal, ranks=(4, 6), notes=None):
    """Rows (form, dQ error, dK error, dV error) of one state ((B, N, H, D) tensors); lines about the FP16 copies
    of `h16 rank 6, 1/l on dO` are appended to `notes` when given."""
    notes = [] if notes is None else notes
    ref = float64_reference(q, k, v, do, causal)
    scale, qh, kh, vh, doh = ref.scale, ref.q.float(), ref.k.float(), ref.v.float(), ref.do.float()
    dq64 = ref.scale * ref.ds64 @ ref.k
    dk64 = ref.scale * ref.ds64.transpose(-1, -2) @ ref.q
    dv64 = ref.p64.transpose(-1, -2) @ ref.do
    group = q.shape[2] // k.shape[2]
    b, h = q.shape[0], q.shape[2]

    def out_err(dq, dk, dv):  # outputs rounded to BF16; dK, dV of a GQA state summed over each kv head's group
        def kv(x):
            return x.reshape(b, h // group, group, *x.shape[-2:]).sum(2) if group > 1 else x

        def kv64(x):
            return x.reshape(b, h // group, group, *x.shape[-2:]).sum(2) if group > 1 else x
        return (err(bf16(dq.float()).double(), dq64), err(bf16(kv(dk).float()).double(), kv64(dk64)),
                err(bf16(kv(dv).float()).double(), kv64(dv64)))

    rows = []
    p, dp = ref.p, doh @ vh.transpose(-1, -2)
    # today's rounding points
    o_b = bf16(p @ vh)
    dsb = bf16(p * (dp - (doh * o_b).sum(-1, keepdim=True))).double()
    dvb = bf16(p).double().transpose(-1, -2) @ doh.double()
    rows.append(("baseline", *out_err(scale * dsb @ kh.double(), scale * dsb.transpose(-1, -2) @ qh.double(), dvb)))
    r = dsb.sum(-1, keepdim=True)
    w = p.double() / p.double().sum(-1, keepdim=True).clamp_min(1e-300)
    dsp = dsb - r * w
    rows.append(("pweighted (exact, dQ and dK)",
                 *out_err(scale * dsp @ kh.double(), scale * dsp.transpose(-1, -2) @ qh.double(), dvb)))

    s2 = ref.s.float() * LOG2E
    m = torch.ceil(s2.amax(-1, keepdim=True)).nan_to_num(0.0, posinf=0.0, neginf=0.0)  # the integer max
    e = torch.exp2(s2 - m).nan_to_num(0.0)
    vmax = vh.norm(dim=-1, keepdim=True).amax(-2, keepdim=True)  # per head

    def basis(rank):  # the top `rank` eigenvectors of K^T K per head
        return torch.linalg.eigh(kh.double().transpose(-1, -2) @ kh.double())[1][..., -rank:]
    bases = {rank: basis(rank) for rank in ranks}

    def head_scale(x, top):  # one power of two per (batch, head): max |x| s in [2^(top-1), 2^top); 1 for all zero
        xmax = x.abs().amax((-2, -1), keepdim=True)
        e = torch.frexp(xmax).exponent.float()  # max |x| in [2^(e-1), 2^e)
        return torch.where(xmax > 0, torch.exp2((top - e).clamp(-126, 126)), torch.ones(()))

    def h16(name, rnd_p, o_of):
        ph = rnd_p(e)
        l = ph.sum(-1, keepdim=True)
        lc = l.clamp_min(1e-30)
        pn = torch.where(l > 0, ph / lc, torch.zeros(()))  # the P both passes use
        o = (ph @ (fp16(vh) if rnd_p is fp16 else vh)) / lc  # the forward's FP32 O
        delta = (doh * o_of(o)).sum(-1, keepdim=True)
        # one power of two per head: |dS_ij| <= |dO_i| (|V_j| + |O_i|) <= 2 |dO_i| max|V| <= 2^14
        bound = (2 * doh.norm(dim=-1, keepdim=True).amax(-2, keepdim=True) * vmax).clamp_min(1e-30)
        sigma = torch.exp2(14 - torch.ceil(torch.log2(bound)))
        ds = fp16(pn * (dp - delta) * sigma).double() / sigma  # FP16 dS, the scale taken out at the end
        dk = scale * ds.transpose(-1, -2) @ qh.double()
        dv = bf16(pn).double().transpose(-1, -2) @ doh.double()
        dq0 = scale * ds @ kh.double()
        rows.append((f"{name}, no projection", *out_err(dq0, dk, dv)))
        r = ds.sum(-1, keepdim=True)
        s = pn.double().sum(-1, keepdim=True).clamp_min(1e-300)
        rows.append((f"{name}, dQ projection with exact P K",
                     *out_err(dq0 - scale * (r / s) * (pn.double() @ kh.double()), dk, dv)))

        def projected(dq, r_, u):  # P (K U) as the forward forms it: its rounded P^ against fp16(K U), over l
            ku = fp16((kh.double() @ u).float()).double()
            pku = (ph.double() @ ku) / lc.double()
            return dq - scale * (r_ / s) * (pku @ u.transpose(-1, -2))

        for rank, u in bases.items():
            rows.append((f"{name}, dQ projection rank {rank}", *out_err(projected(dq0, r, u), dk, dv)))
            if name == "h16" and rank == 6:
                rows.append(dO_side(ph, l, lc, o, sigma, projected, u))
        if name == "h16" and 6 not in bases:
            rows.append(dO_side(ph, l, lc, o, sigma, projected, basis(6)))

    def dO_side(ph, l, lc, o, sigma, projected, u6):
        """`h16 rank 6, 1/l on dO`: h16's backward with 1/l_i on dO's side (the docstring's bullet)."""
        invl = torch.where(l > 0, 1.0 / lc, torch.zeros(()))  # 1/l_i <= 2 (the row's largest P^ is >= 1/2)
        s_v = head_scale(vh, 15)
        s_do = head_scale(doh, 14)  # max |dO| s_do in [2^13, 2^14): |dO_i / l_i| s_do < 2^15
        raw = doh * invl * s_do
        dOh = fp16(raw)
        vh16, oh16 = fp16(vh * s_v), fp16(o * s_v)
        dpp = dOh @ vh16.transpose(-1, -2)  # FP32 accumulation
        deltap = (dOh * oh16).sum(-1, keepdim=True)
        sigmap = sigma / (s_do * s_v)  # powers of two: sigma' s_do s_v = sigma exactly
        dsp_raw = sigmap * ph * (dpp - deltap)
        ds = fp16(dsp_raw).double() / (sigmap * s_do * s_v).double()  # = / sigma: dS in h16's units
        dk = scale * ds.transpose(-1, -2) @ qh.double()
        dq0 = scale * ds @ kh.double()
        dv = ((ph.transpose(-1, -2) @ dOh) / s_do).double()  # FP32 accumulation, the scale taken out
        r = ds.sum(-1, keepdim=True)
        # what the FP16 copies did (stderr): overflow and flush to zero of dOh, and the same dOh with the scale
        # one power of two larger (max |dO| s_do in [2^14, 2^15), as the other copies)
        big = doh * invl * (2 * s_do)
        notes.append(f"  1/l on dO: dOh {dOh.numel()} elements, {int((doh != 0).sum())} of dO nonzero, "
                     f"{int((raw != 0).sum())} of dO/l nonzero; inf {int(torch.isinf(dOh).sum())}, "
                     f"flushed to zero {int(((raw != 0) & (dOh == 0)).sum())}, "
                     f"FP16 subnormal {int(((dOh != 0) & (dOh.abs() < 2.0 ** -14)).sum())}; "
                     f"max |dO/l| s_do = {float(raw.abs().max()):.6g}; "
                     f"with 2 s_do: max {float(big.abs().max()):.6g}, inf {int(torch.isinf(fp16(big)).sum())}, "
                     f"flushed to zero {int(((big != 0) & (fp16(big) == 0)).sum())}; "
                     f"max |dS'| before rounding {float(dsp_raw.abs().max()):.6g} (< 2^15 = 32768), "
                     f"inf in Vh, Oh, dS' {int(torch.isinf(vh16).sum())}, {int(torch.isinf(oh16).sum())}, "
                     f"{int(torch.isinf(fp16(dsp_raw)).sum())}")
        return ("h16 rank 6, 1/l on dO", *out_err(projected(dq0, r, u6), dk, dv))

    h16("h16", fp16, fp16)
    h16("h16, bf16 P^", bf16, fp16)
    h16("h16, delta from bf16 O + residual", fp16, lambda o: bf16(o) + bf16(o - bf16(o)))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--state", action="append", default=[], help="a BF16 state with q, k, v, do (repeatable)")
    ap.add_argument("--rank", action="append", type=int, help="ranks of the dQ projection's basis (default 4 6)")
    ap.add_argument("--out", help="also write the table (Markdown) here")
    args = ap.parse_args(argv)
    ranks = args.rank or [4, 6]
    if not args.state:
        sys.exit("fp16_projection_study: give --state FILE (repeatable)")
    if any(r < 1 for r in ranks):
        sys.exit("fp16_projection_study: --rank must be >= 1")
    lines = ["| state | form | dQ | dK | dV |", "|---|---|---|---|---|"]
    for i, path in enumerate(args.state):
        if not os.path.isfile(path):
            sys.exit(f"fp16_projection_study: no state file {path}")
        print(f"[{i + 1}/{len(args.state)}] {path} ...", file=sys.stderr, flush=True)
        q, k, v, do, causal = read_state(path, names=("q", "k", "v", "do"))
        if max(r for r in ranks) > q.shape[3]:
            sys.exit(f"fp16_projection_study: --rank above D = {q.shape[3]} ({path})")
        name = os.path.basename(path).removesuffix(".safetensors")
        notes = []
        for form, *errs in forms(q, k, v, do, causal, ranks, notes):
            lines.append(f"| {name} | {form} | " + " | ".join(f"{100 * x:.3f}%" for x in errs) + " |")
        for note in notes:
            print(note, file=sys.stderr, flush=True)
    print_and_save("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
