# Session 50, run 3: where the op's backward time goes, baseline against gproj (the branch's default projection,
# fp16-lowrank), D = 128, non-causal, B N = 16k, H = 16: each call's CUDA kernels from torch.profiler (5 backward
# calls after 3 warm-up calls) and the op's backward timed between CUDA events (20 calls, median), with the same
# inputs attention_bench.py draws. One-off probe of the gap between the op's overhead (attention_bench) and the
# kernels' (cuda_attention_bench); run by run3.sh.
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import gproj

torch.manual_seed(0)
for N in (4096, 8192):
    B, H, D = 16384 // N, 16, 128
    q, k, v = (torch.randn(B, N, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    for variant in ("baseline", "gproj"):
        o = gproj.attention(q, k, v, variant=variant)
        dout = torch.randn_like(o)
        grad = lambda: torch.autograd.grad(o, (q, k, v), dout, retain_graph=True)
        for _ in range(3):
            grad()
        torch.cuda.synchronize()
        times = []
        for _ in range(20):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            grad()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                grad()
            torch.cuda.synchronize()
        print(f"== N = {N} {variant} (projection {gproj.DEFAULT_PROJECTION if variant == 'gproj' else '-'}): "
              f"backward median {statistics.median(times):.3f} ms, min {min(times):.3f} ms over 20 calls")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=70))
        sys.stdout.flush()
