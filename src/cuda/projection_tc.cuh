// The thresh-lowrank projection on the GPU (docs/gproj-projection.md), around flash_bwd_tc_kernel<..., kThresh>:
// a pre-pass per kv head (Gram matrix of K, its top-8 eigenvectors U by subspace iteration as in
// src/cpu/projection.cc, bf16(K U)), and a postprocess that applies the corrections once r_i and s_i are known:
// dQ_i -= c_i (sum_list p K_j + (P K U - sum_list p K U_j)_i U^T), dK_j -= (c_i p - rest_i) Q_i for the listed
// entries and dK_j -= sum_{i sees j} rest_i Q_i (a suffix sum over the rows) for the rest.
// Exercised by tests/cuda/flash_cuda_test.cc (thresh-lowrank against the CPU emulator and the stress bars).
#pragma once

#include "cuda/flash_bwd_tc.cuh"
#include "cuda/kernel_common.cuh"

namespace gproj::cuda::detail {

constexpr int kPostThreads = 256;
constexpr int kGramKeys = 256;  // keys per CTA of the Gram kernel
constexpr int kSuffixBlock = 64;

// gram[b, hk] += K[chunk]^T K[chunk]; grid (ceil(Nk / kGramKeys), Hkv, B).
template <int D>
__global__ void __launch_bounds__(kPostThreads) gram_kernel(const KernelParams p) {
  constexpr int kOut = D * D / kPostThreads, kStage = 32;
  __shared__ float sk[kStage][D];
  const int b = blockIdx.z, hk = blockIdx.y, j0 = blockIdx.x * kGramKeys;
  float acc[kOut];
#pragma unroll
  for (int m = 0; m < kOut; ++m) acc[m] = 0.0f;
  const int jend = min(p.Nk, j0 + kGramKeys);
  for (int js = j0; js < jend; js += kStage) {
    __syncthreads();
    for (int x = threadIdx.x; x < kStage * D; x += kPostThreads) {
      const int r = x / D, d = x % D;
      sk[r][d] = js + r < jend ? load_bf16(p.k, b, js + r, hk, d) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < kOut; ++m) {
      const int o = threadIdx.x + kPostThreads * m, a = o / D, c = o % D;
      float s = acc[m];
      for (int r = 0; r < kStage; ++r) s = fmaf(sk[r][a], sk[r][c], s);
      acc[m] = s;
    }
  }
  float* gram = p.gram + (static_cast<int64_t>(b) * p.Hkv + hk) * D * D;
#pragma unroll
  for (int m = 0; m < kOut; ++m) atomicAdd(&gram[threadIdx.x + kPostThreads * m], acc[m]);
}

// The pseudo-random start of the subspace iteration, the same numbers as top_eigenvectors in
// src/cpu/projection.cc.
__device__ __forceinline__ float start_value(int a, int c) {
  uint32_t h = static_cast<uint32_t>(a * 7919 + c * 104729 + 17);
  h ^= h >> 16;
  h *= 0x7feb352dU;
  h ^= h >> 15;
  h *= 0x846ca68bU;
  h ^= h >> 16;
  return static_cast<float>(static_cast<double>(h) / 4294967296.0 - 0.5);
}

// Modified Gram-Schmidt of the kLowRank columns of X (D x kLowRank, shared), by warp 0.
template <int D>
__device__ void orthonormalise_columns(float* X) {
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x;
  for (int c = 0; c < kLowRank; ++c) {
    for (int d = 0; d < c; ++d) {
      float dot = 0.0f;
      for (int a = lane; a < D; a += 32) dot += X[a * kLowRank + c] * X[a * kLowRank + d];
      for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      for (int a = lane; a < D; a += 32) X[a * kLowRank + c] -= dot * X[a * kLowRank + d];
      __syncwarp();
    }
    float norm = 0.0f;
    for (int a = lane; a < D; a += 32) norm += X[a * kLowRank + c] * X[a * kLowRank + c];
    for (int o = 16; o > 0; o >>= 1) norm += __shfl_xor_sync(0xffffffffu, norm, o);
    const float inv = norm > 0.0f ? rsqrtf(norm) : 0.0f;
    for (int a = lane; a < D; a += 32) X[a * kLowRank + c] *= inv;
    __syncwarp();
  }
}

constexpr int kSubspaceIters = 24;

template <int D>
constexpr size_t eig_smem_bytes() {
  return sizeof(float) * (D * D + 2 * D * kLowRank);
}

// u[b, hk] = top-8 eigenvectors of gram[b, hk] by kSubspaceIters steps of subspace iteration; grid (Hkv, B).
template <int D>
__global__ void __launch_bounds__(kPostThreads) eig_kernel(const KernelParams p) {
  extern __shared__ float smem_f[];
  float* G = smem_f;            // [D][D]
  float* X = G + D * D;         // [D][8]
  float* Y = X + D * kLowRank;  // [D][8]
  const int b = blockIdx.y, hk = blockIdx.x;
  const float* gram = p.gram + (static_cast<int64_t>(b) * p.Hkv + hk) * D * D;
  for (int x = threadIdx.x; x < D * D; x += kPostThreads) G[x] = gram[x];
  for (int x = threadIdx.x; x < D * kLowRank; x += kPostThreads) X[x] = start_value(x / kLowRank, x % kLowRank);
  __syncthreads();
  orthonormalise_columns<D>(X);
  __syncthreads();
  for (int it = 0; it < kSubspaceIters; ++it) {
    for (int x = threadIdx.x; x < D * kLowRank; x += kPostThreads) {
      const int a = x / kLowRank, c = x % kLowRank;
      float s = 0.0f;
      for (int e = 0; e < D; ++e) s = fmaf(G[a * D + e], X[e * kLowRank + c], s);
      Y[x] = s;
    }
    __syncthreads();
    for (int x = threadIdx.x; x < D * kLowRank; x += kPostThreads) X[x] = Y[x];
    __syncthreads();
    orthonormalise_columns<D>(X);
    __syncthreads();
  }
  float* u = p.u + (static_cast<int64_t>(b) * p.Hkv + hk) * D * kLowRank;
  for (int x = threadIdx.x; x < D * kLowRank; x += kPostThreads) u[x] = X[x];
}

// ku[b, hk, j] = bf16(K_j U); one thread per key; grid (ceil(Nk / kPostThreads), Hkv, B).
template <int D>
__global__ void __launch_bounds__(kPostThreads) ku_kernel(const KernelParams p) {
  __shared__ float su[D * kLowRank];
  const int b = blockIdx.z, hk = blockIdx.y, j = blockIdx.x * kPostThreads + threadIdx.x;
  const float* u = p.u + (static_cast<int64_t>(b) * p.Hkv + hk) * D * kLowRank;
  for (int x = threadIdx.x; x < D * kLowRank; x += kPostThreads) su[x] = u[x];
  __syncthreads();
  if (j >= p.Nk) return;
  float acc[kLowRank];
#pragma unroll
  for (int c = 0; c < kLowRank; ++c) acc[c] = 0.0f;
  for (int a = 0; a < D; ++a) {
    const float x = load_bf16(p.k, b, j, hk, a);
#pragma unroll
    for (int c = 0; c < kLowRank; ++c) acc[c] = fmaf(x, su[a * kLowRank + c], acc[c]);
  }
  __nv_bfloat16* out = p.ku + ((static_cast<int64_t>(b) * p.Hkv + hk) * p.Nk + j) * kLowRank;
#pragma unroll
  for (int c = 0; c < kLowRank; c += 2) *reinterpret_cast<__nv_bfloat162*>(out + c) = __floats2bfloat162_rn(acc[c], acc[c + 1]);
}

// One warp per row (B, H, Nq): the dQ correction and the output dQ = bf16(scale dQacc'), the listed entries'
// dK correction (atomics into dk_acc) and rest_i for the uniform part.
template <int D>
__global__ void __launch_bounds__(kPostThreads) thresh_dq_kernel(const KernelParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kPostThreads / 32) + (threadIdx.x >> 5);
  if (row >= static_cast<int64_t>(p.B) * p.H * p.Nq) return;
  const int i = static_cast<int>(row % p.Nq), h = static_cast<int>((row / p.Nq) % p.H);
  const int b = static_cast<int>(row / (static_cast<int64_t>(p.Nq) * p.H));
  const int hk = h / (p.H / p.Hkv);
  const float s = p.psum[row];
  const float c = s > 0.0f ? p.rowsum[row] / s : 0.0f;
  const int cnt = min(p.list_count[row], p.list_cap);
  int jt = 0;
  float pt = 0.0f;
  if (lane < cnt) {
    jt = p.list_j[row * p.list_cap + lane];
    pt = p.list_p[row * p.list_cap + lane];
  }
  const __nv_bfloat16* ku = p.ku + (static_cast<int64_t>(b) * p.Hkv + hk) * p.Nk * kLowRank;
  float tail[kLowRank];
#pragma unroll
  for (int u = 0; u < kLowRank; ++u) {
    float x = lane < cnt ? pt * __bfloat162float(ku[static_cast<int64_t>(jt) * kLowRank + u]) : 0.0f;
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    tail[u] = p.pku[row * kLowRank + u] - x;
  }
  float mass = pt;
  for (int o = 16; o > 0; o >>= 1) mass += __shfl_xor_sync(0xffffffffu, mass, o);
  const int n_vis = p.causal ? max(0, min(p.Nk, i + p.Nk - p.Nq + 1)) : p.Nk;
  const int n_rest = n_vis - cnt;
  const float rest = s > 0.0f && n_rest > 0 ? c * (s - mass) / static_cast<float>(n_rest) : 0.0f;
  if (lane == 0) p.rest[row] = rest;
  const float* u = p.u + (static_cast<int64_t>(b) * p.Hkv + hk) * D * kLowRank;
  for (int d = lane; d < D; d += 32) {
    float acc = 0.0f;
    for (int t = 0; t < cnt; ++t) {
      const int j = __shfl_sync(0xffffffffu, jt, t);
      const float pj = __shfl_sync(0xffffffffu, pt, t);
      acc = fmaf(pj, load_bf16(p.k, b, j, hk, d), acc);
    }
    float back = 0.0f;
#pragma unroll
    for (int v = 0; v < kLowRank; ++v) back = fmaf(tail[v], u[d * kLowRank + v], back);
    const float x = p.dq_acc[row * D + d] - c * (acc + back);
    p.dq[((static_cast<int64_t>(b) * p.Nq + i) * p.H + h) * D + d] = __float2bfloat16_rn(p.scale * x);
    const float qd = load_bf16(p.q, b, i, h, d);
    for (int t = 0; t < cnt; ++t) {
      const int j = __shfl_sync(0xffffffffu, jt, t);
      const float w = c * __shfl_sync(0xffffffffu, pt, t) - rest;
      atomicAdd(&p.dk_acc[((static_cast<int64_t>(b) * p.H + h) * p.Nk + j) * D + d], -w * qd);
    }
  }
}

// part[b, h, blk, d] = sum over the rows of block blk of rest_i Q_i[d]; grid (ceil(Nq / 64), H, B), D threads.
template <int D>
__global__ void suffix_part_kernel(const KernelParams p) {
  const int b = blockIdx.z, h = blockIdx.y, blk = blockIdx.x, d = threadIdx.x;
  const int64_t bh = static_cast<int64_t>(b) * p.H + h;
  const int i0 = blk * kSuffixBlock, i1 = min(p.Nq, i0 + kSuffixBlock);
  float s = 0.0f;
  for (int i = i0; i < i1; ++i) s = fmaf(p.rest[bh * p.Nq + i], load_bf16(p.q, b, i, h, d), s);
  p.part[(bh * gridDim.x + blk) * D + d] = s;
}

// suffix[b, h, i, d] = sum_{i' >= i} rest_i' Q_i'[d]: block sums after blk (sequential over the few blocks),
// then down the block's own rows; grid (ceil(Nq / 64), H, B), D threads.
template <int D>
__global__ void suffix_kernel(const KernelParams p) {
  const int b = blockIdx.z, h = blockIdx.y, blk = blockIdx.x, d = threadIdx.x;
  const int64_t bh = static_cast<int64_t>(b) * p.H + h;
  float run = 0.0f;
  for (int later = gridDim.x - 1; later > blk; --later) run += p.part[(bh * gridDim.x + later) * D + d];
  const int i0 = blk * kSuffixBlock, i1 = min(p.Nq, i0 + kSuffixBlock);
  for (int i = i1 - 1; i >= i0; --i) {
    run = fmaf(p.rest[bh * p.Nq + i], load_bf16(p.q, b, i, h, d), run);
    p.suffix[(bh * p.Nq + i) * D + d] = run;
  }
}

// dk_acc[b, h, j] -= suffix[b, h, first row that sees key j]; one thread per element of (B, H, Nk, D).
__global__ void suffix_apply_kernel(const KernelParams p) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(p.B) * p.H * p.Nk * p.D) return;
  const int d = static_cast<int>(idx % p.D);
  const int64_t bhj = idx / p.D;
  const int j = static_cast<int>(bhj % p.Nk);
  const int64_t bh = bhj / p.Nk;
  const int first = p.causal ? max(0, j - (p.Nk - p.Nq)) : 0;
  if (first < p.Nq) p.dk_acc[idx] -= p.suffix[(bh * p.Nq + first) * p.D + d];
}

}  // namespace gproj::cuda::detail
