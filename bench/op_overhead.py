# Where the PyTorch op's backward time goes beyond its kernels (docs/perf-notes.md, session 9: at D = 128, N = 4k
# bench/attention_bench.py timed gproj's backward ~0.39 ms above cuda_attention_bench's kernels, baseline's ~0.19
# ms). Per variant, on the same inputs:
#   grad     torch.autograd.grad through gproj.attention (what attention_bench.py times)
#   op       the binding's backward alone (gproj._C.backward on the forward's saved tensors: no autograd)
#   kernels  the device time of the kernels and memsets one backward launches (torch.profiler), and the largest
# gap = grad - kernels is time the GPU spends idle or waiting on the host inside one backward. Run on the GPU
# machine; --smoke runs a tiny shape on the CPU (the emulator; no device times) to test the harness.
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


def kernel_times(fn, device):
    """{kernel or memset name: device µs} of one fn() under torch.profiler (empty on the CPU)."""
    if device != "cuda":
        return {}
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    out = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            name = e.name.split("(")[0].split("<")[0].replace("void ", "")[:60]
            us = getattr(e, "device_time_total", None)
            out[name] = out.get(name, 0.0) + (us if us is not None else e.cuda_time_total)
    return out


def measure(variant, B, N, H, D, causal, device, reps, warmup, q_scale):
    gen = torch.Generator(device="cpu").manual_seed(1234)
    base = [(torch.randn((B, N, H, D), generator=gen) * (q_scale if i == 0 else 1.0)).to(device=device,
                                                                                         dtype=torch.bfloat16)
            for i in range(4)]
    q, k, v = (t.detach().clone().requires_grad_(True) for t in base[:3])
    dout = base[3]
    o = gproj.attention(q, k, v, causal=causal, variant=variant)
    grad = lambda: torch.autograd.grad(o, (q, k, v), dout, retain_graph=True)  # noqa: E731
    with torch.no_grad():
        o2, o_fp32, lse = _C.forward(q, k, v, causal, None, variant, None)
    op = lambda: _C.backward(dout, q, k, v, o2, o_fp32, lse, causal, None, variant, None, None)  # noqa: E731
    t_grad = median_s(grad, device, reps, warmup)
    t_op = median_s(op, device, reps, warmup)
    kernels = kernel_times(grad, device)
    busy = sum(kernels.values()) / 1e6
    return {"variant": variant, "B": B, "N": N, "H": H, "D": D, "causal": causal, "q_scale": q_scale,
            "grad_ms": 1e3 * t_grad, "op_ms": 1e3 * t_op, "kernels_ms": 1e3 * busy if kernels else None,
            "gap_ms": 1e3 * (t_grad - busy) if kernels else None,
            "kernels_us": dict(sorted(kernels.items(), key=lambda kv: -kv[1]))}


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
    rows = []
    print(f"{'variant':<10} {'grad ms':>8} {'op ms':>8} {'kernels':>8} {'gap ms':>8}   largest kernels (µs)", flush=True)
    for variant in args.variants:
        r = measure(variant, B, args.length, H, args.dim, args.causal, device, args.reps, args.warmup, args.q_scale)
        rows.append(r)
        ker = "-" if r["kernels_ms"] is None else f"{r['kernels_ms']:.3f}"
        gap = "-" if r["gap_ms"] is None else f"{r['gap_ms']:.3f}"
        top = ", ".join(f"{n} {us:.0f}" for n, us in list(r["kernels_us"].items())[:6])
        print(f"{variant:<10} {r['grad_ms']:>8.3f} {r['op_ms']:>8.3f} {ker:>8} {gap:>8}   {top}", flush=True)
    if args.out:
        tmp = f"{args.out}.tmp.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump({"command": " ".join(argv), "torch": torch.__version__, "gproj": gproj.build_info(),
                       "rows": rows}, f, indent=2)
        os.replace(tmp, args.out)
    return rows


if __name__ == "__main__":
    main(sys.argv)
