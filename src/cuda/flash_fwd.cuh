// CUDA forward, reference version (v0): FP32 CUDA-core tiles in shared memory, the same rounding points and
// tile sizes as the CPU emulator (F4: bf16(P) before PV, F5: O), fwdfix's tie rule per key block.
// Exercised by tests/cuda/flash_cuda_test.cc against the float64 oracle and the CPU emulator.
#pragma once

#include "cuda/kernel_common.cuh"

namespace gproj::cuda::detail {

// Dynamic shared memory: sQ (BQ, D+1), sK (BK, D+1), sV (BK, D), sP (BQ, BK+1) floats.
template <int D>
constexpr size_t fwd_smem_bytes() {
  return sizeof(float) * (kBlockQ * (D + 1) + kBlockK * (D + 1) + kBlockK * D + kBlockQ * (kBlockK + 1));
}

template <int D, bool kRoundP, bool kTieFix>
__global__ void __launch_bounds__(kThreads) flash_fwd_kernel(const KernelParams p) {
  extern __shared__ float smem[];
  float* sQ = smem;                       // (BQ, D+1)
  float* sK = sQ + kBlockQ * (D + 1);     // (BK, D+1)
  float* sV = sK + kBlockK * (D + 1);     // (BK, D)
  float* sP = sV + kBlockK * D;           // (BQ, BK+1)
  const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * kBlockQ;
  const int hk = h / (p.H / p.Hkv);
  const int t = threadIdx.x, r = t >> 1, half = t & 1;
  const int rows = min(kBlockQ, p.Nq - i0);
  for (int x = t; x < kBlockQ * D; x += kThreads) {
    const int rr = x / D, d = x % D;
    sQ[rr * (D + 1) + d] = rr < rows ? load_bf16(p.q, b, i0 + rr, h, d) : 0.0f;
  }
  constexpr int kHalfD = D / 2, kCols = kBlockK / 2;
  float acc[kHalfD];
#pragma unroll
  for (int e = 0; e < kHalfD; ++e) acc[e] = 0.0f;
  float m = neg_inf(), l = 0.0f;
  const int i = i0 + r;
  const int limit = last_visible(p, i);
  const int j_end = p.causal ? max(0, min(p.Nk, i0 + rows + p.Nk - p.Nq)) : p.Nk;
  for (int j0 = 0; j0 < j_end; j0 += kBlockK) {
    const int cols = min(kBlockK, j_end - j0);
    __syncthreads();
    for (int x = t; x < kBlockK * D; x += kThreads) {
      const int jj = x / D, d = x % D;
      const bool in = jj < cols;
      sK[jj * (D + 1) + d] = in ? load_bf16(p.k, b, j0 + jj, hk, d) : 0.0f;
      sV[jj * D + d] = in ? load_bf16(p.v, b, j0 + jj, hk, d) : 0.0f;
    }
    __syncthreads();
    // S for row r, columns half*32 .. half*32+31.
    float s[kCols];
#pragma unroll 4
    for (int c = 0; c < kCols; ++c) {
      const int jj = half * kCols + c;
      float dot = 0.0f;
#pragma unroll 8
      for (int d = 0; d < D; ++d) dot = fmaf(sQ[r * (D + 1) + d], sK[jj * (D + 1) + d], dot);
      const bool visible = r < rows && jj < cols && j0 + jj <= limit;
      s[c] = visible ? p.scale * dot : neg_inf();
    }
    float rm = neg_inf();
#pragma unroll
    for (int c = 0; c < kCols; ++c) rm = fmaxf(rm, s[c]);
    rm = fmaxf(rm, __shfl_xor_sync(0xffffffffu, rm, 1));
    float cand = rm;
    if (kTieFix) {  // the shuffle must be reached by every lane: no data-dependent branch around it
      int ties = 0;
#pragma unroll
      for (int c = 0; c < kCols; ++c) ties += s[c] >= rm - p.tie_tol ? 1 : 0;
      ties += __shfl_xor_sync(0xffffffffu, ties, 1);
      if (rm != neg_inf() && ties > 1) cand = tied_candidate(rm, p.beta, p.max_shift);
    }
    const float m_new = fmaxf(m, cand);
    float alpha = 1.0f, rowsum = 0.0f;
    if (m_new == neg_inf()) {
#pragma unroll
      for (int c = 0; c < kCols; ++c) s[c] = 0.0f;
    } else {
      alpha = expf(m - m_new);
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const float e = expf(s[c] - m_new);
        rowsum += e;
        s[c] = kRoundP ? round_bf16(e) : e;
      }
      m = m_new;
    }
    rowsum += __shfl_xor_sync(0xffffffffu, rowsum, 1);
    l = l * alpha + rowsum;
#pragma unroll
    for (int c = 0; c < kCols; ++c) sP[r * (kBlockK + 1) + half * kCols + c] = s[c];
    __syncthreads();
#pragma unroll
    for (int e = 0; e < kHalfD; ++e) {
      const int d = half * kHalfD + e;
      float a = acc[e] * alpha;
      for (int jj = 0; jj < cols; ++jj) a = fmaf(sP[r * (kBlockK + 1) + jj], sV[jj * D + d], a);
      acc[e] = a;
    }
  }
  if (r >= rows) return;
  __nv_bfloat16* o = p.o_out + ((static_cast<int64_t>(b) * p.Nq + i) * p.H + h) * D;
  float* of = p.o_fp32_out ? p.o_fp32_out + ((static_cast<int64_t>(b) * p.Nq + i) * p.H + h) * D : nullptr;
  const bool empty = m == neg_inf();
#pragma unroll
  for (int e = 0; e < kHalfD; ++e) {
    const int d = half * kHalfD + e;
    const float x = empty ? 0.0f : acc[e] / l;
    o[d] = __float2bfloat16_rn(x);  // F5
    if (of) of[d] = x;
  }
  if (half == 0) p.lse_out[(static_cast<int64_t>(b) * p.H + h) * p.Nq + i] = empty ? neg_inf() : m + logf(l);
}

}  // namespace gproj::cuda::detail
