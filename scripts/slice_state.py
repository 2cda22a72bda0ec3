#!/usr/bin/env python3
# Copies a slice (batch and head ranges) of a BF16 attention state file into a new safetensors file.
# Used once to make tests/data/real_*.safetensors from ../shared/states (standard library only).
import argparse
import json
import os
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    return header, blob[8 + n :]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--batch", type=int, nargs=2, default=[0, 1], metavar=("BEGIN", "END"))
    ap.add_argument("--heads", type=int, nargs=2, default=None, metavar=("BEGIN", "END"))
    args = ap.parse_args()
    header, data = read(args.src)
    meta = dict(header.pop("__metadata__", {}))
    out_header, chunks, offset = {}, [], 0
    for name in sorted(header):
        entry = header[name]
        if entry["dtype"] != "BF16" or len(entry["shape"]) != 4:
            sys.exit(f"{args.src}: tensor {name} is not a rank-4 BF16 tensor")
        B, N, H, D = entry["shape"]
        b0, b1 = args.batch
        h0, h1 = args.heads or (0, H)
        if not (0 <= b0 < b1 <= B and 0 <= h0 < h1 <= H):
            sys.exit(f"{args.src}: slice out of range for {name} {entry['shape']}")
        begin = entry["data_offsets"][0]
        row = D * 2
        piece = bytearray()
        for b in range(b0, b1):
            for n in range(N):
                start = begin + ((b * N + n) * H + h0) * row
                piece += data[start : start + (h1 - h0) * row]
        out_header[name] = {"dtype": "BF16", "shape": [b1 - b0, N, h1 - h0, D],
                            "data_offsets": [offset, offset + len(piece)]}
        chunks.append(bytes(piece))
        offset += len(piece)
    meta["sliced_from"] = os.path.basename(args.src)
    meta["slice"] = f"batch {args.batch[0]}:{args.batch[1]}, heads {(args.heads or [0, 'all'])[0]}:{(args.heads or [0, 'all'])[1]}"
    out_header["__metadata__"] = meta
    text = json.dumps(out_header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = args.dst + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
    os.replace(tmp, args.dst)


if __name__ == "__main__":
    main()
