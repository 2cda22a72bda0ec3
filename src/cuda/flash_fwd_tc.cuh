// CUDA forward v1: tensor cores (mma.sync m16n8k16 BF16), FlashAttention-2 structure. One CTA per
// 16*kWarps query rows, each warp owns 16 rows and the whole head dim; key blocks of 64 (the CPU emulator's
// block_k, so fwdfix's per-block tie rule is the same) double-buffered with cp.async into swizzled shared
// memory. Rounding points as the CPU emulator: S in FP32, l sums the FP32 P, F4 bf16(P) before PV, F5 O.
// Exercised by tests/cuda/flash_cuda_test.cc against the float64 oracle and the CPU emulator.
#pragma once

#include "cuda/kernel_common.cuh"
#include "cuda/mma.cuh"

namespace gproj::cuda::detail {

constexpr int kTcBlockK = 64;

template <int D, int kWarps>
constexpr size_t fwd_tc_smem_bytes() {
  return sizeof(bf16_t) * (16 * kWarps * D + 4 * kTcBlockK * D);
}

// One key block of the online softmax for a warp's 16 rows (rows g and g + 8 of each thread), shared by the
// mma.sync and wgmma forwards: s holds the 16 x 64 dot products in the m16n8 C layout, s[4 n + e] at row
// g + 8 (e / 2), column 8 n + 2 t + e % 2. Masks (only when the block crosses a row's limit or the end of the
// keys), takes the row max on the unscaled dot products (rounding is monotone, so scale * max(dot) is the max of
// S = scale * dot exactly), applies fwdfix's tie rule, updates m and l (the FP32 P), and returns bf16(P) as the
// A fragments of the PV product (F4) and the factors the caller rescales its O accumulators by. kPackP = false:
// the FP32 P is left in s instead (pf untouched), for a caller that packs it later (pack_p).
template <bool kTieFix, bool kPackP = true, bool kTree = false>
__device__ __forceinline__ void softmax_block(const KernelParams& p, float (&s)[32], bool need_mask, int j0, int tq,
                                              int lim_a, int lim_b, float& m_a, float& m_b, float& l_a, float& l_b,
                                              float& alpha_a, float& alpha_b, uint32_t (&pf)[4][4]) {
  // Row max and, for fwdfix, the second largest value (with multiplicity) of each row.
  float rm_a = neg_inf(), rm_b = neg_inf(), sec_a = neg_inf(), sec_b = neg_inf();
  const auto mask_tile = [&](int n) {  // n-tile n's columns past each row's limit or the keys' end
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = j0 + n * 8 + 2 * tq + (e & 1);
      if (col > (e < 2 ? lim_a : lim_b) || col >= p.Nk) s[4 * n + e] = neg_inf();
    }
  };
  if constexpr (kTree) {
    if (need_mask) {
#pragma unroll
      for (int n = 0; n < 8; ++n) mask_tile(n);
    }
    // v2.11 (the wgmma forward at D = 128): trees over the thread's 8 n-tiles. The forward is bound by its warps'
    // dependent instructions (ncu, session 35: ~2.2 cycles of `wait` stall per instruction, two warps per
    // scheduler), and the chains below are 8 (max) and 24 (top two) instructions deep per row; the trees are 4
    // and 10, for 16 more live registers. The max and the top two are the same values in any order. The top-two
    // merge of (a1 >= a2) and (b1 >= b2) is (max(a1, b1), max(min(a1, b1), max(a2, b2))); a pair's is (max, min).
    float t1a[8], t1b[8], t2a[8], t2b[8];  // the top two of each n-tile's pair, rows a and b
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      t1a[n] = fmaxf(s[4 * n], s[4 * n + 1]);
      t1b[n] = fmaxf(s[4 * n + 2], s[4 * n + 3]);
      if (kTieFix) {
        t2a[n] = fminf(s[4 * n], s[4 * n + 1]);
        t2b[n] = fminf(s[4 * n + 2], s[4 * n + 3]);
      }
    }
#pragma unroll
    for (int w = 1; w < 8; w <<= 1)
#pragma unroll
      for (int n = 0; n < 8; n += 2 * w) {
        if (kTieFix) {
          t2a[n] = fmaxf(fminf(t1a[n], t1a[n + w]), fmaxf(t2a[n], t2a[n + w]));
          t2b[n] = fmaxf(fminf(t1b[n], t1b[n + w]), fmaxf(t2b[n], t2b[n + w]));
        }
        t1a[n] = fmaxf(t1a[n], t1a[n + w]);
        t1b[n] = fmaxf(t1b[n], t1b[n + w]);
      }
    rm_a = t1a[0], rm_b = t1b[0];
    if (kTieFix) sec_a = t2a[0], sec_b = t2b[0];
  } else {
    // Chains: top-2 merges of pairs (hi, lo) into (m1 >= m2): m2' = max(min(m1, hi), max(m2, lo)), m1' = max(m1,
    // hi). Fewer live registers: at D = 64 the wgmma forward keeps two CTAs per SM only at <= 128.
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      if (need_mask) mask_tile(n);
      const float hi_a = fmaxf(s[4 * n], s[4 * n + 1]), hi_b = fmaxf(s[4 * n + 2], s[4 * n + 3]);
      if (kTieFix) {
        sec_a = fmaxf(fminf(rm_a, hi_a), fmaxf(sec_a, fminf(s[4 * n], s[4 * n + 1])));
        sec_b = fmaxf(fminf(rm_b, hi_b), fmaxf(sec_b, fminf(s[4 * n + 2], s[4 * n + 3])));
      }
      rm_a = fmaxf(rm_a, hi_a);
      rm_b = fmaxf(rm_b, hi_b);
    }
  }
#pragma unroll
  for (int o = 1; o <= 2; o <<= 1) {
    const float oa = __shfl_xor_sync(0xffffffffu, rm_a, o), ob = __shfl_xor_sync(0xffffffffu, rm_b, o);
    if (kTieFix) {
      const float sa = __shfl_xor_sync(0xffffffffu, sec_a, o), sb = __shfl_xor_sync(0xffffffffu, sec_b, o);
      sec_a = fmaxf(fminf(rm_a, oa), fmaxf(sec_a, sa));
      sec_b = fmaxf(fminf(rm_b, ob), fmaxf(sec_b, sb));
    }
    rm_a = fmaxf(rm_a, oa);
    rm_b = fmaxf(rm_b, ob);
  }
  rm_a *= p.scale;
  rm_b *= p.scale;
  float cand_a = rm_a, cand_b = rm_b;
  if (kTieFix) {
    // fwdfix: a tie at this block's max (more than one entry with scale s >= r_m - tol) lifts the candidate to
    // beta r_m (or 0 when negative). x -> fl(scale x) is monotone, so more than one entry qualifies exactly when
    // the second largest does: the count of the CPU emulator without counting.
    if (rm_a != neg_inf() && sec_a * p.scale >= rm_a - p.tie_tol) cand_a = tied_candidate(rm_a, p.beta, p.max_shift);
    if (rm_b != neg_inf() && sec_b * p.scale >= rm_b - p.tie_tol) cand_b = tied_candidate(rm_b, p.beta, p.max_shift);
  }
  const float mn_a = fmaxf(m_a, cand_a), mn_b = fmaxf(m_b, cand_b);
  const float mu_a = mn_a == neg_inf() ? 0.0f : mn_a, mu_b = mn_b == neg_inf() ? 0.0f : mn_b;
  alpha_a = fast_exp2((m_a - mu_a) * kLog2e);
  alpha_b = fast_exp2((m_b - mu_b) * kLog2e);
  m_a = mn_a;
  m_b = mn_b;
  // exp(S - m) as exp2(dot * scale log2e - m log2e): one FFMA and one MUFU per element.
  const float sl2 = p.scale * kLog2e, ml_a = mu_a * kLog2e, ml_b = mu_b * kLog2e;
  // kTree: the block's row sums as trees too (the chain is 16 FADDs deep): another FP32 order of the same sum,
  // which the GPU's l never shared with the CPU emulator's (the quad's partial sums meet only at the end).
  float psa[8], psb[8];
  float ps_a = 0.0f, ps_b = 0.0f;
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    const float e0 = fast_exp2(fmaf(s[4 * n], sl2, -ml_a)), e1 = fast_exp2(fmaf(s[4 * n + 1], sl2, -ml_a));
    const float e2 = fast_exp2(fmaf(s[4 * n + 2], sl2, -ml_b)), e3 = fast_exp2(fmaf(s[4 * n + 3], sl2, -ml_b));
    if constexpr (kTree) {
      psa[n] = e0 + e1;
      psb[n] = e2 + e3;
    } else {
      ps_a += e0 + e1;
      ps_b += e2 + e3;
    }
    if (kPackP) {
      pf[n >> 1][(n & 1) * 2] = pack_bf16(e0, e1);
      pf[n >> 1][(n & 1) * 2 + 1] = pack_bf16(e2, e3);
    } else {
      s[4 * n] = e0, s[4 * n + 1] = e1, s[4 * n + 2] = e2, s[4 * n + 3] = e3;
    }
  }
  if constexpr (kTree) {
#pragma unroll
    for (int w = 1; w < 8; w <<= 1)
#pragma unroll
      for (int n = 0; n < 8; n += 2 * w) {
        psa[n] += psa[n + w];
        psb[n] += psb[n + w];
      }
    ps_a = psa[0];
    ps_b = psb[0];
  }
  l_a = l_a * alpha_a + ps_a;
  l_b = l_b * alpha_b + ps_b;
}

// bf16(P) as PV A fragments from the FP32 P that softmax_block<kTieFix, false> left in s (F4).
__device__ __forceinline__ void pack_p(const float (&s)[32], uint32_t (&pf)[4][4]) {
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    pf[n >> 1][(n & 1) * 2] = pack_bf16(s[4 * n], s[4 * n + 1]);
    pf[n >> 1][(n & 1) * 2 + 1] = pack_bf16(s[4 * n + 2], s[4 * n + 3]);
  }
}

// F5 and the LSE: the quad's partial row sums l are summed, O = bf16(acc / l) (and the FP32 acc / l when asked)
// of rows row_a and row_a + 8 from accumulators in the m16n8 C layout (acc[n][e]: column 8 n + 2 t + e % 2), and
// LSE = m + log(l); empty rows give O = 0 and LSE = -inf. Shared by the mma.sync and wgmma forwards.
// kH16 (fp16-lowrank, the consistent P): m is in log2 units, LSE = (m + log2 l) ln 2, and acc is in the units of
// the FP16 V, scaled by the power of two v_scale: O = acc / (l v_scale); and p.o16_out gets fp16(acc / l) = fp16(O
// v_scale), the FP16 copy of O the backward's delta reads.
template <int D, bool kH16 = false>
__device__ __forceinline__ void store_o_lse(const KernelParams& p, int b, int h, int row_a, int tq, float m_a,
                                            float m_b, float l_a, float l_b, const float (&acc)[D / 8][4],
                                            float v_scale = 1.0f) {
#pragma unroll
  for (int o = 1; o <= 2; o <<= 1) {
    l_a += __shfl_xor_sync(0xffffffffu, l_a, o);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, o);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int i = row_a + 8 * half;
    if (i >= p.Nq) continue;
    const float m = half ? m_b : m_a, l_sum = half ? l_b : l_a;
    const float l = kH16 ? l_sum * v_scale : l_sum;
    const bool empty = m == neg_inf();
    const int64_t base = ((static_cast<int64_t>(b) * p.Nq + i) * p.H + h) * D;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const int d = n * 8 + 2 * tq;
      const float x0 = empty ? 0.0f : acc[n][2 * half] / l, x1 = empty ? 0.0f : acc[n][2 * half + 1] / l;
      *reinterpret_cast<__nv_bfloat162*>(p.o_out + base + d) = __floats2bfloat162_rn(x0, x1);  // F5
      if constexpr (kH16) {  // O s_v = acc / l in FP16: the backward's delta reads it (the emulator's rounding)
        const float y0 = empty ? 0.0f : acc[n][2 * half] / l_sum, y1 = empty ? 0.0f : acc[n][2 * half + 1] / l_sum;
        *reinterpret_cast<__half2*>(p.o16_out + base + d) = __floats2half2_rn(y0, y1);
      }
      if (p.o_fp32_out) *reinterpret_cast<float2*>(p.o_fp32_out + base + d) = make_float2(x0, x1);
    }
    if (tq == 0) {
      const float lse = kH16 ? (m + log2f(l_sum)) * 0.693147180559945309f : m + logf(l);
      p.lse_out[(static_cast<int64_t>(b) * p.H + h) * p.Nq + i] = empty ? neg_inf() : lse;
    }
  }
}

template <int D, int kWarps, bool kTieFix>
// D = 64 is held to 128 registers so two CTAs fit on an SM (at 131 the fwdfix kernel ran at one: -40%).
__global__ void __launch_bounds__(kWarps * 32, D == 64 ? 2 : 1) flash_fwd_tc_kernel(const KernelParams p) {
  constexpr int BQ = 16 * kWarps, BK = kTcBlockK, kT = kWarps * 32, kNt = D / 8;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16_t* sQ = reinterpret_cast<bf16_t*>(smem_raw);  // [BQ][D]
  bf16_t* sK = sQ + BQ * D;                           // [2][BK][D]
  bf16_t* sV = sK + 2 * BK * D;                       // [2][BK][D]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int b = blockIdx.z, h = blockIdx.y;
  const int qb = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;  // causal: longest rows first
  const int i0 = qb * BQ, hk = h / (p.H / p.Hkv);
  const int rows = min(BQ, p.Nq - i0);
  const int j_end = p.causal ? max(0, min(p.Nk, i0 + rows + p.Nk - p.Nq)) : p.Nk;
  const int nblocks = (j_end + BK - 1) / BK;

  load_tile_async<BQ, D, kT>(sQ, p.q.data, p.q.s0, p.q.s1, p.q.s2, b, i0, rows, h);
  if (nblocks > 0) {
    load_tile_async<BK, D, kT>(sK, p.k.data, p.k.s0, p.k.s1, p.k.s2, b, 0, min(BK, p.Nk), hk);
    load_tile_async<BK, D, kT>(sV, p.v.data, p.v.s0, p.v.s1, p.v.s2, b, 0, min(BK, p.Nk), hk);
  }
  cp_async_commit();

  const int r0 = warp * 16;
  const int row_a = i0 + r0 + g, row_b = row_a + 8;
  const int lim_a = last_visible(p, row_a), lim_b = last_visible(p, row_b);
  const int warp_lim = last_visible(p, i0 + r0);  // smallest limit of the warp's rows
  float acc[kNt][4];
#pragma unroll
  for (int n = 0; n < kNt; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  float m_a = neg_inf(), m_b = neg_inf(), l_a = 0.0f, l_b = 0.0f;
  uint32_t qf[D / 16][4];

  for (int jb = 0; jb < nblocks; ++jb) {
    const int buf = jb & 1, j0 = jb * BK;
    if (jb + 1 < nblocks) {
      const int jn = j0 + BK, cnt = min(BK, p.Nk - jn);
      load_tile_async<BK, D, kT>(sK + (buf ^ 1) * BK * D, p.k.data, p.k.s0, p.k.s1, p.k.s2, b, jn, cnt, hk);
      load_tile_async<BK, D, kT>(sV + (buf ^ 1) * BK * D, p.v.data, p.v.s0, p.v.s1, p.v.s2, b, jn, cnt, hk);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if (jb == 0) {
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc)
        ldsm_x4(qf[kc], smem_u32(sQ + swz<D>(r0 + (lane & 15), kc * 2 + (lane >> 4))));
    }
    const bf16_t* kt = sK + buf * BK * D;
    const bf16_t* vt = sV + buf * BK * D;

    // S = Q K^T for the warp's 16 rows x 64 keys.
    float s[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t kb[4];
        ldsm_x4(kb, smem_u32(kt + swz<D>(np * 16 + (lane & 7) + ((lane >> 4) << 3), kc * 2 + ((lane >> 3) & 1))));
        mma16816(s[2 * np], qf[kc], kb[0], kb[1]);
        mma16816(s[2 * np + 1], qf[kc], kb[2], kb[3]);
      }
    }
    float alpha_a, alpha_b;
    uint32_t pf[4][4];
    const bool need_mask = j0 + BK > p.Nk || j0 + BK - 1 > warp_lim;
    softmax_block<kTieFix>(p, reinterpret_cast<float(&)[32]>(s), need_mask, j0, tq, lim_a, lim_b, m_a, m_b, l_a, l_b,
                           alpha_a, alpha_b, pf);
    // Rescale O unconditionally: skipping it behind a warp vote when alpha = 1 (v1.11) measured 9.5% slower
    // here (docs/perf-notes.md).
#pragma unroll
    for (int n = 0; n < kNt; ++n) {
      acc[n][0] *= alpha_a;
      acc[n][1] *= alpha_a;
      acc[n][2] *= alpha_b;
      acc[n][3] *= alpha_b;
    }
    // O += bf16(P) V.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t vb[4];
        ldsm_x4_t(vb, smem_u32(vt + swz<D>(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, dp * 2 + (lane >> 4))));
        mma16816(acc[2 * dp], pf[kk], vb[0], vb[1]);
        mma16816(acc[2 * dp + 1], pf[kk], vb[2], vb[3]);
      }
    }
    __syncthreads();  // every warp is done with this buffer before the next prefetch overwrites it
  }
  cp_async_wait<0>();

  store_o_lse<D>(p, b, h, row_a, tq, m_a, m_b, l_a, l_b, acc);
}

}  // namespace gproj::cuda::detail
