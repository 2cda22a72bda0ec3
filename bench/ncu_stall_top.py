#!/usr/bin/env python3
"""Top stall sites of one kernel from ncu's per-instruction source page.

Input: the CSV that scripts/device_profile.sh (PROFILE_SASS=1) and scripts/device_profile_overhead.sh write
(`ncu -i REP --page source --print-source sass --csv`): a kernel-name line, then a header row, then one row per
SASS instruction. Prints the total warp-stall samples, the share of each stall reason, and the N instructions
with the most samples (index, address, share, SASS, top two reasons), in address order.

Usage: python3 bench/ncu_stall_top.py sass_KERNEL_LABEL.csv [N]
"""
import csv
import lzma
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def cell(row, i):
    """Column i of a source-page row as a number (an empty or missing cell is 0)."""
    return float(row[i] or 0) if i < len(row) else 0.0


def read_source_page(path):
    """(header row, instruction rows) of an ncu source-page CSV (also bench/ncu_source_lines.py's reader)."""
    opener = lzma.open if str(path).endswith(".xz") else open  # (committed pages are xz-compressed: SRC.csv.xz)
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    header_at = next((i for i, r in enumerate(rows) if SAMPLES in r), None)
    if header_at is None:
        raise ValueError(f"{path}: no '{SAMPLES}' column (not an ncu source-page CSV?)")
    return rows[header_at], rows[header_at + 1:]


def summarize(path, n=40):
    """(total samples, [(reason, share)] largest first, [(index, address, share, source, reasons)])."""
    hdr, body = read_source_page(path)
    i_addr, i_src, i_smp = hdr.index("Address"), hdr.index("Source"), hdr.index(SAMPLES)
    stall_cols = [i for i, h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
    num = cell
    total = sum(num(r, i_smp) for r in body)
    if total <= 0:
        raise ValueError(f"{path}: no stall samples")
    by_reason = {hdr[i][len("stall_"):]: sum(num(r, i) for r in body) / total for i in stall_cols}
    reasons = sorted(by_reason.items(), key=lambda x: -x[1])
    top = sorted(range(len(body)), key=lambda k: -num(body[k], i_smp))[:n]
    sites = []
    for k in sorted(top):
        r = body[k]
        two = sorted(((num(r, i), hdr[i][len("stall_"):]) for i in stall_cols), reverse=True)[:2]
        sites.append((k, r[i_addr], num(r, i_smp) / total, r[i_src], two))
    return total, reasons, sites


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    total, reasons, sites = summarize(argv[1], int(argv[2]) if len(argv) > 2 else 40)
    print("total samples", total)
    print("by reason:", ", ".join(f"{name} {100 * share:.1f}%" for name, share in reasons[:10]))
    for k, addr, share, src, two in sites:
        tops = " ".join(f"{name}:{v:.0f}" for v, name in two)
        print(f"{k:5d} {addr:>6s} {100 * share:5.1f}%  {src[:70]:70s} {tops}")


if __name__ == "__main__":
    main(sys.argv)
