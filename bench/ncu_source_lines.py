#!/usr/bin/env python3
"""Stall samples and executed instructions of two kernels' ncu source pages, summed per source line.

ncu's source page (`--page source --print-source sass --csv`, as scripts/device_env.sh's ncu_source_page writes
it) has one row per SASS instruction but no source lines unless the binary carries line info, and the prebuilt
binaries do not. Build the same kernels locally with `-lineinfo` (the instruction stream is the same: checked
here by opcode) and dump them with `nvdisasm -gi -c FILE.cubin > FILE.sass`; this script then gives each
instruction the outermost line of SOURCE (a file name, e.g. flash_bwd_wg.cuh) in its inlining chain and prints, per
line, both kernels' samples and executed warp instructions and their difference, largest difference first.

Usage: python3 bench/ncu_source_lines.py LINEINFO_SASS SOURCE_FILE A.csv A_MANGLED_KEY B.csv B_MANGLED_KEY [N]
  A_MANGLED_KEY / B_MANGLED_KEY: a substring of each kernel's mangled name in LINEINFO_SASS (its template
  arguments, e.g. ILi128ELb0ELb1ELb0ELb1E for the D = 128 v3.2 baseline kernel).
"""
import collections
import re
import sys

from ncu_stall_top import EXECUTED, SAMPLES, cell, read_source_page


def line_map(sass_path, source, key):
    """[(line, instruction text)] of the kernel whose .text section name contains `key`, in address order."""
    out, cur, line = None, False, -1
    for text in open(sass_path):
        m = re.match(r"\s*\.text\.(\S+):", text)
        if m:
            if out is not None and cur:
                break
            cur = key in m.group(1)
            out = [] if cur else out
            continue
        if not cur:
            continue
        if "//## File" in text:
            chain = [int(n) for f, n in re.findall(r'"([^"]+)", line (\d+)', text) if f.endswith(source)]
            line = chain[-1] if chain else -1
            continue
        m = re.search(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", text)
        if m:
            out.append((line, m.group(2).strip()))
    if not out:
        raise SystemExit(f"{sass_path}: no kernel whose name contains {key}")
    return out


def per_line(csv_path, lines):
    hdr, body = read_source_page(csv_path)
    if len(body) != len(lines):
        raise SystemExit(f"{csv_path}: {len(body)} instructions, the line-info build has {len(lines)}")
    i_s, i_e, i_src = hdr.index(SAMPLES), hdr.index(EXECUTED), hdr.index("Source")
    smp, exe = collections.Counter(), collections.Counter()
    for r, (ln, ins) in zip(body, lines):
        op = re.sub(r"^@!?U?P\w+\s+", "", r[i_src].strip()).split()[0].split(".")[0]
        if op not in ins:
            raise SystemExit(f"{csv_path}: instruction '{r[i_src].strip()}' is not '{ins}': not the same build")
        smp[ln] += cell(r, i_s)
        exe[ln] += cell(r, i_e)
    return smp, exe


def main(argv):
    if len(argv) not in (7, 8):
        raise SystemExit(__doc__)
    sass, source, a_csv, a_key, b_csv, b_key = argv[1:7]
    n = int(argv[7]) if len(argv) == 8 else 40
    sa, ea = per_line(a_csv, line_map(sass, source, a_key))
    sb, eb = per_line(b_csv, line_map(sass, source, b_key))
    ta, tb = sum(sa.values()), sum(sb.values())
    print(f"samples A {ta:.0f}, B {tb:.0f} ({(tb / ta - 1) * 100:+.1f}%); executed warp instructions A "
          f"{sum(ea.values()) / 1e6:.1f} M, B {sum(eb.values()) / 1e6:.1f} M")
    print(f"{'line':>5} {'A smp':>8} {'B smp':>8} {'B-A':>8} {'share':>6} {'A ex M':>7} {'B ex M':>7} {'B-A M':>7}")
    keys = sorted(set(sa) | set(sb), key=lambda k: -abs(sb[k] - sa[k]))[:n]
    for k in keys:
        d = sb[k] - sa[k]
        print(f"{k:5d} {sa[k]:8.0f} {sb[k]:8.0f} {d:+8.0f} {d / (tb - ta) * 100:5.1f}% {ea[k] / 1e6:7.1f} "
              f"{eb[k] / 1e6:7.1f} {(eb[k] - ea[k]) / 1e6:+7.1f}")


if __name__ == "__main__":
    main(sys.argv)
