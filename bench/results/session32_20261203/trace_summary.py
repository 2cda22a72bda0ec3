#!/usr/bin/env python3
"""Summaries of the probe traces of runs 2-3 (GPROJ_PROBE_TRACE, branch probe/gap): per backward call, the main
kernel's span, each CTA's mean time, and (run 3's format) each CTA's clock64 cycles and SM clock.

  python3 trace_summary.py r2/trace_*.txt.gz r3/trace_*.txt.gz

A trace line is `call cta start_ns end_ns word`; run 2's word is the SM id, run 3's packs the SM id (8 bits),
thread 0's clock64 cycles from start to end (28 bits) and thread 0's own span in ns (from bit 36). `call pre_end
ns 0 0` lines give the delta preprocess's last CTA's time. Call 0 is the bench's warm-up call and is left out."""
import collections
import gzip
import statistics
import sys


def summarise(path):
    calls, pre = collections.defaultdict(list), {}
    packed = "/r3/" in path or path.startswith("r3/")
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        for line in f:
            a = line.split()
            if a[1] == "pre_end":
                pre[int(a[0])] = int(a[2])
                continue
            t0, t1, w = int(a[2]), int(a[3]), int(a[4])
            cyc, dt = ((w >> 8) & ((1 << 28) - 1), w >> 36) if packed else (0, 0)
            calls[int(a[0])].append((t0, t1, cyc, dt))
    print(f"== {path}")
    for c, v in sorted(calls.items()):
        if c == 0:
            continue
        start = min(x[0] for x in v)
        line = (f"  call {c}: preprocess end -> first CTA {(start - pre.get(c, start)) / 1e3:6.1f} µs, span "
                f"{(max(x[1] for x in v) - start) / 1e3:7.1f} µs, CTA mean {statistics.mean(x[1] - x[0] for x in v) / 1e3:6.1f} µs")
        if packed:
            clk = [x[2] / x[3] * 1e3 for x in v if x[3] > 0]
            line += (f", thread 0: {statistics.mean(x[2] for x in v) / 1e3:6.1f}k cycles at "
                     f"{statistics.mean(clk):6.1f} MHz (min {min(clk):.0f})")
        print(line)


for p in sys.argv[1:]:
    summarise(p)
