// CUDA forward v2 (experimental, FlashParams::cuda_wgmma_forward): Hopper wgmma instead of mma.sync. Two
// warpgroups per CTA, 64 query rows each (128 per CTA); key blocks of 64 (fwdfix's block, as the CPU emulator's)
// double-buffered with cp.async into 128B-swizzled shared memory. S = Q K^T: wgmma from shared memory, both
// K-major. O += bf16(P) V: P from the S accumulators as register A fragments (F4), V MN-major. The softmax, its
// rounding points and the epilogue are those of flash_fwd_tc.cuh. No TMA, no warp specialisation yet: the step
// after this one. Needs sm_90a; exercised by tests/cuda/flash_cuda_test.cc (WgmmaForward*).
#pragma once

#include "cuda/flash_fwd_tc.cuh"  // softmax_block
#include "cuda/kernel_common.cuh"
#include "cuda/mma.cuh"
#include "cuda/wgmma.cuh"

namespace gproj::cuda::detail {

constexpr int kWgRows = 128, kWgThreads = 256;

template <int D>
constexpr size_t fwd_wg_smem_bytes() {
  return sizeof(bf16_t) * (kWgRows * D + 4 * 64 * D) + 1024;  // + 1024: the tiles are realigned to 1024 bytes
}

// Loads rows [n0, n0 + count) of a strided (B, N, H, D) tensor into a 128B-swizzled [D/64][kRows][64] tile.
template <int kRows, int D>
__device__ __forceinline__ void load_sw128_async(bf16_t* dst, const Strided& t, int b, int n0, int count, int hh) {
  constexpr int kChunks = D / 8;
  const bf16_t* src = static_cast<const bf16_t*>(t.data);
  for (int x = threadIdx.x; x < kRows * kChunks; x += kWgThreads) {
    const int r = x / kChunks, c = x % kChunks;
    const bool in = r < count;
    const bf16_t* s = in ? src + b * t.s0 + static_cast<int64_t>(n0 + r) * t.s1 + hh * t.s2 + c * 8 : src;
    cp_async16(smem_u32(dst + sw128_offset(r, c * 8, kRows)), s, in);
  }
}

template <int D, bool kTieFix>
__global__ void __launch_bounds__(kWgThreads, 1) flash_fwd_wg_kernel(const KernelParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int BQ = kWgRows, BK = 64, kNB = D / 64;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  bf16_t* sQ = reinterpret_cast<bf16_t*>(smem_raw + (((raw + 1023) & ~1023u) - raw));  // [kNB][BQ][64]
  bf16_t* sK = sQ + BQ * D;      // [2][kNB][BK][64], K-major for S = Q K^T
  bf16_t* sV = sK + 2 * BK * D;  // [2][kNB][BK][64], MN-major for O += P V
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int wg = warp >> 2, w4 = warp & 3;
  const int b = blockIdx.z, h = blockIdx.y;
  const int qb = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int i0 = qb * BQ, hk = h / (p.H / p.Hkv);
  const int rows = min(BQ, p.Nq - i0);
  const int j_end = p.causal ? max(0, min(p.Nk, i0 + rows + p.Nk - p.Nq)) : p.Nk;
  const int nblocks = (j_end + BK - 1) / BK;

  load_sw128_async<BQ, D>(sQ, p.q, b, i0, rows, h);
  if (nblocks > 0) {
    load_sw128_async<BK, D>(sK, p.k, b, 0, min(BK, p.Nk), hk);
    load_sw128_async<BK, D>(sV, p.v, b, 0, min(BK, p.Nk), hk);
  }
  cp_async_commit();

  const int r0 = wg * 64 + w4 * 16;  // this warp's 16 rows inside the CTA's 128
  const int row_a = i0 + r0 + g, row_b = row_a + 8;
  const int lim_a = last_visible(p, row_a), lim_b = last_visible(p, row_b);
  const int warp_lim = last_visible(p, i0 + r0);
  float o[kNB][32];
#pragma unroll
  for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
    for (int e = 0; e < 32; ++e) o[nb][e] = 0.0f;
  float m_a = neg_inf(), m_b = neg_inf(), l_a = 0.0f, l_b = 0.0f;

  for (int jb = 0; jb < nblocks; ++jb) {
    const int buf = jb & 1, j0 = jb * BK;
    if (jb + 1 < nblocks) {
      const int jn = j0 + BK, cnt = min(BK, p.Nk - jn);
      load_sw128_async<BK, D>(sK + (buf ^ 1) * BK * D, p.k, b, jn, cnt, hk);
      load_sw128_async<BK, D>(sV + (buf ^ 1) * BK * D, p.v, b, jn, cnt, hk);
    }
    cp_async_commit();
    cp_async_wait<1>();
    fence_async_smem();
    __syncthreads();
    const bf16_t* kt = sK + buf * BK * D;
    const bf16_t* vt = sV + buf * BK * D;

    // S = Q K^T for this warpgroup's 64 rows x 64 keys.
    float s[32];
#pragma unroll
    for (int e = 0; e < 32; ++e) s[e] = 0.0f;
    wg_fence();
#pragma unroll
    for (int kb = 0; kb < kNB; ++kb)
#pragma unroll
      for (int kin = 0; kin < 4; ++kin) {
        const uint64_t da = wg_desc_kmajor(sQ + kb * BQ * 64 + wg * 64 * 64 + kin * 16);
        const uint64_t db = wg_desc_kmajor(kt + kb * BK * 64 + kin * 16);
        wgmma_ss_n64<0>(s, da, db, kb + kin > 0);
      }
    wg_commit();
    wg_wait0();

    // Mask, row max, fwdfix, online softmax: the same step as flash_fwd_tc_kernel.
    float alpha_a, alpha_b;
    uint32_t pf[4][4];
    const bool need_mask = j0 + BK > p.Nk || j0 + BK - 1 > warp_lim;
    softmax_block<kTieFix>(p, s, need_mask, j0, tq, lim_a, lim_b, m_a, m_b, l_a, l_b, alpha_a, alpha_b, pf);
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        o[nb][4 * j] *= alpha_a;
        o[nb][4 * j + 1] *= alpha_a;
        o[nb][4 * j + 2] *= alpha_b;
        o[nb][4 * j + 3] *= alpha_b;
      }
    // O += bf16(P) V, one 64-column block of D at a time, 16 keys per step.
    wg_fence();
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint64_t db = wg_desc_mnmajor(vt + nb * BK * 64 + kk * 16 * 64, BK * 128);
        wgmma_rs_n64<1>(o[nb], pf[kk], db, 1);
      }
    wg_commit();
    wg_wait0();
    __syncthreads();  // every warpgroup is done with this buffer before the next prefetch overwrites it
  }
  cp_async_wait<0>();

#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    l_a += __shfl_xor_sync(0xffffffffu, l_a, off);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, off);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int i = half ? row_b : row_a;
    if (i >= p.Nq) continue;
    const float m = half ? m_b : m_a, l = half ? l_b : l_a;
    const bool empty = m == neg_inf();
    const int64_t base = ((static_cast<int64_t>(b) * p.Nq + i) * p.H + h) * D;
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int d = nb * 64 + j * 8 + 2 * tq;
        const float x0 = empty ? 0.0f : o[nb][4 * j + 2 * half] / l, x1 = empty ? 0.0f : o[nb][4 * j + 2 * half + 1] / l;
        *reinterpret_cast<__nv_bfloat162*>(p.o_out + base + d) = __floats2bfloat162_rn(x0, x1);  // F5
        if (p.o_fp32_out) *reinterpret_cast<float2*>(p.o_fp32_out + base + d) = make_float2(x0, x1);
      }
    if (tq == 0) p.lse_out[(static_cast<int64_t>(b) * p.H + h) * p.Nq + i] = empty ? neg_inf() : m + logf(l);
  }
#else
  __trap();  // built without sm_90a: the launch file never selects this kernel then
#endif
}

}  // namespace gproj::cuda::detail
