// The one launch file of the CUDA kernels: checks a Problem, turns runtime flags (D, variant, projection) into
// template parameters, picks the kernel generation (v1 tensor cores when the variant rounds to BF16 and every
// row is 16-byte aligned; the v0 FP32 reference kernels otherwise, e.g. for the fp32 variant), sizes the
// workspace and launches forward / backward. Exercised by tests/cuda/*.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <mutex>

#include "cuda/convert_fp16.cuh"
#include "cuda/flash_bwd.cuh"
#include "cuda/flash_bwd_tc.cuh"
#include "cuda/flash_fwd.cuh"
#include "cuda/flash_fwd_tc.cuh"
#include "cuda/flash_bwd_wg.cuh"
#include "cuda/flash_fwd_wg.cuh"
#include "cuda/projection_tc.cuh"
#include "gproj/bf16.h"
#include "gproj/cuda/attention_cuda.h"

namespace gproj::cuda {

namespace {

using detail::KernelParams;
using detail::kBlockK;
using detail::kBlockQ;
using detail::kThreads;

Status fail(ErrorCode code, const std::string& m) { return Status{false, code, m}; }

Status check_extents(const Problem& p) {
  if (p.B < 1 || p.Nq < 1 || p.Nk < 1 || p.H < 1 || p.Hkv < 1) return fail(ErrorCode::kShape, "extents must be >= 1");
  if (p.H % p.Hkv != 0)
    return fail(ErrorCode::kShape,
                "H % Hkv != 0 (H = " + std::to_string(p.H) + ", Hkv = " + std::to_string(p.Hkv) + ")");
  return {};
}

Status check_problem(const Problem& p) {
  if (Status s = check_extents(p); !s.ok) return s;
  if (p.D != 64 && p.D != 128)
    return fail(ErrorCode::kUnsupported,
                "unsupported head dim D = " + std::to_string(p.D) + " (CUDA supports 64, 128)");
  if (!(p.softmax_scale > 0.0f)) return fail(ErrorCode::kInvalidArgument, "softmax_scale must be > 0");
  if (!(p.params.fwdfix_max_shift > 0.0f)) {
    return fail(ErrorCode::kInvalidArgument, "fwdfix_max_shift must be > 0 (inf: the published, uncapped rule)");
  }
  const Projection proj = effective_projection(p.params);
  if (proj != Projection::kNone && proj != Projection::kPWeighted && proj != Projection::kThreshLowRank &&
      proj != Projection::kFp16LowRank) {
    return fail(ErrorCode::kUnsupported, std::string("projection '") + projection_name(proj) +
                                             "' is not implemented on CUDA (pweighted, thresh-lowrank and "
                                             "fp16-lowrank are)");
  }
  if (p.params.fp16_dout_side && proj != Projection::kFp16LowRank) {
    return fail(ErrorCode::kInvalidArgument, "fp16_dout_side (1 / l on dO's side) is a form of projection fp16-lowrank");
  }
  if (proj == Projection::kFp16LowRank) {  // docs/design-fp16-projection.md (D = 64 and 128, as every CUDA path)
    if (p.params.lowrank_rank != detail::kTailRank) {
      return fail(ErrorCode::kUnsupported, "fp16-lowrank on CUDA takes rank " + std::to_string(detail::kTailRank) +
                                               " (lowrank_rank, the default), got " +
                                               std::to_string(p.params.lowrank_rank));
    }
    if (p.params.dk_compensation_rank != 0) {
      return fail(ErrorCode::kUnsupported,
                  "fp16-lowrank on CUDA takes no dK compensation (dk_compensation_rank: thresh-lowrank's experiment)");
    }
  }
  if (proj == Projection::kThreshLowRank) {
    if (p.params.lowrank_rank != detail::kTailRank) {
      return fail(ErrorCode::kUnsupported, "thresh-lowrank on CUDA takes rank " + std::to_string(detail::kTailRank) +
                                               " (lowrank_rank, the default), got " +
                                               std::to_string(p.params.lowrank_rank));
    }
    if (p.params.thresh_k < 1 || p.params.thresh_k > 32) {
      return fail(ErrorCode::kUnsupported, "thresh-lowrank on CUDA takes 1 <= thresh_k <= 32 (threshold 1/k), got " +
                                               std::to_string(p.params.thresh_k));
    }
  }
  if (p.params.deterministic) {
    if (const std::string why = cuda_deterministic_refusal(p.params); !why.empty())
      return fail(ErrorCode::kUnsupported, why);
  }
  const int64_t big = int64_t{1} << 31;
  if (p.B * p.H * p.Nq * p.D >= big || p.B * p.H * p.Nk * p.D >= big)
    return fail(ErrorCode::kUnsupported, "problem too large for int32 indexing");
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
  k.basis_stride = p.params.basis_key_stride;
  return k;
}

// Sets the kernel's dynamic shared memory and launches it with `args` (the parameters, and the TMA maps where
// the kernel takes them).
template <class Kernel, class... Args>
Status launch_args(Kernel kernel, dim3 grid, int threads, size_t smem, cudaStream_t stream, const char* what,
                   const Args&... args) {
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) !=
      cudaSuccess) {
    return last_error(what);
  }
  kernel<<<grid, threads, smem, stream>>>(args...);
  return last_error(what);
}

template <class Kernel>
Status launch(Kernel kernel, dim3 grid, size_t smem, cudaStream_t stream, const KernelParams& k, const char* what,
              int threads = kThreads) {
  return launch_args(kernel, grid, threads, smem, stream, what, k);
}

// v3.43: `kernel` (no dynamic shared memory) as a programmatic dependent of the kernel queued before it on `stream`:
// it may be scheduled once every CTA of that kernel has run griddepcontrol.launch_dependents, i.e. into the SMs its
// last wave leaves idle, and must itself wait for what it reads (wait_main_kernel_head). Where the driver refuses
// the attribute, a plain launch (the kernel then finds every count complete).
template <class Kernel>
Status launch_dependent(Kernel kernel, dim3 grid, cudaStream_t stream, const KernelParams& k, const char* what,
                        int threads) {
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (cudaLaunchKernelEx(&cfg, kernel, k) == cudaSuccess) return last_error(what);
  cudaGetLastError();
  return launch(kernel, grid, 0, stream, k, what, threads);
}

}  // namespace

// The v1 kernels copy 16-byte chunks of each row: data and the B, N, H strides must keep rows 16-byte aligned.
bool rows_aligned(const DeviceTensor& t) {
  return reinterpret_cast<uintptr_t>(t.data) % 16 == 0 && t.stride[0] % 8 == 0 && t.stride[1] % 8 == 0 &&
         t.stride[2] % 8 == 0;
}

namespace {

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
Status backward_tc(const KernelParams& k, bool deterministic, bool wide, cudaStream_t stream) {
  constexpr int blk = detail::kBwdBlock, threads = detail::kBwdThreads;
  const dim3 grid((k.Nk + blk - 1) / blk, k.H, k.B);
  const size_t smem = detail::bwd_tc_smem_bytes<D>();
  Status s;
  if (wide && !kPWeighted && !deterministic) {  // experimental: 8 warps, 128 keys per CTA
    const dim3 wgrid((k.Nk + detail::kWideKeys - 1) / detail::kWideKeys, k.H, k.B);
    return k.row_stats ? launch(detail::flash_bwd_tc_wide_kernel<D, true>, wgrid, detail::bwd_wide_smem_bytes<D>(),
                                stream, k, "backward main, wide", detail::kWideThreads)
                       : launch(detail::flash_bwd_tc_wide_kernel<D, false>, wgrid, detail::bwd_wide_smem_bytes<D>(),
                                stream, k, "backward main, wide", detail::kWideThreads);
  }
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

template <int D, bool kTie>
Status forward_wg(const KernelParams& k, int version, const detail::TmaMaps& maps, cudaStream_t stream) {
  const dim3 grid((k.Nq + detail::kFwdWgRows<D> - 1) / detail::kFwdWgRows<D>, k.H, k.B);
  if constexpr (kTie) {  // gproj only (forward() checked the rest): not instantiated for baseline
    if (k.fwd_stats != nullptr) {  // v2.3: v2.2 with thresh-lowrank's row statistics
      return launch_args(detail::flash_fwd_wg_kernel<D, kTie, true, true>, grid, detail::kFwdWgThreads<D>,
                         detail::fwd_wg_smem_bytes<D, true>(), stream, "forward (wgmma, statistics)", k, maps);
    }
  }
  const auto kernel =
      version == 2 ? detail::flash_fwd_wg_kernel<D, kTie, true> : detail::flash_fwd_wg_kernel<D, kTie, false>;
  return launch_args(kernel, grid, detail::kFwdWgThreads<D>, detail::fwd_wg_smem_bytes<D>(), stream,
                     "forward (wgmma)", k, maps);
}

// wgmma: 0 = the v1 kernel, 1 = v2.1, 2 = v2.2 (TMA, `maps`); rows that are not 16-byte aligned and the fp32
// variant take the reference kernels.
template <int D>
Status forward_variant(const KernelParams& k, Variant v, bool tc, int wgmma, const detail::TmaMaps& maps,
                       cudaStream_t stream) {
  // Each branch names what it runs (Status::kernels: the audit records it).
  const auto named = [](Status s, const char* kernels) {
    if (s.ok) s.kernels = kernels;
    return s;
  };
  if (k.fp16_scales != nullptr) {  // fp16-lowrank (forward() checked the v2.2 ring and aligned rows)
    return named(launch_args(detail::flash_fwd_wg_kernel<D, false, true, true, true>,
                             dim3((k.Nq + detail::kFwdWgRows<D> - 1) / detail::kFwdWgRows<D>, k.H, k.B),
                             detail::kFwdWgThreads<D>, detail::fwd_wg_smem_bytes<D, true>(), stream,
                             "forward (wgmma, fp16-lowrank)", k, maps),
                 "forward v2.3-h16 (wgmma, TMA, fp16-lowrank: the consistent FP16 P and its statistics)");
  }
  if (tc && wgmma != 0 && v != Variant::kFp32) {
    return named(v == Variant::kBaseline ? forward_wg<D, false>(k, wgmma, maps, stream)
                                         : forward_wg<D, true>(k, wgmma, maps, stream),
                 k.fwd_stats != nullptr ? "forward v2.3 (wgmma, TMA, thresh-lowrank statistics)"
                 : wgmma == 2           ? "forward v2.2 (wgmma, TMA)"
                                        : "forward v2.1 (wgmma)");
  }
  if (tc && v != Variant::kFp32) {
    return named(v == Variant::kBaseline ? forward_tc<D, false>(k, stream) : forward_tc<D, true>(k, stream),
                 "forward v1 (mma.sync)");
  }
  constexpr const char* kV0 = "forward v0 (FP32 CUDA cores)";
  switch (v) {
    case Variant::kFp32: return named(forward_d<D, false, false>(k, stream), kV0);
    case Variant::kBaseline: return named(forward_d<D, true, false>(k, stream), kV0);
    case Variant::kFwdfix:
    case Variant::kGproj: return named(forward_d<D, true, true>(k, stream), kV0);
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

// ---- v3: wgmma (sm_90a) ----
// cuTensorMapEncodeTiled through the runtime's driver entry point (no link against the driver library).
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeTiledFn encode_tiled() {
  static const EncodeTiledFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q);
    return e == cudaSuccess && q == cudaDriverEntryPointSuccess ? reinterpret_cast<EncodeTiledFn>(f) : nullptr;
  }();
  return fn;
}

// A 4-D BF16 tensor map, boxes 128B-swizzled, out-of-bounds elements read as zeros. A refusal is `code` with a
// message naming `what` (and `hint`).
Status encode_sw128_map(CUtensorMap* map, void* data, const cuuint64_t (&dims)[4], const cuuint64_t (&strides)[3],
                        const cuuint32_t (&box)[4], ErrorCode code, const std::string& what, const char* hint) {
  const EncodeTiledFn encode = encode_tiled();
  if (encode == nullptr) return fail(ErrorCode::kDevice, "cuTensorMapEncodeTiled is not available from the driver");
  const cuuint32_t unit[4] = {1, 1, 1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, data, dims, strides, box, unit,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return fail(code, "TMA descriptor of " + what + " rejected by the driver (CUresult " +
                          std::to_string(static_cast<int>(r)) + ")" + hint);
  }
  return {};
}

// A (D, heads, rows, B) tensor map of a BF16 (B, rows, heads, D) tensor with 16-byte aligned rows (rows_aligned):
// boxes of 64 columns x 64 rows of one head, 128B-swizzled; rows past `rows` read as zeros.
Status tensor_map(CUtensorMap* map, const DeviceTensor& t, int64_t B, int64_t rows, int64_t heads, int64_t D,
                  const char* name) {
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(D), static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(rows), static_cast<cuuint64_t>(B)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(t.stride[2]) * 2, static_cast<cuuint64_t>(t.stride[1]) * 2,
                                 static_cast<cuuint64_t>(t.stride[0]) * 2};
  const cuuint32_t box[4] = {64, 1, 64, 1};
  return encode_sw128_map(map, t.data, dims, strides, box, ErrorCode::kUnsupported, name,
                          "; its strides must be multiples of 16 bytes");
}

template <int D, bool kStats, bool kTma, bool kThresh = false, bool kSplitDq = false, bool kDkComp = false,
          bool kVecDq = false, bool kFwdStats = false>
Status launch_bwd_wg(const KernelParams& k, const detail::TmaMaps& maps, dim3 grid, cudaStream_t stream) {
  return launch_args(detail::flash_bwd_wg_kernel<D, kStats, kTma, kThresh, kSplitDq, kDkComp, kVecDq, kFwdStats>,
                     grid, detail::kWgThreads,
                     detail::bwd_wg_smem_bytes<D, kTma, kThresh, kSplitDq, kDkComp, kFwdStats>(), stream,
                     "backward main, wgmma", k, maps);
}

// The forward's map of bf16(K U) (TmaMaps::ku, v2.6): (8, Nk, Hkv, B) with boxes of 64 columns x 64 keys,
// 128B-swizzled: the [64 keys][64] last column block of a V stage, columns 8-63 (past the tensor's 8) and keys past
// Nk filled with zeros by the copy (the driver accepts the box wider than the tensor: session 19, run 1).
Status ku_tiles_map(CUtensorMap* map, void* tiles, const Problem& p) {
  const cuuint64_t row = 8 * 2;  // bytes per key
  const cuuint64_t dims[4] = {8, static_cast<cuuint64_t>(p.Nk), static_cast<cuuint64_t>(p.Hkv),
                              static_cast<cuuint64_t>(p.B)};
  const cuuint64_t strides[3] = {row, row * static_cast<cuuint64_t>(p.Nk),
                                 row * static_cast<cuuint64_t>(p.Nk) * static_cast<cuuint64_t>(p.Hkv)};
  const cuuint32_t box[4] = {64, 64, 1, 1};
  return encode_sw128_map(map, tiles, dims, strides, box, ErrorCode::kDevice, "the K U tiles", "");
}

// v3.1's TMA descriptors of q, do, k, v (before any kernel runs, so that auto mode can fall back to v1).
Status bwd_tma_maps(detail::TmaMaps* maps, const Problem& p, const DeviceTensor& q, const DeviceTensor& k,
                    const DeviceTensor& v, const DeviceTensor& dout) {
  for (Status s :
       {tensor_map(&maps->q, q, p.B, p.Nq, p.H, p.D, "q"), tensor_map(&maps->dout, dout, p.B, p.Nq, p.H, p.D, "do"),
        tensor_map(&maps->k, k, p.B, p.Nk, p.Hkv, p.D, "k"), tensor_map(&maps->v, v, p.B, p.Nk, p.Hkv, p.D, "v")}) {
    if (!s.ok) return s;
  }
  return {};
}

// The wgmma backward main kernel (128 keys per CTA): v3.0 (version 1), the TMA-fed v3.1 (version 2, `maps`
// from bwd_tma_maps), v3.2 (version 3: v3.1 with dQ's columns split between the warpgroups) or v3.3 (version 4,
// experimental, D = 128: v3.2 with 16-byte dQ atomics), with the row statistics only when the audit asks for them;
// `thresh`: the thresh-lowrank form of v3.1 / v3.2 / v3.3.
template <int D>
Status backward_wgmma(const KernelParams& k, int version, bool thresh, const detail::TmaMaps& maps,
                      cudaStream_t stream) {
  const dim3 grid((k.Nk + detail::kWgBwdKeys - 1) / detail::kWgBwdKeys, k.H, k.B);
  if (version == 1) {
    return k.row_stats ? launch_bwd_wg<D, true, false>(k, maps, grid, stream)
                       : launch_bwd_wg<D, false, false>(k, maps, grid, stream);
  }
  if constexpr (D == 128) {
    if (version == 4) {
      if (thresh) return launch_bwd_wg<D, false, true, true, true, false, true>(k, maps, grid, stream);
      return k.row_stats ? launch_bwd_wg<D, true, true, false, true, false, true>(k, maps, grid, stream)
                         : launch_bwd_wg<D, false, true, false, true, false, true>(k, maps, grid, stream);
    }
  }
  if (version == 3) {
    if (thresh && k.fwd_stats != nullptr) {  // v3.9: P (K U) and s_i from the forward
      return launch_bwd_wg<D, false, true, true, true, false, false, true>(k, maps, grid, stream);
    }
    if (thresh) return launch_bwd_wg<D, false, true, true, true>(k, maps, grid, stream);
    return k.row_stats ? launch_bwd_wg<D, true, true, false, true>(k, maps, grid, stream)
                       : launch_bwd_wg<D, false, true, false, true>(k, maps, grid, stream);
  }
  if (thresh && k.fwd_stats != nullptr) {
    return launch_bwd_wg<D, false, true, true, false, false, false, true>(k, maps, grid, stream);
  }
  if (thresh) {
    if constexpr (D == 64) {  // dK compensation (FlashParams::dk_compensation_rank = 8): D = 64 only so far
      if (k.qu != nullptr) return launch_bwd_wg<D, false, true, true, false, true>(k, maps, grid, stream);
    }
    return launch_bwd_wg<D, false, true, true>(k, maps, grid, stream);
  }
  return k.row_stats ? launch_bwd_wg<D, true, true>(k, maps, grid, stream)
                     : launch_bwd_wg<D, false, true>(k, maps, grid, stream);
}

template <int D>
Status backward_variant(const KernelParams& k, Variant v, bool pweighted, bool deterministic, bool tc, bool wide,
                        cudaStream_t stream) {
  if (v == Variant::kFp32) return backward_d<D, false, false>(k, deterministic, stream);
  if (tc) {
    return pweighted ? backward_tc<D, true>(k, deterministic, false, stream)
                     : backward_tc<D, false>(k, deterministic, wide, stream);
  }
  return pweighted ? backward_d<D, true, true>(k, deterministic, stream)
                   : backward_d<D, true, false>(k, deterministic, stream);
}

// Workspace layout, 4-byte words: delta, rowsum, psum (B H Nq) | dq_acc (B H Nq' D, Nq' = Nq rounded up to 16 for
// v3.15's row groups; fp16-lowrank: its tiles of kH16DqTileFloats, each with its rows' r_i) | pk (as dq_acc with
// pweighted; B H D with thresh-lowrank: the uniform dK part's total per head; none otherwise, v1.30)
// | for thresh-lowrank only, first the regions its kernels accumulate into (zeroed by one memset):
// list_count (B H Nq) | pku (B H Nq 8) | head_done, main_done (B H each); then rest (B H Nq) | list_j, list_p
// (B H Nq k) | part (B H ceil(Nq/64) D) | gram (B Hkv chunks D D: a partial matrix per chunk of keys) |
// u (B Hkv D 8) | ku (B Hkv Nk 8 BF16 = 4 words per key) | [dK compensation: gram_q (B H chunks D D) |
// u_q (B H D 8) | qu (B H Nq 8 BF16)]
// | dk_acc, dv_acc (B H Nk D) last: a backward whose main kernel stores dK and dV itself (v3.34) needs neither or
// only dk_acc, and a workspace sized for its tensors ends before them.
struct Workspace {
  size_t row, q, dk, dv, pk = 0;
  size_t list = 0, pku = 0, part = 0, gram = 0, u = 0, ku = 0, heads = 0, gram_q = 0, u_q = 0, qu = 0;
  size_t doh = 0;  // fp16-lowrank with 1 / l on dO's side: dOh, (B, Nq, H, D) FP16, after dV's accumulator
  size_t thresh_words() const {
    return list ? thresh_zeroed() + row + 2 * list + part + gram + u + ku + gram_q + u_q + qu : 0;
  }
  size_t words() const { return 3 * row + q + pk + thresh_words() + dk + dv + doh; }
  size_t thresh_zeroed() const { return row + pku + heads; }  // list_count, pku, head_done, main_done
  size_t bytes() const { return sizeof(float) * words(); }
};

// Words rounded up to whole 128-byte lines: every workspace region starts on a line. (Session 37, run 2: 16 bytes
// more before them moved the later regions off their lines, and every gproj backward, at every shape measured,
// was 1-6% slower, the main kernel's 512-byte dKacc rows then straddling lines.)
size_t line_words(size_t words) { return (words + 31) / 32 * 32; }
// A per-head region of thresh-lowrank's counters (head_done, main_done): B H words.
size_t head_words(const Problem& p) { return line_words(static_cast<size_t>(p.B * p.H)); }

// The partial Gram matrices of K per kv head: chunks of every basis_key_stride-th key tile (detail::gram_chunks).
int k_gram_chunks(const Problem& p) {
  return detail::gram_chunks(static_cast<int>(p.Nk), p.params.basis_key_stride);
}

// Every region starts on a 128-byte line: the per-row and per-head sizes are rounded up by line_words, and the
// regions of D-wide rows are whole lines already (D is 64 or 128 on the GPU). The kernels need 16 bytes (float2 atomics on dq_acc and pku
// need 8, cp.async of K U 16; an odd B H Nq used to misalign them); they run fastest with whole lines.
// dkv_direct: KernelParams::dkv_direct of the backward that will run (bit 1: dV stored by the main kernel, bit 2:
// dK), whose accumulators are left out; -1 (the default): unknown, both kept (the most any backward needs).
Workspace layout(const Problem& p, int dkv_direct = -1) {
  const size_t rows = static_cast<size_t>(p.B * p.H * p.Nq);
  const size_t kv = static_cast<size_t>(p.B * p.H * p.Nk * p.D);
  const bool keep_dk = dkv_direct < 0 || (dkv_direct & 2) == 0, keep_dv = dkv_direct < 0 || (dkv_direct & 1) == 0;
  // dq_acc: rows rounded up to 16 per head, the v3.15 tiles' row groups (dq_acc_index).
  Workspace w{line_words(rows), static_cast<size_t>(p.B * p.H * ((p.Nq + 15) / 16 * 16) * p.D),
              keep_dk ? kv : 0, keep_dv ? kv : 0};
  if (effective_projection(p.params) == Projection::kPWeighted) w.pk = w.q;
  if (effective_projection(p.params) == Projection::kFp16LowRank) {
    // dQacc's tiles carry their rows' r_i (v3.2-h16c: kH16DqTileFloats words a tile of 16 rows x 64 columns)
    w.q = static_cast<size_t>(p.B * p.H * ((p.Nq + 15) / 16) * (p.D / 64)) * detail::kH16DqTileFloats;
    w.pk = head_words(p);  // max |dO_i| per head
    if (p.params.fp16_dout_side) w.doh = line_words(static_cast<size_t>(p.B * p.Nq * p.H * p.D) / 2);
  }
  if (effective_projection(p.params) == Projection::kThreshLowRank) {
    w.pk = line_words(static_cast<size_t>(p.B * p.H * p.D));
    w.list = w.row * static_cast<size_t>(std::max(1, p.params.thresh_k));
    w.pku = w.row * detail::kLowRank;
    w.part = static_cast<size_t>(p.B * p.H * ((p.Nq + detail::kSuffixBlock - 1) / detail::kSuffixBlock) * p.D);
    w.gram = static_cast<size_t>(p.B * p.Hkv * k_gram_chunks(p) * p.D * p.D);
    w.u = static_cast<size_t>(p.B * p.Hkv * p.D * detail::kLowRank);
    w.ku = line_words(static_cast<size_t>(p.B * p.Hkv * p.Nk * detail::kLowRank / 2));
    w.heads = 2 * head_words(p);  // head_done, main_done (v3.43)
    if (p.params.dk_compensation_rank != 0) {
      w.gram_q = static_cast<size_t>(p.B * p.H * detail::gram_chunks(static_cast<int>(p.Nq)) * p.D * p.D);
      w.u_q = static_cast<size_t>(p.B * p.H * p.D * detail::kLowRank);
      w.qu = line_words(static_cast<size_t>(p.B * p.H * p.Nq * detail::kLowRank / 2));
    }
  }
  return w;
}

// Problem::forward_stats, 4-byte words: rows (B H Nq padded as Workspace::row, x 8: the records, column kStatR
// zero) | u (B Hkv D 8) | ku (B Hkv Nk 8 BF16) | ku_tiles (B Hkv Nk 8 BF16, v2.6; a key's row is TMA's 16-byte
// stride). Every region starts on a 16-byte boundary. Problem::forward_workspace: the Gram partials.
// fp16-lowrank (docs/design-fp16-projection.md): no ku (its backward has no K U; tiles hold FP16 bits), then the
// conversion pass's outputs that its backward reads: scales (fp16_scale_count words) | qh (B Nq H D FP16) | kht
// (B Hkv D fp16_kht_ld FP16) | o16 (B Nq H D FP16, the forward's fp16(O s_v)); the forward workspace adds vh (B Nk
// Hkv D FP16, read by the forward only) and the absmax words. With 1 / l on dO's side (FlashParams::fp16_dout_side)
// vh is the backward's too: it follows o16 in forward_stats (vhk) instead.
struct StatsLayout {
  size_t rows = 0, u = 0, ku = 0, tiles = 0, scales = 0, qh = 0, kht = 0, o16 = 0, vhk = 0;  // forward_stats
  size_t gram = 0, vh = 0, maxbits = 0;                                                       // forward_workspace
  size_t bytes() const { return sizeof(float) * (rows + u + ku + tiles + scales + qh + kht + o16 + vhk); }
  size_t workspace_bytes() const { return sizeof(float) * (gram + vh + maxbits); }
};
StatsLayout stats_layout(const Problem& p) {
  const Workspace w = layout(p);
  const bool h16 = effective_projection(p.params) == Projection::kFp16LowRank;
  StatsLayout s;
  s.rows = w.row * detail::kLowRank;
  s.u = static_cast<size_t>(p.B * p.Hkv * p.D * detail::kLowRank);
  s.ku = h16 ? 0 : static_cast<size_t>(p.B * p.Hkv * p.Nk * detail::kLowRank / 2);
  s.tiles = static_cast<size_t>(p.B * p.Hkv * p.Nk * 8) / 2;
  s.gram = static_cast<size_t>(p.B * p.Hkv * k_gram_chunks(p) * p.D * p.D);
  if (h16) {  // whole 128-byte lines each (TMA wants 16-byte aligned bases)
    s.scales = line_words(fp16_scale_count(p));
    s.qh = line_words(static_cast<size_t>(p.B * p.Nq * p.H * p.D) / 2);
    s.kht = line_words(static_cast<size_t>(p.B * p.Hkv * p.D) * fp16_kht_ld(p) / 2);
    s.o16 = s.qh;  // fp16(O s_v), (B, Nq, H, D) as qh
    s.vh = line_words(static_cast<size_t>(p.B * p.Nk * p.Hkv * p.D) / 2);
    s.maxbits = line_words(fp16_scale_count(p));
    if (p.params.fp16_dout_side) std::swap(s.vh, s.vhk);  // kept for the backward's dP'
  }
  return s;
}
// The forward-statistics regions of `stats` in the kernels' parameters (u, ku shared with the backward).
void set_stats_params(KernelParams* kp, const Problem& p, void* stats) {
  const StatsLayout l = stats_layout(p);
  float* base = static_cast<float*>(stats);
  kp->fwd_stats = base;
  kp->u = base + l.rows;
  kp->ku = reinterpret_cast<__nv_bfloat16*>(kp->u + l.u);
  kp->ku_tiles = reinterpret_cast<__nv_bfloat16*>(base + l.rows + l.u + l.ku);
  kp->fp16_scales = l.scales ? base + l.rows + l.u + l.ku + l.tiles : nullptr;
}
// fp16-lowrank's FP16 copies in `stats` and `workspace` (StatsLayout): qh and kht (the backward's), vh, the absmax
// words.
struct Fp16Copies {
  float* scales;
  void *qh, *kht, *o16, *vh;
  unsigned int* maxbits;
};
Fp16Copies fp16_copies(const Problem& p, void* stats, void* workspace) {
  const StatsLayout l = stats_layout(p);
  float* base = static_cast<float*>(stats);
  float* ws = static_cast<float*>(workspace);
  float* scales = base + l.rows + l.u + l.ku + l.tiles;
  float* o16 = scales + l.scales + l.qh + l.kht;
  return {scales, scales + l.scales, scales + l.scales + l.qh, o16, l.vhk ? o16 + l.o16 : ws + l.gram,
          reinterpret_cast<unsigned int*>(ws + l.gram + l.vh)};
}

// The conversion pass's kernels on `st` (convert_fp16_copies checks the arguments; forward() checked its own):
// every head's max |x| and scale and v's copy, which the forward reads (convert_launch), then the copies of q and k,
// which only the backward reads (convert_qk_launch; the forward queues them beside its kernel, forward_side_copies).
Status convert_launch(const Problem& p, const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
                      void* qh, void* kht, void* vh, float* scales, unsigned int* maxbits, cudaStream_t st) {
  const int B = static_cast<int>(p.B), Nq = static_cast<int>(p.Nq), Nk = static_cast<int>(p.Nk),
            H = static_cast<int>(p.H), Hkv = static_cast<int>(p.Hkv), D = static_cast<int>(p.D);
  const int count = static_cast<int>(fp16_scale_count(p));
  if (cudaMemsetAsync(maxbits, 0, sizeof(unsigned int) * count, st) != cudaSuccess) {
    return last_error("FP16 conversion");
  }
  detail::ConvertParams cp{strided(q), strided(k), strided(v), static_cast<__half*>(qh), static_cast<__half*>(kht),
                           static_cast<__half*>(vh), maxbits, scales, B, Nq, Nk, H, Hkv, D};
  const int heads = B * H + 2 * B * Hkv;  // the scales (count: and v's row norms)
  const auto token_blocks = [](int n) {
    return static_cast<unsigned>((n + detail::kConvertTokens - 1) / detail::kConvertTokens);
  };
  // the absmax's rows are q's (H D / 8 chunks) or k's and v's (Hkv D / 8): the wider shape covers both
  const detail::ChunkShape wide = detail::chunk_shape(std::max(H, Hkv) * D / 8);
  detail::fp16_absmax_kernel<<<dim3(wide.blocks, token_blocks(std::max(Nq, Nk)), 3 * B), wide.threads, 0, st>>>(cp);
  detail::fp16_head_scale_kernel<<<(count + 255) / 256, 256, 0, st>>>(maxbits, scales, heads, count);
  const detail::ChunkShape vs = detail::chunk_shape(Hkv * D / 8);
  detail::fp16_convert_kernel<<<dim3(vs.blocks, token_blocks(Nk), B), vs.threads, 0, st>>>(
      strided(v), Nk, Hkv, D, scales + B * H + B * Hkv, static_cast<__half*>(vh));
  return last_error("FP16 conversion");
}

// qh and kht (K^T per kv head) from q, k and the scales convert_launch formed.
Status convert_qk_launch(const Problem& p, const DeviceTensor& q, const DeviceTensor& k, void* qh, void* kht,
                         const float* scales, cudaStream_t st) {
  const int B = static_cast<int>(p.B), Nq = static_cast<int>(p.Nq), Nk = static_cast<int>(p.Nk),
            H = static_cast<int>(p.H), Hkv = static_cast<int>(p.Hkv), D = static_cast<int>(p.D);
  const detail::ChunkShape qs = detail::chunk_shape(H * D / 8);
  detail::fp16_convert_kernel<<<dim3(qs.blocks, (Nq + detail::kConvertTokens - 1) / detail::kConvertTokens, B),
                                qs.threads, 0, st>>>(strided(q), Nq, H, D, scales, static_cast<__half*>(qh));
  detail::fp16_convert_transpose_kernel<<<dim3((Nk + detail::kTransposeKeys - 1) / detail::kTransposeKeys, 1, B * Hkv),
                                          detail::kConvertThreads, 0, st>>>(
      strided(k), Nk, static_cast<int>(fp16_kht_ld(p)), Hkv, D, scales + B * H, static_cast<__half*>(kht));
  return last_error("FP16 conversion of q and k");
}

// The rank-8 basis of K per kv head (kQ: of Q per query head, the dK compensation) and the projections of the
// rows onto it: Gram matrix, eigenvectors, bf16(X U). Reads only q or k; writes only its workspace regions.
// project = false: no K U here (the v3 kernels form it themselves once K is in shared memory).
template <int D, bool kQ>
Status lowrank_prepass(const KernelParams& k, cudaStream_t stream, bool project = true) {
  const int rows = kQ ? k.Nq : k.Nk, heads = kQ ? k.H : k.Hkv;
  const int tiles = (rows + detail::kBwdBlock - 1) / detail::kBwdBlock;
  const int chunks = detail::gram_chunks(rows, kQ ? 1 : k.basis_stride);  // Q's basis: every query
  Status s = launch(detail::gram_kernel<D, kQ>, dim3(chunks, heads, k.B), 0, stream, k,
                    kQ ? "dK compensation Gram matrix" : "thresh-lowrank Gram matrix", detail::kBwdThreads);
  if (s.ok) s = launch(detail::eig_kernel<D, kQ>, dim3(heads, k.B), detail::eig_smem_bytes<D>(), stream, k,
                       kQ ? "dK compensation eigenvectors" : "thresh-lowrank eigenvectors", detail::kPostThreads);
  if (s.ok && project) {
    s = launch(detail::ku_kernel<D, kQ>, dim3(tiles, heads, k.B), 0, stream, k,
               kQ ? "dK compensation Q U" : "thresh-lowrank K U", detail::kBwdThreads);
  }
  return s;
}

// thresh-lowrank (docs/gproj-projection.md), after its pre-passes (lowrank_prepass): the main kernel with the row
// lists and P (K U), the dQ postprocess with the corrections, and with causal masking the dK/dV postprocess with the
// uniform dK part.
template <int D>
Status backward_thresh(const KernelParams& kp, int wg_version, const detail::TmaMaps* v31_maps,
                       cudaStream_t stream) {
  constexpr int threads = detail::kPostThreads;
  Status s;
  constexpr int blk = detail::kBwdBlock;
  // v3.43: behind the wgmma main kernel at D = 128, thresh_dq is its programmatic dependent and waits per head
  // (main_done). At D = 64 the same measured 2% slower (session 36, runs 2 and 4, the latter with the main kernel's
  // registers and code as here; not understood), so it starts after the main kernel there.
  KernelParams k = kp;
  k.main_ctas = (k.Nk + detail::kWgBwdKeys - 1) / detail::kWgBwdKeys;
  if (v31_maps == nullptr || D != 128) k.main_done = nullptr;
  if (v31_maps != nullptr) {  // v3.1 (the default where it applies) or v3.2
    s = backward_wgmma<D>(k, wg_version, true, *v31_maps, stream);
  } else {
    s = launch(detail::flash_bwd_tc_kernel<D, false, true, true, true>, dim3((k.Nk + blk - 1) / blk, k.H, k.B),
               detail::bwd_tc_smem_bytes<D>(), stream, k, "backward main, tensor cores, thresh-lowrank",
               detail::kBwdThreads);
  }
  if (!s.ok) return s;
  // The dQ correction also writes the block sums of the uniform dK part and, without causal masking, their total
  // (the only suffix sum then read).
  const dim3 sgrid((k.Nq + detail::kSuffixBlock - 1) / detail::kSuffixBlock, k.H, k.B);
  // v1.31: at D = 64 two rows per warp when a row's list fits in half a warp (thresh_k <= 16, the default 16).
  const auto launch_dq = [&](auto kernel) {
    const char* what = "thresh-lowrank dQ postprocess";
    return k.main_done != nullptr ? launch_dependent(kernel, sgrid, stream, k, what, threads)
                                  : launch(kernel, sgrid, 0, stream, k, what, threads);
  };
  if constexpr (D == 64) {
    s = k.list_cap <= 16 ? launch_dq(detail::thresh_dq_kernel<D, 16>) : launch_dq(detail::thresh_dq_kernel<D>);
  } else {  // dQacc in v3.15's tiles (the v3.2 backward) or row-major
    s = k.dq_tiled ? launch_dq(detail::thresh_dq_kernel<D, 32, true>) : launch_dq(detail::thresh_dq_kernel<D>);
  }
  if (!s.ok || !k.causal) return s;  // without causal masking the caller's bwd_postprocess_dkv_kernel<true> follows
  // With causal masking the dK/dV postprocess is thresh-lowrank's own: each key block forms its suffix sums.
  const dim3 kgrid((k.Nk + detail::kSuffixBlock - 1) / detail::kSuffixBlock, k.Hkv, k.B);
  return launch(detail::thresh_dkv_causal_kernel<D>, kgrid, 0, stream, k, "thresh-lowrank dK/dV postprocess", threads);
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
  if (cudaDriverGetVersion(&v) == cudaSuccess)
    info.driver_version = std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  if (cudaRuntimeGetVersion(&v) == cudaSuccess)
    info.runtime_version = std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  return info;
}

namespace {

// The backward's kernels for Status::kernels (the audit records them beside its numbers), from the choices
// backward_launch made.
std::string backward_kernel_name(const FlashParams& params, bool tc, int wg_version, bool dk_comp) {
  std::string name;
  if (wg_version == 4) name = "backward v3.3 (wgmma, TMA, dQ columns split, 16-byte dQ atomics)";
  else if (wg_version == 3) name = "backward v3.2 (wgmma, TMA, dQ columns split)";
  else if (wg_version == 2) name = "backward v3.1 (wgmma, TMA)";
  else if (wg_version == 1) name = "backward v3.0 (wgmma)";
  else if (params.variant != Variant::kFp32 && tc)
    name = params.cuda_backward_warps == 8 ? "backward v1 wide (mma.sync)" : "backward v1 (mma.sync)";
  else name = "backward v0 (FP32 CUDA cores)";
  if (params.variant == Variant::kGproj) name += std::string(", ") + projection_name(params.projection);
  if (dk_comp) name += ", dK compensation";
  if (params.deterministic) name += ", deterministic";
  return name;
}

// Problem::forward_basis: a stream beside the caller's for K's basis pre-passes during the forward, one per device,
// made on first use and kept. Null when it cannot be made: the pre-passes then run in order on the caller's stream.
cudaStream_t basis_stream() {
  constexpr int kMaxDevices = 64;
  static std::mutex mutex;
  static std::array<cudaStream_t, kMaxDevices> streams{};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) return nullptr;
  const std::lock_guard<std::mutex> lock(mutex);
  cudaStream_t& st = streams[device];
  if (st == nullptr && cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess) {
    cudaGetLastError();  // clear it: the caller's stream takes the work instead
    st = nullptr;
  }
  return st;
}

// An event made for one call and destroyed with it (an event may go once the waits on it are queued), recorded on
// `record_on`; null where not `wanted` or where it could not be made or recorded.
struct CallEvent {
  cudaEvent_t event = nullptr;
  CallEvent(bool wanted, cudaStream_t record_on) {
    if (!wanted) return;
    if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      event = nullptr;
    } else if (cudaEventRecord(event, record_on) != cudaSuccess) {
      cudaGetLastError();
      cudaEventDestroy(event);
      event = nullptr;
    }
  }
  ~CallEvent() {
    if (event != nullptr) cudaEventDestroy(event);
  }
  CallEvent(const CallEvent&) = delete;
  CallEvent& operator=(const CallEvent&) = delete;
};

// Joins the side stream back into the caller's after work queued there (`s`, that work's status): the caller's
// stream waits for an event recorded on `side`; where that cannot be arranged, `side` is drained, so that nothing
// queued there outlives the call unordered, and a status that was ok says why (`what` names the work).
Status join_side_stream(cudaStream_t main, cudaStream_t side, Status s, const char* what) {
  const CallEvent join(true, side);
  if (join.event == nullptr || cudaStreamWaitEvent(main, join.event, 0) != cudaSuccess) {
    cudaStreamSynchronize(side);
    cudaGetLastError();
    if (s.ok) {
      s = fail(ErrorCode::kDevice, std::string(what) + ": could not join the side stream back into the caller's");
    }
  }
  return s;
}

// The forward's basis pre-passes (Gram matrix, eigenvectors) on the side stream from `fork` (the caller's stream
// before the forward kernel was queued), so that the GPU takes the forward kernel's blocks first and the pre-passes
// fill the SMs its last wave leaves idle; the caller's stream then waits for them, so what it sees after forward()
// is ordered as before (a CUDA graph capture follows the fork and the join). Without a side stream or a fork
// event they run in order on the caller's stream.
template <int D>
Status forward_basis_prepass(const KernelParams& kp, cudaStream_t main, const CallEvent& fork) {
  cudaStream_t side = fork.event != nullptr ? basis_stream() : nullptr;
  if (side == nullptr) return lowrank_prepass<D, false>(kp, main, false);
  if (cudaStreamWaitEvent(side, fork.event, 0) != cudaSuccess) return last_error("forward basis fork");
  return join_side_stream(main, side, lowrank_prepass<D, false>(kp, side, false), "forward basis");
}

// fp16-lowrank's basis of K (Gram matrix, eigenvectors: they read only k and write only the Gram workspace and u)
// on the side stream, queued first, beside `main_work` (the conversion pass) on the caller's stream, which then waits
// for both before the K U tiles read U and the scales (session 49). Queued first, the small Gram grid and the
// eigenvector CTAs (one per kv head, latency-bound) take their SMs before the conversion's wide grids fill the rest,
// instead of running after them on the path to the forward kernel. Without a side stream or an event, in order on
// the caller's stream.
template <int D, class MainWork>
Status basis_beside_conversion(const KernelParams& kp, cudaStream_t main, MainWork&& main_work) {
  const CallEvent fork(true, main);
  cudaStream_t side = fork.event != nullptr ? basis_stream() : nullptr;
  if (side == nullptr || cudaStreamWaitEvent(side, fork.event, 0) != cudaSuccess) {
    cudaGetLastError();
    Status s = main_work();
    return s.ok ? lowrank_prepass<D, false>(kp, main, false) : s;
  }
  const Status s = lowrank_prepass<D, false>(kp, side, false);
  const Status m = main_work();  // (on `main`: the join below orders only what `side` holds, the prepass)
  const Status joined = join_side_stream(main, side, s, "forward basis");
  return joined.ok ? m : joined;
}

// fp16-lowrank's copies of q and k (convert_qk_launch), which only its backward reads, on the side stream from
// `fork` beside the forward kernel, as forward_basis_prepass does (session 48): the copies fill the SMs the forward
// kernel's last wave leaves idle instead of running before it. The caller's stream then waits for them. Without a
// side stream or a fork event they run in order on the caller's stream.
Status forward_side_copies(const Problem& p, const DeviceTensor& q, const DeviceTensor& k, const Fp16Copies& c,
                           cudaStream_t main, const CallEvent& fork) {
  cudaStream_t side = fork.event != nullptr ? basis_stream() : nullptr;
  if (side == nullptr) return convert_qk_launch(p, q, k, c.qh, c.kht, c.scales, main);
  if (cudaStreamWaitEvent(side, fork.event, 0) != cudaSuccess) return last_error("FP16 copies fork");
  return join_side_stream(main, side, convert_qk_launch(p, q, k, c.qh, c.kht, c.scales, side), "FP16 copies");
}

}  // namespace

Status forward(const Problem& p, const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
               const DeviceTensor& o, const DeviceTensor& lse, const DeviceTensor& o_fp32, void* stream) {
  for (Status s : {check_problem(p), check_tensor("q", q), check_tensor("k", k), check_tensor("v", v)})
    if (!s.ok) return s;
  if (o.data == nullptr || lse.data == nullptr)
    return fail(ErrorCode::kInvalidArgument, "o and lse outputs are required");
  KernelParams kp = base_params(p);
  kp.q = strided(q);
  kp.k = strided(k);
  kp.v = strided(v);
  kp.o_out = static_cast<__nv_bfloat16*>(o.data);
  kp.lse_out = static_cast<float*>(lse.data);
  kp.o_fp32_out = static_cast<float*>(o_fp32.data);
  const auto st = static_cast<cudaStream_t>(stream);
  const bool tc = rows_aligned(q) && rows_aligned(k) && rows_aligned(v);
  int wgmma = p.params.cuda_wgmma_forward;
  if (wgmma < -1 || wgmma > 2) {
    return fail(ErrorCode::kInvalidArgument, "cuda_wgmma_forward must be -1 (auto), 0 (the v1 kernel), 1 (v2.1) or 2 "
                                             "(v2.2, TMA); got " + std::to_string(wgmma));
  }
  const bool auto_forward = wgmma == -1;
  if (auto_forward) wgmma = 2;  // v2.2 where it applies (forward_variant takes v1 for fp32 and unaligned rows)
  const bool stats = p.forward_stats != nullptr;
  const bool h16 = effective_projection(p.params) == Projection::kFp16LowRank;
  if (h16 && !stats) {
    return fail(ErrorCode::kInvalidArgument,
                "projection fp16-lowrank's forward needs forward_stats and forward_workspace (forward_stats_bytes, "
                "forward_workspace_bytes): they receive its statistics and the FP16 copies of q and k its backward "
                "reads");
  }
  if (stats) {
    if (!forward_stats_apply(p)) {
      return fail(ErrorCode::kUnsupported,
                  h16 ? "projection fp16-lowrank's forward takes the v2.2 forward (cuda_wgmma_forward auto or 2)"
                      : "forward_stats (thresh-lowrank's statistics from the forward) need variant gproj with "
                        "projection thresh-lowrank, the v2.2 forward and the v3.1 / v3.2 backward (auto or chosen), "
                        "not deterministic, no dK compensation");
    }
    if (!tc) {
      return fail(ErrorCode::kUnsupported,
                  h16 ? "projection fp16-lowrank on CUDA needs 16-byte aligned rows of q, k, v; the reference "
                        "kernels for other rows implement projection pweighted"
                      : "forward_stats need 16-byte aligned rows of q, k, v");
    }
    if (p.forward_workspace == nullptr) {
      return fail(ErrorCode::kInvalidArgument, "forward_stats need forward_workspace (forward_workspace_bytes)");
    }
  }
  detail::TmaMaps maps{};
  if (wgmma == 2 && tc && p.params.variant != Variant::kFp32) {
    for (Status s :
         {tensor_map(&maps.q, q, p.B, p.Nq, p.H, p.D, "q"), tensor_map(&maps.k, k, p.B, p.Nk, p.Hkv, p.D, "k"),
          tensor_map(&maps.v, v, p.B, p.Nk, p.Hkv, p.D, "v")}) {
      if (s.ok) continue;
      if (!auto_forward || stats) return s;
      wgmma = 0;  // the driver refused a descriptor (e.g. zero strides): auto mode takes v1
      break;
    }
  }
  const bool basis = p.forward_basis != nullptr;
  if (basis) {
    if (!forward_basis_apply(p)) {
      return fail(ErrorCode::kUnsupported,
                  "forward_basis (K's basis formed by the forward) needs variant gproj with projection thresh-lowrank "
                  "(not deterministic) and no forward_stats");
    }
    if (!rows_aligned(k)) return fail(ErrorCode::kUnsupported, "forward_basis needs 16-byte aligned rows of k");
    if (p.forward_workspace == nullptr) {
      return fail(ErrorCode::kInvalidArgument, "forward_basis needs forward_workspace (forward_workspace_bytes)");
    }
    kp.u = static_cast<float*>(p.forward_basis);
    kp.gram = static_cast<float*>(p.forward_workspace);
  }
  Fp16Copies h16_copies{};  // fp16-lowrank: where its FP16 copies go (q's and k's are queued after the forward)
  if (stats) {  // K's basis, bf16(K U) and its tiles, then the v2.3 forward, all on the caller's stream
    set_stats_params(&kp, p, p.forward_stats);
    if (Status s = ku_tiles_map(&maps.ku, kp.ku_tiles, p); !s.ok) return s;
    kp.gram = static_cast<float*>(p.forward_workspace);
    const dim3 tgrid((p.Nk + detail::kBwdBlock - 1) / detail::kBwdBlock, p.Hkv, p.B);
    if (h16) {  // the FP16 copies (the forward reads vh through maps.v), K's basis, the FP16 K U tiles
      // Every word of forward_stats defined, so that the same inputs give the same bytes (a caller may compare or
      // hash them: torch's opcheck does): the small regions zeroed before their kernels write them (the records'
      // padding rows, u's unused columns), and the line tails of the FP16 copies, which the kernels fill up to
      // their exact sizes.
      {
        const StatsLayout l = stats_layout(p);
        float* base = static_cast<float*>(p.forward_stats);
        if (cudaMemsetAsync(base, 0, sizeof(float) * (l.rows + l.u + l.ku + l.tiles + l.scales), st) != cudaSuccess) {
          return last_error("forward statistics memset");
        }
        float* region = base + l.rows + l.u + l.ku + l.tiles + l.scales;
        const size_t qo = static_cast<size_t>(p.B * p.Nq * p.H * p.D), kt = static_cast<size_t>(p.B * p.Hkv * p.D),
                     vk = static_cast<size_t>(p.B * p.Nk * p.Hkv * p.D);
        for (const auto& [words, halves] : {std::pair<size_t, size_t>{l.qh, qo}, {l.kht, kt * fp16_kht_ld(p)},
                                            {l.o16, qo}, {l.vhk, vk}}) {
          const size_t used = (halves + 1) / 2;
          if (words > used && cudaMemsetAsync(region + used, 0, sizeof(float) * (words - used), st) != cudaSuccess) {
            return last_error("forward statistics memset");
          }
          region += words;
        }
      }
      const Fp16Copies c = fp16_copies(p, p.forward_stats, p.forward_workspace);
      h16_copies = c;
      kp.o16_out = static_cast<__half*>(c.o16);
      // K's basis beside the conversion pass (absmax, scales, v's copy), both done before the K U tiles
      const auto conversion = [&] { return convert_launch(p, q, k, v, c.qh, c.kht, c.vh, c.scales, c.maxbits, st); };
      Status s = p.D == 64 ? basis_beside_conversion<64>(kp, st, conversion)
                           : basis_beside_conversion<128>(kp, st, conversion);
      DeviceTensor vh;
      vh.data = c.vh;
      vh.stride[0] = p.Nk * p.Hkv * p.D, vh.stride[1] = p.Hkv * p.D, vh.stride[2] = p.D, vh.stride[3] = 1;
      if (s.ok) s = tensor_map(&maps.v, vh, p.B, p.Nk, p.Hkv, p.D, "vh (the FP16 copy of v)");
      if (s.ok) {
        s = p.D == 64 ? launch(detail::ku_kernel<64, false, true, true>, tgrid, 0, st, kp, "fp16-lowrank K U tiles",
                               detail::kBwdThreads)
                      : launch(detail::ku_kernel<128, false, true, true>, tgrid, 0, st, kp, "fp16-lowrank K U tiles",
                               detail::kBwdThreads);
      }
      if (!s.ok) return s;
    }
    Status s = h16 ? Status{}
               : p.D == 64 ? lowrank_prepass<64, false>(kp, st, false)
                           : lowrank_prepass<128, false>(kp, st, false);
    if (s.ok && !h16) {
      s = p.D == 64 ? launch(detail::ku_kernel<64, false, true>, tgrid, 0, st, kp, "thresh-lowrank K U tiles",
                             detail::kBwdThreads)
                    : launch(detail::ku_kernel<128, false, true>, tgrid, 0, st, kp, "thresh-lowrank K U tiles",
                             detail::kBwdThreads);
    }
    if (!s.ok) return s;
  }
  // forward_basis and fp16-lowrank's copies of q and k: the fork point is the caller's stream before the forward
  // kernel (forward_basis_prepass, forward_side_copies).
  const CallEvent fork(basis || h16, st);
  Status s = p.D == 64 ? forward_variant<64>(kp, p.params.variant, tc, wgmma, maps, st)
                       : forward_variant<128>(kp, p.params.variant, tc, wgmma, maps, st);
  if (s.ok && stats) s.kernels += h16 ? " (+ FP16 conversion with the basis beside it, K U tiles)" : " (+ thresh-lowrank basis and K U tiles)";
  if (s.ok && h16) {
    const std::string kernels = s.kernels;
    s = forward_side_copies(p, q, k, h16_copies, st, fork);
    if (s.ok) s.kernels = kernels + " (+ the FP16 copies of q and k beside it)";
  }
  if (s.ok && basis) {
    const std::string kernels = s.kernels;
    s = p.D == 64 ? forward_basis_prepass<64>(kp, st, fork) : forward_basis_prepass<128>(kp, st, fork);
    if (s.ok) s.kernels = kernels + " (+ thresh-lowrank basis beside it)";
  }
  return s;
}

size_t backward_workspace_bytes(const Problem& p) { return layout(p).bytes(); }

bool forward_stats_apply(const Problem& p) {
  const FlashParams& f = p.params;
  if (effective_projection(f) == Projection::kFp16LowRank) {  // always: its backward reads what the forward makes
    return check_problem(p).ok && (f.cuda_wgmma_forward == -1 || f.cuda_wgmma_forward == 2);
  }
  return f.variant == Variant::kGproj && f.forward_stats && effective_projection(f) == Projection::kThreshLowRank &&
         (f.cuda_wgmma_forward == -1 || f.cuda_wgmma_forward == 2) &&
         (f.cuda_backward_wgmma == -1 || f.cuda_backward_wgmma == 2 || f.cuda_backward_wgmma == 3) &&
         !f.deterministic && f.cuda_backward_warps == 4 && f.dk_compensation_rank == 0 && (p.D == 64 || p.D == 128);
}

size_t forward_stats_bytes(const Problem& p) { return forward_stats_apply(p) ? stats_layout(p).bytes() : 0; }

ForwardStatsParts forward_stats_parts(const Problem& p, void* stats) {
  ForwardStatsParts parts;
  if (!forward_stats_apply(p) || stats == nullptr) return parts;
  const StatsLayout l = stats_layout(p);
  float* base = static_cast<float*>(stats);
  parts.records = base;
  parts.u = base + l.rows;
  if (l.scales != 0) {
    parts.scales = base + l.rows + l.u + l.ku + l.tiles;
    parts.qh = parts.scales + l.scales;
    parts.kht = parts.scales + l.scales + l.qh;
    parts.o16 = parts.scales + l.scales + l.qh + l.kht;
    if (l.vhk != 0) parts.vh = static_cast<float*>(parts.o16) + l.o16;
  }
  return parts;
}

bool forward_basis_apply(const Problem& p) {
  const FlashParams& f = p.params;
  return f.variant == Variant::kGproj && effective_projection(f) == Projection::kThreshLowRank && !f.forward_stats &&
         !f.deterministic && (p.D == 64 || p.D == 128);
}

size_t forward_basis_bytes(const Problem& p) {
  return forward_basis_apply(p) ? sizeof(float) * stats_layout(p).u : 0;
}

size_t forward_workspace_bytes(const Problem& p) {  // the Gram partials of either form (fp16-lowrank: and vh)
  return forward_stats_apply(p) || forward_basis_apply(p) ? stats_layout(p).workspace_bytes() : 0;
}

size_t backward_workspace_row_stride(const Problem& p) { return layout(p).row; }

namespace {

// What backward() will run for these tensors, decided before any device memory is touched: the main kernel's
// version, whether it stores dK and dV itself, its TMA descriptors. backward() and the tensors' workspace query
// share it, so a workspace sized by the one is what the other lays out.
struct BackwardPlan {
  bool tc = false;  // q, k, v, do rows 16-byte aligned
  int wg_version = 0;
  int dkv_direct = 0;  // KernelParams::dkv_direct
  detail::TmaMaps maps{};
  std::string kernels;
};

// The checks and choices of backward() that depend on q, k, v, do, dq, dk, dv and the parameters (the problem and
// those tensors' strides checked before).
Status plan_backward(const Problem& p, const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
                     const DeviceTensor& dout, const DeviceTensor& dq, const DeviceTensor& dk, const DeviceTensor& dv,
                     BackwardPlan* plan) {
  const bool thresh = effective_projection(p.params) == Projection::kThreshLowRank;
  const bool tc = rows_aligned(q) && rows_aligned(k) && rows_aligned(v) && rows_aligned(dout);
  plan->tc = tc;
  // The backward main kernel: v3.2 / v3.1 (wgmma, TMA) by default where they apply, else the v1 kernels; an explicit
  // request for a wgmma version is refused, not rerouted, where that version does not apply.
  const Variant var = p.params.variant;
  const bool plain = var == Variant::kBaseline || var == Variant::kFwdfix;
  const bool common = tc && !p.params.deterministic && p.params.cuda_backward_warps == 4;
  const bool v31_applies = common && (plain || (var == Variant::kGproj && thresh));
  int wg_version = p.params.cuda_backward_wgmma;
  if (wg_version < -1 || wg_version > 4) {
    return fail(ErrorCode::kInvalidArgument, "cuda_backward_wgmma must be -1 (auto), 0 (the v1 kernels), 1 (v3.0), "
                                             "2 (v3.1), 3 (v3.2) or 4 (v3.3); got " + std::to_string(wg_version));
  }
  if (wg_version == 4 && p.D != 128) {
    return fail(ErrorCode::kUnsupported, "cuda_backward_wgmma = 4 (v3.3, experimental) serves D = 128 only; got D = " +
                                             std::to_string(p.D));
  }
  if (wg_version == -1) wg_version = !v31_applies ? 0 : p.D == 128 ? 3 : 2;  // v3.2 at D = 128, v3.1 at D = 64
  if (wg_version == 1 && !(common && plain)) {
    return fail(ErrorCode::kUnsupported,
                "cuda_backward_wgmma = 1 (v3.0) serves variants baseline and fwdfix with 16-byte aligned rows, "
                "without deterministic mode or the wide backward");
  }
  if (wg_version >= 2 && !v31_applies) {
    return fail(ErrorCode::kUnsupported,
                "cuda_backward_wgmma = " + std::to_string(wg_version) + " (v3." + std::to_string(wg_version - 1) +
                    ") serves variants baseline, fwdfix and gproj with projection thresh-lowrank, with 16-byte "
                    "aligned rows, without deterministic mode or the wide backward");
  }
  // dK compensation (experimental): rank 8, on the v3.1 thresh-lowrank kernel at D = 64 only so far.
  const bool dk_comp = var == Variant::kGproj && p.params.dk_compensation_rank != 0;
  if (dk_comp && (p.params.dk_compensation_rank != detail::kLowRank || !thresh || wg_version != 2 || p.D != 64)) {
    return fail(ErrorCode::kUnsupported,
                "dk_compensation_rank (dK's low-rank rounding compensation, experimental) runs on CUDA with rank 8, "
                "projection thresh-lowrank, the v3.1 backward (cuda_backward_wgmma -1 or 2) and D = 64 only; got "
                "rank " + std::to_string(p.params.dk_compensation_rank) + ", D = " + std::to_string(p.D) +
                    " (the CPU emulator takes any rank and D)");
  }
  if (wg_version >= 2) {  // the driver may refuse a descriptor (e.g. zero strides): auto mode then takes v1
    if (Status ms = bwd_tma_maps(&plan->maps, p, q, k, v, dout); !ms.ok) {
      if (p.params.cuda_backward_wgmma != -1 || dk_comp) return ms;  // (v1 has no dK compensation)
      wg_version = 0;
    }
  }
  // v3.34: with one query head per kv head the wgmma main kernel's dK, dV are final, and it stores them in BF16 (dV
  // only for thresh-lowrank, whose dK correction reads dKacc); the dK/dV postprocess skips them. It stores 16-byte
  // pieces, so dK and dV must be 16-byte aligned (torch's allocations are); 8-byte aligned ones take the
  // accumulators and the postprocess as before.
  const bool dkv_aligned =
      reinterpret_cast<uintptr_t>(dk.data) % 16 == 0 && reinterpret_cast<uintptr_t>(dv.data) % 16 == 0;
  plan->dkv_direct = wg_version != 0 && p.H == p.Hkv && dkv_aligned ? (thresh ? 1 : 3) : 0;
  for (const auto& [name, t] : {std::pair<const char*, const DeviceTensor*>{"dq", &dq}, {"dk", &dk}, {"dv", &dv}}) {
    if (reinterpret_cast<uintptr_t>(t->data) % 8 != 0) {
      return fail(ErrorCode::kInvalidArgument,
                  std::string(name) + " must be 8-byte aligned (the postprocess stores 4 elements at a time)");
    }
  }
  if (thresh && !tc) {
    return fail(ErrorCode::kUnsupported,
                "thresh-lowrank on CUDA needs 16-byte aligned rows of "
                "q, k, v, do; the reference kernels for other rows implement projection pweighted");
  }
  if (p.forward_stats != nullptr && (!forward_stats_apply(p) || (wg_version != 2 && wg_version != 3))) {
    return fail(ErrorCode::kUnsupported,
                "forward_stats need variant gproj with projection thresh-lowrank on the v3.1 / v3.2 backward "
                "(not deterministic, no dK compensation; the TMA descriptors must be accepted)");
  }
  if (p.forward_basis != nullptr && !forward_basis_apply(p)) {
    return fail(ErrorCode::kUnsupported, "forward_basis (K's basis formed by the forward) needs variant gproj with "
                                         "projection thresh-lowrank (not deterministic) and no forward_stats");
  }
  plan->wg_version = wg_version;
  plan->kernels = backward_kernel_name(p.params, tc, wg_version, dk_comp);
  if (p.forward_stats != nullptr) plan->kernels += ", statistics from the forward";
  if (p.forward_basis != nullptr) plan->kernels += ", basis from the forward";
  return {};
}

}  // namespace

size_t backward_workspace_bytes(const Problem& p, const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
                                const DeviceTensor& dout, const DeviceTensor& dq, const DeviceTensor& dk,
                                const DeviceTensor& dv) {
  for (Status s : {check_problem(p), check_tensor("q", q), check_tensor("k", k), check_tensor("v", v),
                   check_tensor("do", dout)})
    if (!s.ok) return backward_workspace_bytes(p);  // backward() reports the error
  BackwardPlan plan;
  if (!plan_backward(p, q, k, v, dout, dq, dk, dv, &plan).ok) return backward_workspace_bytes(p);
  return layout(p, plan.dkv_direct).bytes();
}

namespace {

// fp16-lowrank's Kh^T (the forward's kht, (B, Hkv, D, ld) FP16) as a (ld, D, Hkv, B) tensor map: boxes of 64 keys x
// 64 D-rows, 128B-swizzled (keys past ld read as zeros; ld's padding keys are zeros already).
Status kht_map(CUtensorMap* map, void* kht, const Problem& p) {
  const cuuint64_t ld = fp16_kht_ld(p);
  const cuuint64_t dims[4] = {ld, static_cast<cuuint64_t>(p.D), static_cast<cuuint64_t>(p.Hkv),
                              static_cast<cuuint64_t>(p.B)};
  const cuuint64_t strides[3] = {ld * 2, ld * 2 * p.D, ld * 2 * p.D * p.Hkv};
  const cuuint32_t box[4] = {64, 64, 1, 1};
  return encode_sw128_map(map, kht, dims, strides, box, ErrorCode::kDevice, "kht (the FP16 K^T)", "");
}

// fp16-lowrank's backward (docs/design-fp16-projection.md, build steps 4-5; D = 64 or 128): the preprocess (delta
// from the forward's FP16 O, each head's max |dO_i|), the v3.2-h16 (D = 128) or v3.17-h16 (D = 64) main kernel over
// the forward's Qh and Kh^T, the dQ post-pass with the rank-6 projection, and the dK / dV postprocess where the main
// kernel does not store them.
Status backward_h16(const Problem& p, const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
                    const DeviceTensor& lse, const DeviceTensor& dout, const DeviceTensor& dq, const DeviceTensor& dk,
                    const DeviceTensor& dv, void* workspace, cudaStream_t st, std::string* kernels) {
  if (p.forward_stats == nullptr) {
    return fail(ErrorCode::kInvalidArgument,
                "projection fp16-lowrank's backward needs the forward's forward_stats (its statistics and FP16 copies "
                "of q, k and O)");
  }
  if (!(rows_aligned(q) && rows_aligned(k) && rows_aligned(v) && rows_aligned(dout))) {
    return fail(ErrorCode::kUnsupported, "projection fp16-lowrank on CUDA needs 16-byte aligned rows of q, k, v, do");
  }
  if ((p.params.cuda_backward_wgmma != -1 && p.params.cuda_backward_wgmma != 3) || p.params.cuda_backward_warps != 4) {
    return fail(ErrorCode::kUnsupported,
                "projection fp16-lowrank's backward is a form of v3.2: cuda_backward_wgmma -1 or 3, 4 warps a CTA");
  }
  for (const auto& [name, t] : {std::pair<const char*, const DeviceTensor*>{"dq", &dq}, {"dk", &dk}, {"dv", &dv}}) {
    if (reinterpret_cast<uintptr_t>(t->data) % 8 != 0) {
      return fail(ErrorCode::kInvalidArgument,
                  std::string(name) + " must be 8-byte aligned (the postprocess stores 4 elements at a time)");
    }
  }
  const bool dkv_aligned =
      reinterpret_cast<uintptr_t>(dk.data) % 16 == 0 && reinterpret_cast<uintptr_t>(dv.data) % 16 == 0;
  const int dkv_direct = p.H == p.Hkv && dkv_aligned ? 3 : 0;
  const Workspace w = layout(p, dkv_direct);
  if (p.workspace_bytes != 0 && p.workspace_bytes < w.bytes()) {
    return fail(ErrorCode::kInvalidArgument,
                "the workspace holds " + std::to_string(p.workspace_bytes) + " bytes (Problem::workspace_bytes); this "
                "backward needs " + std::to_string(w.bytes()) + " (backward_workspace_bytes with these tensors)");
  }
  const ForwardStatsParts parts = forward_stats_parts(p, p.forward_stats);
  // 1 / l on dO's side (FlashParams::fp16_dout_side): the main kernel reads dOh (the preprocess's second pass
  // writes it after dV's accumulator) and the forward's vh in place of dO and V
  const bool dos = p.params.fp16_dout_side;
  float* doh = static_cast<float*>(workspace) + 3 * w.row + w.q + w.pk + w.dk + w.dv;
  const auto dense = [](void* data, int64_t n, int64_t heads, int64_t d) {
    DeviceTensor t;
    t.data = data;
    t.stride[0] = n * heads * d, t.stride[1] = heads * d, t.stride[2] = d, t.stride[3] = 1;
    return t;
  };
  const DeviceTensor qh = dense(parts.qh, p.Nq, p.H, p.D);
  detail::TmaMaps maps{};
  for (Status s : {tensor_map(&maps.q, qh, p.B, p.Nq, p.H, p.D, "qh (the FP16 q)"),
                   dos ? tensor_map(&maps.dout, dense(doh, p.Nq, p.H, p.D), p.B, p.Nq, p.H, p.D, "doh (fp16(dO / l))")
                       : tensor_map(&maps.dout, dout, p.B, p.Nq, p.H, p.D, "do"),
                   kht_map(&maps.k, parts.kht, p),
                   dos ? tensor_map(&maps.v, dense(parts.vh, p.Nk, p.Hkv, p.D), p.B, p.Nk, p.Hkv, p.D,
                                    "vh (the forward's FP16 v)")
                       : tensor_map(&maps.v, v, p.B, p.Nk, p.Hkv, p.D, "v")}) {
    if (!s.ok) return s;
  }
  KernelParams kp = base_params(p);
  kp.q = strided(q);
  kp.k = strided(k);
  kp.v = strided(v);
  kp.dout = strided(dout);
  kp.lse = static_cast<const float*>(lse.data);
  float* ws = static_cast<float*>(workspace);
  kp.delta = ws;
  kp.rowsum = ws + w.row;
  kp.psum = ws + 2 * w.row;  // s_i, written by the dQ post-pass for the audit
  kp.dq_acc = ws + 3 * w.row;
  kp.dq_tiled = 1;
  kp.dmax_bits = reinterpret_cast<unsigned int*>(kp.dq_acc + w.q);  // (pk's place: layout() gives it B H words)
  kp.dk_acc = w.dk != 0 ? kp.dq_acc + w.q + w.pk : nullptr;
  kp.dv_acc = w.dv != 0 ? kp.dq_acc + w.q + w.pk + w.dk : nullptr;
  kp.dkv_direct = dkv_direct;
  kp.dq = static_cast<__nv_bfloat16*>(dq.data);
  kp.dk = static_cast<__nv_bfloat16*>(dk.data);
  kp.dv = static_cast<__nv_bfloat16*>(dv.data);
  kp.fwd_stats = parts.records;
  kp.u = parts.u;
  kp.fp16_scales = parts.scales;
  kp.o16 = static_cast<const __half*>(parts.o16);
  kp.doh = dos ? reinterpret_cast<__half*>(doh) : nullptr;
  if (cudaMemsetAsync(workspace, 0, sizeof(float) * (3 * w.row + w.q + w.pk), st) != cudaSuccess) {
    return last_error("workspace memset");
  }
  const int64_t rows = p.B * p.H * p.Nq;
  const unsigned pre_blocks = static_cast<unsigned>((rows + detail::kPreRows - 1) / detail::kPreRows);
  if (dos) {  // 1 / l on dO's side: the first pass takes only max |dO_i| per head (r_i is zeroed above)
    const int cpr = static_cast<int>(p.H * p.D / 8), threads = std::min(256, (cpr + 31) / 32 * 32);
    const auto dmax = p.D == 64 ? detail::h16_dout_max_kernel<64> : detail::h16_dout_max_kernel<128>;
    dmax<<<dim3((cpr + threads - 1) / threads,
                                            (p.Nq + detail::kDoutMaxTokens - 1) / detail::kDoutMaxTokens, p.B),
                                       threads, 0, st>>>(kp);
  } else {
    const auto pre = p.D == 64 ? detail::bwd_preprocess_vec_kernel<64, true, true>  // carveout apart, as gproj's
                               : detail::bwd_preprocess_vec_kernel<128, true, true>;  // (v3.40)
    if (cudaFuncSetAttribute(pre, cudaFuncAttributePreferredSharedMemoryCarveout, 85) != cudaSuccess) {
      return last_error("backward preprocess carveout");
    }
    pre<<<pre_blocks, detail::kPreThreads, 0, st>>>(kp);
  }
  if (Status s = last_error("backward preprocess (fp16-lowrank)"); !s.ok) return s;
  if (dos) {  // its second pass: dOh and delta' from the first pass's max |dO_i| per head
    const auto pre2 = p.D == 64 ? detail::bwd_preprocess_vec_kernel<64, true, true, true>
                                : detail::bwd_preprocess_vec_kernel<128, true, true, true>;
    if (cudaFuncSetAttribute(pre2, cudaFuncAttributePreferredSharedMemoryCarveout, 85) != cudaSuccess) {
      return last_error("backward preprocess carveout");
    }
    pre2<<<pre_blocks, detail::kPreThreads, 0, st>>>(kp);
    if (Status s = last_error("backward preprocess, dOh (fp16-lowrank)"); !s.ok) return s;
  }
  const dim3 grid((p.Nk + detail::kWgBwdKeys - 1) / detail::kWgBwdKeys, p.H, p.B);
  // D = 128: v3.2-h16 (dQ's columns split between the warpgroups); D = 64: v3.17-h16 (each warpgroup's dQ over its
  // own keys, all of D, into the same tiles)
  constexpr size_t smem = detail::bwd_wg_smem_bytes<128, true, false, true, false, false, true>();
  constexpr size_t smem64 = detail::bwd_wg_smem_bytes<64, true, false, false, false, false, true>();
  Status s;
  if (p.D == 64) {
    s = dos ? launch_args(detail::flash_bwd_wg_kernel<64, false, true, false, false, false, false, false, true, true>,
                          grid, detail::kWgThreads, smem64, st, "backward main, wgmma, fp16-lowrank, 1/l on dO", kp,
                          maps)
            : launch_args(detail::flash_bwd_wg_kernel<64, false, true, false, false, false, false, false, true>, grid,
                          detail::kWgThreads, smem64, st, "backward main, wgmma, fp16-lowrank", kp, maps);
  } else {
    s = dos ? launch_args(detail::flash_bwd_wg_kernel<128, false, true, false, true, false, false, false, true, true>,
                          grid, detail::kWgThreads, smem, st, "backward main, wgmma, fp16-lowrank, 1/l on dO", kp, maps)
            : launch_args(detail::flash_bwd_wg_kernel<128, false, true, false, true, false, false, false, true>, grid,
                          detail::kWgThreads, smem, st, "backward main, wgmma, fp16-lowrank", kp, maps);
  }
  if (!s.ok) return s;
  constexpr int kPost = 256;
  const int64_t nk = p.B * p.Nk * p.Hkv * p.D / 4;
  const dim3 dq_grid((p.Nq + detail::kH16DqRows - 1) / detail::kH16DqRows,
                     (p.H + detail::kH16DqHeads - 1) / detail::kH16DqHeads, p.B);
  if (p.D == 64) {
    detail::h16_dq_kernel<64><<<dq_grid, 256, 0, st>>>(kp);
  } else {
    detail::h16_dq_kernel<128><<<dq_grid, 256, 0, st>>>(kp);
  }
  if (Status e = last_error("backward dQ post-pass (fp16-lowrank)"); !e.ok) return e;
  // (h16d, session 48: P from the LSE, not the forward's fp16(P^) / l; the kDoS form keeps the latter)
  *kernels = std::string(p.D == 64 ? "backward v3.17-h16d" : "backward v3.2-h16d") +
             std::string(" (wgmma, TMA, fp16-lowrank: FP16 dS against Qh and Kh^T, r_i from rows of "
                         "ones, rank-6 dQ projection") +
             (dos ? "; 1/l on dO: dP' = Vh dOh^T, dV = fp16(P^)^T dOh)" : ")");
  if (dkv_direct == 3) return {};
  detail::bwd_postprocess_dkv_kernel<false><<<static_cast<unsigned>((nk + kPost - 1) / kPost), kPost, 0, st>>>(kp);
  return last_error("backward dK/dV postprocess");
}

Status backward_launch(const Problem& p, const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
                       const DeviceTensor& o, const DeviceTensor& o_fp32, const DeviceTensor& lse,
                       const DeviceTensor& dout, const DeviceTensor& dq, const DeviceTensor& dk,
                       const DeviceTensor& dv, void* workspace, void* stream, std::string* kernels) {
  for (Status s : {check_problem(p), check_tensor("q", q), check_tensor("k", k), check_tensor("v", v),
                   check_tensor("o", o), check_tensor("do", dout)})
    if (!s.ok) return s;
  if (lse.data == nullptr || dq.data == nullptr || dk.data == nullptr || dv.data == nullptr || workspace == nullptr) {
    return fail(ErrorCode::kInvalidArgument, "lse, dq, dk, dv and the workspace are required");
  }
  if (reinterpret_cast<uintptr_t>(workspace) % 16 != 0) {  // 16-byte loads, cp.async and bulk copies of its regions
    return fail(ErrorCode::kInvalidArgument, "the workspace must be 16-byte aligned (cudaMalloc's and torch's "
                                             "allocations are); got an address " +
                                                 std::to_string(reinterpret_cast<uintptr_t>(workspace) % 16) +
                                                 " bytes past a 16-byte boundary");
  }
  if (effective_projection(p.params) == Projection::kFp16LowRank) {
    return backward_h16(p, q, k, v, lse, dout, dq, dk, dv, workspace, static_cast<cudaStream_t>(stream), kernels);
  }
  const bool fp32 = p.params.variant == Variant::kFp32;
  if (fp32 && o_fp32.data == nullptr) {
    return fail(ErrorCode::kInvalidArgument, "variant fp32 needs the forward's FP32 O (o_fp32)");
  }
  BackwardPlan plan;
  if (Status s = plan_backward(p, q, k, v, dout, dq, dk, dv, &plan); !s.ok) return s;
  const Workspace w = layout(p, plan.dkv_direct);
  if (p.workspace_bytes != 0 && p.workspace_bytes < w.bytes()) {
    return fail(ErrorCode::kInvalidArgument,
                "the workspace holds " + std::to_string(p.workspace_bytes) + " bytes (Problem::workspace_bytes); this "
                "backward needs " + std::to_string(w.bytes()) + " (backward_workspace_bytes with these tensors)");
  }
  const bool pweighted = effective_projection(p.params) == Projection::kPWeighted;
  const bool thresh = effective_projection(p.params) == Projection::kThreshLowRank;
  const int wg_version = plan.wg_version;
  const detail::TmaMaps& maps = plan.maps;
  *kernels = plan.kernels;
  KernelParams kp = base_params(p);
  kp.q = strided(q);
  kp.k = strided(k);
  kp.v = strided(v);
  kp.o = strided(o);
  kp.dout = strided(dout);
  kp.o_fp32 = fp32 ? static_cast<const float*>(o_fp32.data) : nullptr;
  kp.lse = static_cast<const float*>(lse.data);
  float* ws = static_cast<float*>(workspace);
  kp.delta = ws;
  kp.rowsum = ws + w.row;
  kp.psum = ws + 2 * w.row;
  kp.dq_acc = ws + 3 * w.row;
  kp.pk = w.pk != 0 ? kp.dq_acc + w.q : nullptr;
  float* const after_pk = kp.dq_acc + w.q + w.pk;
  if (thresh) {
    float* t = after_pk;  // the zeroed regions first
    kp.list_count = reinterpret_cast<int*>(t);
    kp.pku = t + w.row;
    kp.head_done = reinterpret_cast<int*>(kp.pku + w.pku);
    kp.main_done = kp.head_done + head_words(p);  // (null again below where the main kernel is not v3.1 / v3.2)
    float* r = t + w.thresh_zeroed();  // then the written ones
    kp.rest = r;
    kp.list_j = reinterpret_cast<int*>(r + w.row);
    kp.list_p = r + w.row + w.list;
    kp.part = kp.list_p + w.list;
    kp.gram = kp.part + w.part;
    kp.u = kp.gram + w.gram;
    kp.ku = reinterpret_cast<__nv_bfloat16*>(kp.u + w.u);
    if (w.qu != 0) {
      kp.gram_q = kp.u + w.u + w.ku;
      kp.u_q = kp.gram_q + w.gram_q;
      kp.qu = reinterpret_cast<__nv_bfloat16*>(kp.u_q + w.u_q);
    }
    kp.suffix = kp.pk;
    kp.list_cap = p.params.thresh_k;
    kp.thresh = 1.0f / static_cast<float>(p.params.thresh_k);
    kp.thresh_unrounded = bf16_threshold(kp.thresh);
  }
  // dKacc, dVacc last, where this backward uses them (null where the main kernel stores dK, dV itself)
  kp.dk_acc = w.dk != 0 ? after_pk + w.thresh_words() : nullptr;
  kp.dv_acc = w.dv != 0 ? after_pk + w.thresh_words() + w.dk : nullptr;
  kp.dkv_direct = plan.dkv_direct;
  kp.dq = static_cast<__nv_bfloat16*>(dq.data);
  kp.dk = static_cast<__nv_bfloat16*>(dk.data);
  kp.dv = static_cast<__nv_bfloat16*>(dv.data);
  const auto st = static_cast<cudaStream_t>(stream);
  const bool tc = plan.tc;
  // v3.15's dQacc tiles (v3.2 at D = 128; v3.17, v3.1 at D = 64), read back through dq_acc_index
  kp.dq_tiled = (wg_version == 3 && p.D == 128) || (wg_version >= 2 && p.D == 64);
  // v3.9: P (K U), s_i, U and bf16(K U) from the forward (Problem::forward_stats); no basis pre-pass here.
  const bool fwd_stats = p.forward_stats != nullptr;  // (plan_backward checked that they apply)
  if (fwd_stats) set_stats_params(&kp, p, p.forward_stats);
  if (p.forward_basis != nullptr) kp.u = static_cast<float*>(p.forward_basis);  // (plan_backward checked it applies)
  const bool prepass = thresh && !fwd_stats;  // thresh-lowrank's pre-passes, after the delta preprocess (below)
  // Zeros only where kernels accumulate: the row statistics, dQacc (and P K), and thresh-lowrank's list
  // counters, statistics records and per-head counters (one block). dKacc and dVacc are written whole by the main
  // kernels, the Gram matrices' partials by the Gram kernel.
  {
    size_t zero_words = 3 * w.row + w.q + (pweighted ? w.pk : 0);
    if (cudaMemsetAsync(workspace, 0, sizeof(float) * zero_words, st) != cudaSuccess ||
        (thresh && cudaMemsetAsync(kp.list_count, 0, sizeof(float) * w.thresh_zeroed(), st) != cudaSuccess)) {
      return last_error("workspace memset");
    }
    // v3.9: the records start as the forward's (P (K U), s_i; r_i zero), and the main kernel adds r_i.
    if (fwd_stats && cudaMemcpyAsync(kp.pku, kp.fwd_stats, sizeof(float) * w.pku, cudaMemcpyDeviceToDevice, st) !=
                         cudaSuccess) {
      return last_error("forward statistics copy");
    }
  }
  constexpr int kPost = 256;
  const int64_t rows = p.B * p.H * p.Nq;
  if (!fp32 && rows_aligned(o) && rows_aligned(dout)) {
    const auto grid = static_cast<unsigned>((rows + detail::kPreRows - 1) / detail::kPreRows);
    // v3.40 (session 32): a kernel runs ~3% slower, in cycles and over its whole length, when the SMs were not
    // reconfigured between it and the kernel before it (L1 / shared-memory carveout): gproj's main kernel right after
    // this preprocess (both in the 228 KB configuration: it needs 220 KB of shared memory, and the driver gives the
    // preprocess, 35 KB a CTA, that configuration by default) took 669k cycles a CTA against 651k after a kernel with
    // no shared memory (perf-notes, session 32, runs 1-4). Where gproj's main kernel needs that configuration
    // (D = 128), the preprocess asks for 85% of it, which the driver serves with the 196 KB configuration: 5 of its
    // CTAs an SM (v3.45d; v3.40's 50% gave 132 KB and 3 CTAs, 61 µs against 45: session 38, run 4). Baseline's main
    // kernel (195 KB, the 196 KB configuration) was measured fast after the default and slow after the preprocess in
    // 196 KB, so it keeps the default. A hint to the driver, not a guarantee: if it is not taken, the kernels are as
    // fast as before v3.40.
    // gproj's D = 64 main kernel (153 KB) runs in the 164 KB configuration, which the driver also gives the
    // preprocess (18 KB a CTA) by default: at 100% it runs in 228 KB, 8 CTAs an SM either way (session 38, run 5:
    // gproj's D = 64 backward was 17-30 µs slower after the preprocess in 164 KB).
    if (thresh && wg_version >= 2) {
      const auto apart = p.D == 64 ? detail::bwd_preprocess_vec_kernel<64, true>
                                   : detail::bwd_preprocess_vec_kernel<128, true>;
      if (cudaFuncSetAttribute(apart, cudaFuncAttributePreferredSharedMemoryCarveout, p.D == 64 ? 100 : 85) !=
          cudaSuccess) {
        return last_error("backward preprocess carveout");
      }
      apart<<<grid, detail::kPreThreads, 0, st>>>(kp);
    } else {
      const auto pre = p.D == 64 ? detail::bwd_preprocess_vec_kernel<64> : detail::bwd_preprocess_vec_kernel<128>;
      pre<<<grid, detail::kPreThreads, 0, st>>>(kp);
    }
  } else {
    detail::bwd_preprocess_kernel<<<static_cast<unsigned>((rows + kPost - 1) / kPost), kPost, 0, st>>>(kp);
  }
  if (Status s = last_error("backward preprocess"); !s.ok) return s;
  // thresh-lowrank's pre-passes (K, and Q for the dK compensation), in order on the caller's stream after the delta
  // preprocess (v3.38, session 29). From session 5 to v3.37 they ran on side streams beside the memsets and the
  // preprocess, joined back by events before the main kernel; at D = 128, N = 4k gproj's backward was then 36 µs
  // (causal 17) slower than with them in order (runs 4-5). A guess at why, not measured: the latency-bound
  // eigenvector kernel shared its SMs with the preprocess's memory traffic instead of finishing in its 28 µs.
  if (prepass) {
    const bool project = wg_version < 2;  // the v3.1 / v3.2 kernels form K U themselves
    Status s;
    if (p.forward_basis == nullptr) {
      s = p.D == 64 ? lowrank_prepass<64, false>(kp, st, project) : lowrank_prepass<128, false>(kp, st, project);
    } else if (project) {  // U from the forward (Problem::forward_basis): only bf16(K U) for the v1 kernels
      const dim3 tgrid((p.Nk + detail::kBwdBlock - 1) / detail::kBwdBlock, p.Hkv, p.B);
      s = p.D == 64 ? launch(detail::ku_kernel<64, false>, tgrid, 0, st, kp, "thresh-lowrank K U", detail::kBwdThreads)
                    : launch(detail::ku_kernel<128, false>, tgrid, 0, st, kp, "thresh-lowrank K U",
                             detail::kBwdThreads);
    }
    if (s.ok && kp.qu != nullptr) s = p.D == 64 ? lowrank_prepass<64, true>(kp, st) : lowrank_prepass<128, true>(kp, st);
    if (!s.ok) return s;
  }
  const bool det = p.params.deterministic;
  // The postprocess kernels take 4 elements per thread.
  const int64_t nq = p.B * p.Nq * p.H * p.D / 4, nk = p.B * p.Nk * p.Hkv * p.D / 4;
  const auto qgrid = static_cast<unsigned>((nq + kPost - 1) / kPost),
             kgrid = static_cast<unsigned>((nk + kPost - 1) / kPost);
  if (thresh) {
    const detail::TmaMaps* v31 = wg_version >= 2 ? &maps : nullptr;
    Status s = p.D == 64 ? backward_thresh<64>(kp, wg_version, v31, st) : backward_thresh<128>(kp, wg_version, v31, st);
    if (!s.ok || kp.causal) return s;  // with causal masking backward_thresh ran the dK/dV postprocess
    if (kp.dkv_direct == 1) {  // v3.35: dV stored by the main kernel, dK alone here, 8 elements a thread
      const auto grid8 = static_cast<unsigned>((nk / 2 + kPost - 1) / kPost);
      if (p.D == 64) detail::bwd_postprocess_dk_suffix_kernel<64><<<grid8, kPost, 0, st>>>(kp);
      else detail::bwd_postprocess_dk_suffix_kernel<128><<<grid8, kPost, 0, st>>>(kp);
    } else {
      detail::bwd_postprocess_dkv_kernel<true><<<kgrid, kPost, 0, st>>>(kp);
    }
    return last_error("backward dK/dV postprocess");
  }
  const bool wide = p.params.cuda_backward_warps == 8;
  Status s;
  if (wg_version != 0) {  // v3.0 or v3.1 (checked above)
    s = p.D == 64 ? backward_wgmma<64>(kp, wg_version, false, maps, st)
                  : backward_wgmma<128>(kp, wg_version, false, maps, st);
  } else {
    s = p.D == 64 ? backward_variant<64>(kp, p.params.variant, pweighted, det, tc, wide, st)
                  : backward_variant<128>(kp, p.params.variant, pweighted, det, tc, wide, st);
  }
  if (!s.ok) return s;
  if (pweighted) {
    detail::bwd_postprocess_dq_kernel<true><<<qgrid, kPost, 0, st>>>(kp);
  } else {
    detail::bwd_postprocess_dq_kernel<false><<<qgrid, kPost, 0, st>>>(kp);
  }
  if (Status e = last_error("backward dQ postprocess"); !e.ok) return e;
  if (kp.dkv_direct == 3) return {};  // v3.34: the main kernel stored dK and dV
  detail::bwd_postprocess_dkv_kernel<false><<<kgrid, kPost, 0, st>>>(kp);
  return last_error("backward dK/dV postprocess");
}

}  // namespace

Status backward(const Problem& p, const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
                const DeviceTensor& o, const DeviceTensor& o_fp32, const DeviceTensor& lse, const DeviceTensor& dout,
                const DeviceTensor& dq, const DeviceTensor& dk, const DeviceTensor& dv, void* workspace,
                void* stream) {
  std::string kernels;
  Status s = backward_launch(p, q, k, v, o, o_fp32, lse, dout, dq, dk, dv, workspace, stream, &kernels);
  if (s.ok) s.kernels = kernels;
  return s;
}

size_t fp16_scale_count(const Problem& p) { return static_cast<size_t>(p.B * p.H + 3 * p.B * p.Hkv); }
size_t fp16_kht_ld(const Problem& p) { return static_cast<size_t>((p.Nk + 7) / 8 * 8); }

Status convert_fp16_copies(const Problem& p, const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
                           void* qh, void* kht, void* vh, float* scales, void* workspace, void* stream) {
  if (Status s = check_extents(p); !s.ok) return s;
  if (p.D != 64 && p.D != 128 && p.D != 256) {  // (a head's chunks are D / 8 lanes of one warp)
    return fail(ErrorCode::kUnsupported, "the FP16 conversion takes D = 64, 128 or 256, got " + std::to_string(p.D));
  }
  for (Status s : {check_tensor("q", q), check_tensor("k", k), check_tensor("v", v)})
    if (!s.ok) return s;
  for (const auto& [name, t] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}}) {
    if (!rows_aligned(*t)) {
      return fail(ErrorCode::kUnsupported, std::string("the FP16 conversion reads 16-byte aligned rows; ") + name +
                                               "'s data or B, N, H strides are not multiples of 16 bytes");
    }
  }
  if (qh == nullptr || kht == nullptr || vh == nullptr || scales == nullptr || workspace == nullptr) {
    return fail(ErrorCode::kInvalidArgument, "qh, kht, vh, scales and workspace are required");
  }
  Status s = convert_launch(p, q, k, v, qh, kht, vh, scales, static_cast<unsigned int*>(workspace),
                            static_cast<cudaStream_t>(stream));
  if (s.ok) s = convert_qk_launch(p, q, k, qh, kht, scales, static_cast<cudaStream_t>(stream));
  if (s.ok) s.kernels = "FP16 conversion (per-head absmax, scale, convert, transpose)";
  return s;
}

}  // namespace gproj::cuda
