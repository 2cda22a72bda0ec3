#!/usr/bin/env python3
"""Where a loop's instructions and warp samples go, region by region, from an ncu source page (SASS rows).

The page is ncu's `--page source --print-source sass --csv` of one kernel (SourceCounters; scripts/device_env.sh's
ncu_source_page writes it, and committed pages are xz-compressed, SRC.csv.xz). The rows are cut into regions at
every synchronisation point that runs at least half as often as the loop (`--iterations`, the executed count of a
loop instruction: warps x blocks): warpgroup and CTA barriers, wgmma waits, stmatrix, mbarrier waits and bulk
reduce-adds. Each region's line gives its instructions per warp and iteration (executed / iterations) and its warp
samples, and names the instruction that closes it. ncu charges a stall to the instruction waiting to issue, so a
barrier's wait shows on the instruction after it, at the start of the next region.

Usage: python3 bench/ncu_loop_regions.py SRC.csv[.xz] [--iterations N]
  N defaults to the most common executed count among the instructions run at least a quarter as often as the
  most-run one (the loop's body; the prologue runs once a warp).
"""
import argparse
import collections
import re
import sys

from ncu_stall_top import EXECUTED, SAMPLES, cell, read_source_page

MARKER = re.compile(r"BAR\.SYNC|DEPBAR|STSM|UBLKRED|SYNCS\.PHASECHK")


def regions(path, iterations=None):
    """([(first row, last row, instructions per iteration, samples, closing instruction)], total samples, N)."""
    hdr, body = read_source_page(path)
    i_src, i_smp, i_ex = hdr.index("Source"), hdr.index(SAMPLES), hdr.index(EXECUTED)
    num = lambda r, i: int(cell(r, i))
    if iterations is None:
        top = max((num(r, i_ex) for r in body), default=0)
        if top == 0:
            raise ValueError(f"{path}: no executed instructions")
        counts = collections.Counter(num(r, i_ex) for r in body if num(r, i_ex) >= top // 4)
        iterations = counts.most_common(1)[0][0]
    out, start, n_ex, n_smp = [], 0, 0, 0
    for k, r in enumerate(body):
        src, ex = r[i_src].strip(), num(r, i_ex)
        n_ex += ex
        n_smp += num(r, i_smp)
        if MARKER.search(src) and ex >= iterations // 2:
            out.append((start, k, n_ex / iterations, n_smp, src))
            start, n_ex, n_smp = k + 1, 0, 0
    out.append((start, len(body) - 1, n_ex / iterations, n_smp, "(end of the kernel)"))
    return out, sum(num(r, i_smp) for r in body), iterations


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("page")
    ap.add_argument("--iterations", type=int, default=None)
    args = ap.parse_args(argv)
    try:
        rows, total, n = regions(args.page, args.iterations)
    except (OSError, ValueError) as e:
        sys.exit(f"ncu_loop_regions: {e}")
    print(f"{args.page}: {total} warp samples; per iteration = executed / {n}")
    print(f"{'rows':>11} {'instr/iter':>10} {'samples':>8} {'share':>6}  closing instruction")
    for a, b, ins, smp, src in rows:
        print(f"{a:5d}-{b:5d} {ins:10.1f} {smp:8d} {100 * smp / max(total, 1):5.1f}%  {src[:70]}")
    print(f"{'all':>11} {sum(r[2] for r in rows):10.1f} {total:8d}")


if __name__ == "__main__":
    main(sys.argv[1:])
