// The one launch file of the CUDA kernels: checks a Problem, turns runtime flags (D, variant, projection) into
// template parameters, picks the kernel generation (v1 tensor cores when the variant rounds to BF16 and every
// row is 16-byte aligned; the v0 FP32 reference kernels otherwise, e.g. for the fp32 variant), sizes the
// workspace and launches forward / backward. Exercised by tests/cuda/*.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/flash_bwd.cuh"
#include "cuda/flash_bwd_tc.cuh"
#include "cuda/flash_fwd.cuh"
#include "cuda/flash_fwd_tc.cuh"
#include "gproj/cuda/attention_cuda.h"

namespace gproj::cuda {

namespace {

using detail::KernelParams;
using detail::kBlockK;
using detail::kBlockQ;
using detail::kThreads;

Status fail(ErrorCode code, const std::string& m) { return Status{false, code, m}; }

Status check_problem(const Problem& p) {
  if (p.B < 1 || p.Nq < 1 || p.Nk < 1 || p.H < 1 || p.Hkv < 1) return fail(ErrorCode::kShape, "extents must be >= 1");
  if (p.H % p.Hkv != 0) return fail(ErrorCode::kShape, "H % Hkv != 0 (H = " + std::to_string(p.H) + ", Hkv = " + std::to_string(p.Hkv) + ")");
  if (p.D != 64 && p.D != 128) return fail(ErrorCode::kUnsupported, "unsupported head dim D = " + std::to_string(p.D) + " (CUDA supports 64, 128)");
  if (!(p.softmax_scale > 0.0f)) return fail(ErrorCode::kInvalidArgument, "softmax_scale must be > 0");
  if (!(p.params.fwdfix_max_shift > 0.0f)) {
    return fail(ErrorCode::kInvalidArgument, "fwdfix_max_shift must be > 0 (inf: the published, uncapped rule)");
  }
  const Projection proj = effective_projection(p.params);
  if (proj != Projection::kNone && proj != Projection::kPWeighted) {
    return fail(ErrorCode::kUnsupported, std::string("projection '") + projection_name(proj) + "' is not implemented on CUDA (pweighted is)");
  }
  const int64_t big = int64_t{1} << 31;
  if (p.B * p.H * p.Nq * p.D >= big || p.B * p.H * p.Nk * p.D >= big) return fail(ErrorCode::kUnsupported, "problem too large for int32 indexing");
  return {};
}

Status last_error(const char* what) {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? Status{} : fail(ErrorCode::kDevice, std::string(what) + ": " + cudaGetErrorString(e));
}

detail::Strided strided(const DeviceTensor& t) { return {t.data, t.stride[0], t.stride[1], t.stride[2]}; }

Status check_tensor(const char* name, const DeviceTensor& t) {
  if (t.data == nullptr) return fail(ErrorCode::kInvalidArgument, std::string(name) + " is null");
  if (t.stride[3] != 1) return fail(ErrorCode::kShape, std::string(name) + " must be contiguous in D (stride 1)");
  return {};
}

KernelParams base_params(const Problem& p) {
  KernelParams k{};
  k.B = static_cast<int>(p.B);
  k.Nq = static_cast<int>(p.Nq);
  k.Nk = static_cast<int>(p.Nk);
  k.H = static_cast<int>(p.H);
  k.Hkv = static_cast<int>(p.Hkv);
  k.D = static_cast<int>(p.D);
  k.scale = p.softmax_scale;
  k.causal = p.params.causal;
  k.beta = p.params.fwdfix_beta;
  k.tie_tol = p.params.fwdfix_tie_tol;
  k.max_shift = p.params.fwdfix_max_shift;
  k.row_stats = p.row_stats;
  return k;
}

template <class Kernel>
Status launch(Kernel kernel, dim3 grid, size_t smem, cudaStream_t stream, const KernelParams& k, const char* what,
              int threads = kThreads) {
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) != cudaSuccess) {
    return last_error(what);
  }
  kernel<<<grid, threads, smem, stream>>>(k);
  return last_error(what);
}

// The v1 kernels copy 16-byte chunks of each row: data and the B, N, H strides must keep rows 16-byte aligned.
bool rows_aligned(const DeviceTensor& t) {
  return reinterpret_cast<uintptr_t>(t.data) % 16 == 0 && t.stride[0] % 8 == 0 && t.stride[1] % 8 == 0 &&
         t.stride[2] % 8 == 0;
}

// ---- v1: tensor cores ----
constexpr int kFwdWarps = 8;  // 128 query rows per CTA (perf-notes: v1 vs v1.1)

template <int D, bool kTie>
Status forward_tc(const KernelParams& k, cudaStream_t stream) {
  constexpr int bq = 16 * kFwdWarps;
  const dim3 grid((k.Nq + bq - 1) / bq, k.H, k.B);
  return launch(detail::flash_fwd_tc_kernel<D, kFwdWarps, kTie>, grid, detail::fwd_tc_smem_bytes<D, kFwdWarps>(),
                stream, k, "forward (tensor cores)", kFwdWarps * 32);
}

template <int D, bool kPWeighted>
Status backward_tc(const KernelParams& k, bool deterministic, cudaStream_t stream) {
  constexpr int blk = detail::kBwdBlock, threads = detail::kBwdThreads;
  const dim3 grid((k.Nk + blk - 1) / blk, k.H, k.B);
  const size_t smem = detail::bwd_tc_smem_bytes<D>();
  Status s;
  if (deterministic) {
    s = launch(detail::flash_bwd_tc_kernel<D, kPWeighted, false, false>, grid, smem, stream, k,
               "backward main, tensor cores (dK, dV)", threads);
  } else if (kPWeighted || k.row_stats) {
    s = launch(detail::flash_bwd_tc_kernel<D, kPWeighted, true, true>, grid, smem, stream, k,
               "backward main, tensor cores", threads);
  } else {
    s = launch(detail::flash_bwd_tc_kernel<D, false, true, false>, grid, smem, stream, k,
               "backward main, tensor cores", threads);
  }
  if (s.ok && deterministic) {  // dQ, P K and the row sums in a fixed order, one CTA per query block
    const dim3 qgrid((k.Nq + blk - 1) / blk, k.H, k.B);
    s = launch(detail::flash_bwd_tc_dq_kernel<D, kPWeighted>, qgrid, detail::dq_tc_smem_bytes<D>(), stream, k,
               "backward deterministic dQ, tensor cores", threads);
  }
  if (!s.ok || !kPWeighted) return s;
  return launch(detail::flash_bwd_tc_dk_sweep_kernel<D>, grid, detail::sweep_tc_smem_bytes<D>(), stream, k,
                "backward dK projection sweep, tensor cores", threads);
}

template <int D, bool kRound, bool kTie>
Status forward_d(const KernelParams& k, cudaStream_t stream) {
  const dim3 grid((k.Nq + kBlockQ - 1) / kBlockQ, k.H, k.B);
  return launch(detail::flash_fwd_kernel<D, kRound, kTie>, grid, detail::fwd_smem_bytes<D>(), stream, k, "forward");
}

template <int D>
Status forward_variant(const KernelParams& k, Variant v, bool tc, cudaStream_t stream) {
  if (tc && v != Variant::kFp32) {
    return v == Variant::kBaseline ? forward_tc<D, false>(k, stream) : forward_tc<D, true>(k, stream);
  }
  switch (v) {
    case Variant::kFp32: return forward_d<D, false, false>(k, stream);
    case Variant::kBaseline: return forward_d<D, true, false>(k, stream);
    case Variant::kFwdfix:
    case Variant::kGproj: return forward_d<D, true, true>(k, stream);
  }
  return fail(ErrorCode::kInvalidArgument, "unknown variant");
}

template <int D, bool kRound, bool kPWeighted>
Status backward_d(const KernelParams& k, bool deterministic, cudaStream_t stream) {
  const dim3 grid((k.Nk + kBlockK - 1) / kBlockK, k.H, k.B);
  Status s = deterministic
                 ? launch(detail::flash_bwd_kernel<D, kRound, kPWeighted, false>, grid, detail::bwd_smem_bytes<D>(),
                          stream, k, "backward main (dK, dV)")
                 : launch(detail::flash_bwd_kernel<D, kRound, kPWeighted, true>, grid, detail::bwd_smem_bytes<D>(),
                          stream, k, "backward main");
  if (s.ok && deterministic) {
    const dim3 qgrid((k.Nq + kBlockQ - 1) / kBlockQ, k.H, k.B);
    s = launch(detail::flash_bwd_dq_kernel<D, kRound, kPWeighted>, qgrid, detail::bwd_smem_bytes<D>(), stream, k,
               "backward deterministic dQ");
  }
  if (!s.ok || !kPWeighted) return s;
  return launch(detail::flash_bwd_dk_sweep_kernel<D, kRound>, grid, detail::dk_sweep_smem_bytes<D>(), stream, k,
                "backward dK projection sweep");
}

template <int D>
Status backward_variant(const KernelParams& k, Variant v, bool pweighted, bool deterministic, bool tc,
                        cudaStream_t stream) {
  if (v == Variant::kFp32) return backward_d<D, false, false>(k, deterministic, stream);
  if (tc) return pweighted ? backward_tc<D, true>(k, deterministic, stream) : backward_tc<D, false>(k, deterministic, stream);
  return pweighted ? backward_d<D, true, true>(k, deterministic, stream)
                   : backward_d<D, true, false>(k, deterministic, stream);
}

// Workspace layout, FP32: delta, rowsum, psum (B H Nq) | dq_acc, pk (B H Nq D) | dk_acc, dv_acc (B H Nk D).
struct Workspace {
  size_t row, q, k;
  size_t bytes() const { return sizeof(float) * (3 * row + 2 * q + 2 * k); }
};

Workspace layout(const Problem& p) {
  return {static_cast<size_t>(p.B * p.H * p.Nq), static_cast<size_t>(p.B * p.H * p.Nq * p.D),
          static_cast<size_t>(p.B * p.H * p.Nk * p.D)};
}

}  // namespace

bool available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = std::string("no CUDA device: ") + (e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    return false;
  }
  return true;
}

DeviceInfo device_info() {
  DeviceInfo info;
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    info.name = prop.name;
    info.compute_capability = std::to_string(prop.major) + "." + std::to_string(prop.minor);
  }
  int v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess) info.driver_version = std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) info.runtime_version = std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  return info;
}

Status forward(const Problem& p, const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
               const DeviceTensor& o, const DeviceTensor& lse, const DeviceTensor& o_fp32, void* stream) {
  for (Status s : {check_problem(p), check_tensor("q", q), check_tensor("k", k), check_tensor("v", v)})
    if (!s.ok) return s;
  if (o.data == nullptr || lse.data == nullptr) return fail(ErrorCode::kInvalidArgument, "o and lse outputs are required");
  KernelParams kp = base_params(p);
  kp.q = strided(q);
  kp.k = strided(k);
  kp.v = strided(v);
  kp.o_out = static_cast<__nv_bfloat16*>(o.data);
  kp.lse_out = static_cast<float*>(lse.data);
  kp.o_fp32_out = static_cast<float*>(o_fp32.data);
  const auto st = static_cast<cudaStream_t>(stream);
  const bool tc = rows_aligned(q) && rows_aligned(k) && rows_aligned(v);
  return p.D == 64 ? forward_variant<64>(kp, p.params.variant, tc, st)
                   : forward_variant<128>(kp, p.params.variant, tc, st);
}

size_t backward_workspace_bytes(const Problem& p) { return layout(p).bytes(); }

Status backward(const Problem& p, const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
                const DeviceTensor& o, const DeviceTensor& o_fp32, const DeviceTensor& lse, const DeviceTensor& dout,
                const DeviceTensor& dq, const DeviceTensor& dk, const DeviceTensor& dv, void* workspace,
                void* stream) {
  for (Status s : {check_problem(p), check_tensor("q", q), check_tensor("k", k), check_tensor("v", v),
                   check_tensor("o", o), check_tensor("do", dout)})
    if (!s.ok) return s;
  if (lse.data == nullptr || dq.data == nullptr || dk.data == nullptr || dv.data == nullptr || workspace == nullptr) {
    return fail(ErrorCode::kInvalidArgument, "lse, dq, dk, dv and the workspace are required");
  }
  const bool fp32 = p.params.variant == Variant::kFp32;
  if (fp32 && o_fp32.data == nullptr) {
    return fail(ErrorCode::kInvalidArgument, "variant fp32 needs the forward's FP32 O (o_fp32)");
  }
  const bool pweighted = effective_projection(p.params) == Projection::kPWeighted;
  KernelParams kp = base_params(p);
  kp.q = strided(q);
  kp.k = strided(k);
  kp.v = strided(v);
  kp.o = strided(o);
  kp.dout = strided(dout);
  kp.o_fp32 = fp32 ? static_cast<const float*>(o_fp32.data) : nullptr;
  kp.lse = static_cast<const float*>(lse.data);
  const Workspace w = layout(p);
  float* ws = static_cast<float*>(workspace);
  kp.delta = ws;
  kp.rowsum = ws + w.row;
  kp.psum = ws + 2 * w.row;
  kp.dq_acc = ws + 3 * w.row;
  kp.pk = kp.dq_acc + w.q;
  kp.dk_acc = kp.pk + w.q;
  kp.dv_acc = kp.dk_acc + w.k;
  kp.dq = static_cast<__nv_bfloat16*>(dq.data);
  kp.dk = static_cast<__nv_bfloat16*>(dk.data);
  kp.dv = static_cast<__nv_bfloat16*>(dv.data);
  const auto st = static_cast<cudaStream_t>(stream);
  if (cudaMemsetAsync(workspace, 0, w.bytes(), st) != cudaSuccess) return last_error("workspace memset");
  constexpr int kPost = 256;
  const int64_t rows = p.B * p.H * p.Nq;
  detail::bwd_preprocess_kernel<<<static_cast<unsigned>((rows + kPost - 1) / kPost), kPost, 0, st>>>(kp);
  if (Status s = last_error("backward preprocess"); !s.ok) return s;
  const bool det = p.params.deterministic;
  const bool tc = rows_aligned(q) && rows_aligned(k) && rows_aligned(v) && rows_aligned(dout);
  Status s = p.D == 64 ? backward_variant<64>(kp, p.params.variant, pweighted, det, tc, st)
                       : backward_variant<128>(kp, p.params.variant, pweighted, det, tc, st);
  if (!s.ok) return s;
  const int64_t nq = p.B * p.Nq * p.H * p.D, nk = p.B * p.Nk * p.Hkv * p.D;
  if (pweighted) {
    detail::bwd_postprocess_dq_kernel<true><<<static_cast<unsigned>((nq + kPost - 1) / kPost), kPost, 0, st>>>(kp);
  } else {
    detail::bwd_postprocess_dq_kernel<false><<<static_cast<unsigned>((nq + kPost - 1) / kPost), kPost, 0, st>>>(kp);
  }
  if (Status e = last_error("backward dQ postprocess"); !e.ok) return e;
  detail::bwd_postprocess_dkv_kernel<<<static_cast<unsigned>((nk + kPost - 1) / kPost), kPost, 0, st>>>(kp);
  return last_error("backward dK/dV postprocess");
}

}  // namespace gproj::cuda
