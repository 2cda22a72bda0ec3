#!/usr/bin/env python3
"""Can r_i, the row sum of bf16(dS) that gproj's projection removes, be had without the backward main kernel's
per-block sums? r_i = sum_j bf16(dS_ij) splits into the sum of the unrounded dS (which is dO_i . (O_i - bf16(O_i))
when the row's P sums to one: the forward's rounding of O against the delta the backward uses) and the rounding
errors eps_ij = bf16(dS_ij) - dS_ij. The first part needs only O's rounding residual; of the second, a pass after
the main kernel could recompute the few entries it lists (bf16(P) >= 1/T). This study rebuilds r_i from those two
and reports how far it is from the kernel's r_i and the dQ error of the P-weighted projection that uses it,
against float64 (docs/perf-notes.md, session 22). The kernel's rounding points are emulated in FP32 (P from the
FP32 scores and LSE, O rounded to BF16, delta = dO . bf16(O), dS = P (dP - delta) rounded to BF16); the numbers are
for comparing the candidates with each other, not the emulator's own (`gproj study`). CPU only (torch).

Usage: python3 bench/r_sources.py --state FILE [--state FILE ...] [--threshold T ...] [--out FILE.md]"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from row_entries import float64_reference, print_and_save, read_state  # noqa: E402


def rebuilt_r(q, k, v, do, causal, thresholds):
    """For one state ((B, N, H, D) tensors, keys and values possibly with fewer heads): the dQ errors of baseline
    and of the P-weighted projection with the kernel's r_i, and for each way of rebuilding r_i without per-block
    sums (the delta term alone, then with the eps of the entries with bf16(P) >= 1/T for each T) the relative
    distance to the kernel's r_i, the dQ error and the mean number of entries per row it recomputes."""
    ref = float64_reference(q, k, v, do, causal)
    scale, k, v, do, p = ref.scale, ref.k, ref.v, ref.do, ref.p
    dq64 = scale * ref.ds64 @ k
    o = p @ v.float()
    delta = (do.float() * o.to(torch.bfloat16).float()).sum(-1, keepdim=True)
    ds = p * (do.float() @ v.float().transpose(-1, -2) - delta)
    dsb = ds.to(torch.bfloat16).float().double()
    eps = dsb - ds.double()
    r = dsb.sum(-1)
    w = p.double() / p.double().sum(-1, keepdim=True).clamp_min(1e-300)
    ref = dq64.norm()

    def dq_err(r_used):
        return float((scale * (dsb - r_used.unsqueeze(-1) * w) @ k - dq64).norm() / ref)

    delta_term = ((do.float() * o).sum(-1, keepdim=True) - delta).squeeze(-1).double()
    pb = p.to(torch.bfloat16).float()
    rows = [("delta term only", delta_term, 0.0)]
    for t in thresholds:
        listed = pb >= 1.0 / t
        rows.append((f"delta term + eps of bf16(P) >= 1/{t:g}", delta_term + (eps * listed).sum(-1),
                     float(listed.sum(-1).double().mean())))
    return {
        "baseline": float((scale * dsb @ k - dq64).norm() / ref),
        "kernel_r": dq_err(r),
        "rebuilt": [(name, float((r - c).norm() / r.norm().clamp_min(1e-300)), dq_err(c), per_row)
                    for name, c, per_row in rows],
    }


def table(results):
    lines = ["| state | r_i | dQ error | entries recomputed per row | distance to the kernel's r_i |",
             "|---|---|---|---|---|"]
    for state, res in results:
        lines.append(f"| {state} | none (baseline) | {100 * res['baseline']:.3f}% | | |")
        lines.append(f"| {state} | the kernel's (per-block sums) | {100 * res['kernel_r']:.3f}% | | 0 |")
        for name, dist, err, per_row in res["rebuilt"]:
            lines.append(f"| {state} | {name} | {100 * err:.3f}% | {per_row:.1f} | {dist:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--state", action="append", required=True, help="a BF16 state with q, k, v, do (repeatable)")
    ap.add_argument("--threshold", action="append", type=float, help="T of bf16(P) >= 1/T (default 16 64 256 1024)")
    ap.add_argument("--out", help="also write the table (Markdown) here")
    args = ap.parse_args(argv)
    thresholds = args.threshold or [16, 64, 256, 1024]
    if any(t < 1 for t in thresholds):
        sys.exit("r_sources: --threshold must be >= 1 (entries with bf16(P) >= 1/T)")
    results = []
    for i, path in enumerate(args.state):
        if not os.path.isfile(path):
            sys.exit(f"r_sources: no state file {path}")
        print(f"[{i + 1}/{len(args.state)}] {path} ...", file=sys.stderr, flush=True)
        q, k, v, do, causal = read_state(path, names=("q", "k", "v", "do"))
        results.append((os.path.basename(path).removesuffix(".safetensors"),
                        rebuilt_r(q, k, v, do, causal, thresholds)))
    print_and_save(table(results), args.out)


if __name__ == "__main__":
    main()
