#!/usr/bin/env python3
"""Per-kernel times from `ncu --metrics gpu__time_duration.sum --csv --print-units base` of one benchmark run
with --reps 1: cuda_attention_bench runs each phase twice in turn, a warm-up call and a timed one (the forward
twice, then the backward twice), so the launch sequence is P1 P1 P2 P2; the timed calls are the second copy of each
phase. (Until session 10 this took the second half of the launches, which also held the warm-up backward's last
launch: that kernel was counted twice.)

  python3 bench/ncu_times.py times_LABEL.csv
      each kernel's µs in the timed calls, then the total (scripts/device_profile.sh)
  python3 bench/ncu_times.py --compare DIR
      for every DIR/times_KEY_baseline.csv beside DIR/times_KEY_gproj.csv: the backward kernels of both side by
      side, by name without template arguments, and gproj's extra (scripts/device_profile_overhead.sh)
"""
import collections
import csv
import glob
import os
import sys


def timed_calls(path):
    """[(full kernel name, µs)] of the timed call of each phase, or None when the file has no ncu rows."""
    rows = [r for r in csv.reader(open(path)) if len(r) > 10] if os.path.exists(path) else []
    if not rows:
        return None
    head, body = rows[0], rows[1:]
    kn, mv = head.index("Kernel Name"), head.index("Metric Value")
    calls = [(r[kn], float(r[mv].replace(",", "")) / 1e3) for r in body]
    starts = doubled_blocks([name for name, _ in calls])
    if starts is None:
        print(f"ncu_times: {path}: the launches are not a sequence of phases run twice each; taking the second "
              "half of them (the last kernel of a phase may be counted twice)", file=sys.stderr)
        return calls[len(calls) // 2:]
    return [c for a, n in starts for c in calls[a + n:a + 2 * n]]


def doubled_blocks(names):
    """[(start, length)] splitting names into consecutive blocks that each appear twice in a row (P1 P1 P2 P2 ..),
    the shortest first block that lets the rest split too; None when no split exists."""
    memo = {}

    def split(i):
        if i == len(names):
            return []
        if i not in memo:
            memo[i] = None
            for n in range(1, (len(names) - i) // 2 + 1):
                if names[i:i + n] == names[i + n:i + 2 * n]:
                    rest = split(i + 2 * n)
                    if rest is not None:
                        memo[i] = [(i, n)] + rest
                        break
        return memo[i]

    return split(0)


def by_kernel(calls, base_names=False, backward_only=False):
    """Ordered {name: µs}: the full name cut to 90 characters, or (base_names) without template arguments."""
    tot = collections.OrderedDict()
    for full, us in calls:
        name = full.split("(")[0].split("<")[0].replace("void ", "") if base_names else full[:90]
        if backward_only and "fwd" in name:
            continue
        tot[name] = tot.get(name, 0.0) + us
    return tot


def print_times(path):
    calls = timed_calls(path)
    if calls is None:
        print("  (no ncu rows)")
        return
    tot = by_kernel(calls)
    for name, us in tot.items():
        print(f"  {us:9.1f} us  {name}")
    print(f"  {sum(tot.values()):9.1f} us  total (the timed call of each phase)")


def print_compare(work):
    for path in sorted(glob.glob(os.path.join(work, "times_*_baseline.csv"))):
        key = os.path.basename(path)[len("times_"):-len("_baseline.csv")]
        base, gp = timed_calls(path), timed_calls(path.replace("_baseline.csv", "_gproj.csv"))
        print(f"\n## {key} (ncu µs, backward kernels)")
        if base is None or gp is None:
            print("  (no ncu rows: see the CSVs)")
            continue
        base, gp = by_kernel(base, True, True), by_kernel(gp, True, True)
        print(f"  {'kernel':58s} {'baseline':>9s} {'gproj':>9s} {'extra':>9s}")
        for name in dict.fromkeys(list(base) + list(gp)):
            b, g = base.get(name, 0.0), gp.get(name, 0.0)
            print(f"  {name[:58]:58s} {b:9.1f} {g:9.1f} {g - b:+9.1f}")
        tb, tg = sum(base.values()), sum(gp.values())
        print(f"  {'total (serialised under ncu)':58s} {tb:9.1f} {tg:9.1f} {tg - tb:+9.1f} ({100 * (tg / tb - 1):+.1f}%)")


def main(argv):
    if len(argv) == 3 and argv[1] == "--compare":
        print_compare(argv[2])
    elif len(argv) == 2 and not argv[1].startswith("-"):
        print_times(argv[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
