#!/usr/bin/env python3
"""Top stall sites of one kernel from ncu's per-instruction source page.

Input: the CSV that scripts/device_profile.sh writes with PROFILE_SASS=1
(`ncu -i REP --page source --print-source sass --csv`). Prints the total warp-stall samples, the share of each
stall reason, and the N instructions with the most samples (index, address, share, SASS, top two reasons), in
address order. Usage: python3 bench/ncu_stall_top.py sass_KERNEL_LABEL.csv [N]
"""
import csv
import sys

if len(sys.argv) < 2:
    sys.exit(__doc__)
f=sys.argv[1]; n=int(sys.argv[2]) if len(sys.argv)>2 else 40
rows=list(csv.reader(open(f)))
hdr=rows[1]; body=rows[2:]
ia=hdr.index("Address"); isrc=hdr.index("Source"); iss=hdr.index("Warp Stall Sampling (All Samples)")
stall_cols=[i for i,h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
tot=sum(float(r[iss] or 0) for r in body)
print("total samples", tot)
agg={}
for r in body:
    for i in stall_cols:
        agg[hdr[i]]=agg.get(hdr[i],0)+float(r[i] or 0)
print("by reason:", ", ".join(f"{k[6:]} {100*v/tot:.1f}%" for k,v in sorted(agg.items(), key=lambda x:-x[1])[:10]))
top=sorted(range(len(body)), key=lambda k:-float(body[k][iss] or 0))[:n]
for k in sorted(top):
    r=body[k]; s=float(r[iss] or 0)
    reasons=sorted(((float(r[i] or 0),hdr[i][6:]) for i in stall_cols), reverse=True)[:2]
    print(f"{k:5d} {r[ia]:>6s} {100*s/tot:5.1f}%  {r[isrc][:70]:70s} {reasons[0][1]}:{reasons[0][0]:.0f} {reasons[1][1]}:{reasons[1][0]:.0f}")
