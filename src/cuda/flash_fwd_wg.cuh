// CUDA forward v2 (experimental, FlashParams::cuda_wgmma_forward): Hopper wgmma instead of mma.sync. Two
// warpgroups per CTA (v2.12: three at D = 128), 64 query rows each; key blocks of 64 (fwdfix's block, as the CPU
// emulator's) in a 3-stage cp.async ring of 128B-swizzled shared memory. S = Q K^T: wgmma, K K-major from shared
// memory (Q as register A fragments since v2.9 with two warpgroups; from shared memory before and with three).
// O += bf16(P) V: P from the S accumulators as register A fragments (F4), V MN-major. v2.1 overlaps the softmax
// with the tensor cores inside each warpgroup: S of block j + 1 and P V of block j are issued back to back, the
// softmax of block j + 1 runs while P V of block j is in flight (same operations in the same order as v2.0, so
// the same bits). Register operands of an in-flight wgmma are pinned with fence_regs (wgmma.cuh). The softmax,
// its rounding points and the epilogue are those of flash_fwd_tc.cuh. The ring is v2.1's cp.async one; v2.2
// (kTma, the default) fills it with TMA instead (below). No warp specialisation.
// Needs sm_90a; exercised by tests/cuda/flash_cuda_test.cc (WgmmaForward*).
#pragma once

#include <type_traits>

#include "cuda/flash_fwd_tc.cuh"  // softmax_block
#include "cuda/kernel_common.cuh"
#include "cuda/mma.cuh"
#include "cuda/tma.cuh"
#include "cuda/wgmma.cuh"

namespace gproj::cuda::detail {

constexpr int kWgThreads = 256, kWgStages = 3;  // (kWgThreads: also the backward's CTA)

// v2.12: the forward's query rows per CTA, 64 per warpgroup: three warpgroups at D = 128 (three warps per scheduler
// instead of two: the forward is bound by its warps' dependent instructions, ncu session 35), two at D = 64 (where
// two CTAs share an SM instead). With three, the register budget is 168 a thread, so S = Q K^T takes Q from shared
// memory again (v2.9's 32 registers of Q fragments do not fit).
template <int D>
constexpr int kFwdWgRows = D == 128 ? 192 : 128;
template <int D>
constexpr int kFwdWgThreads = 2 * kFwdWgRows<D>;

// Bench-only ablation (CMake -DGPROJ_ABLATE, see flash_bwd_wg.cuh): bit 16 drops the statistics' 8 columns of P V
// (v2.6: P V is then m64n128k16; the records are zero and gproj's gradients wrong), bit 32 the K U blocks' copies
// (with 16: the form's extra registers, rescale and epilogue alone).
#ifndef GPROJ_ABLATE
#define GPROJ_ABLATE 0
#endif
constexpr bool kFwdAblateStats = (GPROJ_ABLATE & 16) != 0, kFwdAblateTiles = (GPROJ_ABLATE & 32) != 0;

template <int D, bool kStats = false>
constexpr size_t fwd_wg_smem_bytes() {
  // + 1024: tiles realigned to 1024 B; + 64: v2.2's mbarriers; v2.6 (kStats): an 8 KB K U column block per V stage
  return sizeof(bf16_t) * (kFwdWgRows<D> * D + 2 * kWgStages * 64 * D) + (kStats ? kWgStages * 8192 : 0) + 1024 + 64;
}

// Loads rows [n0, n0 + count) of a strided (B, N, H, D) tensor into a 128B-swizzled [D/64][kRows][64] tile.
template <int kRows, int D, int kThreads = kWgThreads>
__device__ __forceinline__ void load_sw128_async(bf16_t* dst, const Strided& t, int b, int n0, int count, int hh) {
  constexpr int kChunks = D / 8;
  const bf16_t* src = static_cast<const bf16_t*>(t.data);
  for (int x = threadIdx.x; x < kRows * kChunks; x += kThreads) {
    const int r = x / kChunks, c = x % kChunks;
    const bool in = r < count;
    const bf16_t* s = in ? src + b * t.s0 + static_cast<int64_t>(n0 + r) * t.s1 + hh * t.s2 + c * 8 : src;
    cp_async16(smem_u32(dst + sw128_offset(r, c * 8, kRows)), s, in);
  }
}

// 2^(m_old - m_new) of two integer running maxima (kH16), exactly: 1 when equal (both -inf too), 0 below 2^-126 or
// from -inf (the accumulators are zero then).
__device__ __forceinline__ float pow2_step(float m_old, float m_new) {
  if (m_old == m_new) return 1.0f;
  const float d = m_old - m_new;
  return d >= -126.0f ? __int_as_float((static_cast<int>(d) + 127) << 23) : 0.0f;
}

// kH16 (fp16-lowrank, docs/design-fp16-projection.md): one key block of the consistent P for a warp's 16 rows, the
// CPU emulator's cpu::forward_query_block step. Masks as softmax_block does, takes the row max of S in log2 units
// rounded up to an integer (m_new = max(m, ceil(max S scale log2e)): the rescale 2^(m_old - m_new) is exact), and
// leaves P^ = fp16(exp2(S scale log2e - m_new)) (one FFMA, rounded once) in s as FP32 values, which pack_p_f16
// converts exactly after the in-flight P V; l sums the rounded P^. No fwdfix: the integer max is the tie rule's
// replacement (the emulator's fp16-lowrank takes none).
template <bool kTree>
__device__ __forceinline__ void softmax_block_h16(const KernelParams& p, float (&s)[32], bool need_mask, int j0,
                                                  int tq, int lim_a, int lim_b, float& m_a, float& m_b, float& l_a,
                                                  float& l_b, float& alpha_a, float& alpha_b) {
  if (need_mask) {
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = j0 + n * 8 + 2 * tq + (e & 1);
        if (col > (e < 2 ? lim_a : lim_b) || col >= p.Nk) s[4 * n + e] = neg_inf();
      }
  }
  float t1a[8], t1b[8];
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    t1a[n] = fmaxf(s[4 * n], s[4 * n + 1]);
    t1b[n] = fmaxf(s[4 * n + 2], s[4 * n + 3]);
  }
#pragma unroll
  for (int w = 1; w < 8; w <<= 1)
#pragma unroll
    for (int n = 0; n < 8; n += 2 * w) {
      t1a[n] = fmaxf(t1a[n], t1a[n + w]);
      t1b[n] = fmaxf(t1b[n], t1b[n + w]);
    }
  float rm_a = t1a[0], rm_b = t1b[0];
#pragma unroll
  for (int o = 1; o <= 2; o <<= 1) {
    rm_a = fmaxf(rm_a, __shfl_xor_sync(0xffffffffu, rm_a, o));
    rm_b = fmaxf(rm_b, __shfl_xor_sync(0xffffffffu, rm_b, o));
  }
  const float sl2 = p.scale * kLog2e;  // the emulator's scale_log2 (scale > 0: the max of the scaled row)
  const float mn_a = fmaxf(m_a, ceilf(rm_a * sl2)), mn_b = fmaxf(m_b, ceilf(rm_b * sl2));
  alpha_a = pow2_step(m_a, mn_a);
  alpha_b = pow2_step(m_b, mn_b);
  m_a = mn_a;
  m_b = mn_b;
  const float mu_a = mn_a == neg_inf() ? 0.0f : mn_a, mu_b = mn_b == neg_inf() ? 0.0f : mn_b;
  float psa[8], psb[8];
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    const float2 pa = __half22float2(__floats2half2_rn(fast_exp2(fmaf(s[4 * n], sl2, -mu_a)),
                                                       fast_exp2(fmaf(s[4 * n + 1], sl2, -mu_a))));
    const float2 pb = __half22float2(__floats2half2_rn(fast_exp2(fmaf(s[4 * n + 2], sl2, -mu_b)),
                                                       fast_exp2(fmaf(s[4 * n + 3], sl2, -mu_b))));
    s[4 * n] = pa.x, s[4 * n + 1] = pa.y, s[4 * n + 2] = pb.x, s[4 * n + 3] = pb.y;
    psa[n] = pa.x + pa.y;
    psb[n] = pb.x + pb.y;
  }
  if constexpr (kTree) {
#pragma unroll
    for (int w = 1; w < 8; w <<= 1)
#pragma unroll
      for (int n = 0; n < 8; n += 2 * w) {
        psa[n] += psa[n + w];
        psb[n] += psb[n + w];
      }
  } else {
#pragma unroll
    for (int n = 1; n < 8; ++n) {
      psa[0] += psa[n];
      psb[0] += psb[n];
    }
  }
  l_a = l_a * alpha_a + psa[0];
  l_b = l_b * alpha_b + psb[0];
}

// P^ (FP16 values held as FP32 by softmax_block_h16) as f16x2 A fragments of P V: exact conversions.
__device__ __forceinline__ void pack_p_f16(const float (&s)[32], uint32_t (&pf)[4][4]) {
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    pf[n >> 1][(n & 1) * 2] = pack_f16(s[4 * n], s[4 * n + 1]);
    pf[n >> 1][(n & 1) * 2 + 1] = pack_f16(s[4 * n + 2], s[4 * n + 3]);
  }
}

// kTma (v2.2): thread 0 loads Q and the K, V blocks with TMA (two blocks ahead, three stages; mbarriers full per
// stage, completed by the copies, and empty per stage, one arrival per warp once its P V of the block is done),
// and no CTA-wide barrier remains in the loop: the two warpgroups drift apart, as in the backward's v3.1.
// kStats (v2.3, on v2.2; gproj with thresh-lowrank): thresh-lowrank's row statistics ride on P V. v2.6: each V
// stage has a third column block (a second at D = 64), which the producer fills with the block's 64 rows of
// p.ku_tiles through the tensor map maps.ku (bf16(K U) in columns 0-5, a one in kStatS; columns 8-63 and keys
// past Nk zero), so that P V is one m64n136k16 (m64n72k16) per 16 keys whose last n8 block is bf16(P) [K U | 1 |
// 0], rescaled with O (v2.3 had four m64n8k16 products of their own beside P V, against a K-major [8][64] tile of
// the transpose; docs/design-fwd-stats-pv.md). The epilogue divides by l like O and writes the row's record
// (p.fwd_stats): P (K U) in columns 0-5 and s_i = sum_j bf16(P)_ij in column kStatS, from the same bf16(P) as
// O. The backward (v3.9) then forms only r_i (docs/gproj-forward-stats.md).
// Registers: at D = 64 two CTAs share an SM (67 KB of shared memory each) only while the kernel needs <= 128
// registers, and then each scheduler holds four warps instead of two: the forward, bound by its warps' dependent
// instructions (ncu, session 35), runs ~25% faster so. v2.10 (203 registers) and v2.11's first form (140 for
// fwdfix) fell to one CTA per SM and lost 34-35% at D = 64; the kernels here need 127 (baseline) and 128 (fwdfix).
// (Launch bounds asking for two CTAs would hold that, but made ptxas schedule fwdfix's D = 64 step differently;
// check `-Xptxas -v` after a change instead.) v2.3-h16 at D = 64 (session 46 candidate) asks for two: without
// them it took 150 registers and one CTA an SM; with them 128, no spills, 16 SASS instructions more (3640).
// Shared memory: 89 KB a CTA, two fit.
// kH16 (fp16-lowrank, on v2.3; docs/design-fp16-projection.md, build step 3): the consistent P (softmax_block_h16),
// P V and the statistics as one FP16 product against the FP16 copy of V (maps.v over the conversion pass's vh)
// and fp16(K U s_ku) tiles (maps.ku), O = acc / (l s_v), LSE = (m + log2 l) ln 2, the record's P (K U) / (l s_ku).
template <int D, bool kTieFix, bool kTma = false, bool kStats = false, bool kH16 = false>
__global__ void __launch_bounds__(kFwdWgThreads<D>, kH16 && D == 64 ? 2 : 1)
    flash_fwd_wg_kernel(const KernelParams p, const __grid_constant__ TmaMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int BQ = kFwdWgRows<D>, BK = 64, kNB = D / 64, kThreads = kFwdWgThreads<D>;
  static_assert(!kStats || kTma, "the forward's statistics ride on v2.2's TMA ring");
  static_assert(!kH16 || (kStats && !kTieFix), "fp16-lowrank's forward: v2.3, no fwdfix");
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  bf16_t* sQ = reinterpret_cast<bf16_t*>(smem_raw + (((raw + 1023) & ~1023u) - raw));  // [kNB][BQ][64]
  bf16_t* sK = sQ + BQ * D;                // [kWgStages][kNB][BK][64], K-major for S = Q K^T
  // [kWgStages][kNB (+ 1 with kStats)][BK][64], MN-major for O += P V; v2.6 (kStats): each stage's last column
  // block is the K U block ([BK keys][64]: bf16(K U) in columns 0-5, a one in kStatS, zeros after)
  constexpr int kVStage = BK * D + (kStats ? BK * 64 : 0);
  bf16_t* sV = sK + kWgStages * BK * D;
  uint64_t* full = reinterpret_cast<uint64_t*>(sV + kWgStages * kVStage);  // v2.2: [3] K, V landed; [3] empty;
  uint64_t* empty = full + 3;                                              // [1] Q landed
  uint64_t* q_full = full + 6;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  // wg through a broadcast: the compiler then knows it is warp-uniform, and the shared-memory descriptors that
  // depend on it live in uniform registers (forward 1.46 -> 1.41 ms on the H200; the same change made gproj's
  // backward 10% slower and was reverted there: docs/perf-notes.md, session 9).
  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0), w4 = warp & 3;
  const int b = blockIdx.z, h = blockIdx.y;
  const int qb = p.causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
  const int i0 = qb * BQ, hk = h / (p.H / p.Hkv);
  const int rows = min(BQ, p.Nq - i0);
  const int j_end = p.causal ? max(0, min(p.Nk, i0 + rows + p.Nk - p.Nq)) : p.Nk;
  const int nblocks = (j_end + BK - 1) / BK;
  const auto load_kv = [&](int jb) {  // one cp.async group per key block (possibly empty, to keep the count)
    if (jb < nblocks) {
      const int j0 = jb * BK, cnt = min(BK, p.Nk - j0), st = jb % kWgStages;
      load_sw128_async<BK, D, kThreads>(sK + st * BK * D, p.k, b, j0, cnt, hk);
      load_sw128_async<BK, D, kThreads>(sV + st * kVStage, p.v, b, j0, cnt, hk);
    }
    cp_async_commit();
  };

  const auto tma_kv = [&](int jb) {  // v2.2, thread 0: K, V of block jb into stage jb % 3 (rows past Nk: zeros)
    const int st = jb % kWgStages;
    mbar_arrive_expect_tx(&full[st],
                          2 * BK * D * sizeof(bf16_t) + (kStats && !kFwdAblateTiles ? 64 * BK * sizeof(bf16_t) : 0));
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) {
      tma_load_4d(sK + st * BK * D + nb * BK * 64, &maps.k, nb * 64, hk, jb * BK, b, &full[st]);
      tma_load_4d(sV + st * kVStage + nb * BK * 64, &maps.v, nb * 64, hk, jb * BK, b, &full[st]);
    }
    if constexpr (kStats && !kFwdAblateTiles) {  // columns 8-63 and keys past Nk arrive as zeros
      tma_load_4d(sV + st * kVStage + kNB * BK * 64, &maps.ku, 0, jb * BK, hk, b, &full[st]);
    }
  };
  if constexpr (kTma) {
    init_load_ring(full, empty, kWgStages, kThreads / 32, q_full);
    if (threadIdx.x == 0) {
      mbar_arrive_expect_tx(q_full, BQ * D * sizeof(bf16_t));  // whole boxes: rows past Nq arrive as zeros
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
        for (int r = 0; r < BQ; r += 64)
          tma_load_4d(sQ + nb * BQ * 64 + r * 64, &maps.q, nb * 64, h, i0 + r, b, q_full);
      for (int jb = 0; jb < min(2, nblocks); ++jb) tma_kv(jb);
    }
  } else {
    load_sw128_async<BQ, D, kThreads>(sQ, p.q, b, i0, rows, h);
    load_kv(0);  // group 0: Q, K0, V0
    load_kv(1);
  }

  const int r0 = wg * 64 + w4 * 16;  // this warp's 16 rows inside the CTA's BQ
  const int row_a = i0 + r0 + g, row_b = row_a + 8;
  const int lim_a = last_visible(p, row_a), lim_b = last_visible(p, row_b);
  const int warp_lim = last_visible(p, i0 + r0);
  // O's accumulator and, v2.6 (kStats), its last n8 block: bf16(P) [K U | 1 | 0] (rows a, b), the same product
  float oacc[kNB * 32 + 4];
#pragma unroll
  for (int e = 0; e < kNB * 32 + 4; ++e) oacc[e] = 0.0f;
  auto& o = reinterpret_cast<float(&)[kNB][32]>(oacc);
  auto& kus = reinterpret_cast<float(&)[4]>(oacc[kNB * 32]);
  float m_a = neg_inf(), m_b = neg_inf(), l_a = 0.0f, l_b = 0.0f;
  float s[32];
  // v2.9: this warp's 16 rows of Q as wgmma A fragments (the m16k16 layout of mma.sync), loaded once from sQ
  // after it has landed, so that S = Q K^T reads only K from shared memory: with both operands there (m64n64k16,
  // 4 KB per k-step) the S product alone asked as many bytes of shared memory per clock as the tensor cores could
  // use (docs/perf-notes.md, session 34). D = 128: 32 registers, which v2.12's three warpgroups do not have.
  constexpr bool kQRegs = kThreads == 256;
  uint32_t qf[kQRegs ? kNB * 4 : 1][4];
  const auto load_q_frags = [&]() {
    if constexpr (kQRegs) {
#pragma unroll
      for (int kb = 0; kb < kNB; ++kb)
#pragma unroll
        for (int kin = 0; kin < 4; ++kin)
          ldsm_x4(qf[kb * 4 + kin], smem_u32(sQ + kb * BQ * 64 + swz<64>(r0 + (lane & 15), kin * 2 + (lane >> 4))));
    }
  };
  // S = Q K^T of key block jb (stage jb % kWgStages) for this warpgroup's 64 rows: issued, not waited for.
  const auto issue_s = [&](int jb) {
    const bf16_t* kt = sK + __shfl_sync(0xffffffffu, jb % kWgStages, 0) * BK * D;  // warp-uniform stage
    const uint64_t k_desc0 = wg_desc_kmajor(kt);
    [[maybe_unused]] const uint64_t q_desc0 = wg_desc_kmajor(sQ + wg * 64 * 64);  // (Q from shared memory)
    wg_fence();
#pragma unroll
    for (int kb = 0; kb < kNB; ++kb)
#pragma unroll
      for (int kin = 0; kin < 4; ++kin) {
        const uint64_t db = wg_desc_advance(k_desc0, kb * BK * 64 + kin * 16);
        if constexpr (kQRegs) {
          if (kb + kin == 0) wgmma_rs_n64_first(s, qf[0], db);
          else wgmma_rs_n64<0>(s, qf[kb * 4 + kin], db, 1);
        } else {
          const uint64_t da = wg_desc_advance(q_desc0, kb * BQ * 64 + kin * 16);
          if (kb + kin == 0) wgmma_ss_n64_first(s, da, db);
          else wgmma_ss_n64<0>(s, da, db, 1);
        }
      }
    wg_commit();
  };

  if constexpr (kTma) mbar_wait(q_full, 0);  // also when no key block is visible: no copy may outlive the CTA
  if (nblocks > 0) {
    if constexpr (kTma) {
      mbar_wait(&full[0], 0);
    } else {
      cp_async_wait<1>();  // group 0
      fence_async_smem();
      __syncthreads();
    }
    load_q_frags();
    issue_s(0);
    wg_wait0();
    fence_regs(s);
  }
  uint32_t pf[4][4];  // bf16(P) of the block whose P V is in flight (a wgmma operand until the next wait)
  // One step per key block; kNext: S of block jb + 1 is issued beside P V of block jb. The last block is a
  // separate instantiation so that every step has a static wgmma group count (ptxas then keeps them async).
  const auto step = [&](int jb, auto next) {
    constexpr bool kNext = decltype(next)::value;
    const int j0 = jb * BK;
    // Mask, row max, fwdfix, online softmax of block jb: the same step as flash_fwd_tc_kernel. Runs while
    // P V of block jb - 1 is still on the tensor cores.
    float alpha_a, alpha_b;
    // v2.5: the mask test as two inlined copies of the step (need_mask is warp-uniform), so that a block no row
    // of the warp needs masked runs without it. With the flag at run time, ptxas kept one copy and tested it per
    // 8-column tile, each test a branch with its predicates recomputed (BSSY / BRA / BSYNC and ten ISETP per
    // block: ~60 of the ~400 warp instructions per block, 15% of the stall samples, non-causal N = 4k).
    const bool need_mask = j0 + BK > p.Nk || j0 + BK - 1 > warp_lim;
    constexpr bool kTree = D == 128;  // v2.11
    if constexpr (kH16) {
      if (need_mask) {
        softmax_block_h16<kTree>(p, s, true, j0, tq, lim_a, lim_b, m_a, m_b, l_a, l_b, alpha_a, alpha_b);
      } else {
        softmax_block_h16<kTree>(p, s, false, j0, tq, lim_a, lim_b, m_a, m_b, l_a, l_b, alpha_a, alpha_b);
      }
    } else if (need_mask) {
      softmax_block<kTieFix, false, kTree>(p, s, true, j0, tq, lim_a, lim_b, m_a, m_b, l_a, l_b, alpha_a, alpha_b, pf);
    } else {
      softmax_block<kTieFix, false, kTree>(p, s, false, j0, tq, lim_a, lim_b, m_a, m_b, l_a, l_b, alpha_a, alpha_b, pf);
    }
    wg_wait0();  // P V of block jb - 1: o and pf are free
    // Nothing below may move above the wait: the fences make the packing and the rescale depend on it. (pf is
    // written only here, after the wait: an earlier pack, even into other variables, let the compiler put the
    // new bf16(P) into the registers the in-flight P V was reading; seen in the PTX of v2.1's first try.)
    fence_regs(s);
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) fence_regs(o[nb]);
    if constexpr (kStats) fence_regs(kus);
    if constexpr (kH16) {
      pack_p_f16(s, pf);
    } else {
      pack_p(s, pf);
    }
    if (!__all_sync(0xffffffffu, alpha_a == 1.0f && alpha_b == 1.0f)) {  // else the identity (see v1)
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          o[nb][4 * j] *= alpha_a;
          o[nb][4 * j + 1] *= alpha_a;
          o[nb][4 * j + 2] *= alpha_b;
          o[nb][4 * j + 3] *= alpha_b;
        }
      if constexpr (kStats) {
        kus[0] *= alpha_a;
        kus[1] *= alpha_a;
        kus[2] *= alpha_b;
        kus[3] *= alpha_b;
      }
    }
    if (kTma && jb >= 1 && lane == 0) mbar_arrive(&empty[(jb - 1) % kWgStages]);  // P V of jb - 1 is done
    if (kNext) {
      if constexpr (kTma) {
        // Block jb + 2 into the stage of block jb - 1 once all eight warps have released it; then wait for
        // block jb + 1 (loaded two blocks ago).
        if (threadIdx.x == 0 && jb + 2 < nblocks) {
          if (jb >= 1) mbar_wait(&empty[(jb + 2) % kWgStages], ((jb - 1) / kWgStages) & 1);
          tma_kv(jb + 2);
        }
        mbar_wait(&full[(jb + 1) % kWgStages], ((jb + 1) / kWgStages) & 1);
      } else {
        // Block jb + 1 is loaded (its group was committed an iteration ago) and, after the barrier, stage
        // (jb + 2) % 3 = (jb - 1) % 3 is free in both warpgroups (their P V of block jb - 1 has completed).
        cp_async_wait<0>();
        fence_async_smem();
        __syncthreads();
        load_kv(jb + 2);
      }
      issue_s(jb + 1);
    }
    // O += bf16(P) V of block jb, 16 keys per step: at D = 128 both 64-column blocks of V in one m64n128k16 (the
    // descriptor's N-block stride is the blocks' 8 KB; session 13), at D = 64 one m64n64k16.
    const bf16_t* vt = sV + __shfl_sync(0xffffffffu, jb % kWgStages, 0) * kVStage;  // warp-uniform stage
    const uint64_t v_desc0 = wg_desc_mnmajor(vt, BK * 128);
    wg_fence();
    if constexpr (kStats && !kFwdAblateStats && kNB == 2) {  // v2.6: the record's 8 columns ride on P V (n136)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma_rs_n136<1, kH16>(reinterpret_cast<float(&)[68]>(oacc), pf[kk], wg_desc_advance(v_desc0, kk * 16 * 64),
                               1);
    } else if constexpr (kStats && !kFwdAblateStats) {  // (D = 64: n72)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma_rs_n72<1, kH16>(reinterpret_cast<float(&)[36]>(oacc), pf[kk], wg_desc_advance(v_desc0, kk * 16 * 64), 1);
    } else if constexpr (kNB == 2) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma_rs_n128<1>(reinterpret_cast<float(&)[64]>(o), pf[kk], wg_desc_advance(v_desc0, kk * 16 * 64), 1);
    } else {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma_rs_n64<1>(o[0], pf[kk], wg_desc_advance(v_desc0, kk * 16 * 64), 1);
    }
    wg_commit();
    if (kNext) {
      wg_wait1();      // S of block jb + 1 (P V of block jb may still run)
      fence_regs(s);   // the next softmax reads s after the wait, not before
    }
  };
  for (int jb = 0; jb + 1 < nblocks; ++jb) step(jb, std::true_type{});
  if (nblocks > 0) step(nblocks - 1, std::false_type{});
  wg_wait0();
#pragma unroll
  for (int nb = 0; nb < kNB; ++nb) fence_regs(o[nb]);
  if constexpr (!kTma) cp_async_wait<0>();
  if constexpr (kStats) {  // the record of rows a, b: columns 2 tq, 2 tq + 1, divided by the row's l as O is
    fence_regs(kus);
    float la = l_a, lb = l_b;
#pragma unroll
    for (int x = 1; x <= 2; x <<= 1) {
      la += __shfl_xor_sync(0xffffffffu, la, x);
      lb += __shfl_xor_sync(0xffffffffu, lb, x);
    }
    const int64_t rec = (static_cast<int64_t>(b) * p.H + h) * p.Nq;
    // kH16: the K U columns (0-5, threads tq < 3) carry s_ku; the ones column (kStatS, tq = 3) does not.
    if constexpr (kH16) {
      if (2 * tq < kTailRank) {
        const float s_ku = fp16_ku_scale<D>(p.fp16_scales[fp16_k_slot(p.B, p.H, p.Hkv, b, hk)]);
        la *= s_ku;
        lb *= s_ku;
      }
    }
    if (row_a < p.Nq) {
      const bool empty = m_a == neg_inf();
      *reinterpret_cast<float2*>(p.fwd_stats + (rec + row_a) * kLowRank + 2 * tq) =
          empty ? make_float2(0.0f, 0.0f) : make_float2(kus[0] / la, kus[1] / la);
    }
    if (row_b < p.Nq) {
      const bool empty = m_b == neg_inf();
      *reinterpret_cast<float2*>(p.fwd_stats + (rec + row_b) * kLowRank + 2 * tq) =
          empty ? make_float2(0.0f, 0.0f) : make_float2(kus[2] / lb, kus[3] / lb);
    }
  }

  // The wgmma accumulator [kNB][32] is the mma.sync layout [D / 8][4] (n8 tile 8 nb + j, element e).
  if constexpr (kH16) {
    store_o_lse<D, true>(p, b, h, row_a, tq, m_a, m_b, l_a, l_b, reinterpret_cast<const float(&)[D / 8][4]>(o),
                         p.fp16_scales[fp16_v_slot(p.B, p.H, p.Hkv, b, hk)]);
  } else {
    store_o_lse<D>(p, b, h, row_a, tq, m_a, m_b, l_a, l_b, reinterpret_cast<const float(&)[D / 8][4]>(o));
  }
#else
  __trap();  // built without sm_90a: the launch file never selects this kernel then
#endif
}

}  // namespace gproj::cuda::detail
