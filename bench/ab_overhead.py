#!/usr/bin/env python3
"""GProj's backward overhead per build, shape and round from scripts/device_bench_ab.sh's ab.txt.

Each row of ab.txt is `variant N D causal fwd_ms bwd_ms fwd_TF bwd_TF inputs round commit`. For every build
(commit), shape and round this prints baseline's backward, each other variant's backward and its overhead
bwd(variant) / bwd(baseline) - 1 against baseline's row of the same build, shape, inputs and round (GUIDE section 5:
the two timed in the same process run order, on the same inputs). A variant without a baseline row beside it is
listed with no overhead.

Usage: python3 bench/ab_overhead.py AB_TXT
"""
import collections
import sys


def read_rows(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.startswith("#") or not line.strip():
                continue
            parts = line.split()
            if len(parts) != 11:
                sys.exit(f"ab_overhead: {path}:{n}: expected 11 fields, got {len(parts)}: {line.strip()}")
            variant, n_, d, causal, _, bwd, _, _, inputs, rnd, commit = parts
            try:
                rows.append((variant, int(n_), int(d), causal, float(bwd), inputs, rnd, commit))
            except ValueError as e:
                sys.exit(f"ab_overhead: {path}:{n}: {e}")
    return rows


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    rows = read_rows(argv[1])
    if not rows:
        sys.exit(f"ab_overhead: no rows in {argv[1]}")
    base = {}
    for v, n, d, c, bwd, inputs, rnd, commit in rows:
        if v == "baseline":
            base[(n, d, c, inputs, rnd, commit)] = bwd
    table = collections.OrderedDict()
    for v, n, d, c, bwd, inputs, rnd, commit in rows:
        if v == "baseline":
            continue
        b = base.get((n, d, c, inputs, rnd, commit))
        key = (d, n, c, inputs, v, commit)
        table.setdefault(key, []).append((rnd, b, bwd))
    print(f"{'D':>4} {'N':>6} {'causal':>6} {'inputs':>9} {'variant':>12} {'build':>14}  rounds: baseline / variant ms (overhead)")
    for (d, n, c, inputs, v, commit), cells in table.items():
        text = []
        for rnd, b, bwd in cells:
            text.append(f"{rnd} {b:.3f} / {bwd:.3f} ({100 * (bwd / b - 1):+.1f}%)" if b else f"{rnd} - / {bwd:.3f}")
        print(f"{d:>4} {n:>6} {c:>6} {inputs:>9} {v:>12} {commit:>14}  " + "; ".join(text))


if __name__ == "__main__":
    main(sys.argv)
