# Where the PyTorch op's backward time goes beyond its kernels (docs/perf-notes.md, session 9: at D = 128, N = 4k
# bench/attention_bench.py timed gproj's backward ~0.39 ms above cuda_attention_bench's kernels, baseline's ~0.19
# ms). Per variant, on the same inputs:
#   grad     torch.autograd.grad through gproj.attention, one call between two CUDA events (what
#            attention_bench.py times, GUIDE section 5)
#   pipe     the same, 8 calls back to back between two events, per call: the host queues ahead of the GPU as in
#            training, so its latency before the first kernel is hidden (grad - pipe is that latency)
#   op       the binding's backward alone (gproj._C.backward on the forward's saved tensors: no autograd)
#   kernels  the device time of the kernels and memsets one backward launches (torch.profiler), and the largest
# gap = grad - kernels is time the GPU spends idle or waiting on the host inside one backward. --sdpa adds torch
# SDPA's FLASH_ATTENTION backend as a reference row (grad and pipe only). --trace DIR writes a Chrome trace of one
# grad call per row (CPU and GPU activity; open in chrome://tracing or Perfetto) and prints where the host was when
# the GPU started and finished. Run on the GPU machine; --smoke runs a tiny shape on the CPU (the emulator; no
# device times) to test the harness.
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
import gproj  # noqa: E402
from attention_bench import timed as median_s  # noqa: E402  (median seconds: CUDA events, or perf_counter)
from gproj import _C  # noqa: E402


def _profile(activities):
    """torch.profiler.profile over one cycle. acc_events=True where this torch has it: the events are the same for a
    single cycle, and newer torch (2.15) otherwise warns at the end that a cycle's events were cleared."""
    import inspect

    from torch.profiler import profile
    if "acc_events" in inspect.signature(profile.__init__).parameters:
        return profile(activities=activities, acc_events=True)
    return profile(activities=activities)


def kernel_times(fn, device):
    """{kernel or memset name: device µs} of one fn() under torch.profiler (empty on the CPU)."""
    if device != "cuda":
        return {}
    from torch.profiler import ProfilerActivity
    fn()
    torch.cuda.synchronize()
    with _profile([ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    out = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            name = e.name.split("(")[0].split("<")[0].replace("void ", "")[:60]
            us = getattr(e, "device_time_total", None)
            out[name] = out.get(name, 0.0) + (us if us is not None else e.cuda_time_total)
    return out


def pipelined_s(fn, device, reps, warmup, depth=8):
    """Median seconds per call of `depth` back-to-back fn() calls between one pair of CUDA events (perf_counter
    on the CPU): the host's launch latency overlaps the GPU's work, as it does in a training step."""
    return median_s(lambda: [fn() for _ in range(depth)], device, reps, warmup) / depth


def host_timeline(fn, device, trace_path=None):
    """One fn() under torch.profiler with CPU and (on the GPU) CUDA activity. Returns µs from the first host event
    to the first kernel launch, the last launch, the first GPU activity and the last GPU activity's end, and the
    GPU's idle time between its first and last activity (None for the GPU entries on the CPU); with trace_path,
    also the Chrome trace there (written atomically)."""
    from torch.profiler import ProfilerActivity
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    with _profile(acts) as prof:
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
    if trace_path:
        tmp = f"{trace_path}.tmp.{os.getpid()}.json"
        prof.export_chrome_trace(tmp)
        os.replace(tmp, trace_path)
    cpu = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU]
    gpu = sorted(((e.time_range.start, e.time_range.end) for e in prof.events()
                  if e.device_type == torch.autograd.DeviceType.CUDA), key=lambda t: t[0])
    t0 = min(e.time_range.start for e in cpu)
    launches = [e.time_range.end for e in cpu if "Launch" in e.name or "Memset" in e.name]
    out = {"first_launch_us": min(launches) - t0 if launches else None,
           "last_launch_us": max(launches) - t0 if launches else None,
           "gpu_start_us": None, "gpu_end_us": None, "gpu_idle_us": None}
    if gpu:
        idle, reach = 0.0, gpu[0][1]
        for a, b in gpu[1:]:
            idle += max(0.0, a - reach)
            reach = max(reach, b)
        out.update(gpu_start_us=gpu[0][0] - t0, gpu_end_us=reach - t0, gpu_idle_us=idle)
    return out


def make_inputs(B, N, H, D, device, q_scale):
    gen = torch.Generator(device="cpu").manual_seed(1234)
    return [(torch.randn((B, N, H, D), generator=gen) * (q_scale if i == 0 else 1.0)).to(device=device,
                                                                                        dtype=torch.bfloat16)
            for i in range(4)]


def grad_row(variant, grad, shape, device, reps, warmup, trace_dir, trace_label=None):
    """The columns every row has: grad and pipe times of grad() and its host timeline (and, with trace_dir, its
    trace as trace_LABEL_grad.json, LABEL the variant unless given)."""
    trace = os.path.join(trace_dir, f"trace_{trace_label or variant}_grad.json") if trace_dir else None
    return {"variant": variant, **shape, "grad_ms": 1e3 * median_s(grad, device, reps, warmup),
            "pipe_ms": 1e3 * pipelined_s(grad, device, reps, warmup), "op_ms": None, "kernels_ms": None,
            "gap_ms": None, "kernels_us": {}, "timeline": host_timeline(grad, device, trace)}


def measure_sdpa(shape, device, reps, warmup, trace_dir=None):
    """The reference row: torch SDPA's FLASH_ATTENTION backend through autograd (grad and pipe only; MATH on the
    CPU)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    base = make_inputs(shape["B"], shape["N"], shape["H"], shape["D"], device, shape["q_scale"])
    q, k, v = (t.detach().clone().transpose(1, 2).requires_grad_(True) for t in base[:3])
    dout = base[3].transpose(1, 2)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION if device == "cuda" else SDPBackend.MATH):
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=shape["causal"])
    grad = lambda: torch.autograd.grad(o, (q, k, v), dout, retain_graph=True)  # noqa: E731
    return grad_row("sdpa-flash" if device == "cuda" else "sdpa-math", grad, shape, device, reps, warmup, trace_dir,
                    "sdpa")


def measure(variant, shape, device, reps, warmup, trace_dir=None):
    """A gproj row: grad and pipe as for SDPA, the binding's backward alone (op) and the kernels' device time."""
    causal = shape["causal"]
    base = make_inputs(shape["B"], shape["N"], shape["H"], shape["D"], device, shape["q_scale"])
    q, k, v = (t.detach().clone().requires_grad_(True) for t in base[:3])
    dout = base[3]
    o = gproj.attention(q, k, v, causal=causal, variant=variant)
    grad = lambda: torch.autograd.grad(o, (q, k, v), dout, retain_graph=True)  # noqa: E731
    with torch.no_grad():
        o2, o_fp32, lse, basis = _C.forward(q, k, v, causal, None, variant, None, None, True)  # (as the op does)
    op = lambda: _C.backward(dout, q, k, v, o2, o_fp32, lse, basis, causal, None, variant, None, None)  # noqa: E731
    row = grad_row(variant, grad, shape, device, reps, warmup, trace_dir)
    kernels = kernel_times(grad, device)
    busy_ms = 1e3 * sum(kernels.values()) / 1e6
    row.update(op_ms=1e3 * median_s(op, device, reps, warmup), kernels_ms=busy_ms if kernels else None,
               gap_ms=row["grad_ms"] - busy_ms if kernels else None,
               kernels_us=dict(sorted(kernels.items(), key=lambda kv: -kv[1])))
    return row


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="a tiny shape on the CPU to test the harness")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--length", type=int, default=4096)
    ap.add_argument("--tokens", type=int, default=16384, help="B * N")
    ap.add_argument("--width", type=int, default=2048, help="H * D")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--variants", nargs="+", default=["baseline", "gproj"])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--q-scale", type=float, default=1.0)
    ap.add_argument("--sdpa", action="store_true", help="add torch SDPA FLASH_ATTENTION's backward as a reference")
    ap.add_argument("--trace", default=None, metavar="DIR", help="write a Chrome trace of one grad call per row")
    ap.add_argument("--out", default=None, help="JSON report (written atomically)")
    args = ap.parse_args(argv[1:])
    if not (0.0 < args.q_scale <= 64.0):
        ap.error("--q-scale must be in (0, 64]")
    if args.length < 1 or args.dim < 1 or args.tokens < args.length or args.width % args.dim:
        ap.error("--length and --dim must be positive, --tokens at least --length, --width a multiple of --dim")
    unknown = [v for v in args.variants if v not in gproj.VARIANTS]
    if unknown:
        ap.error(f"unknown variant(s) {unknown}; known: {list(gproj.VARIANTS)}")
    device = "cpu" if args.smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("op_overhead: no CUDA device (use --smoke to test the harness on the CPU)")
    if args.smoke:
        args.dim, args.length, args.tokens, args.width, args.reps, args.warmup = 64, 128, 256, 128, 2, 1
    B, H = args.tokens // args.length, args.width // args.dim
    if args.trace:
        os.makedirs(args.trace, exist_ok=True)
    rows = []
    print(f"{'variant':<10} {'grad ms':>8} {'pipe ms':>8} {'op ms':>8} {'kernels':>8} {'gap ms':>8}   "
          "largest kernels (µs)", flush=True)
    fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    shape = {"B": B, "N": args.length, "H": H, "D": args.dim, "causal": args.causal, "q_scale": args.q_scale}
    jobs = [lambda v=v: measure(v, shape, device, args.reps, args.warmup, args.trace) for v in args.variants]
    if args.sdpa:
        jobs.append(lambda: measure_sdpa(shape, device, args.reps, args.warmup, args.trace))
    for job in jobs:
        r = job()
        rows.append(r)
        top = ", ".join(f"{n} {us:.0f}" for n, us in list(r["kernels_us"].items())[:6])
        print(f"{r['variant']:<10} {r['grad_ms']:>8.3f} {r['pipe_ms']:>8.3f} {fmt(r['op_ms']):>8} "
              f"{fmt(r['kernels_ms']):>8} {fmt(r['gap_ms']):>8}   {top}", flush=True)
    print("host timeline of one grad call (µs from its first host event): first launch, last launch, "
          "GPU start, GPU end, GPU idle in between")
    for r in rows:
        t = r["timeline"]
        print(f"  {r['variant']:<10} " + "  ".join(f"{k[:-3]} {'-' if t[k] is None else f'{t[k]:.0f}'}"
                                                 for k in ("first_launch_us", "last_launch_us", "gpu_start_us",
                                                           "gpu_end_us", "gpu_idle_us")), flush=True)
    if args.out:
        tmp = f"{args.out}.tmp.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump({"command": " ".join(argv), "torch": torch.__version__, "gproj": gproj.build_info(),
                       "rows": rows}, f, indent=2)
        os.replace(tmp, args.out)
    return rows


if __name__ == "__main__":
    main(sys.argv)
