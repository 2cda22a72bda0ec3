# The attention variants of examples/train_gpt.py and the audit of their gradients against float64, plus a state-file writer.
# Exercised by scripts/train_smoke.sh (through train_gpt.py --audit-every) and tests/python/test_train_gpt.py.
import json
import math
import os

import torch
import torch.nn.functional as F

GPROJ_VARIANTS = {"gproj-baseline": "baseline", "gproj-fwdfix": "fwdfix", "gproj-gproj": "gproj",
                  "gproj-gproj-published": "gproj", "gproj-thresh": "gproj", "gproj-pweighted": "gproj",
                  "gproj-fp16": "gproj", "gproj-gproj-dkc": "gproj"}
# gproj-gproj uses the library's default projection (gproj.DEFAULT_PROJECTION: fp16-lowrank since session 47,
# thresh-lowrank from 2026-11-30, pweighted before); gproj-thresh, gproj-pweighted and gproj-fp16 name one explicitly
# (gproj-fp16: the FP16 dS with the forward's P; docs/design-fp16-projection.md).
# gproj-gproj-published: thresh-lowrank with fwdfix's lift uncapped, as published (underflows to NaN past tied maxima
# of ~87); the A/B against gproj-thresh (lift capped at 16) of docs/experiment.md. (fp16-lowrank's forward has no
# lift: its running max is an integer and the tie bias does not arise.)
# gproj-gproj-dkc: thresh-lowrank with dK compensation (rank 8, experimental; docs/gproj-projection.md).
GPROJ_OPTIONS = {"gproj-gproj-published": {"projection": "thresh-lowrank", "fwdfix_max_shift": float("inf")},
                 "gproj-thresh": {"projection": "thresh-lowrank"}, "gproj-pweighted": {"projection": "pweighted"},
                 "gproj-fp16": {"projection": "fp16-lowrank"},
                 "gproj-gproj-dkc": {"projection": "thresh-lowrank", "dk_compensation_rank": 8}}
VARIANTS = ("sdpa-bf16", *GPROJ_VARIANTS, "fp32")


def attend(q, k, v, variant):
    """Causal attention of (B, N, H, D) q, k, v by `variant`; returns (B, N, H, D) in q's dtype.
    sdpa-bf16 and the gproj variants see BF16 inputs; fp32 upcasts them and computes in float32."""
    if variant in GPROJ_VARIANTS:
        import gproj

        o = gproj.attention(q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16), causal=True,
                            variant=GPROJ_VARIANTS[variant], **GPROJ_OPTIONS.get(variant, {}))
    elif variant in ("sdpa-bf16", "fp32"):
        dtype = torch.bfloat16 if variant == "sdpa-bf16" else torch.float32
        with torch.autocast(q.device.type, enabled=False):
            o = F.scaled_dot_product_attention(*(t.to(dtype).transpose(1, 2) for t in (q, k, v)), is_causal=True)
        o = o.transpose(1, 2)
    else:
        raise ValueError(f"unknown attention variant {variant!r}; one of {', '.join(VARIANTS)}")
    return o.to(q.dtype)


def _causal_scores(q, k):
    """scale * Q K^T as (B, H, N, N) in q's dtype, masked with -inf above the diagonal."""
    n, d = q.shape[1], q.shape[-1]
    s = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(d)
    mask = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
    return s.masked_fill(mask, float("-inf"))


def reference_attention(q, k, v):
    """Causal softmax attention in q's dtype, (B, N, H, D) in and out."""
    p = torch.softmax(_causal_scores(q, k), dim=-1)
    return torch.einsum("bhij,bjhd->bihd", p, v)


def reference_grads(q, k, v, do):
    """(dq, dk, dv) of causal attention computed in float64 on the given (BF16) inputs."""
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    reference_attention(q64, k64, v64).backward(do.double())
    return q64.grad, k64.grad, v64.grad


def variant_grads(q, k, v, do, variant):
    """(dq, dk, dv) that `variant` produces on the BF16 inputs, as the training step would see them."""
    leaves = [t.detach().to(torch.bfloat16).requires_grad_(True) for t in (q, k, v)]
    attend(*leaves, variant).backward(do.to(torch.bfloat16))
    return tuple(t.grad for t in leaves)


def rel_error(x, ref):
    """||x - ref||_F / ||ref||_F in float64."""
    return (torch.linalg.vector_norm(x.double() - ref) / torch.linalg.vector_norm(ref)).item()


def ds_row_residual(q, k, v, do):
    """Row sums r_i of bf16(dS) for a materialised emulation of a BF16 FlashAttention backward (GUIDE §2: FP32
    scores and P, delta from the BF16-rounded O, dS rounded to BF16). It is the residual a baseline kernel feeds
    into dQ on these inputs, not read out of the variant's own kernel. Returns max and mean of |r_i| relative to
    the mean over rows of sum_j |bf16(dS)_ij| (one scale for the whole state: rows with one visible key have
    r_i ~ sum_j |dS_ij| ~ 0), and max |r_i|."""
    q32, k32, v32, do32 = (t.to(torch.bfloat16).float() for t in (q, k, v, do))
    p = torch.softmax(_causal_scores(q32, k32), dim=-1)
    o_bf16 = torch.einsum("bhij,bjhd->bihd", p, v32).to(torch.bfloat16).float()
    delta = (do32 * o_bf16).sum(-1).transpose(1, 2).unsqueeze(-1)  # (B, H, N, 1)
    dp = torch.einsum("bihd,bjhd->bhij", do32, v32)
    ds = (p * (dp - delta)).to(torch.bfloat16).float()
    r = ds.sum(-1).abs()
    rel = r / ds.abs().sum(-1).mean().clamp_min(torch.finfo(torch.float32).tiny)
    return {"ds_resid_rel_max": rel.max().item(), "ds_resid_rel_mean": rel.mean().item(),
            "ds_resid_abs_max": r.max().item()}


def shared_key_ratio(k):
    """||mean_j k_j|| / sqrt(mean_j ||k_j||^2) per (batch, head), averaged; k is (B, N, H, D)."""
    k = k.double()
    shared = k.mean(dim=1).norm(dim=-1)
    rms = k.square().sum(-1).mean(dim=1).sqrt()
    return (shared / rms).mean().item()


def logit_stats(q, k, block=64, beta=2.0):
    """The scores' size where fwdfix acts: the largest causal score S = scale q.k, the largest block max (blocks of
    `block` keys, as the kernels) that is exactly tied, and the lift the published fwdfix rule would give it,
    (beta - 1) r_m for r_m > 0 (its tied entries exp(-lift) underflow past ~87; gproj caps the lift at 16)."""
    s = _causal_scores(q.to(torch.bfloat16).float(), k.to(torch.bfloat16).float())  # (B, H, N, N)
    n = s.shape[-1]
    pad = -n % block
    if pad:
        s = torch.nn.functional.pad(s, (0, pad), value=float("-inf"))
    blocks = s.reshape(*s.shape[:-1], -1, block)
    bmax = blocks.amax(-1)
    tied = ((blocks == bmax.unsqueeze(-1)).sum(-1) >= 2) & torch.isfinite(bmax)
    tied_max = bmax[tied].max().item() if tied.any() else None
    out = {"max_logit": s.amax().item(), "max_tied_logit": tied_max, "tied_blocks": int(tied.sum().item())}
    out["published_fwdfix_lift"] = (beta - 1) * tied_max if tied_max is not None and tied_max > 0 else 0.0
    return out


def audit_layer(q, k, v, do, variant):
    """Errors of the variant's gradients against float64 and the key/residual statistics of one layer."""
    ref = reference_grads(q, k, v, do)
    got = variant_grads(q, k, v, do, variant)
    out = {f"{name}_err": rel_error(g, r) for name, g, r in zip(("dq", "dk", "dv"), got, ref)}
    out.update(ds_row_residual(q, k, v, do))
    out["shared_key_ratio"] = shared_key_ratio(k)
    out.update(logit_stats(q, k))
    return out


def write_state(path, tensors, metadata):
    """Writes a safetensors file (BF16 tensors, string metadata) atomically: with the `safetensors` package when
    it is installed, else by hand (8-byte little-endian header length, JSON header, raw little-endian data)."""
    tensors = {name: t.detach().to("cpu", torch.bfloat16).contiguous() for name, t in tensors.items()}
    metadata = {key: str(value) for key, value in metadata.items()}
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        from safetensors.torch import save_file
    except ImportError:
        header, offset = {"__metadata__": metadata}, 0
        for name, t in tensors.items():
            size = t.numel() * t.element_size()
            header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [offset, offset + size]}
            offset += size
        blob = json.dumps(header, separators=(",", ":")).encode()
        blob += b" " * (-len(blob) % 8)
        with open(tmp, "wb") as f:
            f.write(len(blob).to_bytes(8, "little"))
            f.write(blob)
            for t in tensors.values():
                f.write(t.view(torch.int16).numpy().astype("<i2", copy=False).tobytes())
    else:
        save_file(tensors, tmp, metadata=metadata)
    os.replace(tmp, path)
