# Writes the seed corpus of state_reader_fuzz: tiny safetensors files (states in BF16/F16/F32/F64, edge cases).
# Exercised by hand (`python3 fuzz/make_corpus.py`, output committed in fuzz/corpus/); deterministic output.
import json
import math
import pathlib
import struct
import sys

STRUCT_FORMATS = {"F16": "<e", "F32": "<f", "F64": "<d"}


def bf16_bits(x):
    """Round a float to bf16 (nearest even), as bit pattern; NaN stays a quiet NaN."""
    (u,) = struct.unpack("<I", struct.pack("<f", x))
    if (u & 0x7FFFFFFF) > 0x7F800000:
        return (u >> 16) | 0x0040
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def encode(dtype, xs):
    if dtype == "BF16":
        return b"".join(struct.pack("<H", bf16_bits(x)) for x in xs)
    return b"".join(struct.pack(STRUCT_FORMATS[dtype], x) for x in xs)


def values(count, seed):
    return [round(math.sin(0.7 * i + seed), 3) for i in range(count)]


def tensor(dtype, shape, seed, overrides=None):
    data = values(math.prod(shape), seed)
    for index, value in (overrides or {}).items():
        data[index] = value
    return dtype, shape, encode(dtype, data)


def safetensors(tensors, metadata=None, order=None, trailing=b""):
    """Serialises {name: (dtype, shape, bytes)}; `order` is the order of the data section (default: names)."""
    header = {"__metadata__": metadata} if metadata is not None else {}
    offset, blobs = 0, []
    for name in order or sorted(tensors):
        dtype, shape, blob = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs) + trailing


def state(dtypes, q_shape, kv_shape, overrides=None):
    """Tensors q, do of q_shape and k, v of kv_shape; overrides: {name: {flat index: value}}."""
    overrides = overrides or {}
    shapes = {"q": q_shape, "k": kv_shape, "v": kv_shape, "do": q_shape}
    return {
        name: tensor(dtypes[name], shapes[name], seed, overrides.get(name))
        for seed, name in enumerate(("q", "k", "v", "do"))
    }


def seeds():
    bf16 = dict.fromkeys(("q", "k", "v", "do"), "BF16")
    f32 = dict.fromkeys(("q", "k", "v", "do"), "F32")
    mixed = {"q": "F16", "k": "F64", "v": "F32", "do": "BF16"}

    meta = {"causal": "true", "softmax_scale": "0.35355338", "source": "make_corpus", "step": "7"}
    yield "bf16_causal_gqa", safetensors(state(bf16, [1, 3, 2, 8], [1, 4, 1, 8]), meta)

    yield "f32_noncausal", safetensors(state(f32, [1, 2, 1, 4], [1, 3, 1, 4]), {"causal": "false"})

    mix = state(mixed, [2, 1, 1, 2], [2, 1, 1, 2])
    mix["extra"] = tensor("F32", [3], 9)
    yield "mixed_dtypes_reordered", safetensors(mix, {"causal": "false", "layer": "4"},
                                                order=["v", "extra", "do", "k", "q"], trailing=b"\0" * 5)

    # q's 3.4e38 is finite in F32 but overflows bf16; v holds an Inf and do a NaN.
    bad = state(dict(bf16, q="F32"), [1, 1, 2, 4], [1, 2, 2, 4],
                overrides={"q": {3: 3.4e38}, "v": {5: float("inf")}, "do": {0: float("nan")}})
    yield "nonfinite", safetensors(bad, {"causal": "true", "softmax_scale": "0.5"})

    yield "empty_batch", safetensors(state(bf16, [0, 2, 1, 8], [0, 3, 1, 8]), {"causal": "false"})

    yield "plain_scalar", safetensors({"x": tensor("F32", [], 3)})


def main():
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent / "corpus"
    out.mkdir(parents=True, exist_ok=True)
    for name, blob in seeds():
        (out / f"{name}.safetensors").write_bytes(blob)


if __name__ == "__main__":
    main()
