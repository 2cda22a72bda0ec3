// fp16-lowrank's conversion pass (docs/design-fp16-projection.md, build step 2; its forward runs it): each head's max |x| of q, k and v, its power of two s (max |x| s in [2^14, 2^15), as the CPU emulator's
// cpu::fp16_head_scale), then FP16 copies x s rounded to nearest even: qh as q, kht = K^T per (b, kv head) (keys
// contiguous: the backward's K-major B for dQ and MN-major A for S^T), vh as v. Launched by launch.cu
// (convert_fp16_copies); exercised by tests/cuda/convert_fp16_test.cc against the CPU's round_fp16.
#pragma once

#include <cuda_fp16.h>

#include "cuda/kernel_common.cuh"

namespace gproj::cuda::detail {

struct ConvertParams {
  Strided q, k, v;        // BF16 (B, N, H, D), D contiguous
  __half* qh;             // (B, Nq, H, D) dense
  __half* kht;            // (B, Hkv, D, ld), ld = Nk rounded up to a multiple of 8 (fp16_kht_ld), keys Nk.. zero
  __half* vh;             // (B, Nk, Hkv, D) dense
  unsigned int* maxbits;  // per head, max |x| as float bits (non-negative floats order as their bits): q's B H
                          // heads (b H + h), then k's B Hkv, then v's B Hkv (b Hkv + hk); zeroed before
  float* scales;          // the same layout: s per head
  int B, Nq, Nk, H, Hkv, D;
};

constexpr int kConvertRows = 64, kConvertThreads = 256;

// v2 (session 43; with v1, one element per thread and a launch per tensor, the whole forward of fp16-lowrank took
// 1.79 ms against gproj-fs's 1.28 at D = 128, N = 4k, H200): 16-byte loads and stores (the rows are 16-byte aligned: launch.cu checks), every
// head's max of q, k and v in one launch, and max |x| on the BF16 bits as 16-bit unsigned integers (non-negative
// floats order as their bits), NaN ignored as the CPU's fmax does.

// The slot (b heads + h of tensor t: q, then k, then v) of blockIdx.y, and that tensor's view.
struct ConvertHead {
  Strided x;
  int n, slot, b, h;
};
__device__ __forceinline__ ConvertHead convert_head(const ConvertParams& p, int y) {
  const int nq = p.B * p.H, nk = p.B * p.Hkv;
  if (y < nq) return {p.q, p.Nq, y, y / p.H, y % p.H};
  const int z = y < nq + nk ? y - nq : y - nq - nk;
  return {y < nq + nk ? p.k : p.v, p.Nk, y, z / p.Hkv, z % p.Hkv};
}

// maxbits[slot] = max |x| over the head's rows [64 blockIdx.x, +64) as float bits (an atomic max), for every slot
// blockIdx.y of q, k and v; grid (ceil(max(Nq, Nk) / 64), B H + 2 B Hkv).
__global__ void __launch_bounds__(kConvertThreads) fp16_absmax_kernel(const ConvertParams p) {
  const ConvertHead t = convert_head(p, blockIdx.y);
  const int n0 = blockIdx.x * kConvertRows;
  if (n0 >= t.n) return;
  const int rows = min(kConvertRows, t.n - n0), chunks = p.D / 8;
  const auto* base = static_cast<const __nv_bfloat16*>(t.x.data) + t.b * t.x.s0 + t.h * t.x.s2;
  // v's heads also give their largest row norm |V_j| (fp16-lowrank's dS scale): a row's chunks are `chunks`
  // consecutive lanes (kConvertThreads is a multiple of the row's chunks, D <= 256), summed by shuffles.
  const bool norms = t.slot >= p.B * p.H + p.B * p.Hkv;
  uint32_t m = 0;      // two BF16 magnitudes
  float nmax = 0.0f;  // v: the largest row norm
  // Four chunks per thread in flight at a time (session 43, run 2: one at a time, 98 us for q, k, v at D = 128, N =
  // 4k under ncu, latency-bound); every thread runs the same count of steps (the shuffles).
  constexpr int kPer = 4;
  for (int e0 = 0; e0 < rows * chunks; e0 += kConvertThreads * kPer) {
    uint4 w[kPer];
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int e = e0 + u * kConvertThreads + threadIdx.x, r = e / chunks, c = e % chunks;
      w[u] = e < rows * chunks
                 ? *reinterpret_cast<const uint4*>(base + static_cast<int64_t>(n0 + r) * t.x.s1 + c * 8)
                 : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      float sq = 0.0f;
      for (uint32_t x : {w[u].x, w[u].y, w[u].z, w[u].w}) {
        sq = fmaf(__uint_as_float(x << 16), __uint_as_float(x << 16), sq);
        sq = fmaf(__uint_as_float(x & 0xFFFF0000u), __uint_as_float(x & 0xFFFF0000u), sq);
        x &= 0x7FFF7FFFu;
        x &= ~__vcmpgtu2(x, 0x7F807F80u);  // NaN halves -> 0
        m = __vmaxu2(m, x);
      }
      if (norms) {  // (uniform per CTA) the row's sum over its `chunks` lanes
        for (int o = 1; o < chunks; o <<= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
        nmax = fmaxf(nmax, sqrtf(sq));
      }
    }
  }
  uint32_t bits = max(m & 0xFFFFu, m >> 16) << 16;  // the largest as float bits
  bits = __reduce_max_sync(0xffffffffu, bits);
  if ((threadIdx.x & 31) == 0) atomicMax(p.maxbits + t.slot, bits);
  if (norms) {
    const uint32_t nb = __reduce_max_sync(0xffffffffu, __float_as_uint(nmax));
    if ((threadIdx.x & 31) == 0) atomicMax(p.maxbits + t.slot + p.B * p.Hkv, nb);
  }
}

// scales[i] from maxbits[i], i < scale_count: 2^(15 - e) with max in [2^(e-1), 2^e), the exponent within +-126; 1
// for a zero or non-finite max (cpu::fp16_head_scale). From scale_count to count: v's row norms, as they are.
__global__ void fp16_head_scale_kernel(const unsigned int* maxbits, float* scales, int scale_count, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const float m = __uint_as_float(maxbits[i]);
  if (i >= scale_count) {
    scales[i] = m;
    return;
  }
  float s = 1.0f;
  if (m > 0.0f && isfinite(m)) s = ldexpf(1.0f, max(-126, min(126, 15 - (ilogbf(m) + 1))));
  scales[i] = s;
}

// Eight BF16 (one 16-byte chunk) times s, rounded to FP16 (RNE): one 16-byte chunk of the copy.
__device__ __forceinline__ uint4 fp16_chunk(uint4 w, float s) {
  uint4 o;
  uint32_t* out = reinterpret_cast<uint32_t*>(&o);
  const uint32_t in[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2 h = __floats2half2_rn(__uint_as_float(in[i] << 16) * s, __uint_as_float(in[i] & 0xFFFF0000u) * s);
    out[i] = *reinterpret_cast<const uint32_t*>(&h);
  }
  return o;
}

// out (B, N, heads, D) dense = fp16(x s_head), one 16-byte chunk per thread and step, in the output's order.
__global__ void __launch_bounds__(kConvertThreads)
    fp16_convert_kernel(Strided x, int B, int N, int heads, int D, const float* scales, __half* out) {
  const int chunks = D / 8;
  const int64_t total = static_cast<int64_t>(B) * N * heads * chunks;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(kConvertThreads) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * kConvertThreads) {
    const int c = static_cast<int>(e % chunks);
    const int64_t rest = e / chunks;
    const int h = static_cast<int>(rest % heads);
    const int64_t bn = rest / heads;
    const int n = static_cast<int>(bn % N), b = static_cast<int>(bn / N);
    const uint4 w = *reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(x.data) + b * x.s0 + n * x.s1 +
                                                    h * x.s2 + c * 8);
    reinterpret_cast<uint4*>(out)[e] = fp16_chunk(w, scales[b * heads + h]);
  }
}

// kht (B, Hkv, D, ld) = fp16(K s_head)^T, ld = Nk rounded up to a multiple of 8 (keys Nk.. zero): a tile of 64 keys x
// 64 d through shared memory; grid (ceil(Nk / 64), D / 64, B Hkv), 256 threads. 16-byte loads; 16-byte stores of
// eight keys (ld keeps every row 16-byte aligned).
__global__ void __launch_bounds__(kConvertThreads)
    fp16_convert_transpose_kernel(Strided k, int Nk, int ld, int Hkv, int D, const float* scales, __half* kht) {
  __shared__ __align__(16) __half tile[64][72];  // [d][key], rows 144 bytes (16-byte aligned, banks spread)
  const int bh = blockIdx.z, b = bh / Hkv, hk = bh % Hkv, j0 = blockIdx.x * 64, d0 = blockIdx.y * 64;
  const float s = scales[bh];
  const auto* base = static_cast<const __nv_bfloat16*>(k.data) + b * k.s0 + hk * k.s2 + d0;
  for (int e = threadIdx.x; e < 64 * 8; e += kConvertThreads) {  // key e / 8, d chunk e % 8
    const int r = e >> 3, c = e & 7, j = j0 + r;
    const uint4 w = j < Nk ? *reinterpret_cast<const uint4*>(base + static_cast<int64_t>(j) * k.s1 + c * 8)
                           : make_uint4(0, 0, 0, 0);
    const uint4 h = fp16_chunk(w, s);
    const __half* hv = reinterpret_cast<const __half*>(&h);
#pragma unroll
    for (int i = 0; i < 8; ++i) tile[c * 8 + i][r] = hv[i];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < 64 * 8; e += kConvertThreads) {  // d row e / 8, keys 8 (e % 8) ..
    const int r = e >> 3, c = e & 7, j = j0 + c * 8;
    if (j < ld) {
      *reinterpret_cast<uint4*>(kht + (static_cast<int64_t>(bh) * D + d0 + r) * ld + j) =
          *reinterpret_cast<const uint4*>(&tile[r][c * 8]);
    }
  }
}

}  // namespace gproj::cuda::detail
