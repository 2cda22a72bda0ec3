# gproj.attention: the torch.library custom ops gproj::attention_forward/backward with fake (meta) and autograd
# implementations over gproj._C (torch >= 2.4), or an autograd.Function on older torch. Exercised by tests/python/.
import warnings
from typing import Optional, Tuple, Union

import torch

from . import _C
from ._validate import DEFAULT_PROJECTION, VARIANTS, check_attention_args


def _projection_of(variant: str, projection: Optional[str]) -> Optional[str]:
    """The projection that runs: the one named, else gproj's default (DEFAULT_PROJECTION); None for the others."""
    if variant != "gproj":
        return None
    return DEFAULT_PROJECTION if projection is None else projection


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, softmax_scale: Optional[float],
             variant: str, fwdfix_max_shift: Optional[float] = None, projection: Optional[str] = None,
             dk_compensation_rank: Optional[int] = None, basis: bool = False,
             deterministic: bool = False) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(o (B, Nq, H, D) BF16, o_fp32 (B, Nq, H, D) FP32 or (0,) when the backward does not read it,
    lse (B, H, Nq) FP32, basis (n,) FP32 or (0,)) from q (B, Nq, H, D), k, v (B, Nk, Hkv, D) BF16.
    dk_compensation_rank and deterministic are only carried (the backward uses them). basis: on CUDA, K's basis for
    gproj's thresh-lowrank projection is formed beside the forward kernel and handed to the backward, which then skips
    its own basis pre-passes (the same gradients, a faster backward; docs/gproj-forward-basis.md); n is
    _C.basis_numel(B, Hkv, D, variant, projection), 0 where it does not apply. Projection fp16-lowrank on CUDA:
    the fourth output is its forward's statistics and FP16 copies, which its backward needs (n =
    _C.stats_numel(B, Nq, Nk, H, Hkv, D, variant, projection)), whatever `basis` says."""
    check_attention_args(q, k, v, softmax_scale, variant, projection)
    return _C.forward(q, k, v, causal, softmax_scale, variant, fwdfix_max_shift, projection, basis)


def _basis_shape(q, k, variant, projection, basis):
    """The basis's shape as _forward returns it: B Hkv D 8 floats on CUDA where it applies. B and Hkv may be
    symbolic under torch.compile (dynamic shapes), so only D (a head dim: static) reaches the binding. Projection
    fp16-lowrank on CUDA: its forward's statistics, always (_C.stats_numel; its shapes are made concrete, so
    torch.compile specialises on them)."""
    if q.device.type != "cuda":
        return (0,)
    if _projection_of(variant, projection) == "fp16-lowrank":
        B, Nq, H, D = (int(x) for x in q.shape)
        return (_C.stats_numel(B, Nq, int(k.shape[1]), H, int(k.shape[2]), D, variant, projection),)
    if not basis:
        return (0,)
    per_head = _C.basis_numel(1, 1, int(k.shape[3]), variant, projection)
    return (k.shape[0] * k.shape[2] * per_head,) if per_head else (0,)


def _forward_fake(q, k, v, causal, softmax_scale, variant, fwdfix_max_shift=None, projection=None,
                  dk_compensation_rank=None, basis=False, deterministic=False):
    check_attention_args(q, k, v, softmax_scale, variant, projection)
    B, Nq, H, D = q.shape
    # (fp16-lowrank's CUDA backward reads the FP16 O its forward keeps in the statistics, not the FP32 O)
    h16_cuda = q.device.type == "cuda" and _projection_of(variant, projection) == "fp16-lowrank"
    o_fp32_shape = (B, Nq, H, D) if _C.needs_o_fp32(variant, projection) and not h16_cuda else (0,)
    return (q.new_empty((B, Nq, H, D)), q.new_empty(o_fp32_shape, dtype=torch.float32),
            q.new_empty((B, H, Nq), dtype=torch.float32),
            q.new_empty(_basis_shape(q, k, variant, projection, basis), dtype=torch.float32))


def _backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
              o_fp32: torch.Tensor, lse: torch.Tensor, basis: torch.Tensor, causal: bool,
              softmax_scale: Optional[float], variant: str, projection: Optional[str] = None,
              dk_compensation_rank: Optional[int] = None,
              deterministic: bool = False) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq (B, Nq, H, D), dk, dv (B, Nk, Hkv, D)) BF16 from dout (B, Nq, H, D) and what _forward returned.
    deterministic: on CUDA, dQ without atomics (the same bits on every run; refused where
    _C.cuda_deterministic_refusal names a reason); the CPU emulator gives the same bits either way."""
    return _C.backward(dout, q, k, v, o, o_fp32, lse, basis, causal, softmax_scale, variant, projection,
                       dk_compensation_rank, deterministic)


def _backward_fake(dout, q, k, v, o, o_fp32, lse, basis, causal, softmax_scale, variant, projection=None,
                   dk_compensation_rank=None, deterministic=False):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _save(ctx, inputs, outputs) -> None:
    q, k, v, causal, softmax_scale, variant = inputs[:6]  # fwdfix_max_shift acts in the forward only
    projection = inputs[7] if len(inputs) > 7 else None
    dk_compensation_rank = inputs[8] if len(inputs) > 8 else None
    deterministic = inputs[10] if len(inputs) > 10 else False  # (inputs[9], basis, is the forward's)
    o, o_fp32, lse, basis = outputs
    ctx.save_for_backward(q, k, v, o, o_fp32, lse, basis)
    ctx.args = (causal, softmax_scale, variant, projection, dk_compensation_rank, deterministic)


def _grads(ctx, dout, backward_op):
    q, k, v, o, o_fp32, lse, basis = ctx.saved_tensors
    dq, dk, dv = backward_op(dout, q, k, v, o, o_fp32, lse, basis, *ctx.args)
    return (dq, dk, dv) + (None,) * 8  # causal .. deterministic take no gradient


class _AttentionFunction(torch.autograd.Function):
    """The operator for torch < 2.4 (no torch.library.custom_op): eager autograd only, no torch.compile."""

    @staticmethod
    def forward(ctx, q, k, v, causal, softmax_scale, variant, fwdfix_max_shift=None, projection=None,
                dk_compensation_rank=None, basis=False, deterministic=False):
        inputs = (q, k, v, causal, softmax_scale, variant, fwdfix_max_shift, projection, dk_compensation_rank, basis,
                  deterministic)
        outputs = _forward(*inputs)
        _save(ctx, inputs, outputs)
        ctx.mark_non_differentiable(outputs[2])
        ctx.set_materialize_grads(False)  # no zeros tensor for the LSE's (absent) gradient
        return outputs[0], outputs[2]  # o and the LSE (gproj.attention's return_lse; it carries no gradient)

    @staticmethod
    def backward(ctx, dout, _d_lse):
        return _grads(ctx, dout, _backward)


HAS_CUSTOM_OP = hasattr(torch.library, "custom_op")  # torch >= 2.4

if HAS_CUSTOM_OP:
    attention_forward = torch.library.custom_op("gproj::attention_forward", _forward, mutates_args=())
    attention_forward.register_fake(_forward_fake)
    attention_backward = torch.library.custom_op("gproj::attention_backward", _backward, mutates_args=())
    attention_backward.register_fake(_backward_fake)

    def _setup_context(ctx, inputs, output):
        _save(ctx, inputs, output)
        ctx.mark_non_differentiable(output[1], output[2], output[3])

    attention_forward.register_autograd(
        lambda ctx, dout, _d_o_fp32, _d_lse, _d_basis: _grads(ctx, dout, attention_backward),
        setup_context=_setup_context)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              softmax_scale: Optional[float] = None, variant: str = "gproj",
              fwdfix_max_shift: Optional[float] = None, projection: Optional[str] = None,
              dk_compensation_rank: Optional[int] = None, deterministic: Optional[bool] = None,
              return_lse: bool = False) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Softmax attention of BF16 tensors laid out like flash_attn_func's, with gproj's rounding variants.

    q: (B, Nq, H, D), k, v: (B, Nk, Hkv, D) torch.bfloat16 on one device, H % Hkv == 0 (GQA), D a multiple of 8
    from 8 to 256. causal masks with bottom-right alignment (key j is visible to query i when j <= i + Nk - Nq;
    a query with no visible key gets 0). softmax_scale defaults to 1/sqrt(D). variant is one of VARIANTS:
    "fp32", "baseline", "fwdfix" or "gproj" (the default). Returns o: (B, Nq, H, D) torch.bfloat16, differentiable
    in q, k and v. Raises TypeError for a dtype other than bfloat16 and ValueError for a device mismatch, a shape,
    a head dim or a variant gproj does not take, or NaN/Inf in an input. fwdfix_max_shift (fwdfix, and gproj with
    thresh-lowrank or pweighted; refused with fp16-lowrank, whose forward has no lift) caps the lift of a tied block
    maximum (default 16, docs/numerics.md); float("inf") is the published rule, which underflows to NaN once a tied
    maximum passes ~87. projection (variant "gproj") picks GProj's projection by name (PROJECTIONS; default
    DEFAULT_PROJECTION, "fp16-lowrank"; "thresh-lowrank" was the default before, threshold 1/16; "pweighted" is the
    exact form, the one the CUDA reference kernels for rows that are not 16-byte aligned and the deterministic mode
    implement). dk_compensation_rank (variant "gproj" with projection
    "thresh-lowrank", experimental, default off): give dK back the BF16 rounding error of dS through the top-r
    directions of the queries (docs/gproj-projection.md, "dK compensation"; CPU any r, CUDA r = 8 at D = 64).
    deterministic: the backward gives the same bits on every run. None (the default) follows
    torch.use_deterministic_algorithms; True asks for it, False allows atomics. The CPU emulator always is; the
    CUDA backward then adds dQ without atomics (slower: a query-major pass recomputes S and dP) for variants fp32,
    baseline, fwdfix and gproj with projection "pweighted". With gproj's other projections on CUDA, True raises
    ValueError, and torch's flag raises RuntimeError (a warning under warn_only=True, and the atomics run), as
    torch's own nondeterministic operations do (docs/pytorch.md, "Deterministic backward").
    return_lse: also return the forward's log-sum-exp, (o, lse) with lse (B, H, Nq) torch.float32, the natural log of
    each row's sum of exp(softmax_scale q.k) over its visible keys (-inf for a row with none), as flash_attn's
    softmax_lse: what merging attention over key blocks needs. It carries no gradient (as torch's own attention ops'
    logsumexp outputs): a loss that uses it gets no gradient through it (docs/pytorch.md, "The LSE").
    """
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be True or False, got {return_lse!r}")
    scale = None if softmax_scale is None else float(softmax_scale)
    shift = None if fwdfix_max_shift is None else float(fwdfix_max_shift)
    # gproj's projection by name from here on, the default resolved: a graph torch.compile traces then carries the
    # projection that runs, so that its caches (keyed on the graph) never hand back code compiled for another default.
    if variant == "gproj":
        projection = _projection_of(variant, projection)
    if shift is not None and projection == "fp16-lowrank" and variant == "gproj":
        raise ValueError("fwdfix_max_shift caps fwdfix's lift of a tied row maximum; gproj's fp16-lowrank forward has "
                         "no lift (its running maximum is an integer in log2 units): name projection='thresh-lowrank' "
                         "or variant='fwdfix' for it")
    rank = None if dk_compensation_rank is None else int(dk_compensation_rank)
    deterministic = _deterministic_backward(deterministic, q, variant, projection)
    # K's basis from the forward only where a backward will follow (docs/gproj-forward-basis.md)
    basis = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if HAS_CUSTOM_OP and _needs_custom_op(q):
        outputs = attention_forward(q, k, v, bool(causal), scale, variant, shift, projection, rank, basis,
                                    deterministic)
        o, lse = outputs[0], outputs[2]
    else:
        o, lse = _AttentionFunction.apply(q, k, v, bool(causal), scale, variant, shift, projection, rank, basis,
                                          deterministic)
    return (o, lse) if return_lse else o


def _deterministic_backward(deterministic: Optional[bool], q: torch.Tensor, variant: str,
                            projection: Optional[str]) -> bool:
    """Whether the backward runs in deterministic mode: `deterministic` where given, else torch's
    use_deterministic_algorithms flag. Decided before the forward runs, so that a refusal costs nothing: on CUDA the
    core's cuda_deterministic_refusal names the combinations without a deterministic backward; the CPU emulator
    always gives the same bits (the flag is carried and changes nothing there)."""
    if deterministic is not None and not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be True, False or None (follow torch.use_deterministic_algorithms), "
                        f"got {deterministic!r}")
    wanted = torch.are_deterministic_algorithms_enabled() if deterministic is None else deterministic
    if not wanted or not isinstance(q, torch.Tensor) or q.device.type != "cuda":
        return wanted
    why = _C.cuda_deterministic_refusal(variant, projection) if variant in VARIANTS else ""
    if not why:
        return True
    what = f"gproj.attention's CUDA backward (variant {variant!r}, projection {projection!r}) has no deterministic form"
    if deterministic:
        raise ValueError(f"deterministic=True: {what}: {why}")
    message = (f"{what}, but torch.use_deterministic_algorithms(True) is set: {why}; or pass deterministic=False "
               "to this call to allow its atomics")
    if torch.is_deterministic_algorithms_warn_only_enabled():
        warnings.warn(message)
        return False
    raise RuntimeError(message)


def _needs_custom_op(q: torch.Tensor) -> bool:
    """True while torch.compile traces (it captures the custom op) and for meta or fake tensors (the fake
    implementation). Eager calls on real tensors take the autograd.Function, the same kernels with less Python
    per call: the custom op's dispatch cost ~60 us more per forward and ~40 us per backward on the CPU here,
    an estimated 5% of a D = 128, N = 4k forward on the H200 (docs/pytorch.md)."""
    if torch.compiler.is_compiling() or q.device.type == "meta":
        return True
    return isinstance(q, torch._subclasses.fake_tensor.FakeTensor)


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: Optional[float] = None, enable_gqa: bool = False,
                                 *, variant: str = "gproj", projection: Optional[str] = None,
                                 deterministic: Optional[bool] = None) -> torch.Tensor:
    """torch.nn.functional.scaled_dot_product_attention's arguments and layout over gproj.attention, so that a model
    written for SDPA can take gproj's attention unchanged: query (B, H, L, E), key, value (B, Hkv, S, E) bfloat16;
    returns (B, H, L, E). The (B, N, H, D) views gproj reads are transposes, not copies.

    As torch's: is_causal masks top-left (key j visible to query i when j <= i; gproj.attention's causal is
    flash_attn's bottom-right, the same when L == S); with L < S the keys past L are then never visible and are left
    out (their gradients are zero); L > S is refused (queries past S would see every key, which gproj's causal mask
    cannot express: use gproj.attention). Hkv != H needs enable_gqa=True, as torch's. attn_mask and dropout_p other
    than None and 0 are refused (gproj has neither). variant, projection and deterministic as gproj.attention's.
    """
    if attn_mask is not None:
        raise ValueError("gproj's scaled_dot_product_attention takes no attn_mask (gproj masks only causally: use "
                         "is_causal=True, or torch's own scaled_dot_product_attention for other masks)")
    if dropout_p != 0.0:
        raise ValueError(f"gproj's scaled_dot_product_attention takes dropout_p = 0 only (gproj has no attention "
                         f"dropout), got {dropout_p}")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have rank 4 (B, H, L or S, E) as gproj's scaled_dot_product_attention "
                             f"takes it, got shape {tuple(t.shape)}")
    if key.shape[1] != query.shape[1] and not enable_gqa:
        raise ValueError(f"query has {query.shape[1]} heads but key has {key.shape[1]}: pass enable_gqa=True for "
                         "grouped-query attention (as torch's scaled_dot_product_attention asks)")
    L, S = query.shape[2], key.shape[2]
    if is_causal and L > S:
        raise ValueError(f"is_causal with L = {L} queries > S = {S} keys: torch's top-left mask lets the queries past "
                         "S see every key, which gproj's causal mask (bottom-right) cannot express; use "
                         "gproj.attention(q, k, v, causal=True) for flash_attn's bottom-right alignment")
    if is_causal and L < S:  # top-left: no query sees a key past L; bottom-right on the first L keys is the same mask
        key, value = key[:, :, :L], value[:, :, :L]
    o = attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), causal=bool(is_causal),
                  softmax_scale=scale, variant=variant, projection=projection, deterministic=deterministic)
    return o.transpose(1, 2)
