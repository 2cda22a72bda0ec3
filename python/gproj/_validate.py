# Argument checks of gproj.attention with messages that name the tensor, run by the eager kernels and by the fake
# (meta) implementation that torch.compile traces. Exercised by tests/python/test_attention.py (bad inputs).
import math
from typing import Optional

import torch

from . import _C

VARIANTS = tuple(_C.variants())
PROJECTIONS = tuple(_C.projections())
DEFAULT_PROJECTION = _C.default_projection()  # variant gproj's when none is named (docs/gproj-projection.md)


def check_attention_args(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: Optional[float],
                         variant: str, projection: Optional[str] = None) -> None:
    """Raises TypeError (not a BF16 tensor) or ValueError (device, shape, head dim, variant, scale)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != torch.bfloat16:
            raise TypeError(f"{name} has dtype {t.dtype}; gproj.attention takes torch.bfloat16 "
                            f"(convert explicitly: {name}.to(torch.bfloat16))")
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; q, k and v must be on one device")
    for name, t, letters in (("q", q, "(B, Nq, H, D)"), ("k", k, "(B, Nk, Hkv, D)"), ("v", v, "(B, Nk, Hkv, D)")):
        if t.dim() != 4:
            raise ValueError(f"{name} must have rank 4 {letters}, got shape {tuple(t.shape)}")
        if any(n < 1 for n in t.shape):
            raise ValueError(f"{name} {letters} has an empty extent: {tuple(t.shape)}")
    B, _, H, D = q.shape
    Bk, _, Hkv, Dk = k.shape
    if k.shape != v.shape:
        raise ValueError(f"v has shape {tuple(v.shape)} but k has {tuple(k.shape)}; they must match")
    if Bk != B:
        raise ValueError(f"batch of k ({Bk}) differs from batch of q ({B})")
    if Dk != D:
        raise ValueError(f"head dim of k ({Dk}) differs from head dim of q ({D})")
    if H % Hkv != 0:
        raise ValueError(f"H = {H} query heads is not a multiple of Hkv = {Hkv} key/value heads "
                         "(GQA needs H % Hkv == 0)")
    if not _C.supports_head_dim(int(D)):
        raise ValueError(f"head dim D = {D} is not supported (gproj takes multiples of 8 from 8 to 256)")
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r} (valid: {', '.join(VARIANTS)})")
    if projection is not None and projection not in PROJECTIONS:
        raise ValueError(f"unknown projection {projection!r} (valid: {', '.join(PROJECTIONS)})")
    if softmax_scale is not None and not (math.isfinite(softmax_scale) and softmax_scale > 0):
        raise ValueError(f"softmax_scale must be finite and > 0, got {softmax_scale}")
