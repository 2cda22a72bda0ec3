# Session 51, run 2: where the op's forward time goes, fwdfix against gproj (the default projection, fp16-lowrank),
# D = 128, B N = 16k, H = 16, N = 4k causal and non-causal: each call's CUDA kernels from torch.profiler (5 forward
# calls after 3 warm-up calls), and the forward timed between CUDA events one call at a time and 8 calls queued
# (20 timings each, median). Run 1's chained attention_bench put gproj's forward at 4k causal level with SDPA
# flash's (301.05 against 301.06 TFLOP/s) while fwdfix's forward is 375: this says which kernels make the gap.
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import gproj


def median_ms(fn, chain):
    times = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(chain):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / chain)
    return statistics.median(times)


torch.manual_seed(0)
N, D, H = 4096, 128, 16
B = 16384 // N
q, k, v = (torch.randn(B, N, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
for causal in (True, False):
    for variant in ("fwdfix", "gproj"):
        fn = lambda: gproj.attention(q, k, v, causal=causal, variant=variant)
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        one, chained = median_ms(fn, 1), median_ms(fn, 8)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
        print(f"== N = {N} causal {causal} {variant}: forward median {one:.3f} ms one call, {chained:.3f} ms per call "
              f"of 8 queued")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=16, max_name_column_width=80))
        sys.stdout.flush()
