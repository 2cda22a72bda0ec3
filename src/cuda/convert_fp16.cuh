// fp16-lowrank's conversion pass (docs/design-fp16-projection.md, build step 2; no forward or backward uses it
// yet): each head's max |x| of q, k and v, its power of two s (max |x| s in [2^14, 2^15), as the CPU emulator's
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
  __half* kht;            // (B, Hkv, D, Nk) dense
  __half* vh;             // (B, Nk, Hkv, D) dense
  unsigned int* maxbits;  // per head, max |x| as float bits (non-negative floats order as their bits): q's B H
                          // heads (b H + h), then k's B Hkv, then v's B Hkv (b Hkv + hk); zeroed before
  float* scales;          // the same layout: s per head
  int B, Nq, Nk, H, Hkv, D;
};

constexpr int kConvertRows = 32, kConvertThreads = 256;

// max |x| over rows [blockIdx.x 32, +32) of head blockIdx.y of batch blockIdx.z of one tensor (N rows, `heads`
// heads), into maxbits[slot0 + b heads + h] by an atomic max of the bits.
__global__ void __launch_bounds__(kConvertThreads)
    fp16_head_absmax_kernel(Strided x, int N, int heads, int D, unsigned int* maxbits) {
  const int h = blockIdx.y, b = blockIdx.z, n0 = blockIdx.x * kConvertRows;
  const auto* base = static_cast<const __nv_bfloat16*>(x.data) + b * x.s0 + h * x.s2;
  float m = 0.0f;
  const int rows = min(kConvertRows, N - n0);
  for (int e = threadIdx.x; e < rows * D; e += kConvertThreads) {
    const int r = e / D, d = e % D;
    m = fmaxf(m, fabsf(__bfloat162float(base[(n0 + r) * x.s1 + d])));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) atomicMax(maxbits + b * heads + h, __float_as_uint(m));
}

// scales[i] from maxbits[i], i < count: 2^(15 - e) with max in [2^(e-1), 2^e), the exponent within +-126; 1 for a
// zero or non-finite max (cpu::fp16_head_scale).
__global__ void fp16_head_scale_kernel(const unsigned int* maxbits, float* scales, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const float m = __uint_as_float(maxbits[i]);
  float s = 1.0f;
  if (m > 0.0f && isfinite(m)) s = ldexpf(1.0f, max(-126, min(126, 15 - (ilogbf(m) + 1))));
  scales[i] = s;
}

// out (B, N, heads, D) dense = fp16(x s_head), one thread per element in the output's order.
__global__ void __launch_bounds__(kConvertThreads)
    fp16_convert_kernel(Strided x, int B, int N, int heads, int D, const float* scales, __half* out) {
  const int64_t total = static_cast<int64_t>(B) * N * heads * D;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(kConvertThreads) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * kConvertThreads) {
    const int d = static_cast<int>(e % D);
    const int64_t rest = e / D;
    const int h = static_cast<int>(rest % heads);
    const int64_t bn = rest / heads;
    const int n = static_cast<int>(bn % N), b = static_cast<int>(bn / N);
    const float v = __bfloat162float(static_cast<const __nv_bfloat16*>(x.data)[b * x.s0 + n * x.s1 + h * x.s2 + d]);
    out[e] = __float2half_rn(v * scales[b * heads + h]);
  }
}

// kht (B, Hkv, D, Nk) = fp16(K s_head)^T: a 32 x 32 tile of (keys, d) through shared memory, 32 x 8 threads;
// grid (ceil(Nk / 32), D / 32, B Hkv).
__global__ void fp16_convert_transpose_kernel(Strided k, int Nk, int Hkv, int D, const float* scales, __half* kht) {
  __shared__ float tile[32][33];
  const int bh = blockIdx.z, b = bh / Hkv, hk = bh % Hkv, j0 = blockIdx.x * 32, d0 = blockIdx.y * 32;
  const float s = scales[bh];
  const auto* base = static_cast<const __nv_bfloat16*>(k.data) + b * k.s0 + hk * k.s2;
  for (int r = threadIdx.y; r < 32; r += 8) {
    const int j = j0 + r;
    tile[r][threadIdx.x] = j < Nk ? __bfloat162float(base[j * k.s1 + d0 + threadIdx.x]) * s : 0.0f;
  }
  __syncthreads();
  for (int r = threadIdx.y; r < 32; r += 8) {  // row d0 + r of the head's D x Nk block, keys j0 + threadIdx.x
    const int j = j0 + threadIdx.x;
    if (j < Nk) kht[(static_cast<int64_t>(bh) * D + d0 + r) * Nk + j] = __float2half_rn(tile[threadIdx.x][r]);
  }
}

}  // namespace gproj::cuda::detail
