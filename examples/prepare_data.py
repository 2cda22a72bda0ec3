# Byte-level corpus for examples/train_gpt.py: text files/folders -> a cached uint8 token file + JSON sidecar.
# Exercised by scripts/train_smoke.sh and tests/python/test_train_gpt.py; run alone: python examples/prepare_data.py.
import argparse
import hashlib
import json
import os
import sys
import sysconfig

import numpy as np

# Folders under the stdlib root that hold third-party packages, not the standard library's own sources.
_THIRD_PARTY_DIRS = {"site-packages", "dist-packages"}


def default_corpus():
    """The installed Python's standard library folder (sysconfig's "stdlib" path)."""
    return [sysconfig.get_paths()["stdlib"]]


def corpus_files(paths):
    """Files of `paths`, in a deterministic order: a file is taken as given; a folder contributes its *.py files
    (third-party package folders skipped), sorted by path."""
    files = []
    for path in paths:
        path = os.path.abspath(path)
        if os.path.isfile(path):
            files.append(path)
            continue
        if not os.path.isdir(path):
            raise FileNotFoundError(f"corpus path not found: {path}")
        found = []
        for folder, dirs, names in os.walk(path):
            dirs[:] = [d for d in dirs if d not in _THIRD_PARTY_DIRS]
            found.extend(os.path.join(folder, n) for n in names if n.endswith(".py"))
        files.extend(sorted(found))
    return files


def corpus_key(files, max_bytes, val_fraction):
    """Cache key: a hash of the file list with each file's size, and the options that change the token file."""
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f}\0{os.path.getsize(f)}\n".encode())
    h.update(f"max_bytes={max_bytes} val_fraction={val_fraction}".encode())
    return h.hexdigest()[:16]


def prepare(paths=None, cache_dir="build/data", max_bytes=None, val_fraction=0.01):
    """Concatenates the corpus bytes into `cache_dir/corpus-KEY.bin` (reused when present) and writes the sidecar
    `corpus-KEY.json`; returns the sidecar's path. The last `val_fraction` of the bytes is the validation split."""
    files = corpus_files(paths or default_corpus())
    if not files:
        raise ValueError("the corpus has no files")
    key = corpus_key(files, max_bytes, val_fraction)
    os.makedirs(cache_dir, exist_ok=True)
    bin_path = os.path.join(cache_dir, f"corpus-{key}.bin")
    meta_path = os.path.join(cache_dir, f"corpus-{key}.json")
    if os.path.exists(meta_path) and os.path.exists(bin_path):
        return meta_path
    tmp = f"{bin_path}.tmp.{os.getpid()}"
    total = 0
    with open(tmp, "wb") as out:
        for f in files:
            with open(f, "rb") as src:
                data = src.read()
            if max_bytes is not None:
                data = data[: max_bytes - total]
            out.write(data)
            total += len(data)
            if max_bytes is not None and total >= max_bytes:
                break
    os.replace(tmp, bin_path)
    n_val = max(1, int(total * val_fraction))
    meta = {
        "key": key,
        "bin": os.path.basename(bin_path),
        "bytes": total,
        "train_bytes": total - n_val,
        "val_bytes": n_val,
        "files": len(files),
        "roots": [os.path.abspath(p) for p in (paths or default_corpus())],
        "max_bytes": max_bytes,
        "val_fraction": val_fraction,
    }
    tmp = f"{meta_path}.tmp.{os.getpid()}"
    with open(tmp, "w") as out:
        json.dump(meta, out, indent=1)
    os.replace(tmp, meta_path)
    return meta_path


def load(meta_path):
    """(train, val, meta): uint8 memmaps of the two splits and the sidecar's contents."""
    with open(meta_path) as f:
        meta = json.load(f)
    tokens = np.memmap(os.path.join(os.path.dirname(meta_path), meta["bin"]), dtype=np.uint8, mode="r")
    return tokens[: meta["train_bytes"]], tokens[meta["train_bytes"] :], meta


def main(argv=None):
    ap = argparse.ArgumentParser(description="Cache a byte-level corpus for examples/train_gpt.py.")
    ap.add_argument("paths", nargs="*", help="files or folders (default: this Python's standard library)")
    ap.add_argument("--cache", default="build/data", help="folder of the cached token files")
    ap.add_argument("--max-bytes", type=int, default=None, help="keep only the first N bytes of the corpus")
    ap.add_argument("--val-fraction", type=float, default=0.01)
    args = ap.parse_args(argv)
    meta_path = prepare(args.paths or None, args.cache, args.max_bytes, args.val_fraction)
    with open(meta_path) as f:
        meta = json.load(f)
    print(f"{meta_path}: {meta['bytes']} bytes from {meta['files']} files "
          f"(train {meta['train_bytes']}, val {meta['val_bytes']})", file=sys.stderr)
    print(meta_path)


if __name__ == "__main__":
    main()
