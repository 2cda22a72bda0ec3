# gproj for PyTorch: BF16 attention whose gradients are right, as gproj.attention(q, k, v, ...) (see ops.py).
# Exercised by tests/python/test_attention.py; docs/pytorch.md says how to build and use it.
import torch  # noqa: F401  (loads libtorch before the extension that links it)

from ._C import build_info, cuda_status
from ._validate import DEFAULT_PROJECTION, PROJECTIONS, VARIANTS
from .ops import attention

__version__ = build_info()["version"]
__all__ = ["attention", "build_info", "cuda_status", "DEFAULT_PROJECTION", "PROJECTIONS", "VARIANTS", "__version__"]
