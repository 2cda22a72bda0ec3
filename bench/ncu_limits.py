#!/usr/bin/env python3
"""What bounds one kernel: a table of the metrics that tell issue, tensor pipe, shared memory and L2 atomics
apart, from `ncu --csv --page raw` reports of one kernel launch each (scripts/device_bench_ab.sh NCU_LIMITS=1
writes them; session 11's model, perf-notes "Next (for session 12)": the backward main kernel bound by its L2
atomic bytes and its shared-memory operand reads rather than by issue).

  python3 bench/ncu_limits.py A.csv B.csv ...
      one column per report (its file name without .csv), one row per metric that any report has, in the order
      of ROWS; a report without a kernel row is named on stderr and left out, and the exit status is 1 when no
      report has one
"""
import csv
import os
import re
import sys

# (label, metric name pattern): the rows, in order. Patterns are full-match regular expressions.
ROWS = [
    ("time (us)", r"gpu__time_duration\.sum"),
    ("instructions (M)", r"smsp__inst_executed\.sum"),
    ("issue active %", r"smsp__issue_active\.avg\.pct_of_peak_sustained_active"),
    ("tensor pipe %", r"sm__pipe_tensor_cycles_active\.avg\.pct_of_peak_sustained_active"),
    ("shared wavefronts (M)", r"l1tex__data_pipe_lsu_wavefronts_mem_shared\.sum"),
    ("L2 throughput %", r"lts__throughput\.avg\.pct_of_peak_sustained_elapsed"),
    ("L2 red requests (M)", r"lts__t_requests_op_red\.sum"),
    ("L2 red sectors (M)", r"lts__t_sectors_op_red\.sum"),
    ("L2 atomic unit %", r"lts__d_atomic_input_cycles_active\.avg\.pct_of_peak_sustained_elapsed"),
    ("L1 LSU wavefronts %", r"l1tex__data_pipe_lsu_wavefronts\.avg\.pct_of_peak_sustained_elapsed"),
    ("shared bank reads %", r"l1tex__data_bank_reads\.avg\.pct_of_peak_sustained_elapsed"),
    ("shared bank writes %", r"l1tex__data_bank_writes\.avg\.pct_of_peak_sustained_elapsed"),
    ("shared pipe %", r"sm__pipe_shared_cycles_active\.avg\.pct_of_peak_sustained_elapsed"),
    ("ALU pipe %", r"sm__pipe_alu_cycles_active\.avg\.pct_of_peak_sustained_elapsed"),
    ("DRAM throughput %", r"dram__throughput\.avg\.pct_of_peak_sustained_elapsed"),
]
STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio")
MILLIONS = {"instructions (M)", "shared wavefronts (M)", "L2 red requests (M)", "L2 red sectors (M)"}


def read_report(path):
    """{metric: value} of the report's (first) kernel row, or None when it has none. Values are floats where
    they parse (ncu writes thousands separators), else the text; the time is converted to µs from its unit."""
    rows = [r for r in csv.reader(open(path, newline="")) if r] if os.path.exists(path) else []
    for i, row in enumerate(rows):
        if row[0] == "ID" and i + 2 < len(rows):
            head, units, values = row, rows[i + 1], rows[i + 2]
            out = {}
            for name, unit, text in zip(head, units, values):
                try:
                    v = float(text.replace(",", ""))
                except ValueError:
                    out[name] = text
                    continue
                if name == "gpu__time_duration.sum":
                    v *= {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(unit, 1e-3)
                out[name] = v
            return out
    return None


def table(reports):
    """[(label, [value text per report])] of ROWS and then every stall reason that some report has."""
    names = [m for r in reports for m in r]
    lines = []
    for label, pattern in ROWS:
        rx = re.compile(pattern)
        hit = next((m for m in names if rx.fullmatch(m)), None)
        if hit is None:
            continue
        lines.append((label, [fmt(r.get(hit), label in MILLIONS) for r in reports]))
    stalls = sorted({STALL.fullmatch(m).group(1) for m in names if STALL.fullmatch(m)})
    for s in stalls:
        metric = f"smsp__average_warps_issue_stalled_{s}_per_issue_active.ratio"
        lines.append((f"stall {s}", [fmt(r.get(metric), False) for r in reports]))
    return lines


def fmt(v, millions):
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    return f"{v / 1e6:.1f}" if millions else f"{v:.2f}"


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    cols, reports = [], []
    for path in argv:
        r = read_report(path)
        if r is None:
            print(f"ncu_limits: {path}: no kernel row (did ncu fail or profile nothing?)", file=sys.stderr)
            continue
        cols.append(os.path.basename(path)[:-4] if path.endswith(".csv") else os.path.basename(path))
        reports.append(r)
    if not reports:
        return 1
    lines = table(reports)
    w = max(len(label) for label, _ in lines)
    cw = [max(len(c), *(len(vals[k]) for _, vals in lines)) for k, c in enumerate(cols)]
    print(" " * w + "  " + "  ".join(c.rjust(cw[k]) for k, c in enumerate(cols)))
    for label, vals in lines:
        print(label.ljust(w) + "  " + "  ".join(v.rjust(cw[k]) for k, v in enumerate(vals)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
