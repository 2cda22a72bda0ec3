# pytest suite of gproj.attention: every variant's forward and gradients against a float64 torch reference (derived
# tolerances), GQA, Nq != Nk, causal, shared-key dQ bias, torch.compile, bad inputs. Run by scripts/python_test.sh.
import functools
import math
from functools import lru_cache

import pytest
import torch

import gproj
from gproj import ops

FIELDS = ("o", "dq", "dk", "dv")
CUDA_HEAD_DIMS = (64, 128)  # what the v0 CUDA kernels take (src/cuda/launch.cu); the CPU takes 8, 16, ..., 256

CUDA_KERNELS = gproj.build_info()["cuda_kernels"]
needs_cuda_device = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
needs_cuda_kernels = pytest.mark.skipif(not CUDA_KERNELS,
                                        reason="gproj was built without CUDA kernels (build with GPROJ_CUDA=1)")
needs_custom_op = pytest.mark.skipif(not ops.HAS_CUSTOM_OP,
                                     reason=f"torch {torch.__version__} < 2.4 has no torch.library.custom_op")


def make_inputs(B, Nq, Nk, H, Hkv, D, seed, shared_key=0.0):
    """Gaussian q, do (B, Nq, H, D) and k, v (B, Nk, Hkv, D) in BF16; every key gets + shared_key * u, with u a
    random direction of norm sqrt(D) (the component softmax cannot see but a row residual of dS carries into dQ)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Nq, H, D, generator=g)
    k = torch.randn(B, Nk, Hkv, D, generator=g)
    v = torch.randn(B, Nk, Hkv, D, generator=g)
    do = torch.randn(B, Nq, H, D, generator=g)
    u = torch.randn(D, generator=g)
    k = k + shared_key * u * (math.sqrt(D) / u.norm())
    return tuple(t.to(torch.bfloat16) for t in (q, k, v, do))


def default_scale(D):
    """1/sqrt(D) rounded to FP32 as the C++ core computes it (1.0f / std::sqrt(float(D)))."""
    one, d = torch.tensor(1.0, dtype=torch.float32), torch.tensor(float(D), dtype=torch.float32)
    return float(one / d.sqrt())


def masked_scores(q, k, causal, scale):
    """scale q.k (B, H, Nq, Nk) of (B, N, H, D) tensors as given (GQA by repeating each kv head), -inf where causal
    masking (bottom-right: key j visible to query i when j <= i + Nk - Nq) hides the key."""
    group = q.shape[2] // k.shape[2]
    s = torch.einsum("bihd,bjhd->bhij", q, k.repeat_interleave(group, dim=2)) * scale
    if causal:
        Nq, Nk = q.shape[1], k.shape[1]
        visible = torch.arange(Nk)[None, :] <= torch.arange(Nq)[:, None] + (Nk - Nq)
        s = s.masked_fill(~visible, float("-inf"))
    return s


def reference(q, k, v, do, causal, scale):
    """Float64 softmax attention of the same BF16 inputs and its gradients: bottom-right causal alignment (key j is
    visible to query i when j <= i + Nk - Nq), GQA by repeating each kv head, 0 for a query with no visible key."""
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    group = q.shape[2] // k.shape[2]
    s = masked_scores(qd, kd, causal, scale)
    m = s.detach().amax(dim=-1, keepdim=True)
    e = torch.exp(s - torch.where(torch.isfinite(m), m, 0.0))
    l = e.sum(dim=-1, keepdim=True)
    p = e / torch.where(l > 0, l, 1.0)
    o = torch.einsum("bhij,bjhd->bihd", p, vd.repeat_interleave(group, dim=2))
    dq, dk, dv = torch.autograd.grad(o, (qd, kd, vd), do.double())
    return {"o": o.detach(), "dq": dq, "dk": dk, "dv": dv}


def run_gproj(variant, q, k, v, do, causal, scale, attention=gproj.attention):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o = attention(q, k, v, causal, scale, variant)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
    return {"o": o.detach(), "dq": dq, "dk": dk, "dv": dv}


def rel_err(x, ref):
    """||x - ref||_F / ||ref||_F in float64."""
    return float((x.double() - ref).norm() / ref.norm())


def errors(out, ref):
    return {f: rel_err(out[f], ref[f]) for f in FIELDS}


def assert_within_tolerance(out, ref, tol, what):
    """Every field of out (on any device) within its derived tolerance of the float64 reference."""
    err = errors({f: out[f].cpu() for f in FIELDS}, ref)
    for f in FIELDS:
        assert err[f] <= tol[f], f"{what} {f}: {err[f]:.3e} > derived tolerance {tol[f]:.3e}"


# (B, Nq, Nk, H, Hkv, D, causal, softmax_scale): GQA, MQA, Nq < Nk and Nq > Nk (with fully masked rows when
# causal), lengths that no tile divides, D in {32, 64, 128}, the default and an explicit scale.
CASES = {
    "gqa_causal": (2, 97, 97, 4, 2, 64, True, None),
    "nq_lt_nk_mqa_causal": (2, 33, 130, 4, 1, 32, True, None),
    "nq_gt_nk_causal_masked_rows": (1, 130, 33, 2, 2, 64, True, None),
    "nq_lt_nk_full_d128": (1, 64, 200, 4, 2, 128, False, 0.2),
}


@lru_cache(maxsize=None)
def case_data(name):
    """Inputs, float64 reference, the fp32 variant's errors and the derived tolerances of one case. GUIDE §4: a
    variant passes when its error is at most 2x the error of the fp32 variant (BF16 only at inputs and outputs)
    plus 2x the error of rounding the float64 reference itself to BF16; both terms are measured here."""
    B, Nq, Nk, H, Hkv, D, causal, scale = CASES[name]
    q, k, v, do = make_inputs(B, Nq, Nk, H, Hkv, D, seed=100 + list(CASES).index(name))
    ref = reference(q, k, v, do, causal, default_scale(D) if scale is None else scale)
    fp32 = errors(run_gproj("fp32", q, k, v, do, causal, scale), ref)
    tol = {f: 2 * fp32[f] + 2 * rel_err(ref[f].to(torch.bfloat16), ref[f]) for f in FIELDS}
    return (q, k, v, do, causal, scale), ref, tol


@pytest.mark.parametrize("variant", gproj.VARIANTS)
@pytest.mark.parametrize("case", CASES)
def test_forward_and_gradients_within_derived_tolerance(case, variant):
    inputs, ref, tol = case_data(case)
    err = errors(run_gproj(variant, *inputs), ref)
    for f in FIELDS:
        print(f"{case} {variant:8s} {f}: rel err {err[f]:.3e} <= tol {tol[f]:.3e}")
    for f in FIELDS:
        assert err[f] <= tol[f], f"{variant} {f}: {err[f]:.3e} > derived tolerance {tol[f]:.3e}"


def test_rows_with_no_visible_key_give_zero():
    (q, k, v, do, causal, scale), _, _ = case_data("nq_gt_nk_causal_masked_rows")
    out = run_gproj("gproj", q, k, v, do, causal, scale)
    masked = q.shape[1] - k.shape[1]  # causal, bottom-right: queries 0 .. Nq - Nk - 1 see no key
    assert torch.count_nonzero(out["o"][:, :masked]) == 0 and torch.count_nonzero(out["dq"][:, :masked]) == 0
    assert torch.count_nonzero(out["o"][:, masked:]) > 0 and torch.count_nonzero(out["dq"][:, masked:]) > 0


@pytest.mark.parametrize("causal", [False, True])
def test_shared_key_component_baseline_dq_bias_removed_by_gproj(causal):
    # Keys share one large component (16x the noise): S is blind to it, but the row residual of bf16(dS) in the
    # baseline multiplies it into dQ. The C++ suite's bound: baseline dQ at least 10x gproj's.
    q, k, v, do = make_inputs(1, 512, 512, 4, 4, 64, seed=77, shared_key=16.0)
    ref = reference(q, k, v, do, causal, default_scale(64))
    base = errors(run_gproj("baseline", q, k, v, do, causal, None), ref)
    fix = errors(run_gproj("gproj", q, k, v, do, causal, None), ref)
    print(f"dQ rel err: baseline {base['dq']:.3e}, gproj {fix['dq']:.3e}; dK gproj {fix['dk']:.3e}")
    assert base["dq"] >= 10 * fix["dq"]
    assert fix["dq"] <= 0.005 and fix["dk"] <= 0.005


def test_strided_inputs_and_broadcast_gradient_match_contiguous():
    # q, k, v sliced from one packed (B, N, 3, H, D) buffer are read in place; a transposed D is copied first; the
    # gradient of a sum arrives as a broadcast (zero-stride) tensor. None may change a single bit.
    B, N, H, D = 2, 40, 2, 32
    qkv = torch.randn(B, N, 3, H, D, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    q, k, v = qkv.unbind(dim=2)
    assert not q.is_contiguous()
    o = gproj.attention(q, k, v, causal=True)
    assert torch.equal(o, gproj.attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=True))
    q_t = q.contiguous().transpose(1, 3).contiguous().transpose(1, 3)  # same values, D not unit-stride
    assert q_t.stride(-1) != 1 and torch.equal(gproj.attention(q_t, k, v, causal=True), o)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    gproj.attention(*leaves, causal=True).sum().backward()
    grads = torch.autograd.grad(gproj.attention(*leaves, causal=True), leaves, torch.ones_like(o))
    for leaf, g in zip(leaves, grads):
        assert torch.equal(leaf.grad, g)


@needs_custom_op
def test_autograd_function_matches_custom_op():
    # Eager calls (and torch < 2.4) run the autograd.Function; torch.compile and fake tensors the custom op:
    # the same numbers either way.
    inputs, _, _ = case_data("gqa_causal")

    def custom_op(q, k, v, causal, scale, variant):
        return ops.attention_forward(q, k, v, causal, scale, variant)[0]

    for variant in ("fp32", "gproj"):
        got = run_gproj(variant, *inputs, attention=lambda *a: ops._AttentionFunction.apply(*a)[0])
        want = run_gproj(variant, *inputs, attention=custom_op)
        for f in FIELDS:
            assert torch.equal(got[f], want[f]), f"{variant} {f}"


def reference_lse(q, k, causal, scale):
    """Float64 log-sum-exp of each row's visible scores (B, H, Nq), -inf for a row with no visible key."""
    return torch.logsumexp(masked_scores(q.double(), k.double(), causal, scale), dim=-1)


def lse_error(lse, want):
    """||lse - want||_F / ||want||_F over the rows with a visible key; asserts -inf exactly on the others."""
    finite = torch.isfinite(want)
    got = lse.cpu().double()
    assert torch.equal(torch.isfinite(got), finite) and bool((got[~finite] < 0).all()), "-inf rows differ"
    return rel_err(got[finite], want[finite])


@lru_cache(maxsize=None)
def lse_case(name):
    """A case's inputs, float64 LSE and the derived LSE tolerance (GUIDE §4, as tests/cpu/flash_forward_test.cc
    forms it): 2x the fp32 variant's error plus 2x the error of rounding the float64 LSE to FP32."""
    (q, k, v, _, causal, scale), _, _ = case_data(name)
    scale_used = default_scale(q.shape[-1]) if scale is None else scale
    want = reference_lse(q, k, causal, scale_used)
    _, fp32 = gproj.attention(q, k, v, causal, scale, "fp32", return_lse=True)
    finite = torch.isfinite(want)
    tol = 2 * lse_error(fp32, want) + 2 * rel_err(want[finite].float(), want[finite])
    return (q, k, v, causal, scale), want, tol


def assert_lse(lse, want, tol, variant, projection, what):
    """lse against the float64 one: -inf exactly on the rows with no visible key, and on the others the derived
    tolerance `tol` (relative, Frobenius) or, where gproj's fp16-lowrank projection runs, its row bound: its LSE is
    log l of FP16-rounded terms, each within 2^-11 relative, so each row is within 2^-11 of the float64 one plus FP32
    rounding (tests/cpu/flash_backward_test.cc's bound)."""
    err = lse_error(lse, want)
    if ops._projection_of(variant, projection) != "fp16-lowrank":
        print(f"{what} lse: rel err {err:.3e} <= tol {tol:.3e}")
        assert err <= tol, f"{what} lse: {err:.3e} > derived tolerance {tol:.3e}"
        return
    got, finite = lse.cpu().double(), torch.isfinite(want)
    bound = 2.0**-11 + 1e-6 * (1 + want[finite].abs())
    worst = float(((got[finite] - want[finite]).abs() - bound).max())
    assert worst <= 0, f"{what}: a row's LSE is {worst:.3e} past 2^-11 + 1e-6 (1 + |lse|)"


@pytest.mark.parametrize("variant", gproj.VARIANTS)
@pytest.mark.parametrize("case", CASES)
def test_return_lse_gives_the_row_log_sum_exp_without_gradient(case, variant):
    # return_lse hands back the LSE the forward saves for its backward: within the derived tolerance of float64's,
    # -inf for rows with no visible key, carrying no gradient; o and its gradients are the bits of the plain call.
    (q, k, v, causal, scale), want, tol = lse_case(case)
    _, _, _, do, _, _ = case_data(case)[0]
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    o, lse = gproj.attention(*leaves, causal, scale, variant, return_lse=True)
    assert lse.shape == (q.shape[0], q.shape[2], q.shape[1]) and lse.dtype == torch.float32
    assert not lse.requires_grad
    assert_lse(lse, want, tol, variant, None, f"{case} {variant}")
    grads = torch.autograd.grad(o, leaves, do)
    plain = run_gproj(variant, q, k, v, do, causal, scale)
    assert torch.equal(o.detach(), plain["o"])
    for f, g in zip(("dq", "dk", "dv"), grads):
        assert torch.equal(g, plain[f]), f


def test_return_lse_of_the_fp16_lowrank_projection_within_its_bound():
    for case in CASES:
        (q, k, v, causal, scale), want, tol = lse_case(case)
        _, lse = gproj.attention(q, k, v, causal, scale, projection="fp16-lowrank", return_lse=True)
        assert_lse(lse, want, tol, "gproj", "fp16-lowrank", case)


def test_return_lse_must_be_a_bool():
    q = torch.zeros(1, 4, 1, 8, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="return_lse must be True or False"):
        gproj.attention(q, q, q, return_lse=1)


@needs_custom_op
def test_return_lse_through_torch_compile_matches_eager():
    (q, k, v, causal, scale), _, _ = lse_case("nq_gt_nk_causal_masked_rows")

    def step(q, k, v):
        o, lse = gproj.attention(q, k, v, causal=causal, softmax_scale=scale, return_lse=True)
        return o * 2, lse

    compiled = torch.compile(step, fullgraph=True)
    got, want = compiled(q, k, v), step(q, k, v)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    do = case_data("nq_gt_nk_causal_masked_rows")[0][3]
    grads = {}
    for name, fn in (("compiled", compiled), ("eager", step)):
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        o, lse = fn(*leaves)
        assert not lse.requires_grad, name
        grads[name] = torch.autograd.grad(o, leaves, do)
    for g, w in zip(grads["compiled"], grads["eager"]):
        assert torch.equal(g, w)


def test_eager_calls_take_the_autograd_function():
    q = torch.zeros(1, 4, 1, 8, dtype=torch.bfloat16)
    assert not ops._needs_custom_op(q)
    assert ops._needs_custom_op(q.to("meta"))
    o = gproj.attention(q.requires_grad_(), q, q, variant="baseline")
    assert type(o.grad_fn).__name__ == "_AttentionFunctionBackward"


def test_o_fp32_is_saved_only_when_the_backward_reads_it():
    q, k, v, _ = make_inputs(1, 8, 8, 2, 2, 16, seed=3)
    # (fp32, and on the CPU gproj's default fp16-lowrank: its emulator forms delta from O's FP32 value; the CUDA
    # kernels keep an FP16 O in the forward's statistics instead)
    for variant in gproj.VARIANTS:
        o, o_fp32, lse, basis = gproj._C.forward(q, k, v, False, None, variant)
        assert o.shape == q.shape and lse.shape == (1, 2, 8) and lse.dtype == torch.float32
        reads = variant == "fp32" or (variant == "gproj" and gproj.DEFAULT_PROJECTION == "fp16-lowrank")
        assert o_fp32.shape == (q.shape if reads else (0,)), variant
        assert basis.shape == (0,), variant  # (not asked for)
    _, o_fp32, _, _ = gproj._C.forward(q, k, v, False, None, "gproj", None, "thresh-lowrank")
    assert o_fp32.shape == (0,)


def test_the_cpu_forward_forms_no_basis_and_its_backward_takes_none():
    q, k, v, do = make_inputs(1, 8, 8, 2, 2, 64, seed=4)
    o, o_fp32, lse, basis = gproj._C.forward(q, k, v, False, None, "gproj", None, None, True)
    assert basis.shape == (0,) and basis.dtype == torch.float32
    with pytest.raises(ValueError, match="basis is for the CUDA backward"):
        gproj._C.backward(do, q, k, v, o, o_fp32, lse, torch.zeros(2 * 64 * 8), False, None, "gproj")


def test_basis_numel_names_where_the_forward_forms_the_basis():
    # B Hkv D 8 floats for gproj's thresh-lowrank at D = 64 or 128 where the CUDA kernels are built, else 0; the
    # default projection, fp16-lowrank, hands its backward statistics instead (stats_numel), never this basis.
    n = 2 * 3 * 128 * 8 if CUDA_KERNELS else 0
    assert gproj._C.basis_numel(2, 3, 128, "gproj") == 0
    assert gproj._C.basis_numel(2, 3, 128, "gproj", "thresh-lowrank") == n
    assert gproj._C.basis_numel(2, 3, 128, "gproj", "pweighted") == 0
    assert gproj._C.basis_numel(2, 3, 128, "baseline") == 0
    assert gproj._C.basis_numel(2, 3, 32, "gproj") == 0


@needs_custom_op
def test_meta_tensors_get_shapes_from_the_fake_implementation():
    q = torch.empty(2, 7, 4, 64, dtype=torch.bfloat16, device="meta")
    k = torch.empty(2, 9, 2, 64, dtype=torch.bfloat16, device="meta")
    o = gproj.attention(q, k, k, causal=True)
    assert o.device.type == "meta" and o.shape == q.shape and o.dtype == torch.bfloat16
    o, o_fp32, lse, basis = ops.attention_forward(q, k, k, False, None, "fp32")
    assert o_fp32.shape == q.shape and lse.shape == (2, 4, 7) and basis.shape == (0,)
    *_, basis = ops.attention_forward(q, k, k, False, None, "gproj", None, None, None, True)
    assert basis.shape == (0,)  # (meta tensors are not CUDA tensors: no basis)


def test_fake_implementation_sizes_cuda_outputs_by_the_projection_that_runs():
    # Fake CUDA tensors need no GPU (FakeTensorMode), so the fake implementation's CUDA branch runs here: fp16-lowrank's
    # CUDA backward reads the FP16 O its forward keeps with its statistics (no FP32 O; its fourth output is those
    # statistics, _C.stats_numel: 0 in a build without CUDA kernels), the fp32 variant's reads the FP32 O, and the
    # default resolves to its name first (gproj.DEFAULT_PROJECTION), so None and the name give the same shapes.
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q = torch.empty(2, 64, 4, 128, dtype=torch.bfloat16, device="cuda")
        k = torch.empty(2, 96, 2, 128, dtype=torch.bfloat16, device="cuda")
        shapes = {}
        for variant, projection in (("fp32", None), ("gproj", "fp16-lowrank"), ("gproj", "thresh-lowrank"),
                                    ("gproj", None), ("gproj", gproj.DEFAULT_PROJECTION)):
            outs = ops._forward_fake(q, k, k, True, None, variant, None, projection, None, False)
            shapes[variant, projection] = tuple(tuple(t.shape) for t in outs)
            assert all(t.device.type == "cuda" for t in outs)
    n16 = gproj._C.stats_numel(2, 64, 96, 4, 2, 128, "gproj", "fp16-lowrank")
    assert shapes["fp32", None][1] == (2, 64, 4, 128)
    assert shapes["gproj", "fp16-lowrank"] == ((2, 64, 4, 128), (0,), (2, 4, 64), (n16,))
    assert shapes["gproj", "thresh-lowrank"] == ((2, 64, 4, 128), (0,), (2, 4, 64), (0,))
    assert shapes["gproj", None] == shapes["gproj", gproj.DEFAULT_PROJECTION]


def sdpa_layout(t):
    """(B, N, H, D) -> (B, H, N, D), a view (torch SDPA's layout)."""
    return t.transpose(1, 2)


def through_sdpa(q, k, v, causal, scale, variant):
    """gproj.scaled_dot_product_attention on (B, N, H, D) tensors, through torch SDPA's (B, H, N, D) views."""
    o = gproj.scaled_dot_product_attention(sdpa_layout(q), sdpa_layout(k), sdpa_layout(v), is_causal=causal,
                                           scale=scale, variant=variant, enable_gqa=True)
    return sdpa_layout(o)


@pytest.mark.parametrize("case", ["gqa_causal", "nq_lt_nk_full_d128"])
def test_sdpa_entry_point_is_gproj_attention_in_torch_layout(case):
    # gproj.scaled_dot_product_attention takes torch SDPA's (B, H, L, E) tensors and arguments: the same bits as
    # gproj.attention on the transposed views, so within the same derived tolerance of the float64 reference.
    (q, k, v, do, causal, scale), ref, tol = case_data(case)
    got = run_gproj("gproj", q, k, v, do, causal, scale, attention=through_sdpa)
    want = run_gproj("gproj", q, k, v, do, causal, scale)
    for f in FIELDS:
        assert torch.equal(got[f], want[f]), f
    assert_within_tolerance(got, ref, tol, f"sdpa {case}")


def test_sdpa_entry_point_masks_top_left_as_torch_does():
    # torch's is_causal is top-left (key j visible to query i when j <= i). With L < S no query sees a key past L, so
    # it is gproj's bottom-right mask on the first L keys: the same bits as that call, zero gradients past L. The
    # equivalence itself, checked on torch's float64 SDPA.
    B, H, Hkv, L, S, E = 2, 4, 2, 24, 40, 32
    q, k, v, do = make_inputs(B, L, S, H, Hkv, E, seed=7)
    q, k, v, do = (sdpa_layout(t) for t in (q, k, v, do))
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    o = gproj.scaled_dot_product_attention(*leaves, is_causal=True, enable_gqa=True)
    grads = torch.autograd.grad(o, leaves, do)
    cut = [t.detach()[:, :, :L].clone().requires_grad_() if i else t.detach().clone().requires_grad_()
           for i, t in enumerate((q, k, v))]
    o_cut = sdpa_layout(gproj.attention(*(sdpa_layout(t) for t in cut), causal=True))
    grads_cut = torch.autograd.grad(o_cut, cut, do)
    assert torch.equal(o, o_cut) and torch.equal(grads[0], grads_cut[0])
    for full, part in zip(grads[1:], grads_cut[1:]):
        assert torch.equal(full[:, :, :L], part) and not full[:, :, L:].any()
    qd, kd, vd = (t.double() for t in (q, k, v))
    kd, vd = (t.repeat_interleave(H // Hkv, dim=1) for t in (kd, vd))
    top_left = torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, is_causal=True)
    on_first_l = torch.nn.functional.scaled_dot_product_attention(qd, kd[:, :, :L], vd[:, :, :L], is_causal=True)
    assert torch.allclose(top_left, on_first_l, rtol=1e-12, atol=1e-12)


def test_sdpa_entry_point_refuses_what_gproj_has_not():
    q = torch.zeros(1, 4, 16, 8, dtype=torch.bfloat16)
    k = torch.zeros(1, 2, 16, 8, dtype=torch.bfloat16)
    sdpa = gproj.scaled_dot_product_attention
    with pytest.raises(ValueError, match="enable_gqa=True"):
        sdpa(q, k, k)
    with pytest.raises(ValueError, match="no attn_mask"):
        sdpa(q, q, q, attn_mask=torch.ones(16, 16, dtype=torch.bool))
    with pytest.raises(ValueError, match="dropout_p = 0 only"):
        sdpa(q, q, q, dropout_p=0.1)
    with pytest.raises(ValueError, match="L = 16 queries > S = 8 keys"):
        sdpa(q, q[:, :, :8], q[:, :, :8], is_causal=True)
    with pytest.raises(ValueError, match="rank 4"):
        sdpa(q[0], q[0], q[0])
    with pytest.raises(TypeError, match="q has dtype torch.float32"):
        sdpa(q.float(), q, q)
    assert sdpa(q, q[:, :, :8], q[:, :, :8]).shape == q.shape  # (not causal: any L, S)


class deterministic_algorithms:
    """torch.use_deterministic_algorithms(on, warn_only=...) for a with-block, the previous setting restored after."""

    def __init__(self, on=True, warn_only=False):
        self.on, self.warn_only = on, warn_only

    def __enter__(self):
        self.saved = (torch.are_deterministic_algorithms_enabled(),
                      torch.is_deterministic_algorithms_warn_only_enabled())
        torch.use_deterministic_algorithms(self.on, warn_only=self.warn_only)

    def __exit__(self, *exc):
        torch.use_deterministic_algorithms(self.saved[0], warn_only=self.saved[1])


def test_cuda_deterministic_refusal_names_the_projections_without_it():
    # The core's rule (gproj::cuda_deterministic_refusal): the CUDA backward's deterministic dQ pass serves every
    # variant without a projection and gproj's exact projection; the cheap projections add with atomics.
    for variant in ("fp32", "baseline", "fwdfix"):
        assert gproj._C.cuda_deterministic_refusal(variant) == "", variant
    assert gproj._C.cuda_deterministic_refusal("gproj", "pweighted") == ""
    for projection in ("thresh-lowrank", "fp16-lowrank"):
        why = gproj._C.cuda_deterministic_refusal("gproj", projection)
        assert projection in why and "choose projection pweighted" in why, why


def test_deterministic_changes_nothing_on_the_cpu():
    # The CPU emulator gives the same bits on every run, so every setting is accepted there and gives the same
    # numbers, torch's flag included (which also leaves the op traceable by torch.compile).
    inputs, _, _ = case_data("gqa_causal")
    want = run_gproj("gproj", *inputs)
    for deterministic in (True, False):
        got = run_gproj("gproj", *inputs, attention=functools.partial(gproj.attention, deterministic=deterministic))
        assert all(torch.equal(got[f], want[f]) for f in FIELDS), deterministic
    with deterministic_algorithms():
        got = run_gproj("gproj", *inputs)
    assert all(torch.equal(got[f], want[f]) for f in FIELDS)


@pytest.mark.parametrize("bad", ["yes", 1, 0.0])
def test_deterministic_must_be_true_false_or_none(bad):
    q = torch.zeros(1, 4, 1, 8, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="deterministic must be True, False or None"):
        gproj.attention(q, q, q, deterministic=bad)


def test_deterministic_on_cuda_is_decided_before_the_forward_runs():
    # Fake CUDA tensors need no GPU: the decision happens in gproj.attention before any kernel, so a refusal costs
    # nothing and names the way out. Explicit True raises ValueError; torch's flag raises RuntimeError (torch's own
    # nondeterministic operations do) or, under warn_only, warns and lets the atomics run.
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q = torch.empty(1, 64, 2, 64, dtype=torch.bfloat16, device="cuda")
        for projection in (None, "thresh-lowrank", "fp16-lowrank"):
            with pytest.raises(ValueError, match="deterministic=True: .*choose projection pweighted"):
                gproj.attention(q, q, q, projection=projection, deterministic=True)
        assert gproj.attention(q, q, q, projection="pweighted", deterministic=True).shape == q.shape
        assert gproj.attention(q, q, q, variant="baseline", deterministic=True).shape == q.shape
        with deterministic_algorithms():
            with pytest.raises(RuntimeError, match="use_deterministic_algorithms.*deterministic=False"):
                gproj.attention(q, q, q)
            assert gproj.attention(q, q, q, deterministic=False).shape == q.shape  # the call's own word wins
            assert ops._deterministic_backward(None, q, "gproj", "pweighted") is True
            assert ops._deterministic_backward(None, q, "baseline", None) is True
        with deterministic_algorithms(warn_only=True):
            with pytest.warns(UserWarning, match="no deterministic form"):
                assert ops._deterministic_backward(None, q, "gproj", "thresh-lowrank") is False
        assert ops._deterministic_backward(None, q, "gproj", "thresh-lowrank") is False  # (flag off: atomics)


@needs_custom_op
def test_opcheck_schema_fake_and_autograd_registration():
    inputs, _, _ = case_data("nq_lt_nk_mqa_causal")
    q, k, v, do, causal, scale = inputs
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    for variant in ("fp32", "gproj"):
        torch.library.opcheck(ops.attention_forward, (q, k, v, causal, scale, variant))
        saved = [t.detach() for t in (q, k, v, *ops.attention_forward(q, k, v, causal, scale, variant))]
        # The backward op has no autograd formula of its own (no double backward), so its inputs need no grad.
        torch.library.opcheck(ops.attention_backward, (do, *saved, causal, scale, variant))
        torch.library.opcheck(ops.attention_backward, (do, *saved, causal, scale, variant, None, None, True))


@needs_custom_op
@pytest.mark.skipif(not torch._dynamo.is_dynamo_supported(), reason="torch.compile is not supported here")
def test_torch_compile_fullgraph_matches_eager():
    inputs, _, _ = case_data("gqa_causal")
    q, k, v, do, causal, scale = inputs

    def step(q, k, v):
        return gproj.attention(q, k, v, causal=causal, softmax_scale=scale) * 2

    compiled = torch.compile(step, fullgraph=True)
    got = run_gproj("gproj", q, k, v, do, causal, scale, attention=lambda q, k, v, *_: compiled(q, k, v))
    want = run_gproj("gproj", q, k, v, do, causal, scale, attention=lambda q, k, v, *_: step(q, k, v))
    for f in FIELDS:
        assert torch.equal(got[f], want[f]), f
    # torch's deterministic flag, which gproj.attention reads, is a guard of the compiled graph, not a break in it
    with deterministic_algorithms():
        got = run_gproj("gproj", q, k, v, do, causal, scale, attention=lambda q, k, v, *_: compiled(q, k, v))
    for f in FIELDS:
        assert torch.equal(got[f], want[f]), f


BF16 = torch.bfloat16


def bad(shape, dtype=BF16, device="cpu"):
    return torch.randn(shape, generator=torch.Generator().manual_seed(1)).to(dtype).to(device)


@pytest.mark.parametrize(
    "q, k, v, kwargs, error, needle",
    [
        (bad((1, 8, 2, 64), torch.float32), bad((1, 8, 2, 64)), bad((1, 8, 2, 64)), {}, TypeError, "torch.bfloat16"),
        (bad((1, 8, 2, 64)), bad((1, 8, 2, 64), torch.float16), bad((1, 8, 2, 64)), {}, TypeError, "k has dtype"),
        (bad((1, 8, 2, 64)), bad((1, 8, 2, 64), device="meta"), bad((1, 8, 2, 64)), {}, ValueError, "one device"),
        (bad((8, 2, 64)), bad((1, 8, 2, 64)), bad((1, 8, 2, 64)), {}, ValueError, "rank 4"),
        (bad((1, 8, 4, 64)), bad((1, 8, 3, 64)), bad((1, 8, 3, 64)), {}, ValueError, "H % Hkv"),
        (bad((1, 8, 2, 12)), bad((1, 8, 2, 12)), bad((1, 8, 2, 12)), {}, ValueError, "head dim D = 12"),
        (bad((1, 8, 2, 512)), bad((1, 8, 2, 512)), bad((1, 8, 2, 512)), {}, ValueError, "head dim D = 512"),
        (bad((1, 8, 2, 64)), bad((1, 8, 2, 64)), bad((1, 9, 2, 64)), {}, ValueError, "must match"),
        (bad((2, 8, 2, 64)), bad((1, 8, 2, 64)), bad((1, 8, 2, 64)), {}, ValueError, "batch of k"),
        (bad((1, 8, 2, 64)), bad((1, 8, 2, 64)), bad((1, 8, 2, 64)), {"variant": "fa3"}, ValueError, "valid: fp32"),
        (bad((1, 8, 2, 64)), bad((1, 8, 2, 64)), bad((1, 8, 2, 64)), {"softmax_scale": 0.0}, ValueError, "> 0"),
    ],
    ids=["float32", "float16", "cpu_meta_mix", "rank3", "heads", "d12", "d512", "kv_shapes", "batch", "variant",
         "scale"],
)
def test_bad_inputs_raise_clear_errors(q, k, v, kwargs, error, needle):
    with pytest.raises(error, match=needle):
        gproj.attention(q, k, v, **kwargs)


def test_nonfinite_input_raises_naming_the_tensor():
    q, k, v, _ = make_inputs(1, 8, 8, 2, 2, 64, seed=9)
    k[0, 3, 1, 7] = float("inf")
    with pytest.raises(ValueError, match=r"k holds Inf at \(0, 3, 1, 7\)"):
        gproj.attention(q, k, v)


def test_binding_checks_dtype_and_device_itself():
    # gproj._C is callable on its own: it must not convert another dtype to BF16, nor mix devices.
    q = bad((1, 8, 2, 64))
    with pytest.raises(TypeError, match="q has dtype Float"):
        gproj._C.forward(q.float(), q, q, False, None, "gproj")
    with pytest.raises(ValueError, match="v is on meta but q is on cpu"):
        gproj._C.forward(q, q, q.to("meta"), False, None, "gproj")


def test_cuda_status_names_what_is_missing():
    available, why = gproj.cuda_status()
    if not CUDA_KERNELS:
        assert not available and "gproj was built without CUDA kernels" in why
    assert available or why


@pytest.mark.cuda
@needs_cuda_device
def test_cuda_cpu_device_mismatch_raises():
    with pytest.raises(ValueError, match="one device"):
        gproj.attention(bad((1, 8, 2, 64)), bad((1, 8, 2, 64), device="cuda"), bad((1, 8, 2, 64)))


@pytest.mark.cuda
@needs_cuda_device
@pytest.mark.skipif(CUDA_KERNELS, reason="this build has CUDA kernels")
def test_cuda_tensors_without_cuda_kernels_raise():
    x = bad((1, 8, 2, 64), device="cuda")
    with pytest.raises(RuntimeError, match="gproj was built without CUDA kernels"):
        gproj.attention(x, x, x)


@pytest.mark.cuda
@needs_cuda_device
@needs_cuda_kernels
def test_cuda_head_dim_outside_the_kernels_raises():
    x = bad((1, 8, 2, 32), device="cuda")
    with pytest.raises(ValueError, match="head dim D = 32"):
        gproj.attention(x, x, x, variant="baseline")
    with pytest.raises(ValueError, match="D = 32"):  # (the default projection's own sentence names D too)
        gproj.attention(x, x, x)


@pytest.mark.cuda
@needs_cuda_device
@needs_cuda_kernels
@pytest.mark.parametrize("variant", gproj.VARIANTS)
def test_cuda_within_derived_tolerance(variant):
    for case in CASES:
        (q, k, v, do, causal, scale), ref, tol = case_data(case)
        if q.shape[-1] not in CUDA_HEAD_DIMS:
            continue
        out = run_gproj(variant, q.cuda(), k.cuda(), v.cuda(), do.cuda(), causal, scale)
        assert_within_tolerance(out, ref, tol, f"cuda {case} {variant}")


@pytest.mark.cuda
@needs_cuda_device
@needs_cuda_kernels
@pytest.mark.parametrize("projection", [None, "fp16-lowrank"])
@pytest.mark.parametrize("variant", gproj.VARIANTS)
def test_cuda_return_lse_within_derived_tolerance(variant, projection):
    if projection is not None and variant != "gproj":
        pytest.skip("a projection is gproj's")
    for case in CASES:
        (q, k, v, causal, scale), want, tol = lse_case(case)
        if q.shape[-1] not in CUDA_HEAD_DIMS:
            continue
        _, lse = gproj.attention(q.cuda(), k.cuda(), v.cuda(), causal, scale, variant, projection=projection,
                                 return_lse=True)
        assert lse.is_cuda and not lse.requires_grad
        assert_lse(lse, want, tol, variant, projection, f"cuda {case} {variant}")


def misaligned_copy(t):
    """A copy of t whose data starts 2 bytes past a 16-byte boundary: the v1 kernels' 16-byte row copies cannot
    take it, so the launch file falls back to the v0 reference kernels."""
    flat = torch.empty(t.numel() + 8, dtype=t.dtype, device=t.device)
    out = flat[1 : 1 + t.numel()].view(t.shape)
    out.copy_(t)
    assert out.data_ptr() % 16 != 0
    return out


@pytest.mark.cuda
@needs_cuda_device
@needs_cuda_kernels
@pytest.mark.parametrize("variant", ["baseline", "gproj"])
def test_cuda_misaligned_rows_take_the_reference_kernels_within_tolerance(variant):
    # The reference kernels implement the exact projection, pweighted, so gproj names it here.
    opts = {"projection": "pweighted"} if variant == "gproj" else {}
    attention = functools.partial(gproj.attention, **opts)
    for case in CASES:
        (q, k, v, do, causal, scale), ref, tol = case_data(case)
        if q.shape[-1] not in CUDA_HEAD_DIMS:
            continue
        aligned = run_gproj(variant, q.cuda(), k.cuda(), v.cuda(), do.cuda(), causal, scale, attention)
        qm, km, vm = (misaligned_copy(t.cuda()).requires_grad_() for t in (q, k, v))
        om = attention(qm, km, vm, causal, scale, variant)
        mis = dict(zip(("dq", "dk", "dv"), torch.autograd.grad(om, (qm, km, vm), misaligned_copy(do.cuda()))))
        mis["o"] = om.detach()
        for name, out in (("aligned (v1)", aligned), ("misaligned (v0)", mis)):
            assert_within_tolerance(out, ref, tol, f"{name} {case} {variant}")


@pytest.mark.cuda
@needs_cuda_device
@needs_cuda_kernels
@pytest.mark.parametrize("variant", ["baseline", "gproj"])
def test_cuda_sdpa_entry_point_reads_torch_layout_within_tolerance(variant):
    # Through torch SDPA's (B, H, N, D) layout the CUDA kernels read q, k, v (and dO) as transposed views: head and
    # token strides swapped, D unit-stride. Within the derived tolerance, as the (B, N, H, D) tensors are.
    for case in CASES:
        (q, k, v, do, causal, scale), ref, tol = case_data(case)
        if q.shape[-1] not in CUDA_HEAD_DIMS or (causal and q.shape[1] != k.shape[1]):
            continue  # (causal with Nq != Nk: torch's mask is top-left, the cases' reference bottom-right)
        out = run_gproj(variant, q.cuda(), k.cuda(), v.cuda(), do.cuda(), causal, scale, through_sdpa)
        assert_within_tolerance(out, ref, tol, f"cuda sdpa {case} {variant}")


@pytest.mark.cuda
@needs_cuda_device
@needs_cuda_kernels
@pytest.mark.parametrize("variant,projection", [("baseline", None), ("gproj", "pweighted"), ("fp32", None)])
def test_cuda_deterministic_backward_gives_the_same_bits_every_run(variant, projection):
    # deterministic=True (and torch's flag, which asks for the same) gives the same gradients bit for bit on every
    # run, within the derived tolerance; the atomic form's are as close to the reference.
    attention = functools.partial(gproj.attention, projection=projection)
    for case in ("gqa_causal", "nq_lt_nk_full_d128"):
        (q, k, v, do, causal, scale), ref, tol = case_data(case)
        args = tuple(t.cuda() for t in (q, k, v, do)) + (causal, scale)
        runs = [run_gproj(variant, *args, functools.partial(attention, deterministic=True)) for _ in range(3)]
        with deterministic_algorithms():
            runs.append(run_gproj(variant, *args, attention))
        for f in ("dq", "dk", "dv"):
            assert all(torch.equal(r[f], runs[0][f]) for r in runs[1:]), f"{case} {variant} {f}"
        fast = run_gproj(variant, *args, functools.partial(attention, deterministic=False))
        for name, out in (("deterministic", runs[0]), ("atomic", fast)):
            assert_within_tolerance(out, ref, tol, f"{name} {case} {variant}")


@pytest.mark.cuda
@needs_cuda_device
@needs_cuda_kernels
def test_cuda_forward_forms_k_basis_for_the_backward():
    # With a backward to follow, gproj's CUDA forward with thresh-lowrank forms K's basis beside its kernel
    # (docs/gproj-forward-basis.md): B Hkv D 8 floats, the same bits on every call (the pre-passes have no atomics),
    # 8 orthonormal columns per kv head; the gradients from it stay within the derived tolerance.
    for case in ("gqa_causal", "nq_lt_nk_full_d128"):
        (q, k, v, do, causal, scale), ref, tol = case_data(case)
        q, k, v, do = (t.cuda() for t in (q, k, v, do))
        B, _, Hkv, D = k.shape
        args = (q, k, v, causal, scale, "gproj", None, "thresh-lowrank", None, True)
        *_, u = ops.attention_forward(*args)
        *_, u2 = ops._forward(*args)
        assert u.shape == (B * Hkv * D * 8,) == (gproj._C.basis_numel(B, Hkv, D, "gproj", "thresh-lowrank"),), case
        assert torch.equal(u, u2), case
        u = u.view(B * Hkv, D, 8).double()
        gram = u.transpose(1, 2) @ u
        assert torch.allclose(gram, torch.eye(8, dtype=torch.float64, device=gram.device).expand_as(gram),
                              atol=1e-4), case
        torch.library.opcheck(ops.attention_forward, args)
        out = run_gproj("gproj", q, k, v, do, causal, scale,  # (requires grad: the basis from the forward)
                        functools.partial(gproj.attention, projection="thresh-lowrank"))
        assert_within_tolerance(out, ref, tol, case)


@pytest.mark.cuda
@needs_cuda_device
@needs_cuda_kernels
def test_cuda_fp16_lowrank_within_derived_tolerance():
    # Projection fp16-lowrank on CUDA (D = 64 and 128; docs/design-fp16-projection.md): the forward's statistics and
    # FP16 copies travel to the backward in the fourth output, sized by _C.stats_numel; the gradients stay within
    # the derived tolerance and close to the CPU emulator's; D = 32 is refused with the reason.
    fp16 = functools.partial(gproj.attention, projection="fp16-lowrank")
    for name in ("gqa_causal", "nq_lt_nk_full_d128"):
        (q, k, v, do, causal, scale), ref, tol = case_data(name)
        qc, kc, vc, doc = (t.cuda() for t in (q, k, v, do))
        out = run_gproj("gproj", qc, kc, vc, doc, causal, scale, fp16)
        cpu = run_gproj("gproj", q, k, v, do, causal, scale, fp16)
        assert_within_tolerance(out, ref, tol, f"{name}: cuda fp16-lowrank")
        for f in FIELDS:
            assert rel_err(out[f].cpu(), cpu[f].double()) <= tol[f], f"{name}: cuda against the CPU emulator, {f}"
    B, Nq, H, D = q.shape
    args = (qc, kc, vc, causal, scale, "gproj", None, "fp16-lowrank", None, True)
    *_, stats = ops.attention_forward(*args)
    assert stats.shape == (gproj._C.stats_numel(B, Nq, k.shape[1], H, k.shape[2], D, "gproj", "fp16-lowrank"),)
    assert stats.numel() > 0
    torch.library.opcheck(ops.attention_forward, args)
    (q, k, v, _, causal, _), _, _ = case_data("nq_lt_nk_mqa_causal")  # D = 32
    with pytest.raises(ValueError, match="D = 32"):
        gproj.attention(q.cuda(), k.cuda(), v.cuda(), causal=causal, projection="fp16-lowrank")


@pytest.mark.cuda
@needs_cuda_device
@needs_cuda_kernels
def test_cuda_default_projection_on_misaligned_rows_is_a_clear_error():
    (q, k, v, do, causal, scale), _, _ = case_data("gqa_causal")
    qm, km, vm = (misaligned_copy(t.cuda()).requires_grad_() for t in (q, k, v))
    # fp16-lowrank: its forward already forms what its backward reads, so the forward says so
    with pytest.raises(Exception, match="16-byte aligned rows.*pweighted"):
        gproj.attention(qm, km, vm, causal, scale, "gproj")
    # thresh-lowrank (named): its backward
    om = gproj.attention(qm, km, vm, causal, scale, "gproj", projection="thresh-lowrank")
    with pytest.raises(Exception, match="16-byte aligned rows.*pweighted"):
        torch.autograd.grad(om, (qm, km, vm), misaligned_copy(do.cuda()))


def test_fwdfix_max_shift_caps_the_lift_and_inf_is_the_published_rule():
    # Every query of a 32-key row ties keys 0 and 1 at S = r_m = 120 (scale 1/8): the published lift (r_m)
    # underflows every P, the default cap of 16 does not. Below the cap both rules give the same bits.
    g = torch.Generator().manual_seed(3)
    k = torch.randn(1, 32, 1, 64, generator=g)
    k[0, 1] = k[0, 0]
    k = k.to(torch.bfloat16)
    v = torch.randn(1, 32, 1, 64, generator=g).to(torch.bfloat16)

    def queries(r_m):
        k0 = k[0, 0, 0].float()
        return (r_m * 8 / k0.dot(k0) * k0).expand(1, 4, 1, 64).to(torch.bfloat16).contiguous()

    q = queries(120.0)
    capped = gproj.attention(q, k, v, variant="fwdfix")
    published = gproj.attention(q, k, v, variant="fwdfix", fwdfix_max_shift=float("inf"))
    assert torch.isfinite(capped).all() and not torch.isfinite(published).all()
    ref = torch.softmax(q.double()[0, :, 0] @ k.double()[0, :, 0].T / 8, -1) @ v.double()[0, :, 0]
    assert rel_err(capped[0, :, 0], ref) < 1e-2
    q = queries(10.0)
    assert torch.equal(gproj.attention(q, k, v, variant="fwdfix"),
                       gproj.attention(q, k, v, variant="fwdfix", fwdfix_max_shift=float("inf")))
    with pytest.raises(ValueError, match="max shift"):
        gproj.attention(q, k, v, variant="fwdfix", fwdfix_max_shift=0.0)
    # gproj's default, fp16-lowrank, has no lift to cap: refused rather than ignored; thresh-lowrank takes it
    with pytest.raises(ValueError, match="fwdfix_max_shift.*no lift"):
        gproj.attention(q, k, v, fwdfix_max_shift=float("inf"))
    assert torch.equal(gproj.attention(q, k, v, projection="thresh-lowrank", fwdfix_max_shift=float("inf")),
                       gproj.attention(q, k, v, variant="fwdfix", fwdfix_max_shift=float("inf")))


def test_default_projection_is_fp16_lowrank():
    # docs/gproj-projection.md, "The switch to fp16-lowrank": the core's default, as the op reports and runs it.
    assert gproj.DEFAULT_PROJECTION == "fp16-lowrank" and gproj.DEFAULT_PROJECTION in gproj.PROJECTIONS
    (q, k, v, do, causal, scale), _, _ = case_data("gqa_causal")
    default = run_gproj("gproj", q, k, v, do, causal, scale)
    named = run_gproj("gproj", q, k, v, do, causal, scale,
                      functools.partial(gproj.attention, projection="fp16-lowrank"))
    thresh = run_gproj("gproj", q, k, v, do, causal, scale,
                       functools.partial(gproj.attention, projection="thresh-lowrank"))
    for f in FIELDS:
        assert torch.equal(default[f], named[f]), f
    assert not torch.equal(default["dq"], thresh["dq"])


def test_the_op_is_called_with_the_default_resolved(monkeypatch):
    # gproj.attention hands the op the projection by name, not None: torch.compile's caches key on the traced graph,
    # and a graph with None would match code compiled when None meant another projection (seen: a warm inductor
    # cache from a build with another default made a compiled step fail on the FP32 O's rank).
    seen = []

    class Recorder:
        @staticmethod
        def apply(*args):
            seen.append(args)
            return args[0], None

    monkeypatch.setattr(ops, "_AttentionFunction", Recorder)
    q, k, v, _ = make_inputs(1, 8, 8, 2, 2, 16, seed=5)
    gproj.attention(q, k, v)
    gproj.attention(q, k, v, variant="baseline")
    gproj.attention(q, k, v, projection="pweighted")
    assert [a[7] for a in seen] == [gproj.DEFAULT_PROJECTION, None, "pweighted"]
    assert gproj.DEFAULT_PROJECTION in gproj.PROJECTIONS


def test_projection_by_name_within_derived_tolerance():
    (q, k, v, do, causal, scale), ref, tol = case_data("gqa_causal")
    for projection in ("pweighted", "thresh-lowrank", "uniform", "fp16-lowrank"):  # (CUDA: test_cuda_fp16_lowrank_*)
        out = run_gproj("gproj", q, k, v, do, causal, scale,
                        attention=lambda *a, p=projection: gproj.attention(*a, projection=p))
        err = errors(out, ref)
        for f in FIELDS:
            assert err[f] <= tol[f], f"{projection} {f}: {err[f]:.3e} > derived tolerance {tol[f]:.3e}"
    assert "thresh-lowrank" in gproj.PROJECTIONS
    # (only fp16-lowrank's CUDA forward has them)
    assert gproj._C.stats_numel(1, 64, 64, 2, 2, 128, "gproj", "thresh-lowrank") == 0
    # The fake (meta) implementation sizes o_fp32 from the variant and the projection, as the real one does.
    assert gproj._C.needs_o_fp32("gproj", "fp16-lowrank") and not gproj._C.needs_o_fp32("gproj", "thresh-lowrank")
    assert gproj._C.needs_o_fp32("gproj") == gproj._C.needs_o_fp32("gproj", gproj.DEFAULT_PROJECTION)
    with pytest.raises(ValueError, match="unknown projection 'fast'"):
        gproj.attention(q, k, v, variant="gproj", projection="fast")


def test_dk_compensation_lowers_dk_error_with_shared_queries():
    # Queries that share a large component: the column sums of dS's rounding error carry it into dK; the
    # compensation (rank 8, experimental) gives that error back and leaves dQ, dV as they were.
    q, k, v, do = make_inputs(1, 256, 256, 2, 2, 64, seed=11)
    g = torch.Generator().manual_seed(12)
    u = torch.randn(64, generator=g)
    q = (q.float() + 8.0 * u * (8.0 / u.norm())).to(torch.bfloat16)
    ref = reference(q, k, v, do, True, default_scale(64))
    # (the compensation is thresh-lowrank's: fp16-lowrank's FP16 dS leaves dK no BF16 rounding to give back)
    plain = run_gproj("gproj", q, k, v, do, True, None,
                      attention=lambda *a: gproj.attention(*a, projection="thresh-lowrank"))
    comp = run_gproj("gproj", q, k, v, do, True, None,
                     attention=lambda *a: gproj.attention(*a, projection="thresh-lowrank", dk_compensation_rank=8))
    e_plain, e_comp = errors(plain, ref), errors(comp, ref)
    print(f"dK rel err: gproj {e_plain['dk']:.3e}, with dK compensation {e_comp['dk']:.3e}")
    assert e_comp["dk"] < 0.9 * e_plain["dk"]
    assert torch.equal(comp["dq"], plain["dq"]) and torch.equal(comp["dv"], plain["dv"])
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    with pytest.raises(ValueError, match="dk_compensation_rank"):
        gproj.attention(*leaves, variant="gproj", projection="thresh-lowrank", dk_compensation_rank=-1).sum().backward()
