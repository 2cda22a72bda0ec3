// CUDA backward v3.0 (experimental, FlashParams::cuda_backward_wgmma; D = 64, 128; baseline and fwdfix): the v1
// backward's products on Hopper wgmma, per docs/design-wgmma-backward.md. One CTA = two warpgroups over 128 keys
// (warpgroup w owns keys j0 + 64 w ..), query blocks of 64 double-buffered with cp.async in 128B-swizzled
// tiles. Per query block and warpgroup: S^T = K Q^T and dP^T = V dO^T (SS, K-major), P^T and dS^T in the
// accumulator layout with the B4 rounding into register A fragments, dV += P^T dO and dK += dS^T Q (RS, B
// MN-major), bf16(dS) transposed into shared memory, and dQ += dS K over the warpgroup's 64 keys (SS; the two
// warpgroups' partial sums go to dQacc with FP32 atomics, as v1's per-key-block partials). Phases are
// synchronous in this first version (every wgmma group is waited for before its operands change). Same rounding
// points and the same per-element arithmetic as flash_bwd_tc.cuh. Needs sm_90a; exercised by
// tests/cuda/flash_cuda_test.cc (WgmmaBackward*).
#pragma once

#include "cuda/flash_bwd_tc.cuh"  // atomic_add1, atomic_add2, store_dk_dv
#include "cuda/flash_fwd_wg.cuh"  // load_sw128_async, kWgThreads
#include "cuda/kernel_common.cuh"
#include "cuda/mma.cuh"
#include "cuda/tma.cuh"
#include "cuda/wgmma.cuh"

#include <type_traits>

namespace gproj::cuda::detail {

constexpr int kWgBwdKeys = 128, kWgBwdRows = 64;

// v3.15 (v3.2, D = 128): dQ's partial sums leave through shared memory, each warp's 16 rows x 64 columns as one
// bulk reduce-add of 4 KB into dQacc's tile of those rows and columns (kernel_common.cuh, dq_acc_index) instead of
// 16 8-byte atomics per thread. The shared-memory rows are the tile's image, 16-byte chunks XOR the row: the
// accumulator layout's float2 stores then take two wavefronts per warp instruction, the least for 256 bytes.
// (v3.3, kVecDq, experimental, keeps its 16-byte atomics into the row-major dQacc on v3.15's two stages; the
// tile room goes unused there.)
// v3.17 (D = 64, v3.1 with TMA): the same per warp, where a warp's 16 rows x 64 columns are all of D; both
// warpgroups' partials (their own 64 keys each) reduce into the same tile.
template <int D, bool kSplitDq, bool kTma = true>
constexpr bool kBwdWgBulkDq = kTma && (D == 64 || kSplitDq);
constexpr int kBulkDqFloats = 8 * 16 * 64;  // 8 warps x 16 rows x 64 columns

// Q, dO stages: v3.0 double-buffers with cp.async; v3.1 keeps three in flight (loads two blocks ahead); v3.15 two
// (still loaded two blocks ahead, each once its block's dK, dV products have read it), for the dQ rows' room.
template <int D, bool kTma, bool kBulk = false>
constexpr int kBwdWgStages = kTma ? (kBulk && D == 128 ? 2 : 3) : 2;  // (D = 64 keeps three with v3.17's bulk)

// thresh-lowrank's extra tiles (kThresh): bf16(P) like bf16(dS), and the B operands of the 64 x 16 product that
// gives the row's statistics record in its first 8 columns: P (K U) (columns 0 to kTailRank - 1), s_i (kStatS)
// and r_i (kStatR); per warpgroup [16][64 keys] = ((K U)^T rows 0-5; ones; zeros) against bf16(P), and one
// shared [16][64] = (zeros; ones in row kStatR; zeros) against bf16(dS). Columns 8-15 stay zero.
constexpr int kWgStatCols = 16;

// v3.2 (kSplitDq, D = 128): each warpgroup forms half of dQ's columns over all 128 keys, from both bf16(dS)
// halves, which are therefore double-buffered.
template <int D, bool kSplitDq>
constexpr bool kBwdWgSplit = kSplitDq && D == 128;

// v3.9 (kFwdStats): 8 KB of BF16 ones, the dQ product's extra 8 columns (r_i), in place of the statistics tiles:
// 64 K rows of 128 bytes, the rows each warpgroup's n72 steps read (their descriptors point there per warpgroup).
constexpr int kWgOnesElems = 4096;

// kH16 (fp16-lowrank): sK holds Kh^T, two column blocks of 64 keys, each of 72 rows of 128 bytes per 64 columns of
// D (D = 128: D-rows 0-63, 8 rows of ones, D-rows 64-127, 8 rows of ones; D = 64: D-rows 0-63, 8 rows of ones;
// docs/design-fp16-projection.md); 2 x 64 more floats for 1 / l.
template <int D>
constexpr int kH16ColBlock = (D / 64) * 72 * 64;
template <int D>
constexpr int kH16KElems = 2 * kH16ColBlock<D>;

template <int D, bool kTma = false, bool kThresh = false, bool kSplitDq = false, bool kDkComp = false,
          bool kFwdStats = false, bool kH16 = false>
constexpr size_t bwd_wg_smem_bytes() {
  // K, V (128 keys) | Q, dO (stages x 64 rows) | bf16(dS) (64 rows x 128 keys, x 2 for v3.2) | [bf16(P),
  // 3 x 16 x 64] | [(Q U_q)^T, 2 x 16 x 64] | [bf16(U)^T, D / 64 x 16 x 64] | LSE, delta (2 x 64) | mbarriers
  constexpr bool kBulk = kBwdWgBulkDq<D, kSplitDq, kTma>;
  return sizeof(bf16_t) * ((kH16 ? kH16KElems<D> : kWgBwdKeys * D) + kWgBwdKeys * D +
                           2 * kBwdWgStages<D, kTma, kBulk> * kWgBwdRows * D +
                           (kBwdWgSplit<D, kSplitDq> ? 2 : 1) * kWgBwdRows * kWgBwdKeys +
                           (kThresh ? kWgBwdRows * kWgBwdKeys : 0) +
                           (kThresh && !kFwdStats ? 3 * kWgStatCols * 64 + D * kWgStatCols : 0) +
                           (kFwdStats ? kWgOnesElems : 0) +
                           (kDkComp ? 2 * kWgStatCols * 64 : 0)) +
         sizeof(float) * (4 * kWgBwdRows + (kBulk ? (kH16 ? 8 * kH16DqTileFloats : kBulkDqFloats) : 0)) +
         8 * 8 + 1024;
}


// dK compensation (kDkComp): dK_acc[key] += E[key] U_q^T for this thread's keys (rows g, g + 8 of its warp's 16),
// E the m64n16 accumulator of eps^T (Q U_q) (columns 0-7; lane (g, t) holds columns 2 t, 2 t + 1 of block 0),
// added to the m64n64 dK accumulators [D / 64][32] before they are stored.
template <int D>
__device__ __forceinline__ void dk_compensate(const float* u_q, const float (&e)[8], float (&dk)[D / 64][32],
                                              int lane) {
  const int tq = lane & 3;
  float ea[kLowRank], eb[kLowRank];
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    const int src = (lane & ~3) | t;
    ea[2 * t] = __shfl_sync(0xffffffffu, e[0], src);
    ea[2 * t + 1] = __shfl_sync(0xffffffffu, e[1], src);
    eb[2 * t] = __shfl_sync(0xffffffffu, e[2], src);
    eb[2 * t + 1] = __shfl_sync(0xffffffffu, e[3], src);
  }
#pragma unroll
  for (int nb = 0; nb < D / 64; ++nb)
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int c2 = 0; c2 < 2; ++c2) {
        const int d = nb * 64 + n * 8 + 2 * tq + c2;
        const float4 u0 = *reinterpret_cast<const float4*>(u_q + d * kLowRank);
        const float4 u1 = *reinterpret_cast<const float4*>(u_q + d * kLowRank + 4);
        const float u[kLowRank] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
        float xa = 0.0f, xb = 0.0f;
#pragma unroll
        for (int c = 0; c < kLowRank; ++c) {
          xa = fmaf(ea[c], u[c], xa);
          xb = fmaf(eb[c], u[c], xb);
        }
        dk[nb][4 * n + c2] += xa;
        dk[nb][4 * n + 2 + c2] += xb;
      }
}

// thresh-lowrank: the list entries of this thread (bf16(P) >= thresh) as a mask over its 32 candidates c = 4 n +
// 2 e + half: query 8 n + 2 tq + e, key key_a + 8 half, read from its bf16(P) fragments pf (element-wise layout:
// pf[n / 2][2 (n % 2) + half] holds queries e = 0, 1 in its low and high halves).
__device__ __forceinline__ uint32_t large_entry_mask(const uint32_t (&pf)[4][4], float thresh) {
  uint32_t mask = 0;
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint32_t w = pf[n >> 1][(n & 1) * 2 + half];
      if (bf16_lo(w) >= thresh) mask |= 1u << (4 * n + half);
      if (bf16_hi(w) >= thresh) mask |= 1u << (4 * n + 2 + half);
    }
  return mask;
}
__device__ __forceinline__ int large_entry_query(int c, int tq) { return (c >> 2) * 8 + 2 * tq + ((c >> 1) & 1); }

// thresh-lowrank, the rare rest of the warp's entries (past the two per thread whose list slots were claimed early,
// in the kernel's loop): appends the candidates of every lane's `mask` (large_entry_mask's numbering) to their rows'
// lists, bf16(P) read back from the warpgroup's tile sPw[query][key]. The whole warp calls it (v3.22): the entries
// are spread over the lanes, 32 at a time, so that their slots' atomics go out together. (Before, each thread
// appended its own, four atomics at a time: with a sink key, four lanes of one warp hold all 64 rows' entries of
// a block, and their rounds of atomics held up both warpgroups at the next barrier, block after block.) Lane l
// holds keys kl0 + l / 4 (+ 8) of the block (key0 + ... in the head) and queries large_entry_query(c, l % 4).
// Out of line, scalars only.
__device__ __noinline__ void append_large_entries_warp(ListRef list, const bf16_t* sPw, int64_t bh, int i0, int kl0,
                                                       int key0, uint32_t mask) {
  const int lane = threadIdx.x & 31, cnt = __popc(mask);
  int incl = cnt;  // inclusive scan of the lanes' counts
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  const int total = __shfl_sync(0xffffffffu, incl, 31);
  for (int base = 0; base < total; base += 32) {
    const int k = base + lane;  // this lane's entry: the (k - excl(s))-th of lane s, s the first lane with incl > k
    int s = 0;
#pragma unroll
    for (int step = 16; step >= 1; step >>= 1)
      if (__shfl_sync(0xffffffffu, incl, s + step - 1) <= k) s += step;
    const uint32_t ms = __shfl_sync(0xffffffffu, mask, s);
    const int excl = __shfl_sync(0xffffffffu, incl - cnt, s);
    if (k >= total) continue;
    const int c = static_cast<int>(__fns(ms, 0, k - excl + 1));
    const int ql = large_entry_query(c, s & 3), kl = kl0 + (s >> 2) + 8 * (c & 1);
    if (i0 + ql >= list.nq) continue;
    const int64_t row = bh * list.nq + i0 + ql;
    const int slot = atomicAdd(&list.count[row], 1);
    if (slot < list.cap) {
      list.j[row * list.cap + slot] = key0 + kl - kl0;
      list.p[row * list.cap + slot] = __bfloat162float(sPw[sw128_offset(ql, kl, kWgBwdRows)]);
    }
  }
}

// thresh-lowrank: the thread's (up to) two entries whose list slots it claimed after the element-wise step
// (claim_c: large_entry_mask's numbering, -1 for none; claim_slot: the atomics' results), bf16(P) read back from
// the warpgroup's tile sPw[query][key] (keys kl_a, kl_a + 8 of the block). The slots are compared with the
// capacity through `ready`, a value of the product just waited for (the min is the capacity itself): ptxas
// otherwise hoisted the compare of the atomics' results above the products and waited for their round trip there
// (2% of the v3.4 kernel's stall samples).
__device__ __forceinline__ void write_claimed_entries(const KernelParams& p, const int (&claim_c)[2],
                                                      const int (&claim_slot)[2], float ready, const bf16_t* sPw,
                                                      int64_t bh, int i0, int tq, int key_a, int kl_a) {
  const int cap = static_cast<int>(min(static_cast<uint32_t>(p.list_cap), __float_as_uint(ready) | 0x40000000u));
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    const int c = claim_c[u];
    if (c >= 0 && claim_slot[u] < cap) {
      const int ql = large_entry_query(c, tq);
      const int64_t at = (bh * p.Nq + i0 + ql) * p.list_cap + claim_slot[u];
      p.list_j[at] = key_a + 8 * (c & 1);
      p.list_p[at] = __bfloat162float(sPw[sw128_offset(ql, kl_a + 8 * (c & 1), kWgBwdRows)]);
    }
  }
}

// v3.34 (p.dkv_direct, where each kv head has one query head): this CTA's keys are all its head's, so their dV
// (bit 1) and dK (bit 2) are final here. They go to the outputs as the dK/dV postprocess would form them from
// dVacc, dKacc (bf16(dV), bf16(scale dK); the same bits, but for the sign of a zero), and the postprocess does not
// run (bits 1 and 2) or forms dK only (bit 1: thresh-lowrank's dK correction needs dKacc). Before, the postprocess
// read 2 x 4 and wrote 2 x 2 bytes per element: 101 us of baseline's backward at D = 128, N = 4k.
// Each warpgroup stages a tensor's 64 rows in its own rows of sV (no other warpgroup reads them, and its own
// products are done), 16-byte chunks XOR the row so that the accumulator layout's 4-byte stores and the 16-byte
// reads each take the fewest wavefronts, then stores whole 128-byte row pieces. (Stored from the accumulator layout
// straight to global memory, 16 contiguous bytes per row and instruction, the main kernel lost 30 / 60 us non-causal
// / causal at D = 128, N = 4k; session 25, runs 1-3.) Indices from blockIdx and threadIdx here, not the kernel's
// values (which would stay live across the main loop for it).
template <int D, int kKeys>
__device__ __forceinline__ void store_dk_dv_direct(const KernelParams& p, bf16_t* sV, const float (&dk)[D / 8][4],
                                                   const float (&dv)[D / 8][4]) {
  const bool dk_too = (p.dkv_direct & 2) != 0;
  const int wg = threadIdx.x >> 7, ltid = threadIdx.x & 127, w4 = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int g = lane >> 2, tq = lane & 3, b = blockIdx.z, hk = blockIdx.y / (p.H / p.Hkv);
  const int key0 = blockIdx.x * kKeys + wg * 64;  // the warpgroup's first key
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    if (t == 1 && !dk_too) break;
    const float sc = t == 0 ? 1.0f : p.scale;
    const float(&acc)[D / 8][4] = t == 0 ? dv : dk;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = w4 * 16 + g + 8 * half, c = n & 7;
        bf16_t* row = sV + (n >> 3) * kKeys * 64 + wg * 64 * 64 + r * 64;
        reinterpret_cast<uint32_t*>(row + ((c ^ (r & 7)) << 3))[tq] =
            pack_bf16(sc * acc[n][2 * half], sc * acc[n][2 * half + 1]);
      }
    wg_bar_sync(1 + wg);
    bf16_t* out = t == 0 ? p.dv : p.dk;
#pragma unroll
    for (int kb = 0; kb < D / 64; ++kb)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = ltid / 8 + 16 * i, c = ltid & 7, j = key0 + r;
        const uint4 v = *reinterpret_cast<const uint4*>(sV + kb * kKeys * 64 + wg * 64 * 64 + r * 64 +
                                                        ((c ^ (r & 7)) << 3));
        const int64_t at = ((static_cast<int64_t>(b) * p.Nk + j) * p.Hkv + hk) * D + kb * 64 + c * 8;
        if (j < p.Nk) *reinterpret_cast<uint4*>(out + at) = v;
      }
    wg_bar_sync(1 + wg);  // every lane has read the staged rows before the next tensor's are written
  }
  if (!dk_too)  // thresh-lowrank: dK to dKacc
    store_dk_dv<D, false>(p, static_cast<int64_t>(b) * p.H + blockIdx.y, key0 + w4 * 16, g, tq, dk, dv);
}

// Bench-only ablation (CMake -DGPROJ_ABLATE=N, `ABLATE=N scripts/pack_bench.sh REV`): each bit removes one part
// of thresh-lowrank's work from this kernel so that a bench can time it; the gradients are then wrong, and the
// bench says so. 1: the statistics product (the record is zero), 2: bf16(P) into shared memory, 4: the record
// atomics, 8: the large-entry test and the list appends; 16 and 32 are the forward's (flash_fwd_wg.cuh), 64 and 128
// thresh_dq_kernel's (projection_tc.cuh). With kH16 (fp16-lowrank) bit 2 changes its element-wise step instead (the
// comment there). 0 (every normal build) changes nothing.
#ifndef GPROJ_ABLATE
#define GPROJ_ABLATE 0
#endif
constexpr int kAblate = GPROJ_ABLATE;
static_assert(kAblate >= 0 && kAblate < 256, "GPROJ_ABLATE is an 8-bit mask (16, 32: the forward's, flash_fwd_wg.cuh)");

// kStats: also add the row sums of bf16(dS) to r_i (p.rowsum; the audit's max |r_i|), for baseline and fwdfix.
// kThresh (v3.1 only): the main kernel of gproj's thresh-lowrank projection, as v1's kThresh: r_i, s_i, P (K U)
// from one small wgmma per block, the entries with bf16(P) >= thresh appended to their rows' lists; the
// projection itself is then applied by the postprocess kernels of projection_tc.cuh.
// kTma (v3.1): thread 0 loads K, V and Q, dO blocks with TMA two blocks ahead into three stages (mbarriers: full
// per stage, completed by the copies; empty per stage, one arrival per warp once its dK/dV products have read
// the stage), each warpgroup stages its own LSE and delta and synchronises only its own 128 threads (its bf16(dS)
// block is private), so the two warpgroups drift apart and one's element-wise phase overlaps the other's wgmma.
// kSplitDq (v3.2, on v3.1; D = 128, else v3.1 itself): the two warpgroups meet once per block at a 256-thread
// barrier after both have stored bf16(dS), and each adds dQ[:, 64 wg ..] over all 128 keys: half the dQ atomics
// of v3.1, one coupling point per block.
// kVecDq (v3.3, experimental, on v3.2 at D = 128): lane pairs (tq, tq ^ 1) swap half their dQ values so that each
// lane adds four consecutive columns of one row with one 16-byte atomic: half the atomic instructions, the same
// bytes (whether instructions or bytes limit v3.2 is what it measures).
// kFwdStats (v3.9, on kThresh; docs/gproj-forward-stats.md): P (K U) and s_i come from the forward (v2.3), which
// also wrote U and bf16(K U); the record arrives holding them (copied in before this kernel) and this kernel adds
// only r_i, through the dQ product: one 64-column block of it becomes m64n72k16, whose last 8 columns read a
// shared tile of ones (the descriptor's N-block stride points there), so r_i costs no extra read of bf16(dS).
// No statistics product, no K U product, one 4-byte atomic per row and warpgroup instead of the 32-byte record.
// kH16 (fp16-lowrank, on v3.2 at D = 128 and v3.17 at D = 64; docs/design-fp16-projection.md, build step 4; session 46
// for D = 64: Kh^T in kH16ColBlock<D> blocks, each warpgroup's dQ over its own keys): sK holds Kh^T (maps.k over the
// forward's kht) with rows of ones, the Q stages hold Qh (maps.q over qh); S^T = Kh Qh^T reads A MN-major; the
// element-wise step rebuilds the consistent P = fp16(exp2(S scale log2e - M)) / l with M = ceil(LSE log2e), rounds
// sigma dS to FP16 (the dK product's A and the dQ product's tile); dQ = dS Kh reads B K-major over Kh^T, its own keys'
// four steps m64n72k16 with the ones rows (r_i, sent in the dQ tile since v3.2-h16c); dK = fp16(dS^T) Qh; dV as
// baseline's.
// dK leaves divided by sigma s_q; dQacc is in sigma s_k units (the dQ post-pass takes them out and projects).
// kDoS (kH16 with 1 / l on dO's side, FlashParams::fp16_dout_side; docs/design-fp16-projection.md): maps.dout reads
// dOh = fp16(dO / l s_do) and maps.v the forward's vh, dP' = Vh dOh^T is an FP16 product, sigma dS = fp16(P^) (dP'
// sigma' - delta' sigma') with sigma' = sigma / (s_v s_do) (p.delta holds delta' = dOh . o16), no 1 / l, and dV =
// fp16(P^)^T dOh (the packed FP16 P^ its A), leaving divided by s_do.
template <int D, bool kStats, bool kTma, bool kThresh = false, bool kSplitDq = false, bool kDkComp = false,
          bool kVecDq = false, bool kFwdStats = false, bool kH16 = false, bool kDoS = false>
__global__ void __launch_bounds__(kWgThreads, 1)
    flash_bwd_wg_kernel(const KernelParams p, const __grid_constant__ TmaMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(D == 64 || D == 128, "tiles are 64-column blocks; registers hold dK, dV for D <= 128");
  static_assert(!kThresh || (kTma && !kStats), "thresh-lowrank runs on v3.1, with its own statistics");
  static_assert(!kSplitDq || kTma, "v3.2 is a form of v3.1");
  static_assert(!kDkComp || (kThresh && D == 64 && !kSplitDq), "dK compensation: thresh-lowrank on v3.1, D = 64");
  static_assert(!kVecDq || (kSplitDq && D == 128), "v3.3 is a form of v3.2 at D = 128");
  static_assert(!kFwdStats || (kThresh && !kDkComp && !kVecDq), "v3.9 is a form of thresh-lowrank's v3.1 / v3.2");
  static_assert(!kH16 || ((D == 64 || kSplitDq) && kTma && !kThresh && !kStats && !kDkComp && !kVecDq),
                "fp16-lowrank's backward is a form of v3.2 at D = 128 and of v3.17 (v3.1 with TMA) at D = 64");
  static_assert(!kDoS || kH16, "1 / l on dO's side is a form of fp16-lowrank's backward");
  constexpr bool kSplit = kBwdWgSplit<D, kSplitDq>;
  constexpr bool kBulk = kBwdWgBulkDq<D, kSplitDq, kTma>;
  constexpr int BK = kWgBwdKeys, BQ = kWgBwdRows, kNB = D / 64, kStages = kBwdWgStages<D, kTma, kBulk>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  // Tiles [D/64][rows][64], 128B-swizzled (wgmma.cuh): one layout serves as K-major and as MN-major operand.
  bf16_t* sK = reinterpret_cast<bf16_t*>(smem_raw + (((raw + 1023) & ~1023u) - raw));  // [kNB][BK][64]
  bf16_t* sV = sK + (kH16 ? kH16KElems<D> : BK * D);  // [kNB][BK][64] (kH16: sK is Kh^T, [2][72 kNB][64] FP16)
  bf16_t* sQ = sV + BK * D;                                                        // [kStages][kNB][BQ][64]
  bf16_t* sdO = sQ + kStages * BQ * D;                                             // [kStages][kNB][BQ][64]
  bf16_t* sdS = sdO + kStages * BQ * D;  // [2 key halves][BQ][64]: bf16(dS), rows = queries (dQ's K-major A)
  bf16_t* sP = sdS + (kSplit ? 2 : 1) * BQ * BK;         // kThresh: [2 key halves][BQ][64] bf16(P), as sdS
  bf16_t* sUp = sP + (kThresh ? BQ * BK : 0);            // kThresh: [2][16][64] ((K U)^T rows 0-5; ones; zeros)
  bf16_t* sUd = sUp + 2 * kWgStatCols * 64;              // kThresh: [16][64] (zeros; ones in row kStatR; zeros)
  // kDkComp: [2 warpgroups][16][64] ((Q U_q)^T; zeros)
  bf16_t* sQU = sUp + (kThresh && !kFwdStats ? 3 * kWgStatCols * 64 : 0);
  bf16_t* sUT = sQU + (kDkComp ? 2 * kWgStatCols * 64 : 0);  // kThresh: [kNB][16][64] (bf16(U)^T; zeros), K U's B
  bf16_t* sOnes = sUT + (kThresh && !kFwdStats ? D * kWgStatCols : 0);  // kFwdStats: [kWgOnesElems] ones
  float* sDq = reinterpret_cast<float*>(sOnes + (kFwdStats ? kWgOnesElems : 0));  // v3.15: [8 warps][16][64]
  constexpr int kDqWarpFloats = kH16 ? kH16DqTileFloats : 1024;  // a warp's tile image (kH16: and its r_i)
  float* sL = sDq + (kBulk ? 8 * kDqWarpFloats : 0);  // [2][BQ] LSE: v3.0 per
                                                         // stage, v3.1 per warpgroup
  float* sDl = sL + 2 * BQ;                             // [2][BQ] delta, likewise
  uint64_t* full = reinterpret_cast<uint64_t*>(sDl + 2 * BQ);  // v3.1: [3] Q, dO landed; [3] empty; [1] K, V
  uint64_t* empty = full + 3;
  uint64_t* kv_full = full + 6;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int wg = warp >> 2, w4 = warp & 3;
  const int b = blockIdx.z, h = blockIdx.y, j0 = blockIdx.x * BK;
  const int hk = h / (p.H / p.Hkv);
  const int64_t bh = static_cast<int64_t>(b) * p.H + h;
  const int first = first_query_row(p, j0);
  const int qb0 = first / BQ, nqb = (p.Nq + BQ - 1) / BQ;
  const int kcount = min(BK, p.Nk - j0);

  const int count = nqb - qb0;  // query blocks of this CTA
  // v3.43 (D = 128 only: at D = 64 these two lines alone took the kernel from 194 to 201 registers and gproj's
  // backward 2.5% slower, session 36 run 3): thresh_dq may be scheduled once the last CTA has started
  if constexpr (kThresh && D == 128) allow_dependents();
  const auto load_q = [&](int qb) {  // v3.0: Q, dO of query block qb into stage qb & 1, as one cp.async group
    if (qb < nqb) {
      const int i0 = qb * BQ, cnt = min(BQ, p.Nq - i0), st = qb & 1;
      load_sw128_async<BQ, D>(sQ + st * BQ * D, p.q, b, i0, cnt, h);
      load_sw128_async<BQ, D>(sdO + st * BQ * D, p.dout, b, i0, cnt, h);
    }
    cp_async_commit();
  };
  const auto tma_q = [&](int it) {  // v3.1, thread 0: Q, dO of the CTA's block it into stage it % 3
    const int st = it % kStages, i0 = (qb0 + it) * BQ;
    mbar_arrive_expect_tx(&full[st], 2 * BQ * D * sizeof(bf16_t));  // whole boxes: rows past Nq arrive as zeros
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) {
      tma_load_4d(sQ + st * BQ * D + nb * BQ * 64, &maps.q, nb * 64, h, i0, b, &full[st]);
      tma_load_4d(sdO + st * BQ * D + nb * BQ * 64, &maps.dout, nb * 64, h, i0, b, &full[st]);
    }
  };
  if constexpr (kH16) {  // Kh^T's rows of ones (64-71 (D = 128: and 136-143) of each column block; read after the
                         // first barrier)
    const int cb = threadIdx.x >> 7, grp = (threadIdx.x >> 6) & 1, r = (threadIdx.x >> 3) & 7, c = threadIdx.x & 7;
    if (grp < kNB)
      *reinterpret_cast<uint4*>(sK + cb * kH16ColBlock<D> + (72 * grp + 64 + r) * 64 + c * 8) =
          make_uint4(0x3C003C00u, 0x3C003C00u, 0x3C003C00u, 0x3C003C00u);  // FP16 ones
    fence_async_smem();
  }
  if constexpr (kFwdStats) {  // ones for the dQ product's r_i columns (read after the loop's first barrier)
    const uint4 ones = make_uint4(0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u);
    for (int x = threadIdx.x; x < kWgOnesElems / 8; x += kWgThreads) reinterpret_cast<uint4*>(sOnes)[x] = ones;
    fence_async_smem();
  }
  // kThresh: bf16(U)^T, the B operand of K U, [kNB][16][64] (row c = basis column c, rows 8-15 zero; column = d).
  // v3.36b: this thread's values are loaded here and stored into sUT after the K, V copies are issued (below):
  // staged before them, as until v3.36b, their gather's round trip came before the CTA's barrier that precedes the
  // copies, at every CTA's start.
  constexpr int kUtPer = kThresh && !kFwdStats ? D * kWgStatCols / kWgThreads : 1;
  static_assert(!kThresh || kFwdStats || (D * kWgStatCols) % kWgThreads == 0, "whole U^T values per thread");
  float ut[kUtPer];
  if constexpr (kThresh && !kFwdStats) {
    const float* u = p.u + (static_cast<int64_t>(b) * p.Hkv + hk) * D * kLowRank;
#pragma unroll
    for (int e = 0; e < kUtPer; ++e) {
      const int x = threadIdx.x + e * kWgThreads;
      const int kb = x / (kWgStatCols * 64), r = (x / 64) % kWgStatCols, col = x % 64;
      ut[e] = r < kLowRank ? u[(kb * 64 + col) * kLowRank + r] : 0.0f;
    }
  }
  if constexpr (kThresh && !kFwdStats) {  // the B tiles of the statistics product, K-major [16][64] (key = column)
    if (threadIdx.x < BK) {  // rows kTailRank.. of sUp (rows 0-5, K U, are formed below once K has landed)
      const int jj = threadIdx.x, c = jj % 64;
      bf16_t* t = sUp + (jj / 64) * kWgStatCols * 64;
      const bf16_t one = __float2bfloat16_rn(1.0f), zero = __float2bfloat16_rn(0.0f);
#pragma unroll
      for (int r = kTailRank; r < kWgStatCols; ++r) t[sw128_offset(r, c, kWgStatCols)] = r == kStatS ? one : zero;
      if (jj < 64) {
#pragma unroll
        for (int r = 0; r < kWgStatCols; ++r) sUd[sw128_offset(r, c, kWgStatCols)] = r == kStatR ? one : zero;
      }
    }
    if constexpr (kDkComp) {  // rows 8-15 of both warpgroups' (Q U_q)^T tiles stay zero
      for (int x = threadIdx.x; x < 2 * 8 * 64; x += kWgThreads) {
        const int w = x / (8 * 64), r = 8 + (x / 64) % 8, c = x % 64;
        sQU[w * kWgStatCols * 64 + sw128_offset(r, c, kWgStatCols)] = __float2bfloat16_rn(0.0f);
      }
    }
    fence_async_smem();  // read by wgmma after the barrier below
  }
  if constexpr (kTma) {
    init_load_ring(full, empty, kStages, kWgThreads / 32, kv_full);
    if (threadIdx.x == 0) {
      mbar_arrive_expect_tx(kv_full, 2 * BK * D * sizeof(bf16_t));
#pragma unroll
      for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
        for (int r = 0; r < BK; r += 64) {
          if constexpr (kH16) {  // Kh^T: keys j0 + r .., D-rows 64 nb .. into rows 72 nb of column block r / 64
            tma_load_4d(sK + (r / 64) * kH16ColBlock<D> + nb * 72 * 64, &maps.k, j0 + r, nb * 64, hk, b, kv_full);
          } else {
            tma_load_4d(sK + nb * BK * 64 + r * 64, &maps.k, nb * 64, hk, j0 + r, b, kv_full);
          }
          tma_load_4d(sV + nb * BK * 64 + r * 64, &maps.v, nb * 64, hk, j0 + r, b, kv_full);
        }
      for (int it = 0; it < min(2, count); ++it) tma_q(it);
    }
  } else {
    load_sw128_async<BK, D>(sK, p.k, b, j0, kcount, hk);
    load_sw128_async<BK, D>(sV, p.v, b, j0, kcount, hk);
    load_q(qb0);  // group 0: K, V, Q and dO of the first block
  }
  if constexpr (kThresh && !kFwdStats) {  // v3.36b: sUT, read by both warpgroups' K U products below
#pragma unroll
    for (int e = 0; e < kUtPer; ++e) {
      const int x = threadIdx.x + e * kWgThreads;
      const int kb = x / (kWgStatCols * 64), r = (x / 64) % kWgStatCols, col = x % 64;
      sUT[kb * kWgStatCols * 64 + sw128_offset(r, col, kWgStatCols)] = __float2bfloat16_rn(ut[e]);
    }
    fence_async_smem();
    __syncthreads();
  }

  // This thread's keys (accumulator rows) and their dK, dV accumulators (64 keys x D per warpgroup).
  const int key_a = j0 + wg * 64 + w4 * 16 + g, key_b = key_a + 8;
  float dk[kNB][32], dv[kNB][32];
#pragma unroll
  for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
    for (int e = 0; e < 32; ++e) dk[nb][e] = dv[nb][e] = 0.0f;
  // This warpgroup's 64 keys in column block kb (1024-byte aligned: 64 rows of 128 bytes).
  const auto kw = [&](int kb) { return sK + kb * BK * 64 + wg * 64 * 64; };
  const auto vw = [&](int kb) { return sV + kb * BK * 64 + wg * 64 * 64; };

  // v3.1: each warpgroup's threads 0..63 stage the LSE and delta of one query row, loaded a block ahead.
  // v3.52: load_row leaves the values as loaded; the staging of the next block forms what the element-wise step
  // reads from them. (Formed here, in the same block as the loads, they held warps 0-1 at their loads' round trip
  // before the warpgroup's barrier, every block, and warps 2-3 at the barrier: ptxas keeps arithmetic before a
  // bar.sync. Session 44 run 1: 2.2% of baseline's warp samples on that FMUL alone.)
  const int ltid = threadIdx.x & 127;
  float next_l = 0.0f, next_dl = 0.0f;
  uint4 next_qu = make_uint4(0, 0, 0, 0);  // kDkComp: bf16(Q U_q) of the same row
  const auto load_row = [&](int qb) {  // 0 past Nq (those columns are masked)
    const int i = qb * BQ + ltid;
    if (kTma && ltid < BQ && qb < nqb && i < p.Nq) {
      next_l = p.lse[bh * p.Nq + i];
      next_dl = p.delta[bh * p.Nq + i];
      if constexpr (kDkComp) next_qu = *reinterpret_cast<const uint4*>(p.qu + (bh * p.Nq + i) * kLowRank);
    } else {
      next_l = next_dl = 0.0f;
      next_qu = make_uint4(0, 0, 0, 0);
    }
  };
  // kH16: the CTA's powers of two: sigma (dS), S's scale log2e over Qh's and Kh's scales, dK's 1 / (sigma s_q).
  // kDoS: sigma' = sigma / (s_v s_do) (dP' and delta' carry s_v s_do / l), dV's 1 / s_do.
  float h16_sigma = 1.0f, h16_sl2 = 0.0f, h16_dk_unscale = 1.0f, h16_dv_unscale = 1.0f;
  if constexpr (kH16) {
    const float s_q = p.fp16_scales[b * p.H + h], s_k = p.fp16_scales[fp16_k_slot(p.B, p.H, p.Hkv, b, hk)];
    const float dmax = __uint_as_float(p.dmax_bits[bh]);
    h16_sigma = fp16_ds_scale(dmax, p.fp16_scales[fp16_vnorm_slot(p.B, p.H, p.Hkv, b, hk)]);
    h16_sl2 = p.scale * kLog2e * (1.0f / (s_q * s_k));  // exact: powers of two
    h16_dk_unscale = 1.0f / (h16_sigma * s_q);
    if constexpr (kDoS) {
      const float s_do = fp16_head_scale(2.0f * dmax), s_v = p.fp16_scales[fp16_v_slot(p.B, p.H, p.Hkv, b, hk)];
      h16_sigma = h16_sigma / (s_v * s_do);
      h16_dv_unscale = 1.0f / s_do;
    }
  }
  float ecomp[8];  // kDkComp: eps^T (Q U_q) of this warpgroup's 64 keys, m64n16 (columns 8-15 stay zero)
#pragma unroll
  for (int e = 0; e < 8; ++e) ecomp[e] = 0.0f;
  if constexpr (kTma) {
    load_row(qb0);
    mbar_wait(kv_full, 0);
  }
  if constexpr (kThresh && !kFwdStats) {
    // K U of this warpgroup's 64 keys on the tensor cores, bf16(K bf16(U)) as the CPU emulator forms it: rows
    // 0-5 of the warpgroup's sUp tile (read after the loop's first warpgroup barrier) and, for the dQ correction's
    // listed keys, p.ku (8 per key, columns kTailRank.. zero; CTAs of query heads sharing a kv head write the
    // same bits). No ku_kernel runs before a v3 kernel.
    float kuacc[8];
    wg_fence();
#pragma unroll
    for (int kb = 0; kb < kNB; ++kb)
#pragma unroll
      for (int kin = 0; kin < 4; ++kin) {
        const uint64_t ka = wg_desc_kmajor(kw(kb) + kin * 16),
                       ub = wg_desc_kmajor(sUT + kb * kWgStatCols * 64 + kin * 16);
        if (kb + kin == 0) {
          wgmma_ss_n16_first(kuacc, ka, ub);
        } else {
          wgmma_ss_n16(kuacc, ka, ub);
        }
      }
    wg_commit();
    wg_wait0();
    fence_regs(kuacc);
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // keys w4 16 + g (+ 8) of the warpgroup; columns 2 tq, 2 tq + 1
      const int kl = w4 * 16 + g + 8 * half, j = j0 + wg * 64 + kl;
      float v[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int c = 2 * tq + e;
        v[e] = c < kTailRank ? __bfloat162float(__float2bfloat16_rn(kuacc[2 * half + e])) : 0.0f;
        if (c < kTailRank) sUp[wg * kWgStatCols * 64 + sw128_offset(c, kl, kWgStatCols)] = __float2bfloat16_rn(v[e]);
      }
      if (j < p.Nk)
        store_bf16_vec<2>(p.ku + ((static_cast<int64_t>(b) * p.Hkv + hk) * p.Nk + j) * kLowRank + 2 * tq, v);
    }
    fence_async_smem();  // sUp, read by this warpgroup's statistics product after its next barrier
  }

  // v3.1, thread 0: block it + 2 into the stage of block it - 1 once all eight warps have released it (they have,
  // unless the other warpgroup trails by a whole block). v3.15 (two stages): into block it's own stage, which
  // every warp released before its dQ product of block it.
  const auto produce = [&](int it) {
    if (threadIdx.x == 0 && it + 2 < count) {
      if (it >= kStages - 2) mbar_wait(&empty[(it + 2) % kStages], ((it + 2 - kStages) / kStages) & 1);
      tma_q(it + 2);
    }
  };

  // v3.11b: the loop's wgmma descriptors as bases formed once, advanced by constants (wg_desc_advance_lo) and, for
  // the stage and the bf16(dS) buffer, by one runtime offset each: each descriptor built from a pointer took ~10
  // instructions (mask, shift, OR, high word, R2UR), ~120 of gproj's extra per warp and block (session 15).
  // wg_u: wg as the value of lane 0, which ptxas knows to be warp-uniform, so that the bases and the descriptors
  // formed from them can live in uniform registers (no R2UR per wgmma).
  const int wg_u = __shfl_sync(0xffffffffu, wg, 0);
  const uint64_t k_kd = wg_desc_kmajor(sK + wg_u * 64 * 64), v_kd = wg_desc_kmajor(sV + wg_u * 64 * 64);
  const uint64_t q_kd = wg_desc_kmajor(sQ), o_kd = wg_desc_kmajor(sdO);       // their B (stage 0)
  const uint64_t q_mn = wg_desc_mnmajor(sQ, BQ * 128), o_mn = wg_desc_mnmajor(sdO, BQ * 128);  // dK, dV's B
  const uint64_t ds_kd = wg_desc_kmajor(sdS), k_mn = wg_desc_mnmajor(sK, BK * 128);            // dQ's A, B
  // kH16: S^T's A, Kh^T's column block wg (MN-major; M = 64 keys, one 128-byte block), and dQ's B, Kh^T's rows
  // 72 wg .. (K-major: D-rows 64 wg .. and the ones after them)
  // (D = 64, v3.17: each warpgroup's dQ over its own keys, all of D: column block wg, its D-rows and the ones)
  const uint64_t kt_mn = wg_desc_mnmajor(sK + wg_u * kH16ColBlock<D>, kH16ColBlock<D> * 2),
                 kt_kd = wg_desc_kmajor(sK + wg_u * (kSplit ? 72 * 64 : kH16ColBlock<D>));
  const uint64_t p_kd = wg_desc_kmajor(sP + wg_u * BQ * 64), up_kd = wg_desc_kmajor(sUp + wg_u * kWgStatCols * 64),
                 ud_kd = wg_desc_kmajor(sUd);  // kThresh: the statistics product's
  for (int it = 0; it < count; ++it) {
    const int qb = qb0 + it, i0 = qb * BQ, st = kTma ? it % kStages : qb & 1;
    bf16_t* sdS_it = sdS + (kSplit ? (it & 1) * BQ * BK : 0);  // v3.2: this block's bf16(dS) buffer
    float* Ls = kTma ? sL + wg * BQ : sL + st * BQ;  // this block's LSE and delta rows
    float* Dls = kTma ? sDl + wg * BQ : sDl + st * BQ;
    if constexpr (kTma) {
      // The previous block's element-wise reads of Ls are behind every thread of this warpgroup (its second
      // barrier), as are its dQ products' reads of the warpgroup's bf16(dS) block.
      if (ltid < BQ) {
        const float l2 = next_l * kLog2e;  // LSE log2(e), as the element-wise step uses it
        Ls[ltid] = l2;
        Dls[ltid] = next_dl;
        if constexpr (kH16) {
          Dls[ltid] = next_dl * h16_sigma;  // delta sigma (exact)
          if constexpr (kDoS) Ls[ltid] = ceilf(l2);  // M = ceil(LSE log2e), the forward's integer max (-inf: empty)
        }
        if constexpr (kDkComp) {  // row ltid's 8 values into column ltid of the warpgroup's (Q U_q)^T tile
          const bf16_t* v = reinterpret_cast<const bf16_t*>(&next_qu);
#pragma unroll
          for (int r = 0; r < kLowRank; ++r) sQU[wg * kWgStatCols * 64 + sw128_offset(r, ltid, kWgStatCols)] = v[r];
        }
      }
      if constexpr (kDkComp) fence_async_smem();  // read by this block's wgmma, after the barrier
      load_row(qb + 1);
      wg_bar_sync(1 + wg);
      // A warpgroup whose 64 keys no query of this block sees (the causal diagonal's first block, keys past Nk)
      // would only add zeros: it releases the stage and moves on, once the stage has landed. (Until session 46
      // it released it at once: a warpgroup that skipped every block, as when the last key block holds <= 64
      // keys, ran ahead and arrived twice on a stage's empty barrier within one phase, completing it early, so
      // that the producer could reload a stage the other warpgroup still read; compute-sanitizer synccheck,
      // "missing wait", on q200_k64 at D = 64.)
      mbar_wait(&full[st], (it / kStages) & 1);
      if (!kSplit && j0 + wg * 64 > last_visible(p, min(i0 + BQ, p.Nq) - 1)) {  // (v3.2 needs both halves)
        if (lane == 0) mbar_arrive(&empty[st]);
        produce(it);
        continue;
      }
    } else {
      load_q(qb + 1);
      if (threadIdx.x < BQ) {  // LSE and delta of the block's rows (0 past Nq; those columns are masked)
        const int i = i0 + threadIdx.x;
        Ls[threadIdx.x] = i < p.Nq ? p.lse[bh * p.Nq + i] * kLog2e : 0.0f;  // LSE log2(e)
        Dls[threadIdx.x] = i < p.Nq ? p.delta[bh * p.Nq + i] : 0.0f;
      }
      cp_async_wait<1>();  // the group of block qb
      fence_async_smem();
      __syncthreads();
    }
    const int st_off = st * BQ * D;  // the stage's offset (elements) from sQ, sdO
    const int ds_off = kSplit ? (it & 1) * BQ * BK : 0;  // this block's bf16(dS) buffer's from sdS

    // S^T = K Q^T and dP^T = V dO^T for this warpgroup's 64 keys x the 64 queries.
    float s[32], dp[32];
    wg_fence();
#pragma unroll
    for (int kb = 0; kb < kNB; ++kb)
#pragma unroll
      for (int kin = 0; kin < 4; ++kin) {
        const uint64_t q_desc = wg_desc_advance_lo(q_kd, st_off + kb * BQ * 64 + kin * 16);
        const uint64_t o_desc = wg_desc_advance_lo(o_kd, st_off + kb * BQ * 64 + kin * 16);
        if constexpr (kH16) {  // A = Kh from Kh^T (MN-major): D-rows 16 (4 kb + kin) at row 72 kb + 16 kin
          wgmma_ss_n64_f16_ta(s, wg_desc_advance_lo(kt_mn, (kb * 72 + kin * 16) * 64), q_desc, kb + kin != 0);
          if constexpr (kDoS) {  // dP' = Vh dOh^T (the first step write-only, as dP's)
            if (kb + kin == 0) {
              wgmma_ss_n64_f16_first(dp, v_kd, o_desc);
            } else {
              wgmma_ss_n64_f16_acc(dp, wg_desc_advance_lo(v_kd, kb * BK * 64 + kin * 16), o_desc, 1);
            }
          } else if (kb + kin == 0) {
            wgmma_ss_n64_first(dp, v_kd, o_desc);
          } else {
            wgmma_ss_n64<0>(dp, wg_desc_advance_lo(v_kd, kb * BK * 64 + kin * 16), o_desc, 1);
          }
        } else if (kb + kin == 0) {
          wgmma_ss_n64_first(s, k_kd, q_desc);
          wgmma_ss_n64_first(dp, v_kd, o_desc);
        } else {
          wgmma_ss_n64<0>(s, wg_desc_advance_lo(k_kd, kb * BK * 64 + kin * 16), q_desc, 1);
          wgmma_ss_n64<0>(dp, wg_desc_advance_lo(v_kd, kb * BK * 64 + kin * 16), o_desc, 1);
        }
      }
    wg_commit();
    wg_wait0();
    fence_regs(s);
    fence_regs(dp);

    // P^T = exp(scale S - LSE_q), dS^T = P^T (dP^T - delta_q), masked; B4 into A fragments (rows = keys,
    // k = queries: the accumulator-to-fragment identity of the forward's P) and bf16(dS) into sdS transposed.
    // Ls holds LSE log2(e) (the same FP32 product the v1 kernel forms per element). A tile whose 64 queries and
    // this warpgroup's 64 keys are all in range and visible skips the per-element mask (same values).
    const float sl2 = p.scale * kLog2e;
    const int kbase = j0 + wg * 64;
    const bool interior = i0 + BQ <= p.Nq && kbase + 63 <= last_visible(p, i0);
    uint32_t pf[4][4], dsf[4][4], ef[4][4];  // ef, kDkComp: bf16(dS^T - bf16(dS^T)), as dsf
    float pmax = 0.0f;  // kThresh: the largest FP32 P of this thread's (compared once with thresh_unrounded)
    const auto elementwise = [&](auto all_visible) {
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const int ql0 = n * 8 + 2 * tq;  // this thread's queries ql0, ql0 + 1
        const float2 L2 = *reinterpret_cast<const float2*>(Ls + ql0);
        const float2 D2 = *reinterpret_cast<const float2*>(Dls + ql0);
        float pv[4], dsv[4];
        [[maybe_unused]] __half2 h16a, h16b;  // kH16: the packed FP16 P^
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int ql = ql0 + (e & 1), q = i0 + ql;
          const int key = e < 2 ? key_a : key_b;
          const float L = (e & 1) ? L2.y : L2.x;
          [[maybe_unused]] const float dl = (e & 1) ? D2.y : D2.x;  // (kH16 takes it below)
          bool vis = true;
          if constexpr (!decltype(all_visible)::value) {
            vis = q < p.Nq && key < p.Nk && key <= last_visible(p, q) && L != neg_inf();
          }
          // kH16: P = exp2(S scale log2e - LSE log2e) in one FFMA (scale log2e over Qh's and Kh's scales); kDoS:
          // L is M = ceil(LSE log2e) and x = P^ = exp2(S scale log2e - M), as the forward forms it
          const float x = vis ? (kH16 ? fast_exp2(fmaf(s[4 * n + e], h16_sl2, -L)) : fast_exp2(s[4 * n + e] * sl2 - L))
                              : 0.0f;
          pv[e] = x;
          if constexpr (!kH16) dsv[e] = x * (dp[4 * n + e] - dl);
        }
        if constexpr (kH16) {  // sigma dS = P (dP sigma - delta sigma) (Dls holds delta sigma): the emulator's
                               // round_fp16(sigma (P (dP - delta))), sigma a power of two. P is not the forward's
                               // fp16(P^) / l (session 48: the errors move by <= 0.009 points without it), so the
                               // step is baseline's but for sigma and the FP16 pack. kDoS: dS and dV take the packed
                               // fp16(P^) (1 / l is in dP' and delta').
          // (ablation bit 2, timing only, kAblate above: dV's A the packed FP16 P instead of bf16(P))
          if constexpr (kDoS || (kAblate & 2)) {
            h16a = __floats2half2_rn(pv[0], pv[1]), h16b = __floats2half2_rn(pv[2], pv[3]);
          }
          if constexpr (kDoS) {
            const float2 ra = __half22float2(h16a), rb = __half22float2(h16b);
            pv[0] = ra.x, pv[1] = ra.y, pv[2] = rb.x, pv[3] = rb.y;
          }
#pragma unroll
          for (int e = 0; e < 4; ++e) dsv[e] = pv[e] * fmaf(dp[4 * n + e], h16_sigma, -((e & 1) ? D2.y : D2.x));
        }
        if constexpr (kDoS || (kH16 && (kAblate & 2))) {  // kDoS: dV's A is the packed FP16 P^
          pf[n >> 1][(n & 1) * 2] = *reinterpret_cast<const uint32_t*>(&h16a);
          pf[n >> 1][(n & 1) * 2 + 1] = *reinterpret_cast<const uint32_t*>(&h16b);
        } else {
          pf[n >> 1][(n & 1) * 2] = pack_bf16(pv[0], pv[1]);
          pf[n >> 1][(n & 1) * 2 + 1] = pack_bf16(pv[2], pv[3]);
        }
        // kThresh: bf16(P) >= thresh, as the list holds them, is FP32 P >= thresh_unrounded (rounding is
        // monotone), so the FP32 values are compared, once, through their max.
        if (kThresh && !(kAblate & 8)) pmax = fmaxf(pmax, fmaxf(fmaxf(pv[0], pv[1]), fmaxf(pv[2], pv[3])));
        const uint32_t da = kH16 ? pack_f16(dsv[0], dsv[1]) : pack_bf16(dsv[0], dsv[1]),
                       db = kH16 ? pack_f16(dsv[2], dsv[3]) : pack_bf16(dsv[2], dsv[3]);
        dsf[n >> 1][(n & 1) * 2] = da;
        dsf[n >> 1][(n & 1) * 2 + 1] = db;
        if constexpr (kDkComp) {  // the rounding error B4 leaves, rounded again (a tensor-core operand)
          ef[n >> 1][(n & 1) * 2] = pack_bf16(dsv[0] - bf16_lo(da), dsv[1] - bf16_hi(da));
          ef[n >> 1][(n & 1) * 2 + 1] = pack_bf16(dsv[2] - bf16_lo(db), dsv[3] - bf16_hi(db));
        }
        if (kStats) {  // r_i of queries ql0, ql0 + 1: this thread's keys key_a, key_b, then the warp's 16 keys
          float r0 = bf16_lo(da) + bf16_lo(db), r1 = bf16_hi(da) + bf16_hi(db);
#pragma unroll
          for (int o = 4; o <= 16; o <<= 1) {
            r0 += __shfl_xor_sync(0xffffffffu, r0, o);
            r1 += __shfl_xor_sync(0xffffffffu, r1, o);
          }
          if (g == 0 && i0 + ql0 < p.Nq) atomicAdd(&p.rowsum[bh * p.Nq + i0 + ql0], r0);
          if (g == 0 && i0 + ql0 + 1 < p.Nq) atomicAdd(&p.rowsum[bh * p.Nq + i0 + ql0 + 1], r1);
        }
      }
    };
    if (interior) {
      elementwise(std::true_type{});
    } else {
      elementwise(std::false_type{});
    }
    // kThresh (v3.4): a thread with an entry of bf16(P) >= thresh (a few per block on trained attention, none on
    // diffuse rows) claims the list slots of its first two now, so that the atomics' round trips overlap the dK,
    // dV (and dQ) products below; it writes those entries after them, and the rare rest (`more`) goes out of line
    // after the barrier.
    uint32_t more = 0;
    int claim_c[2] = {-1, -1}, claim_slot[2] = {0, 0};
    if (kThresh && !(kAblate & 8) && pmax >= p.thresh_unrounded) {
      more = large_entry_mask(pf, p.thresh);
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        if (more != 0) {
          const int c = __ffs(more) - 1, q = i0 + large_entry_query(c, tq);
          more &= more - 1;
          if (q < p.Nq) {
            claim_c[u] = c;
            claim_slot[u] = atomicAdd(&p.list_count[bh * p.Nq + q], 1);
          }
        }
      }
    }
    // bf16(dS) into sdS[query][key] (block wg of 64 keys; row = query, column = the key within the block),
    // transposed by stmatrix: per pair of n-tiles the four 8 x 8 matrices (keys w4 16 + 0..7 | + 8..15) x
    // (queries 8 n + 0..7 | 8 (n + 1) + 0..7); lane l addresses row l % 8 of matrix l / 8.
    {
      bf16_t* blk = sdS_it + wg * BQ * 64;
      const int mi = lane >> 3, r = lane & 7;
#pragma unroll
      for (int n = 0; n < 8; n += 2) {
        const int query = (n + (mi >> 1)) * 8 + r, key0 = w4 * 16 + (mi & 1) * 8;
        stmatrix_x4_trans(smem_u32(blk + sw128_offset(query, key0, BQ)), dsf[n >> 1][0], dsf[n >> 1][1],
                          dsf[n >> 1][2], dsf[n >> 1][3]);
        if (kThresh && !(kAblate & 2)) {  // bf16(P) the same way, for the statistics product and the list appends
          stmatrix_x4_trans(smem_u32(sP + wg * BQ * 64 + sw128_offset(query, key0, BQ)), pf[n >> 1][0],
                            pf[n >> 1][1], pf[n >> 1][2], pf[n >> 1][3]);
        }
      }
    }

    // dV += bf16(P^T) dO and dK += bf16(dS^T) Q: A from registers, B = dO, Q with K = queries (MN-major). At
    // D = 128 both 64-column blocks in one m64n128k16 per 16 queries (session 13, as the forward's P V).
    wg_fence();
    if constexpr (kNB == 2) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const int off = st_off + kk * 16 * 64;
        wgmma_rs_n128<1, kDoS>(reinterpret_cast<float(&)[64]>(dv), pf[kk], wg_desc_advance_lo(o_mn, off), 1);
        wgmma_rs_n128<1, kH16>(reinterpret_cast<float(&)[64]>(dk), dsf[kk], wg_desc_advance_lo(q_mn, off), 1);
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        wgmma_rs_n64<1, kDoS>(dv[0], pf[kk], wg_desc_advance_lo(o_mn, st_off + kk * 16 * 64), 1);
        wgmma_rs_n64<1, kH16>(dk[0], dsf[kk], wg_desc_advance_lo(q_mn, st_off + kk * 16 * 64), 1);
      }
    }
    if constexpr (kDkComp) {  // E += eps^T (Q U_q): K = queries, B = the warpgroup's (Q U_q)^T tile (K-major)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma_rs_n16(ecomp, ef[kk], wg_desc_kmajor(sQU + wg * kWgStatCols * 64 + kk * 16));
    }
    wg_commit();
    fence_async_smem();  // sdS written by plain stores, read next by wgmma
    if constexpr (kSplit) {
      pair_bar_sync(3);  // both warpgroups' bf16(dS) blocks are complete
    } else if constexpr (kTma) {
      wg_bar_sync(1 + wg);  // the warpgroup's bf16(dS) block is complete
    } else {
      __syncthreads();
    }

    wg_wait0();  // dV, dK: pf and dsf are free (their registers may hold the dQ accumulators next)
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) {
      fence_regs(dv[nb]);
      fence_regs(dk[nb]);
    }
    fence_regs(pf);
    fence_regs(dsf);
    if constexpr (kDkComp) {
      fence_regs(ef);
      fence_regs(ecomp);
    }
    if (kTma && lane == 0) mbar_arrive(&empty[st]);  // this warp's products have read stage st
    // The entries whose slots were claimed after the element-wise step, written once the products that hide the
    // claims' round trips are done (sP holds their bf16(P) from the barrier above to the next block's): in the
    // default form here, after the dK, dV products (v3.22e: backward −3% to −4% on Gaussian and sink rows, q x 4
    // unchanged), with the forward's statistics after the dQ product (v3.4-v3.22; here it measured +3.7% on
    // q x 4 rows).
    if constexpr (kThresh && !kFwdStats)
      write_claimed_entries(p, claim_c, claim_slot, dv[0][0], sP + wg * BQ * 64, bh, i0, tq, key_a, w4 * 16 + g);
    if (kThresh && __any_sync(0xffffffffu, more != 0)) {  // sP is complete (the barrier above)
      append_large_entries_warp({p.list_count, p.list_j, p.list_p, p.list_cap, p.Nq, p.thresh}, sP + wg * BQ * 64,
                                bh, i0, w4 * 16, key_a - g, more);
    }

    // dQ (64 queries x D) += bf16(dS) K over this warpgroup's 64 keys, one 64-column block of D at a time:
    // A = sdS block wg (K-major), B = the warpgroup's K rows (K = keys, N = D: MN-major). v3.2: column block wg
    // only, over all 128 keys (both sdS blocks, all K rows).
    const int row_a = i0 + w4 * 16 + g, row_b = row_a + 8;  // dQ accumulator rows (queries)
    constexpr int kDqBlocks = kSplit ? 1 : kNB, kDqSteps = kSplit ? 8 : 4;
#pragma unroll
    for (int qn = 0; qn < kDqBlocks; ++qn) {
      const int nb = kSplit ? wg : qn;
      // kFwdStats: the steps that also sum bf16(dS) against the ones, each warpgroup over 64 keys: v3.2 warpgroup
      // w's k-steps 4 w .. 4 w + 3 (keys 64 w ..), v3.1 both warpgroups' column block 0 (their own keys).
      const bool with_r = kFwdStats && (kSplit || qn == 0);
      constexpr bool kR = kFwdStats || kH16;  // the dQ accumulator's 9th n8 block: r_i
      float dqa[kR ? 36 : 32];
#pragma unroll
      for (int e = 0; e < (kR ? 36 : 32); ++e) dqa[e] = 0.0f;
      float st16[8];  // kThresh, first column block: the statistics record of this warp's rows, m64n16 layout
      if constexpr ((kAblate & 1) || kFwdStats) {
#pragma unroll
        for (int e = 0; e < 8; ++e) st16[e] = 0.0f;
      }
      wg_fence();
      if (kThresh && !kFwdStats && qn == 0 && !(kAblate & 1)) {
#pragma unroll
        for (int kin = 0; kin < 4; ++kin) {
          const uint64_t pa = wg_desc_advance_lo(p_kd, kin * 16), ub = wg_desc_advance_lo(up_kd, kin * 16);
          if (kin == 0) {
            wgmma_ss_n16_first(st16, pa, ub);
          } else {
            wgmma_ss_n16(st16, pa, ub);
          }
          wgmma_ss_n16(st16, wg_desc_advance_lo(ds_kd, ds_off + wg_u * BQ * 64 + kin * 16),
                       wg_desc_advance_lo(ud_kd, kin * 16));
        }
      }
#pragma unroll
      for (int t = 0; t < kDqSteps; ++t) {
        // kFwdStats with v3.2: warpgroup w takes its own keys' steps (4 w ..) first, so that steps 0-3 are the n72
        // ones in both warpgroups: the shape of every step is then known at compile time (a runtime choice between
        // n72 and n64 made ptxas serialise all wgmmas of the kernel: C7520, backward +20%).
        // (kH16: from wg_u, so that kin and the descriptors formed from it stay in uniform registers: with wg, each
        // step formed its two descriptors in vector registers and moved them over with four R2UR, session 43)
        const int kin = kR && kSplit ? (t + 4 * (kH16 ? wg_u : wg)) & 7 : t;
        const bf16_t* a = kSplit ? sdS_it + (kin >> 2) * BQ * 64 + (kin & 3) * 16 : sdS_it + wg * BQ * 64 + kin * 16;
        const bf16_t* bk = kSplit ? sK + nb * BK * 64 + kin * 16 * 64 : kw(nb) + kin * 16 * 64;
        if constexpr (kH16) {  // B = Kh^T K-major: column block kin / 4, keys 16 (kin % 4) .. of each row
          // (D = 64: the warpgroup's own dS block and column block, keys 16 kin ..)
          const int a_off = (kSplit ? (kin >> 2) : wg_u) * BQ * 64 + (kin & 3) * 16;
          const uint64_t da = wg_desc_advance_lo(ds_kd, ds_off + a_off);
          const uint64_t db =
              wg_desc_advance_lo(kt_kd, (kSplit ? (kin >> 2) * kH16ColBlock<D> : 0) + (kin & 3) * 16);
          if (t < 4) {  // the warpgroup's own keys: n72, the ones rows give r_i
            wgmma_ss_n72_f16(dqa, da, db);
          } else {
            wgmma_ss_n64_f16(reinterpret_cast<float(&)[32]>(dqa), da, db);
          }
        } else if constexpr (kFwdStats) {
          if (kSplit ? t < 4 : with_r) {
            // N-block 1 (columns 64-71) at bk + the descriptor's N-block stride: row (kin % 4) 16 .. of sOnes.
            // `first`: the byte offset from sK of this warpgroup's first n72 step's B rows.
            const uint32_t first = (kSplit ? wg * (BK * 64 + 64 * 64) : wg * 64 * 64) * sizeof(bf16_t);
            const uint32_t stride = static_cast<uint32_t>(sOnes - sK) * sizeof(bf16_t) - first;
            wgmma_ss_n72_tb(dqa, wg_desc_kmajor(a), wg_desc_mnmajor(bk, stride), 1);
          } else {
            wgmma_ss_n64<1>(reinterpret_cast<float(&)[32]>(dqa), wg_desc_kmajor(a), wg_desc_mnmajor(bk, BK * 128), 1);
          }
        } else {
          const int a_off = kSplit ? (kin >> 2) * BQ * 64 + (kin & 3) * 16 : wg_u * BQ * 64 + kin * 16;
          const int b_off = kSplit ? wg_u * BK * 64 + kin * 16 * 64 : nb * BK * 64 + wg_u * 64 * 64 + kin * 16 * 64;
          wgmma_ss_n64<1>(dqa, wg_desc_advance_lo(ds_kd, ds_off + a_off), wg_desc_advance_lo(k_mn, b_off), 1);
        }
      }
      wg_commit();
      wg_wait0();
      fence_regs(dqa);
      if (kThresh && qn == 0) {
        fence_regs(st16);
        // Columns 2 tq, 2 tq + 1 of the record (n8 block 0): one 8-byte atomic per lane and row.
        constexpr bool kRecord = !(kAblate & 4) && !kFwdStats;
        if (kRecord && row_a < p.Nq) atomic_add2(p.pku + (bh * p.Nq + row_a) * kLowRank + 2 * tq, st16[0], st16[1]);
        if (kRecord && row_b < p.Nq) atomic_add2(p.pku + (bh * p.Nq + row_b) * kLowRank + 2 * tq, st16[2], st16[3]);
        if (kFwdStats && with_r && tq == 0) {  // r_i: column 64 of the n72 block (every ones column holds it)
          if (row_a < p.Nq) atomic_add1(p.pku + (bh * p.Nq + row_a) * kLowRank + kStatR, dqa[32]);
          if (row_b < p.Nq) atomic_add1(p.pku + (bh * p.Nq + row_b) * kLowRank + kStatR, dqa[34]);
        }
        if constexpr (kFwdStats)  // the claimed entries (see after the dK, dV products)
          write_claimed_entries(p, claim_c, claim_slot, dqa[0], sP + wg * BQ * 64, bh, i0, tq, key_a, w4 * 16 + g);
      }
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const int col = nb * 64 + n * 8 + 2 * tq;
        // kVecDq: even tq adds row_a, columns 2 tq .. 2 tq + 3; odd tq row_b, columns 2 tq - 2 .. 2 tq + 1.
        if constexpr (kVecDq) {
          const bool even = (tq & 1) == 0;
          const float s0 = __shfl_xor_sync(0xffffffffu, even ? dqa[4 * n + 2] : dqa[4 * n], 1);
          const float s1 = __shfl_xor_sync(0xffffffffu, even ? dqa[4 * n + 3] : dqa[4 * n + 1], 1);
          if (even && row_a < p.Nq) {
            const float v[4] = {dqa[4 * n], dqa[4 * n + 1], s0, s1};
            atomic_add_vec<4>(p.dq_acc + (bh * p.Nq + row_a) * D + col, v);
          }
          if (!even && row_b < p.Nq) {
            const float v[4] = {s0, s1, dqa[4 * n + 2], dqa[4 * n + 3]};
            atomic_add_vec<4>(p.dq_acc + (bh * p.Nq + row_b) * D + col - 2, v);
          }
        } else if constexpr (kBulk) {
          if (n == 0) {  // lane 0 sent the previous block's tile: it waits until that has been read
            if (lane == 0) bulk_wait_read0();
            __syncwarp();
          }
          // rows g and g + 8 of the warp's tile (both have row % 4 = g % 4), columns 8 n + 2 tq, + 1
          // (dq_tile_word(g, 8 n + 2 tq), written out: through the helper ptxas scheduled this loop differently
          // on v3.11c, 16 instructions more)
          float* srow =
              sDq + warp * kDqWarpFloats + g * 64 + (((2 * n + (tq >> 1)) ^ ((g & 3) << 1)) << 2) + 2 * (tq & 1);
          *reinterpret_cast<float2*>(srow) = make_float2(dqa[4 * n], dqa[4 * n + 1]);
          *reinterpret_cast<float2*>(srow + 8 * 64) = make_float2(dqa[4 * n + 2], dqa[4 * n + 3]);
          // v3.2-h16c: r_i of this warpgroup's keys (column 64: every ones column holds it) after the tile's rows,
          // so that it leaves with them. (v3.2-h16, a REDG a row from the lanes with tq = 0: 27 instructions and
          // 3.3% of the warp samples, session 44 run 1; v3.2-h16b, a second 64-byte bulk reduce-add: lane 0 waited
          // for the bulk unit to take the first, 9% of the samples, session 45 run 1.)
          if (kH16 && n == 7 && tq == 0) {
            sDq[warp * kDqWarpFloats + 1024 + g] = dqa[32];
            sDq[warp * kDqWarpFloats + 1024 + g + 8] = dqa[34];
          }
        } else {
          if (row_a < p.Nq) atomic_add2(p.dq_acc + (bh * p.Nq + row_a) * D + col, dqa[4 * n], dqa[4 * n + 1]);
          if (row_b < p.Nq) atomic_add2(p.dq_acc + (bh * p.Nq + row_b) * D + col, dqa[4 * n + 2], dqa[4 * n + 3]);
        }
      }
      if constexpr (kBulk && !kVecDq) {  // lane 0 sends the warp's tile (rows from i0 + 16 w4, columns nb * 64 ..)
        fence_async_smem();
        __syncwarp();
        if (lane == 0) {
          if (i0 + w4 * 16 < p.Nq) {  // (rows of the tile past Nq add zeros into dQacc's padding rows)
            if constexpr (kH16) {  // (the tile of rows i0 + 16 w4 .., column block nb, as h16_dq_kernel reads it)
              const int64_t tile = (bh * ((p.Nq + 15) / 16) + (i0 + w4 * 16) / 16) * kNB + nb;
              bulk_reduce_add_f32(p.dq_acc + tile * kH16DqTileFloats, sDq + warp * kDqWarpFloats,
                                  kH16DqTileFloats * sizeof(float));
            } else {
              bulk_reduce_add_f32(p.dq_acc + dq_acc_tiled_index(p, bh, i0 + w4 * 16, nb * 64), sDq + warp * 1024,
                                  1024 * sizeof(float));
            }
          }
          bulk_commit();
        }
      }
    }
    if constexpr (kTma) {
      produce(it);
    } else {
      __syncthreads();  // sdS and the stage are rewritten by the next block
    }
  }
  if constexpr (!kTma) cp_async_wait<0>();
  if constexpr (kBulk && !kVecDq) {
    if (lane == 0) bulk_wait0();  // the dQ tiles' reduce-adds are done before the CTA's shared memory goes
  }
  if constexpr (kDkComp) dk_compensate<D>(p.u_q + bh * D * kLowRank, ecomp, dk, lane);
  if constexpr (kH16) {  // dK out of sigma s_q's units, kDoS: dV out of s_do's (exact: powers of two)
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb)
#pragma unroll
      for (int e = 0; e < 32; ++e) {
        dk[nb][e] *= h16_dk_unscale;
        if constexpr (kDoS) dv[nb][e] *= h16_dv_unscale;
      }
  }
  // The wgmma accumulator [kNB][32] is the mma.sync layout [D / 8][4] of v1 (n8 tile 8 nb + j, element e).
  if (p.dkv_direct != 0) {
    store_dk_dv_direct<D, BK>(p, sV, reinterpret_cast<const float(&)[D / 8][4]>(dk),
                              reinterpret_cast<const float(&)[D / 8][4]>(dv));
  } else {
    store_dk_dv<D>(p, bh, key_a - g, g, tq, reinterpret_cast<const float(&)[D / 8][4]>(dk),
                   reinterpret_cast<const float(&)[D / 8][4]>(dv));
  }
  if constexpr (kThresh && D == 128) main_kernel_done(p, bh);  // v3.43: all this CTA's writes are done
#else
  __trap();  // built without sm_90a: the launch file never selects this kernel then
#endif
}

}  // namespace gproj::cuda::detail
