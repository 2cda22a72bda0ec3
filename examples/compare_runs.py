# Step-by-step comparison of two training runs' metrics (e.g. a DDP run against the single-GPU run of the same
# seed and global batch): the largest and mean |loss difference| over the common steps, and the grad norms.
# Exits 1 when --max-loss-diff is given and exceeded. Exercised by tests/python/test_train_gpt.py.
import argparse
import json
import sys

from run_files import open_run_file


def load(run):
    with open_run_file(run, "metrics.jsonl") as f:
        return {r["step"]: r for r in map(json.loads, f)}


def compare(a, b):
    """Per common step: (step, loss_a, loss_b, grad_norm_a, grad_norm_b)."""
    steps = sorted(set(a) & set(b))
    return [(s, a[s]["loss"], b[s]["loss"], a[s]["grad_norm"], b[s]["grad_norm"]) for s in steps]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("run_a")
    ap.add_argument("run_b")
    ap.add_argument("--max-loss-diff", type=float, default=None, help="fail above this |loss_a - loss_b|")
    args = ap.parse_args(argv)
    rows = compare(load(args.run_a), load(args.run_b))
    if not rows:
        sys.exit(f"compare_runs: {args.run_a} and {args.run_b} have no step in common")
    diffs = [abs(la - lb) for _, la, lb, _, _ in rows]
    worst = max(range(len(rows)), key=lambda i: diffs[i])
    print(f"{len(rows)} common steps; |loss diff| max {diffs[worst]:.3e} at step {rows[worst][0]}, "
          f"mean {sum(diffs) / len(diffs):.3e}")
    for s, la, lb, ga, gb in rows[:: max(1, len(rows) // 10)] + [rows[-1]]:
        print(f"  step {s:>6}  loss {la:.5f} {lb:.5f}  grad norm {ga:.4f} {gb:.4f}")
    if args.max_loss_diff is not None and diffs[worst] > args.max_loss_diff:
        sys.exit(1)


if __name__ == "__main__":
    main()
