# gproj for PyTorch: gproj.attention(q, k, v, ...) and, with torch SDPA's arguments, gproj.scaled_dot_product_attention.
# Exercised by tests/python/test_attention.py; docs/pytorch.md says how to build and use it.
import torch  # noqa: F401  (loads libtorch before the extension that links it)

from ._C import build_info, cuda_status
from ._validate import DEFAULT_PROJECTION, PROJECTIONS, VARIANTS
from .ops import attention, scaled_dot_product_attention

__version__ = build_info()["version"]
__all__ = ["attention", "scaled_dot_product_attention", "build_info", "cuda_status", "DEFAULT_PROJECTION",
           "PROJECTIONS", "VARIANTS", "__version__"]
