#!/usr/bin/env python3
"""Executed warp instructions (or another per-instruction column) by opcode, side by side, from ncu source pages.

Input: one or more CSVs of `ncu -i REP --page source --print-source sass --csv` (scripts/device_env.sh's
ncu_source_page writes them as sass_KERNEL_LABEL.csv), each given as LABEL=PATH. Every instruction's
"Instructions Executed" is added to its opcode (the mnemonic before the first '.', a predicate skipped), and the
totals are divided by --per (e.g. the executed count of an instruction that runs once per warp and loop
iteration, to get instructions per warp and iteration). The first label is the reference: the table is sorted
by the largest difference from it (then by the largest count), and the last column shows the difference of the
last label. --metric sums another of the page's per-instruction columns instead, e.g. "L1 Wavefronts Shared" or
"L1 Wavefronts Shared Excessive" (shared-memory wavefronts, wgmma operand reads included, and those beyond the
ideal: bank conflicts).

Usage: python3 bench/ncu_opcode_mix.py base=sass_a.csv gproj=sass_b.csv [--per N] [--top 30] [--metric COLUMN]
"""
import argparse
import collections
import csv
import sys

EXECUTED = "Instructions Executed"


def opcode_counts(path, metric=EXECUTED):
    """{opcode: sum of the column `metric` (default: executed warp instructions)} of one source page."""
    rows = list(csv.reader(open(path)))
    header_at = next((i for i, r in enumerate(rows) if metric in r and "Source" in r), None)
    if header_at is None:
        raise ValueError(f"{path}: no '{metric}' column (not an ncu source-page CSV, or not of --set full?)")
    hdr, body = rows[header_at], rows[header_at + 1:]
    i_src, i_exe = hdr.index("Source"), hdr.index(metric)
    counts = collections.Counter()
    for r in body:
        words = r[i_src].split() if i_src < len(r) else []
        if words and words[0].startswith("@"):
            words = words[1:]
        if not words:
            continue
        value = r[i_exe] if i_exe < len(r) else ""
        counts[words[0].split(".")[0]] += float(value.replace(",", "") or 0)
    if not counts:
        raise ValueError(f"{path}: no instructions")
    return counts


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pages", nargs="+", help="LABEL=PATH, the first is the reference")
    ap.add_argument("--per", type=float, default=1.0, help="divide every count by this (default 1)")
    ap.add_argument("--top", type=int, default=30, help="rows to print (default 30)")
    ap.add_argument("--metric", default=EXECUTED, help=f"the per-instruction column to add (default '{EXECUTED}')")
    a = ap.parse_args(argv)
    if a.per <= 0:
        ap.error("--per must be positive")
    labels, tables = [], []
    for spec in a.pages:
        label, sep, path = spec.partition("=")
        if not sep or not label or not path:
            ap.error(f"'{spec}' is not LABEL=PATH")
        labels.append(label)
        tables.append(opcode_counts(path, a.metric))
    ops = set().union(*tables)
    ref, last = tables[0], tables[-1]
    ops = sorted(ops, key=lambda o: (-abs(last[o] - ref[o]), -max(t[o] for t in tables), o))[: a.top]
    print(f"{'opcode':<10}" + "".join(f"{l:>12}" for l in labels) + f"{labels[-1] + '-' + labels[0]:>16}")
    for o in ops:
        print(f"{o:<10}" + "".join(f"{t[o] / a.per:12.1f}" for t in tables) + f"{(last[o] - ref[o]) / a.per:16.1f}")
    print(f"{'total':<10}" + "".join(f"{sum(t.values()) / a.per:12.1f}" for t in tables)
          + f"{(sum(last.values()) - sum(ref.values())) / a.per:16.1f}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (OSError, ValueError) as e:
        print(f"ncu_opcode_mix: {e}", file=sys.stderr)
        sys.exit(2)
