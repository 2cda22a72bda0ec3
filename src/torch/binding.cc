// gproj._C, the PyTorch binding: the one file that sees at::Tensor. It wraps tensors as TensorViews (no copy)
// and calls the torch-free core. Exercised by tests/python/test_attention.py through python/gproj/ops.py.
#include <torch/extension.h>

#include <climits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "gproj/attention.h"
#include "gproj/build_info.h"
#include "gproj/error.h"
#include "gproj/tensor.h"

#ifdef GPROJ_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "gproj/cuda/attention_cuda.h"
#endif

namespace {

using gproj::bf16;
using gproj::Error;
using gproj::ErrorCode;
using gproj::FlashParams;
using Tensors3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using Tensors4 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

static_assert(sizeof(bf16) == sizeof(at::BFloat16) && alignof(bf16) == alignof(at::BFloat16),
              "gproj::bf16 must share at::BFloat16's layout for the views below");

template <class T>
constexpr at::ScalarType scalar_type_of();
template <>
constexpr at::ScalarType scalar_type_of<bf16>() { return at::kBFloat16; }
template <>
constexpr at::ScalarType scalar_type_of<float>() { return at::kFloat; }

// Checks dtype and device of `t` and returns it, copied to a contiguous tensor only when the core cannot read its
// layout (D not unit-stride, or a broadcast zero stride); a tensor of another dtype is an error, never converted.
template <class T>
at::Tensor prepare(const std::string& name, const at::Tensor& t, const at::Device& device) {
  if (t.scalar_type() != scalar_type_of<T>()) {
    throw Error(ErrorCode::kDtype, name + " has dtype " + c10::toString(t.scalar_type()) + " but gproj takes " +
                                       c10::toString(scalar_type_of<T>()) + "; convert it explicitly");
  }
  if (t.device() != device) {
    throw Error(ErrorCode::kInvalidArgument, name + " is on " + t.device().str() + " but q is on " + device.str() +
                                                 "; all tensors of one call must be on one device");
  }
  if (t.dim() > 4) {
    throw Error(ErrorCode::kShape, name + " has rank " + std::to_string(t.dim()) +
                                       "; gproj takes (B, N, H, D) and (B, H, N) tensors, rank 4 at most");
  }
  bool readable = t.dim() == 0 || t.stride(-1) == 1;
  for (int64_t i = 0; i < t.dim(); ++i) readable = readable && (t.size(i) == 1 || t.stride(i) > 0);
  return readable ? t : t.contiguous();
}

template <class T>
gproj::TensorView<const T> view_of(const at::Tensor& t) {
  gproj::TensorView<const T> v;
  v.data = reinterpret_cast<const T*>(t.const_data_ptr());
  v.rank = static_cast<int>(t.dim());
  for (int i = 0; i < v.rank; ++i) {
    v.shape[i] = t.size(i);
    v.stride[i] = t.stride(i);
  }
  return v;
}

// Hands an owning core tensor to torch without a copy: the tensor's deleter frees the values.
template <class T>
at::Tensor adopt(gproj::Tensor<T>&& t) {
  auto values = std::make_unique<std::vector<T>>(std::move(t.values));
  const std::vector<int64_t> sizes(t.shape.begin(), t.shape.begin() + t.rank);
  std::vector<T>* raw = values.get();
  at::Tensor out = torch::from_blob(raw->data(), sizes, [raw](void*) { delete raw; },
                                    at::TensorOptions().dtype(scalar_type_of<T>()));
  values.release();
  return out;
}

// projection: GProj's projection by name (default: FlashParams', fp16-lowrank).
FlashParams params_of(bool causal, std::optional<double> softmax_scale, const std::string& variant,
                      const std::optional<std::string>& projection = std::nullopt) {
  FlashParams p;
  p.variant = gproj::parse_variant(variant);
  if (projection) {
    p.projection = gproj::parse_projection(*projection);
  }
  p.causal = causal;
  if (softmax_scale) p.softmax_scale = static_cast<float>(*softmax_scale);
  return p;
}

bool needs_o_fp32(const FlashParams& p) { return gproj::backward_needs_o_fp32(p); }

at::Tensor empty_fp32(const at::Tensor& like) { return at::empty({0}, like.options().dtype(at::kFloat)); }

#ifdef GPROJ_WITH_CUDA

gproj::cuda::DeviceTensor device_tensor(const at::Tensor& t) {
  gproj::cuda::DeviceTensor d;
  if (t.numel() == 0) return d;
  d.data = t.data_ptr();
  for (int64_t i = 0; i < t.dim(); ++i) d.stride[i] = t.stride(i);
  return d;
}

gproj::cuda::Problem problem_of(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const FlashParams& p) {
  const gproj::AttentionDims d = gproj::check_attention_shapes(view_of<bf16>(q), view_of<bf16>(k), view_of<bf16>(v));
  gproj::cuda::Problem pr;
  pr.B = d.B, pr.Nq = d.Nq, pr.Nk = d.Nk, pr.H = d.H, pr.Hkv = d.Hkv, pr.D = d.D;
  pr.softmax_scale = gproj::resolve_scale(p, d.D);
  pr.params = p;
  return pr;
}

void require_cuda() {
  std::string why;
  if (!gproj::cuda::available(&why)) throw Error(ErrorCode::kDevice, "gproj CUDA kernels unavailable: " + why);
}

void check(const gproj::cuda::Status& s) {
  if (!s.ok) throw Error(s.code, "gproj CUDA: " + s.message);  // the code picks the Python exception type
}

// Elements of K's basis that the CUDA forward forms for the backward (Problem::forward_basis, v3.39): B Hkv D 8
// floats where it applies (variant gproj, projection thresh-lowrank, D 64 or 128), else 0. From the shapes and
// names alone, so that the fake implementation gives the same shape.
int64_t basis_numel(int64_t B, int64_t Hkv, int64_t D, const FlashParams& p) {
  gproj::cuda::Problem pr;
  pr.B = B, pr.Nq = 1, pr.Nk = 1, pr.H = Hkv, pr.Hkv = Hkv, pr.D = static_cast<int>(D);
  pr.params = p;
  return static_cast<int64_t>(gproj::cuda::forward_basis_bytes(pr) / sizeof(float));
}

// Projection fp16-lowrank on CUDA: FP32 elements of the forward's statistics and FP16 copies that its backward
// reads (cuda::forward_stats_bytes / 4, docs/design-fp16-projection.md); 0 for every other variant and projection.
// The op carries them in the basis slot, whether or not a backward follows (the forward writes them either way).
int64_t stats_numel(int64_t B, int64_t Nq, int64_t Nk, int64_t H, int64_t Hkv, int64_t D, const FlashParams& p) {
  if (gproj::effective_projection(p) != gproj::Projection::kFp16LowRank) return 0;
  gproj::cuda::Problem pr;
  pr.B = B, pr.Nq = Nq, pr.Nk = Nk, pr.H = H, pr.Hkv = Hkv, pr.D = static_cast<int>(D);
  pr.softmax_scale = 1.0f;
  pr.params = p;
  return static_cast<int64_t>(gproj::cuda::forward_stats_bytes(pr) / sizeof(float));
}

// basis: form K's basis beside the forward kernel and return it (empty where it does not apply). Where k's rows
// are not 16-byte aligned it is not formed; the backward then forms it itself (the same test on the same k).
// fp16-lowrank: the slot carries its forward's statistics instead (stats_numel), always.
Tensors4 cuda_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const FlashParams& p,
                      bool basis) {
  require_cuda();
  const c10::cuda::CUDAGuard guard(q.device());
  gproj::cuda::Problem pr = problem_of(q, k, v, p);
  const bool h16 = gproj::effective_projection(p) == gproj::Projection::kFp16LowRank;
  at::Tensor o = at::empty({pr.B, pr.Nq, pr.H, pr.D}, q.options());
  at::Tensor lse = at::empty({pr.B, pr.H, pr.Nq}, q.options().dtype(at::kFloat));
  // (fp16-lowrank: its CUDA backward reads the FP16 O in the statistics instead of an FP32 O)
  at::Tensor o_fp32 =
      needs_o_fp32(p) && !h16 ? at::empty({pr.B, pr.Nq, pr.H, pr.D}, lse.options()) : empty_fp32(q);
  // The fourth output: fp16-lowrank's statistics (always), else K's basis where asked for and it applies.
  const int64_t n = h16 ? static_cast<int64_t>(gproj::cuda::forward_stats_bytes(pr) / sizeof(float))
                        : basis ? basis_numel(pr.B, pr.Hkv, pr.D, p) : 0;
  if (h16 && n == 0) {
    throw Error(ErrorCode::kUnsupported, "projection fp16-lowrank on CUDA takes D = 64 or 128, got D = " +
                                             std::to_string(pr.D));
  }
  at::Tensor u = n > 0 ? at::empty({n}, lse.options()) : empty_fp32(q);
  at::Tensor scratch;  // the forward workspace (Gram partials; fp16-lowrank: and vh), needed only until the stream
                       // is past it (the caching allocator keeps it till then)
  if (n > 0 && (h16 || gproj::cuda::rows_aligned(device_tensor(k)))) {
    scratch =
        at::empty({static_cast<int64_t>(gproj::cuda::forward_workspace_bytes(pr))}, q.options().dtype(at::kByte));
    (h16 ? pr.forward_stats : pr.forward_basis) = u.data_ptr();
    pr.forward_workspace = scratch.data_ptr();
  }
  check(gproj::cuda::forward(pr, device_tensor(q), device_tensor(k), device_tensor(v), device_tensor(o),
                             device_tensor(lse), device_tensor(o_fp32), at::cuda::getCurrentCUDAStream().stream()));
  return {o, o_fp32, lse, u};
}

Tensors3 cuda_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const at::Tensor& o, const at::Tensor& o_fp32, const at::Tensor& lse, const at::Tensor& basis,
                       const FlashParams& p) {
  require_cuda();
  const c10::cuda::CUDAGuard guard(q.device());
  gproj::cuda::Problem pr = problem_of(q, k, v, p);
  if (gproj::effective_projection(p) == gproj::Projection::kFp16LowRank) {  // its forward's statistics, required
    const int64_t n = static_cast<int64_t>(gproj::cuda::forward_stats_bytes(pr) / sizeof(float));
    if (n == 0 || basis.numel() != n) {
      throw Error(ErrorCode::kShape, "projection fp16-lowrank's CUDA backward needs its forward's statistics (the "
                                     "forward's fourth output, " + std::to_string(n) + " elements for these shapes), "
                                     "got " + std::to_string(basis.numel()));
    }
    pr.forward_stats = const_cast<void*>(basis.const_data_ptr());
  } else if (basis.numel() > 0) {  // K's basis from the forward (cuda_forward formed it where k's rows are aligned)
    const int64_t n = basis_numel(pr.B, pr.Hkv, pr.D, p);
    if (basis.numel() != n) {
      throw Error(ErrorCode::kShape, "basis has " + std::to_string(basis.numel()) + " elements but this problem's "
                                     "forward forms " + std::to_string(n) + "; pass what forward() returned");
    }
    if (gproj::cuda::rows_aligned(device_tensor(k))) pr.forward_basis = const_cast<void*>(basis.const_data_ptr());
  }
  at::Tensor dq = at::empty(q.sizes(), q.options());
  at::Tensor dk = at::empty(k.sizes(), k.options());
  at::Tensor dv = at::empty(v.sizes(), v.options());
  // sized for these tensors: without the FP32 dK, dV accumulators where the main kernel stores dK, dV itself
  pr.workspace_bytes = gproj::cuda::backward_workspace_bytes(pr, device_tensor(q), device_tensor(k), device_tensor(v),
                                                             device_tensor(dout), device_tensor(dq), device_tensor(dk),
                                                             device_tensor(dv));
  at::Tensor workspace =
      at::empty({static_cast<int64_t>(pr.workspace_bytes)}, q.options().dtype(at::kByte));
  check(gproj::cuda::backward(pr, device_tensor(q), device_tensor(k), device_tensor(v), device_tensor(o),
                              device_tensor(o_fp32), device_tensor(lse), device_tensor(dout), device_tensor(dq),
                              device_tensor(dk), device_tensor(dv), workspace.numel() ? workspace.data_ptr() : nullptr,
                              at::cuda::getCurrentCUDAStream().stream()));
  return {dq, dk, dv};
}

std::tuple<bool, std::string> cuda_status() {
  std::string why;
  const bool ok = gproj::cuda::available(&why);
  return {ok, why};
}

#else  // no CUDA kernels in this build: CUDA tensors get one clear error

const char kWithoutCuda[] =
    "gproj was built without CUDA kernels: move the tensors to the CPU, or rebuild with GPROJ_CUDA=1 "
    "(docs/pytorch.md)";

Tensors4 cuda_forward(const at::Tensor&, const at::Tensor&, const at::Tensor&, const FlashParams&, bool) {
  throw std::runtime_error(kWithoutCuda);
}

Tensors3 cuda_backward(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                       const at::Tensor&, const at::Tensor&, const at::Tensor&, const FlashParams&) {
  throw std::runtime_error(kWithoutCuda);
}

int64_t basis_numel(int64_t, int64_t, int64_t, const FlashParams&) { return 0; }

int64_t stats_numel(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, const FlashParams&) { return 0; }

std::tuple<bool, std::string> cuda_status() { return {false, kWithoutCuda}; }

#endif

void require_cpu(const at::Device& device) {
  if (!device.is_cpu()) {
    throw Error(ErrorCode::kUnsupported, "gproj runs on cpu and cuda tensors, got " + device.str());
  }
}

// (o (B, Nq, H, D) BF16, o_fp32 (B, Nq, H, D) FP32 or empty when the variant's backward does not need it,
// lse (B, H, Nq) FP32, basis: K's basis for the backward, FP32, empty unless `basis` asked for it on CUDA where it
// applies (basis_numel)) from q (B, Nq, H, D), k, v (B, Nk, Hkv, D) BF16.
Tensors4 forward(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in, bool causal,
                 std::optional<double> softmax_scale, const std::string& variant,
                 std::optional<double> fwdfix_max_shift, const std::optional<std::string>& projection,
                 bool basis) {
  FlashParams p = params_of(causal, softmax_scale, variant, projection);
  if (fwdfix_max_shift) p.fwdfix_max_shift = static_cast<float>(*fwdfix_max_shift);  // checked with the scale
  const at::Device device = q_in.device();
  const at::Tensor q = prepare<bf16>("q", q_in, device);
  const at::Tensor k = prepare<bf16>("k", k_in, device);
  const at::Tensor v = prepare<bf16>("v", v_in, device);
  if (device.is_cuda()) return cuda_forward(q, k, v, p, basis);
  require_cpu(device);
  gproj::ForwardResult r;
  {
    const pybind11::gil_scoped_release no_gil;
    r = gproj::flash_forward_cpu(view_of<bf16>(q), view_of<bf16>(k), view_of<bf16>(v), p);
  }
  at::Tensor o_fp32 = needs_o_fp32(p) ? adopt(std::move(r.o_fp32)) : empty_fp32(q);
  return {adopt(std::move(r.o)), o_fp32, adopt(std::move(r.lse)), empty_fp32(q)};  // (the CPU forms no basis)
}

// (dq (B, Nq, H, D), dk, dv (B, Nk, Hkv, D)) BF16 from dout (B, Nq, H, D) and what forward() returned.
Tensors3 backward(const at::Tensor& dout_in, const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                  const at::Tensor& o_in, const at::Tensor& o_fp32_in, const at::Tensor& lse_in,
                  const at::Tensor& basis_in, bool causal,
                  std::optional<double> softmax_scale, const std::string& variant,
                  const std::optional<std::string>& projection, std::optional<int64_t> dk_compensation_rank,
                  bool deterministic) {
  FlashParams p = params_of(causal, softmax_scale, variant, projection);
  p.deterministic = deterministic;  // CUDA: refused where cuda_deterministic_refusal says; the CPU always is
  if (dk_compensation_rank) {  // the core checks 0 <= r <= D (resolve_scale) and the CUDA kernels what they run
    const int64_t r = *dk_compensation_rank;
    if (r < INT_MIN || r > INT_MAX) {
      throw Error(ErrorCode::kInvalidArgument, "dk_compensation_rank must lie in [0, D], got " + std::to_string(r));
    }
    p.dk_compensation_rank = static_cast<int>(r);
  }
  const at::Device device = q_in.device();
  const at::Tensor q = prepare<bf16>("q", q_in, device);
  const at::Tensor k = prepare<bf16>("k", k_in, device);
  const at::Tensor v = prepare<bf16>("v", v_in, device);
  const at::Tensor o = prepare<bf16>("o", o_in, device);
  const at::Tensor o_fp32 = prepare<float>("o_fp32", o_fp32_in, device);
  const at::Tensor lse = prepare<float>("lse", lse_in, device);
  const at::Tensor dout = prepare<bf16>("do", dout_in, device);
  const at::Tensor basis = prepare<float>("basis", basis_in, device);
  if (device.is_cuda()) return cuda_backward(dout, q, k, v, o, o_fp32, lse, basis, p);
  require_cpu(device);
  if (basis.numel() > 0) {
    throw Error(ErrorCode::kInvalidArgument, "basis is for the CUDA backward; a CPU forward returns it empty");
  }
  gproj::BackwardResult r;
  {
    const pybind11::gil_scoped_release no_gil;
    r = gproj::flash_backward_cpu(view_of<bf16>(q), view_of<bf16>(k), view_of<bf16>(v), view_of<bf16>(o),
                                  o_fp32.numel() ? view_of<float>(o_fp32) : gproj::TensorView<const float>{},
                                  view_of<float>(lse), view_of<bf16>(dout), p);
  }
  return {adopt(std::move(r.dq)), adopt(std::move(r.dk)), adopt(std::move(r.dv))};
}

PyObject* python_exception(ErrorCode code) {
  switch (code) {
    case ErrorCode::kDtype: return PyExc_TypeError;
    case ErrorCode::kIO: return PyExc_OSError;
    case ErrorCode::kDevice: return PyExc_RuntimeError;
    case ErrorCode::kShape:
    case ErrorCode::kNonFinite:
    case ErrorCode::kUnsupported:
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kFormat: return PyExc_ValueError;
  }
  return PyExc_RuntimeError;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace py = pybind11;
  m.doc() = "gproj: BF16 attention whose gradients are right (torch binding of the C++ core)";
  py::register_exception_translator([](std::exception_ptr e) {
    try {
      if (e) std::rethrow_exception(e);
    } catch (const Error& err) {
      PyErr_SetString(python_exception(err.code()), err.what());
    }
  });
  m.def("forward", &forward,
        "o, o_fp32 (empty unless the variant's backward needs it), lse, basis (empty unless asked for on CUDA)",
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("causal"), py::arg("softmax_scale"), py::arg("variant"),
        py::arg("fwdfix_max_shift") = py::none(), py::arg("projection") = py::none(), py::arg("basis") = false);
  m.def("backward", &backward, "dq, dk, dv", py::arg("dout"), py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("o"), py::arg("o_fp32"), py::arg("lse"), py::arg("basis"), py::arg("causal"),
        py::arg("softmax_scale"),
        py::arg("variant"), py::arg("projection") = py::none(), py::arg("dk_compensation_rank") = py::none(),
        py::arg("deterministic") = false);
  m.def(
      "cuda_deterministic_refusal",
      [](const std::string& variant, const std::optional<std::string>& projection) {
        return gproj::cuda_deterministic_refusal(params_of(false, std::nullopt, variant, projection));
      },
      "why the CUDA backward of the variant (and projection) has no deterministic form, as a sentence naming the "
      "way out; empty where it has one",
      py::arg("variant"), py::arg("projection") = py::none());
  m.def(
      "projections",
      [] {
        std::vector<std::string> names;
        for (gproj::Projection p : gproj::all_projections()) names.emplace_back(gproj::projection_name(p));
        return names;
      },
      "names of GProj's projections (for variant gproj)");
  m.def(
      "default_projection", [] { return std::string(gproj::projection_name(FlashParams{}.projection)); },
      "the projection variant gproj takes when none is named (FlashParams' default)");
  m.def(
      "variants",
      [] {
        std::vector<std::string> names;
        for (gproj::Variant v : gproj::all_variants()) names.emplace_back(gproj::variant_name(v));
        return names;
      },
      "names of the variants, in the order of gproj::all_variants()");
  m.def(
      "needs_o_fp32",
      [](const std::string& variant, const std::optional<std::string>& projection) {
        return needs_o_fp32(params_of(false, std::nullopt, variant, projection));
      },
      "whether the backward of the variant (and projection) reads the forward's FP32 O", py::arg("variant"),
      py::arg("projection") = py::none());
  m.def(
      "basis_numel",
      [](int64_t B, int64_t Hkv, int64_t D, const std::string& variant, const std::optional<std::string>& projection) {
        return basis_numel(B, Hkv, D, params_of(false, std::nullopt, variant, projection));
      },
      "elements of K's basis that the CUDA forward returns for these shapes when asked (0 where it does not apply "
      "or without CUDA kernels)",
      py::arg("B"), py::arg("Hkv"), py::arg("D"), py::arg("variant"), py::arg("projection") = py::none());
  m.def(
      "stats_numel",
      [](int64_t B, int64_t Nq, int64_t Nk, int64_t H, int64_t Hkv, int64_t D, const std::string& variant,
         const std::optional<std::string>& projection) {
        return stats_numel(B, Nq, Nk, H, Hkv, D, params_of(false, std::nullopt, variant, projection));
      },
      "elements (FP32) of the forward's statistics that projection fp16-lowrank's CUDA forward returns in the basis "
      "slot for these shapes (0 where it does not apply or without CUDA kernels)",
      py::arg("B"), py::arg("Nq"), py::arg("Nk"), py::arg("H"), py::arg("Hkv"), py::arg("D"), py::arg("variant"),
      py::arg("projection") = py::none());
  m.def("supports_head_dim", &gproj::cpu_supports_head_dim, "whether the kernels accept head dimension D",
        py::arg("D"));
  m.def("cuda_status", &cuda_status, "(available, why not)");
  m.def(
      "build_info",
      [] {
        py::dict d;
        d["version"] = gproj::build_version();
        d["git_commit"] = gproj::build_git_commit();
        d["build_type"] = gproj::build_type();
        d["compiler"] = gproj::build_compiler();
#ifdef GPROJ_WITH_CUDA
        d["cuda_kernels"] = true;
#else
        d["cuda_kernels"] = false;
#endif
        return d;
      },
      "version, git commit, build type, compiler, and whether the CUDA kernels are compiled in");
}
