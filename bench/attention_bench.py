# Side-by-side attention benchmark (GUIDE §5): forward and backward TFLOP/s of gproj's variants and of torch's
# SDPA backends on the same inputs in the same run, plus GProj's overhead and issue 4's speed bar (a table after
# the rows; `--summary REPORT` prints it again from a saved report). Run on the GPU machine;
# `--smoke` runs tiny shapes on the CPU (gproj's emulator against SDPA's math backend) to test the harness.
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import gproj  # noqa: E402

SDPA_BACKENDS = ["FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"]


def flops_forward(B, H, N, D, causal):
    f = 4.0 * B * H * N * N * D
    return f / 2 if causal else f


def one_timing(fn, device, chain=1):
    """Seconds per call of `chain` calls of fn() queued back to back: CUDA events on the GPU, perf_counter on the CPU.
    With chain = 1 the host's time before the first kernel counts (one call between two events, the GPU idle until
    it launches); with more, the host queues ahead of the GPU as in training and that latency is hidden but for the
    first call's share."""
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(chain):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1e3 / chain
    t0 = time.perf_counter()
    for _ in range(chain):
        fn()
    return (time.perf_counter() - t0) / chain


def timed(fn, device, reps, warmup, chain=1):
    """Median seconds per call of fn() over reps timings (one_timing's) after warmup calls."""
    for _ in range(warmup):
        fn()
    return statistics.median(one_timing(fn, device, chain) for _ in range(reps))


def paired_overhead(fa, fb, device, pairs, chain=1):
    """fb's time over fa's, minus 1, with the two timed in alternation (a b, b a, a b, ...: `pairs` timings of each,
    one_timing's), so that a drift of the GPU's clocks or temperature over the run falls on both: median(b) /
    median(a) - 1. The rows' own timings, one implementation after the other, put identical kernels up to 3.7%
    apart (session 50, run 2: baseline and fwdfix, whose backwards are the same kernels)."""
    ta, tb = [], []
    for i in range(pairs):
        for f in ((fa, fb) if i % 2 == 0 else (fb, fa)):
            (ta if f is fa else tb).append(one_timing(f, device, chain))
    return statistics.median(tb) / statistics.median(ta) - 1


def timing_note(chain):
    """One line: what a row's time is, for the printed table."""
    if chain == 1:
        return "timing: one call between two CUDA events (the host's time before its first kernel counts)"
    return f"timing: {chain} calls queued back to back between two CUDA events, per call (host latency hidden)"


def make_impls(device):
    """name -> f(q, k, v, causal) returning o, all taking (B, N, H, D) tensors."""
    impls = {f"gproj-{v}": (lambda v: lambda q, k, v_, c: gproj.attention(q, k, v_, causal=c, variant=v))(v)
             for v in ("baseline", "fwdfix", "gproj")}
    # gproj-gproj runs the default projection (gproj.DEFAULT_PROJECTION, fp16-lowrank); the exact form beside it for
    # the overhead table
    impls["gproj-pweighted"] = lambda q, k, v_, c: gproj.attention(q, k, v_, causal=c, variant="gproj",
                                                                   projection="pweighted")
    # thresh-lowrank, the default until the switch to fp16-lowrank (docs/gproj-projection.md)
    impls["gproj-thresh-lowrank"] = lambda q, k, v_, c: gproj.attention(q, k, v_, causal=c, variant="gproj",
                                                                        projection="thresh-lowrank")
    # what deterministic=True costs (the exact projection, the one with a deterministic CUDA backward: dQ without
    # atomics, docs/pytorch.md)
    impls["gproj-pweighted-det"] = lambda q, k, v_, c: gproj.attention(q, k, v_, causal=c, variant="gproj",
                                                                       projection="pweighted", deterministic=True)
    backends = SDPA_BACKENDS if device == "cuda" else ["MATH"]
    for name in backends:
        backend = getattr(torch.nn.attention.SDPBackend, name)

        def sdpa(q, k, v, c, backend=backend):
            with torch.nn.attention.sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                      is_causal=c).transpose(1, 2)
        impls[f"sdpa-{name.lower()}"] = sdpa
    return impls


def backward_peak_mib(o, inputs, dout):
    """MiB the backward allocates at its peak beyond what was allocated before it (the gradients, workspaces and
    temporaries), from torch's CUDA caching allocator."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    grads = torch.autograd.grad(o, inputs, dout, retain_graph=True)
    torch.cuda.synchronize()
    del grads
    return (torch.cuda.max_memory_allocated() - before) / 2**20


# The backward overheads measured in alternation with gproj-baseline's (paired_overhead): gproj's (the bar's) and
# fwdfix's, the control (its backward runs baseline's kernels, so its paired overhead is the measurement's noise).
PAIRED_ROWS = ("gproj-gproj", "gproj-fwdfix")


def bench_shape(impls, B, N, H, D, causal, device, reps, warmup, q_scale=1.0, chain=1, pairs=0):
    gen = torch.Generator(device="cpu").manual_seed(1234)
    shape = (B, N, H, D)
    # q_scale > 1 sharpens the softmax rows (Gaussian inputs are diffuse; trained attention has a few large entries
    # per row, which gproj's thresh-lowrank handles one by one: docs/perf-notes.md).
    base = [(torch.randn(shape, generator=gen) * (q_scale if i == 0 else 1.0)).to(device=device, dtype=torch.bfloat16)
            for i in range(4)]
    rows = []
    backwards = {}  # the backward calls paired_overhead times again (their graphs kept until then)
    for name, fn in impls.items():
        q, k, v = (t.detach().clone().requires_grad_(True) for t in base[:3])
        dout = base[3]
        try:
            t_fwd = timed(lambda: fn(q, k, v, causal), device, reps, warmup, chain)
            o = fn(q, k, v, causal)
            backward = (lambda o, q, k, v: lambda: torch.autograd.grad(o, (q, k, v), dout, retain_graph=True))(
                o, q, k, v)
            t_bwd = timed(backward, device, reps, warmup, chain)
            peak = backward_peak_mib(o, (q, k, v), dout) if device == "cuda" else None
        except (RuntimeError, ValueError) as e:  # a backend that cannot run this shape says so in the report
            rows.append({"impl": name, "error": str(e).splitlines()[0][:200]})
            continue
        if pairs > 0 and (name == "gproj-baseline" or name in PAIRED_ROWS):
            backwards[name] = backward
        f = flops_forward(B, H, N, D, causal)
        rows.append({"impl": name, "fwd_ms": 1e3 * t_fwd, "bwd_ms": 1e3 * t_bwd,
                     "fwd_tflops": f / t_fwd / 1e12, "bwd_tflops": 2.5 * f / t_bwd / 1e12})
        if peak is not None:
            rows[-1]["bwd_peak_mib"] = peak
    by = {r["impl"]: r for r in rows if "error" not in r}
    if "gproj-baseline" in by:
        for r in rows:
            if r["impl"] in OVERHEAD_ROWS and r["impl"] in by:
                r["gproj_bwd_overhead"], r["gproj_step_overhead"] = overheads(r, by["gproj-baseline"])
    if "gproj-baseline" in backwards:
        for name in PAIRED_ROWS:
            if name in backwards:
                by[name]["bwd_overhead_paired"] = paired_overhead(backwards["gproj-baseline"], backwards[name], device,
                                                                  pairs, chain)
                by[name]["pairs"] = pairs
    return rows


# the rows whose overhead over gproj-baseline the report gives
OVERHEAD_ROWS = ("gproj-gproj", "gproj-pweighted", "gproj-thresh-lowrank", "gproj-pweighted-det")


def overheads(g, base):
    """GProj's overhead over baseline: of the backward (issue 4's measure) and of forward plus backward (what a
    training step pays: gproj's forward carries fwdfix's tie rule and K's basis)."""
    return (g["bwd_ms"] / base["bwd_ms"] - 1,
            (g["fwd_ms"] + g["bwd_ms"]) / (base["fwd_ms"] + base["bwd_ms"]) - 1)


# Issue 4's speed bar: at D = 128 and N >= 4k, causal and not, gproj's backward overhead over baseline's at most 3%
# and gproj at least as fast as SDPA's FLASH_ATTENTION forward and backward.
BAR_D, BAR_MIN_N, BAR_OVERHEAD = 128, 4096, 0.03


def bar_rows(results):
    """One row per (D, N, causal) with gproj-gproj and gproj-baseline results: the overheads, gproj's speed-up over
    SDPA flash (its time / gproj's; None where flash did not run) and, for the shapes the bar covers, whether each
    part of the bar holds."""
    groups = {}
    for r in results:
        if "error" not in r:
            groups.setdefault((r["D"], r["N"], r["causal"]), {})[r["impl"]] = r
    rows = []
    for (D, N, causal), by in sorted(groups.items()):
        g, base, flash = by.get("gproj-gproj"), by.get("gproj-baseline"), by.get("sdpa-flash_attention")
        if g is None or base is None:
            continue
        bwd_overhead, step_overhead = overheads(g, base)
        # the bar reads the paired measure where the report has it (paired_overhead), else the rows' ratio
        control = by.get("gproj-fwdfix", {}).get("bwd_overhead_paired")
        row = {"D": D, "N": N, "causal": causal, "bwd_overhead": g.get("bwd_overhead_paired", bwd_overhead),
               "bwd_overhead_rows": bwd_overhead, "paired": "bwd_overhead_paired" in g, "control_overhead": control,
               "step_overhead": step_overhead,
               "fwd_speedup_vs_flash": flash["fwd_ms"] / g["fwd_ms"] if flash else None,
               "bwd_speedup_vs_flash": flash["bwd_ms"] / g["bwd_ms"] if flash else None,
               "covered": D == BAR_D and N >= BAR_MIN_N}
        if row["covered"]:
            row["overhead_ok"] = row["bwd_overhead"] <= BAR_OVERHEAD
            row["flash_ok"] = flash is not None and g["fwd_ms"] <= flash["fwd_ms"] and g["bwd_ms"] <= flash["bwd_ms"]
        rows.append(row)
    return rows


def bar_verdict(rows):
    """One line: whether the bar holds on the shapes it covers that this report has, and the worst overhead."""
    covered = [r for r in rows if r["covered"]]
    if not covered:
        return f"bar: no shape with D = {BAR_D} and N >= {BAR_MIN_N} in this report"
    worst = max(covered, key=lambda r: r["bwd_overhead"])
    parts = [f"backward overhead <= {BAR_OVERHEAD:.0%}: "
             + ("met" if all(r["overhead_ok"] for r in covered) else
                f"NOT met (worst {worst['bwd_overhead']:+.1%} at N = {worst['N']}"
                f"{', causal' if worst['causal'] else ''})"),
             "at least as fast as SDPA flash both ways: "
             + ("met" if all(r["flash_ok"] for r in covered) else "NOT met")]
    return f"bar ({len(covered)} shapes with D = {BAR_D}, N >= {BAR_MIN_N}): " + "; ".join(parts)


def print_bar_table(rows, file=sys.stdout):
    """bar_rows' rows as a table, then bar_verdict's line (nothing without rows)."""
    if not rows:
        return
    print("\nGProj overhead (gproj-gproj over gproj-baseline) and speed-up over SDPA flash (flash time / gproj time)",
          file=file)
    print(f"{'D':>4} {'N':>6} {'causal':>6} {'bwd overhead':>12} {'(rows)':>7} {'control':>7} {'fwd+bwd overhead':>16} "
          f"{'fwd vs flash':>12} {'bwd vs flash':>12}  bar", file=file)
    for r in rows:
        fx = f"{r['fwd_speedup_vs_flash']:.2f}x" if r["fwd_speedup_vs_flash"] is not None else "-"
        bx = f"{r['bwd_speedup_vs_flash']:.2f}x" if r["bwd_speedup_vs_flash"] is not None else "-"
        # (reports saved before the paired measure have only the rows' ratio, as bwd_overhead)
        rows_ratio = f"{r['bwd_overhead_rows']:+.1%}" if r.get("paired") else "-"
        control = f"{r['control_overhead']:+.1%}" if r.get("control_overhead") is not None else "-"
        if not r["covered"]:
            mark = "-"
        else:
            misses = [m for m, ok in (("overhead", r["overhead_ok"]), ("flash", r["flash_ok"])) if not ok]
            mark = "met" if not misses else "not met: " + ", ".join(misses)
        print(f"{r['D']:>4} {r['N']:>6} {str(r['causal']):>6} {r['bwd_overhead']:>+12.1%} {rows_ratio:>7} "
              f"{control:>7} {r['step_overhead']:>+16.1%} {fx:>12} {bx:>12}  {mark}", file=file)
    if any(r.get("paired") for r in rows):
        print("bwd overhead: gproj's backward timed in alternation with baseline's (median over the pairs); (rows): the "
              "two rows' ratio; control: fwdfix's paired overhead (its backward runs baseline's kernels: the noise)",
              file=file)
    print(bar_verdict(rows), file=file)


def environment(device, argv):
    env = {"date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "command": " ".join(argv), "torch": torch.__version__, "python": platform.python_version(),
           "gproj": gproj.build_info(), "default_projection": gproj.DEFAULT_PROJECTION, "host": platform.node()}
    if device == "cuda":
        env.update(gpu=torch.cuda.get_device_name(0), cuda=torch.version.cuda,
                   cudnn=torch.backends.cudnn.version())
        try:
            env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            env["driver"] = "unknown"
    return env


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU to test the harness")
    ap.add_argument("--dims", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 8192, 16384])
    ap.add_argument("--tokens", type=int, default=16384, help="B * N")
    ap.add_argument("--width", type=int, default=2048, help="H * D")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--chain", type=int, default=1,
                    help="calls queued back to back per timing (1: one call between two events, the host's latency "
                         "before the first kernel included; e.g. 8 hides it, as training's queue does)")
    ap.add_argument("--pairs", type=int, default=30,
                    help="timings of each of baseline's and gproj's (and fwdfix's, the control) backwards taken in "
                         "alternation for the overhead the bar reads (0: the rows' ratio only)")
    ap.add_argument("--q-scale", type=float, default=1.0,
                    help="multiply q (sharper softmax rows; 4 matches trained attention's ~3.5 entries >= 1/16 a row)")
    ap.add_argument("--out", default=None, help="JSON report (default bench/results/attention_<date>.json)")
    ap.add_argument("--summary", metavar="REPORT", default=None,
                    help="print the overhead table and the issue's bar for a saved JSON report; runs nothing")
    args = ap.parse_args(argv[1:])
    if args.summary is not None:
        try:
            with open(args.summary) as f:
                results = json.load(f)["results"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.exit(f"attention_bench: cannot read the report {args.summary}: {e}")
        print_bar_table(bar_rows(results))
        if results:
            print(timing_note(results[0].get("chain", 1)))
        return
    if not (0.0 < args.q_scale <= 64.0):
        ap.error("--q-scale must be in (0, 64]")
    if not (1 <= args.chain <= 64):
        ap.error("--chain must be in [1, 64]")
    if not (0 <= args.pairs <= 1000):
        ap.error("--pairs must be in [0, 1000]")
    device = "cpu" if args.smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("attention_bench: no CUDA device (use --smoke to test the harness on the CPU)")
    if args.smoke:
        args.dims, args.lengths, args.tokens, args.width, args.reps, args.warmup = [64], [128], 256, 128, 2, 1
        args.pairs = min(args.pairs, 2)
    impls = make_impls(device)
    report = {"env": environment(device, argv), "results": []}
    print(f"{'impl':<24} {'N':>6} {'D':>4} {'causal':>6} {'fwd TF/s':>9} {'bwd TF/s':>9} {'bwd peak MiB':>12}",
          flush=True)
    for D in args.dims:
        for N in args.lengths:
            for causal in (False, True):
                B, H = max(1, args.tokens // N), args.width // D
                for r in bench_shape(impls, B, N, H, D, causal, device, args.reps, args.warmup, args.q_scale,
                                     args.chain, args.pairs):
                    r.update(B=B, N=N, H=H, D=D, causal=causal, q_scale=args.q_scale, chain=args.chain)
                    report["results"].append(r)
                    if "error" in r:
                        print(f"{r['impl']:<24} {N:>6} {D:>4} {str(causal):>6}  error: {r['error']}", flush=True)
                    else:
                        peak = f"{r['bwd_peak_mib']:>12.0f}" if "bwd_peak_mib" in r else f"{'-':>12}"
                        print(f"{r['impl']:<24} {N:>6} {D:>4} {str(causal):>6} {r['fwd_tflops']:>9.2f} "
                              f"{r['bwd_tflops']:>9.2f} {peak}", flush=True)
    report["bar"] = bar_rows(report["results"])
    print_bar_table(report["bar"])
    print(timing_note(args.chain))
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                   f"attention_{datetime.datetime.now(datetime.timezone.utc):%Y%m%dT%H%M%SZ}.json")
    tmp = f"{out}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=2)
    os.replace(tmp, out)
    print(f"saved {out}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv)
