# PNG figures comparing run folders of examples/train_gpt.py over steps: loss, grad norm, per-layer dQ error, spectral norms.
# Exercised by scripts/train_smoke.sh: python examples/plot_runs.py RUN_DIR... --out DIR.
import argparse
import json
import os
import sys

import matplotlib
from run_files import open_run_file, run_file_path

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_jsonl(run_dir, name):
    if run_file_path(run_dir, name) is None:
        return []
    with open_run_file(run_dir, name) as f:
        return [json.loads(line) for line in f if line.strip()]


def load_run(run_dir):
    """(label, metrics rows, audit rows) of a run folder; the label is the attention variant (and the folder's
    name when it differs)."""
    with open(os.path.join(run_dir, "env.json")) as f:
        config = json.load(f)["config"]
    folder = os.path.basename(os.path.normpath(run_dir))
    label = config["attention"] if folder == config["attention"] else f"{config['attention']} ({folder})"
    return label, read_jsonl(run_dir, "metrics.jsonl"), read_jsonl(run_dir, "audit.jsonl")


def smooth(values, window):
    """Trailing mean over `window` points (window 1: unchanged)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_metric(runs, key, ylabel, path, window, log=False):
    fig, ax = plt.subplots(figsize=(8, 5))
    for label, metrics, _ in runs:
        steps = [m["step"] for m in metrics]
        ax.plot(steps, smooth([m[key] for m in metrics], window), label=label, lw=1)
        if key == "loss":
            val = [(m["step"], m["val_loss"]) for m in metrics if "val_loss" in m]
            if val:
                ax.plot(*zip(*val), "o--", ms=3, lw=0.8, color=ax.lines[-1].get_color(), label=f"{label} val")
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel if window == 1 else f"{ylabel} (mean of {window} steps)")
    if log:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_per_layer(runs, keys, ylabel, path, log=True):
    """One panel per layer; a line per run and key (solid for the first key, dashed for the second)."""
    layers = sorted({a["layer"] for _, _, audit in runs for a in audit})
    if not layers:
        return False
    cols = min(4, len(layers))
    rows = (len(layers) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3 * rows), squeeze=False, sharex=True)
    for i, layer in enumerate(layers):
        ax = axes[i // cols][i % cols]
        for r, (label, _, audit) in enumerate(runs):
            rows_l = [a for a in audit if a["layer"] == layer]
            for key, style in zip(keys, ("-o", "--s")):
                ax.plot([a["step"] for a in rows_l], [a[key] for a in rows_l], style, ms=3, lw=1, color=f"C{r}",
                        label=f"{label} {key}" if i == 0 else None)
        ax.set_title(f"layer {layer}", fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    for j in range(len(layers), rows * cols):
        axes[j // cols][j % cols].axis("off")
    fig.legend(loc="upper center", fontsize=7, ncol=min(3, len(runs) * len(keys)))
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv=None):
    ap = argparse.ArgumentParser(description="Compare run folders of examples/train_gpt.py as PNG figures.")
    ap.add_argument("runs", nargs="+", help="run folders")
    ap.add_argument("--out", required=True, help="folder for the PNG files (created)")
    ap.add_argument("--smooth", type=int, default=1, help="trailing mean window for loss and grad norm")
    args = ap.parse_args(argv)
    runs = [load_run(r) for r in args.runs]
    os.makedirs(args.out, exist_ok=True)
    written = [os.path.join(args.out, name) for name in ("loss.png", "grad_norm.png")]
    plot_metric(runs, "loss", "train loss", written[0], args.smooth)
    plot_metric(runs, "grad_norm", "grad norm (before clipping)", written[1], args.smooth, log=True)
    for name, keys, ylabel in (("dq_error.png", ("dq_err",), "dQ rel. error vs float64"),
                               ("spectral_norms.png", ("wq", "wk"), "||W_q||_2 (-), ||W_k||_2 (--)")):
        path = os.path.join(args.out, name)
        if plot_per_layer(runs, keys, ylabel, path, log=name == "dq_error.png"):
            written.append(path)
        else:
            print(f"plot_runs: no audit records, {name} not written", file=sys.stderr)
    for path in written:
        print(path)


if __name__ == "__main__":
    main()
