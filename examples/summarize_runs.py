# The per-run table of the training experiment (issue 5, docs/experiment.md) from run folders: variant, seed,
# steps, divergence ("none through N", the step, or the non-finite step), final train and validation loss, the
# worst per-layer dQ and dK errors of any audit (with their layer and step), the largest logit seen, median
# tokens/s.
# Usage: python examples/summarize_runs.py RUN_DIR... [--out table.md]. Exercised by tests/python/test_train_gpt.py.
import argparse
import json
import os
import statistics
import sys

from run_files import open_run_file, run_file_path


def summarize(run):
    """One row (a dict) for a run folder written by examples/train_gpt.py."""
    with open(os.path.join(run, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(run, "env.json")) as f:
        config = json.load(f)["config"]
    with open_run_file(run, "metrics.jsonl") as f:
        metrics = [json.loads(line) for line in f]
    audits = []
    if run_file_path(run, "audit.jsonl") is not None:
        with open_run_file(run, "audit.jsonl") as f:
            audits = [json.loads(line) for line in f]
    steps = summary["steps_done"]
    if summary.get("nonfinite_at") is not None:
        divergence = f"non-finite at {summary['nonfinite_at']}"
    elif summary.get("diverged_at") is not None:
        divergence = f"diverged at {summary['diverged_at']}"
    else:
        divergence = f"none through {steps}"
    if summary.get("stopped"):
        divergence += f" ({summary['stopped']})"
    worst = max(audits, key=lambda a: a["dq_err"], default=None)
    worst_k = max(audits, key=lambda a: a["dk_err"], default=None)
    rates = [m["tokens_per_s"] for m in metrics[10:]] or [m["tokens_per_s"] for m in metrics]
    return {
        "run": os.path.basename(os.path.normpath(run)),
        "variant": config["attention"],
        "seed": config["seed"],
        "steps": steps,
        "divergence": divergence,
        "final_loss": summary.get("final_loss"),
        "final_val_loss": summary.get("final_val_loss"),
        "worst_dq": None if worst is None else (worst["dq_err"], worst["layer"], worst["step"]),
        "worst_dk": None if worst_k is None else (worst_k["dk_err"], worst_k["layer"], worst_k["step"]),
        "max_logit": max((a["max_logit"] for a in audits if "max_logit" in a), default=None),
        "tokens_per_s": statistics.median(rates) if rates else None,
    }


def markdown(rows):
    def num(x, fmt):
        return "–" if x is None else format(x, fmt)

    def worst(w):
        return "–" if w is None else f"{100 * w[0]:.3f}% (L{w[1]}, {w[2]})"

    out = ["| run | variant | seed | divergence | final loss | val loss | worst dQ error (layer, step) | "
           "worst dK error (layer, step) | max logit | tokens/s |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['run']} | {r['variant']} | {r['seed']} | {r['divergence']} | {num(r['final_loss'], '.4f')} | "
                   f"{num(r['final_val_loss'], '.4f')} | {worst(r['worst_dq'])} | {worst(r['worst_dk'])} | "
                   f"{num(r['max_logit'], '.1f')} | {num(r['tokens_per_s'], ',.0f')} |")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("runs", nargs="+", help="run folders of examples/train_gpt.py")
    ap.add_argument("--out", default=None, help="write the Markdown table here (atomically) as well")
    args = ap.parse_args(argv)
    rows, broken = [], []
    for run in args.runs:
        try:
            rows.append(summarize(run))
        except (OSError, KeyError, json.JSONDecodeError) as e:
            broken.append(f"{run} is not a complete run folder: {e}")
    table = markdown(rows)
    sys.stdout.write(table)
    if args.out:
        tmp = f"{args.out}.tmp.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(table)
        os.replace(tmp, args.out)
    if broken:  # the complete runs are in the table; the others are named, and the exit status says so
        sys.exit("summarize_runs: " + "; ".join(broken))


if __name__ == "__main__":
    main()
