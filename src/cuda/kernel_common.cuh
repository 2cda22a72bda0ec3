// Device helpers shared by the CUDA attention kernels: problem parameters, BF16 conversions, strided loads.
// Included by src/cuda/*.cuh; exercised by tests/cuda/*.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace gproj::cuda::detail {

constexpr int kBlockQ = 64;    // query rows per tile (the CPU emulator's default block_q)
constexpr int kBlockK = 64;    // keys per tile (the CPU emulator's default block_k)
constexpr int kThreads = 128;  // two threads per tile row

// thresh-lowrank's basis on the GPU: kLowRank = 8 columns iterated (U, and K U stored 8 wide: one n = 8 MMA column
// tile, 16 bytes per key), of which the tail uses the first kTailRank; the main kernels leave K U's last two
// columns zero and put s_i and r_i there instead, so one row's statistics (P (K U), s_i, r_i) are one 32-byte
// record, `pku`, added with one 8-byte atomic per lane (docs/gproj-projection.md, "rank 6").
constexpr int kLowRank = 8;
constexpr int kTailRank = 6;
constexpr int kStatS = kTailRank, kStatR = kTailRank + 1;  // the record's columns of s_i and r_i
static_assert(kStatR == kLowRank - 1, "P (K U), s_i and r_i fill one n = 8 column tile");

// Strided (B, N, H, D) or (B, H, N) views; element strides.
struct Strided {
  const void* data;
  int64_t s0, s1, s2;  // the last dimension is contiguous
};

struct KernelParams {
  int B, Nq, Nk, H, Hkv, D;
  float scale;
  bool causal;
  float beta, tie_tol, max_shift;
  bool row_stats;                    // backward: r_i, s_i for every variant (the audit), not only the projection
  Strided q, k, v, o, dout;          // BF16 inputs
  const float* o_fp32;               // (B, Nq, H, D) contiguous, or null
  const float* lse;                  // (B, H, Nq) contiguous
  __nv_bfloat16* o_out;              // forward: (B, Nq, H, D) contiguous
  float* o_fp32_out;                 // forward: optional
  __half* o16_out;                   // forward, fp16-lowrank: (B, Nq, H, D) fp16(O s_v), the backward's delta source
  const __half* o16;                 // backward, fp16-lowrank: the same
  __half* doh;                       // backward, fp16-lowrank with 1 / l on dO's side: (B, Nq, H, D) dense,
                                     // fp16(dO_i / l_i s_do), s_do fp16_head_scale(2 max_i |dO_i|) per head
  unsigned int* dmax_bits;           // backward, fp16-lowrank: (B, H) max_i |dO_i| as float bits (preprocess)
  float* lse_out;                    // forward
  // backward workspace, all contiguous FP32
  float* delta;                      // (B, H, Nq)
  float* dq_acc;                     // (B, H, Nq, D), or with dq_tiled the v3.15 tiles (dq_acc_index)
  int dq_tiled;                      // 1: dq_acc in v3.15's tiles (v3.2 at D = 128, v3.17 at D = 64)
  float* pk;                         // (B, H, Nq, D) sum_j bf16(P_ij) K_j (P-weighted only)
  float* rowsum;                     // (B, H, Nq) r_i (thresh-lowrank: copied from pku by the dQ postprocess)
  float* psum;                       // (B, H, Nq) s_i (likewise)
  // thresh-lowrank (docs/gproj-projection.md)
  float thresh;                      // entries with bf16(P) >= thresh are kept exactly (1/k)
  float thresh_unrounded;            // the smallest FP32 P with bf16(P) >= thresh (bf16_threshold in launch.cu)
  int list_cap;                      // k: slots per row (never exceeded: sum_j bf16(P) <= 1.002)
  int* list_count;                   // (B, H, Nq)
  int* list_j;                       // (B, H, Nq, k) key indices
  float* list_p;                     // (B, H, Nq, k) their bf16(P)
  int basis_stride;                  // the Gram matrix of K from every s-th tile of 64 keys (FlashParams::basis_key_stride)
  float* gram;                       // (B, Hkv, chunks, D, D) K^T K, a partial matrix per chunk of keys
  float* u;                          // (B, Hkv, D, 8) the basis: 8 columns towards the top eigenvectors
  __nv_bfloat16* ku;                 // (B, Hkv, Nk, 8) bf16(K U), columns kTailRank.. zero
  float* pku;                        // (B, H, Nq, 8) the row's record: sum_j bf16(P_ij) (K U)_j (columns 0-5),
                                     // s_i (kStatS), r_i (kStatR)
  // thresh-lowrank with the forward's statistics (v2.3 forward, v3.9 backward; docs/gproj-forward-stats.md)
  float* fwd_stats;                  // forward: (B, H, Nq, 8) P (K U) (columns 0-5) and s_i (kStatS) of each row,
                                     // from the forward's own bf16(P); column kStatR zero
  __nv_bfloat16* ku_tiles;           // forward: (B, Hkv, Nk, 8) bf16(K U) with a one in column kStatS (v2.6),
                                     // loaded 64 keys at a time through TmaMaps::ku (fp16-lowrank: FP16 bits,
                                     // fp16(K U s_ku), s_ku = fp16_ku_scale(s_k))
  const float* fp16_scales;          // fp16-lowrank: each head's power of two of its FP16 copies (q's B H, k's and
                                     // v's B Hkv: cuda::fp16_scale_count's layout), from the conversion pass
  float* rest;                       // (B, H, Nq) c_i (s_i - mass of the list) / (n_i - entries): the uniform part
  float* suffix;                     // (B, H, D): the total sum_i rest_i Q_i per head (thresh, not causal)
  float* part;                       // (B, H, ceil(Nq / 64), D) block sums of rest_i Q_i
  int* head_done;                    // (B, H) dQ-correction CTAs finished (non-causal: the last one sums `part`)
  int* main_done;                    // v3.43: (B, H) wgmma main-kernel CTAs finished, or null (thresh_dq then
                                     // starts after the main kernel, as a plain launch)
  int main_ctas;                     // v3.43: the main kernel's CTAs per head (gridDim.x)
  // dK compensation (FlashParams::dk_compensation_rank = 8): the same basis for the queries of each query head
  float* gram_q;                     // (B, H, chunks, D, D) Q^T Q, likewise
  float* u_q;                        // (B, H, D, 8) its top-8 eigenvectors
  __nv_bfloat16* qu;                 // (B, H, Nq, 8) bf16(Q U_q)
  float* dk_acc;                     // (B, H, Nk, D) per query head
  float* dv_acc;                     // (B, H, Nk, D) per query head
  int dkv_direct;                    // v3.34, one query head per kv head, dK and dV 16-byte aligned: the wgmma main
                                     // kernel stores dV (bit 1) and dK (bit 2; not thresh-lowrank's, whose dK
                                     // correction needs dKacc) in BF16 itself; the dK/dV postprocess skips them
  __nv_bfloat16 *dq, *dk, *dv;       // outputs, contiguous
};

// dQacc's word (row i, column d) of head row bh (d a multiple of 4: a 16-byte chunk stays whole). Row-major
// (B, H, Nq, D), or with p.dq_tiled (v3.15 at D = 128, v3.17 at D = 64) in tiles of 16 rows x 64 columns (4 KB,
// ceil(Nq / 16) row groups per head, column blocks inner), each the image of one warp's shared-memory rows: row r
// of the tile at 64 r, its 16-byte chunk c at chunk c ^ 2 (r % 4), so that each half-warp's 8-byte stores of its
// accumulator rows (rows g, 4 of them, two chunks each) cover the 32 banks once. (Before v3.19 the chunk was
// c ^ (r & 7), which left the two chunks of rows g and g ^ 1 in the same banks: two wavefronts per half-warp
// store, ncu's excessive shared wavefronts, 33.6 M per backward at D = 128, N = 4k.) A row's 256-byte column
// block is one whole piece either way.
// The word of (row r, column c) inside one tile (r < 16, c < 64), for dq_acc_tiled_index and thresh_dq
// (projection_tc.cuh). The main kernel's shared-memory store writes the same formula out (flash_bwd_wg.cuh: through
// this helper ptxas scheduled its loop with 16 more instructions).
__device__ __forceinline__ int dq_tile_word(int r, int c) {
  return r * 64 + (((c >> 2) ^ ((r & 3) << 1)) << 2) + (c & 3);
}
__device__ __forceinline__ int64_t dq_acc_tiled_index(const KernelParams& p, int64_t bh, int i, int d) {
  const int64_t groups = (p.Nq + 15) / 16;
  return ((bh * groups + i / 16) * (p.D / 64) + d / 64) * 1024 + dq_tile_word(i % 16, d % 64);
}
// fp16-lowrank's dQacc tiles (v3.2-h16c at D = 128, v3.17-h16 at D = 64): the same 16 rows x 64 columns, then the
// 16 rows' r_i over the keys of the warpgroup(s) that send that column block (the main kernel's n72 ones columns),
// 4160 bytes: a warp's rows and their r_i leave as one bulk reduce-add; r_i of a row is the sum of its column
// blocks' words (D = 128: two, each from one warpgroup; D = 64: one, into which both warpgroups add).
constexpr int kH16DqTileFloats = 1024 + 16;
__device__ __forceinline__ int64_t dq_acc_index(const KernelParams& p, int64_t bh, int i, int d) {
  return p.dq_tiled ? dq_acc_tiled_index(p, bh, i, d) : (bh * p.Nq + i) * p.D + d;
}

__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

__device__ __forceinline__ float load_bf16(const Strided& t, int b, int n, int h, int d) {
  const auto* p = static_cast<const __nv_bfloat16*>(t.data);
  return __bfloat162float(p[b * t.s0 + n * t.s1 + h * t.s2 + d]);
}

// The lower and upper BF16 of a packed pair, as floats (exact).
__device__ __forceinline__ float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

// kV = 2 or 4 consecutive BF16 at `at` (aligned to 2 kV bytes) as packed pairs, one load (unpack with bf16_lo and
// bf16_hi where used: half the registers of floats).
template <int kV>
__device__ __forceinline__ void load_bf16_packed(const __nv_bfloat16* at, uint32_t (&w)[kV / 2]) {
  static_assert(kV == 2 || kV == 4, "two or four elements");
  if constexpr (kV == 4) {
    const uint2 r = *reinterpret_cast<const uint2*>(at);
    w[0] = r.x, w[1] = r.y;
  } else {
    w[0] = *reinterpret_cast<const uint32_t*>(at);
  }
}

// kV = 2 or 4 floats rounded to BF16 (RNE) and stored with one access (dst aligned to 2 kV bytes).
template <int kV>
__device__ __forceinline__ void store_bf16_vec(__nv_bfloat16* dst, const float (&x)[kV]) {
  static_assert(kV == 2 || kV == 4, "two or four elements");
  uint32_t w[kV / 2];
#pragma unroll
  for (int i = 0; i < kV / 2; ++i) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(x[2 * i], x[2 * i + 1]);
    w[i] = *reinterpret_cast<const uint32_t*>(&v);
  }
  if constexpr (kV == 4) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
  } else {
    *reinterpret_cast<uint32_t*>(dst) = w[0];
  }
}

// (b, n, head, d) of element idx of a contiguous (B, N, heads, D) tensor, in 32-bit arithmetic: launch.cu refuses
// problems of 2^31 elements or more (64-bit divisions cost more than the postprocess kernels' memory traffic).
struct BnhdIndex {
  int b, n, h, d;
};
__device__ __forceinline__ BnhdIndex decode_bnhd(uint32_t idx, int N, int heads, int D) {
  uint32_t rest = idx / D;
  BnhdIndex x;
  x.d = static_cast<int>(idx - rest * D);
  x.h = static_cast<int>(rest % heads);
  rest /= heads;
  x.n = static_cast<int>(rest % N);
  x.b = static_cast<int>(rest / N);
  return x;
}

// v3.43, the tail of the backward's main kernel: its CTAs count themselves done per head (main_kernel_done, each
// CTA's last act) and thresh_dq's CTAs, launched programmatically (launch.cu) while the main kernel's last wave still
// runs, wait for their head's count (wait_main_kernel_head) instead of for the whole kernel. Every thread of the
// main kernel's CTA fences its own writes, lane 0s first the dQ tiles' bulk reduce-adds (async proxy) it waited for,
// and after the CTA's barrier thread 0 counts: the release that thread 0 of a waiting CTA acquires, then that CTA's
// barrier orders every later read of dQacc, the records, the lists, K U and dKacc after it.
__device__ __forceinline__ void main_kernel_done(const KernelParams& p, int64_t bh) {
  if (p.main_done == nullptr) return;
  if ((threadIdx.x & 31) == 0) asm volatile("fence.proxy.async.global;\n" ::: "memory");
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) atomicAdd(p.main_done + bh, 1);
}
__device__ __forceinline__ void wait_main_kernel_head(const KernelParams& p, int64_t bh) {
  if (p.main_done == nullptr) return;
  if (threadIdx.x == 0) {
    for (;;) {
      int done;
      asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(done) : "l"(p.main_done + bh) : "memory");
      if (done >= p.main_ctas) break;
      __nanosleep(500);
    }
  }
  __syncthreads();
}
// The main kernel lets its programmatic dependents (thresh_dq) be scheduled once every CTA has started.
__device__ __forceinline__ void allow_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

// fp16-lowrank's power of two of the FP16 copy of K U: K's head scale s_k over 2^c, 4^c >= D (1 + 2^-8)^2, so that
// |K U| <= max |K| sqrt(D) (1 + 2^-8) stays below 2^15 (the CPU emulator's cpu::fp16_ku_scale, the same formula).
__host__ __device__ constexpr int fp16_ku_shift(int D) {
  int c = 0;
  while (static_cast<double>(1ull << (2 * c)) < D * (257.0 / 256) * (257.0 / 256)) ++c;
  return c;
}
template <int D>
__device__ __forceinline__ float fp16_ku_scale(float k_scale) {
  constexpr float kInv = 1.0f / static_cast<float>(1 << fp16_ku_shift(D));
  return fmaxf(k_scale * kInv, 1.17549435e-38f);  // >= 2^-126
}
// Slots of cuda::fp16_scale_count's layout: q's head (b, h), k's and v's kv head (b, hk), v's largest row norm.
__device__ __forceinline__ int fp16_k_slot(int B, int H, int Hkv, int b, int hk) { return B * H + b * Hkv + hk; }
__device__ __forceinline__ int fp16_v_slot(int B, int H, int Hkv, int b, int hk) {
  return B * H + B * Hkv + b * Hkv + hk;
}
__device__ __forceinline__ int fp16_vnorm_slot(int B, int H, int Hkv, int b, int hk) {  // max_j |V_j| (not a scale)
  return B * H + 2 * B * Hkv + b * Hkv + hk;
}

// fp16-lowrank's dS scale (the CPU emulator's): sigma = 2^(14 - ceil(log2 bound)), bound = 2 max_i |dO_i| max_j |V_j|
// >= |dS_ij|, its exponent within +-126 (2^-126 for an infinite bound), 1 for a zero one. ceil(log2) from the
// exponent and mantissa of `bound`, exactly.
__device__ __forceinline__ float fp16_ds_scale(float dmax, float vmax) {
  const float bound = 2.0f * dmax * vmax;
  if (!(bound > 0.0f)) return 1.0f;
  int c = 126 + 14;  // (infinite or NaN bound: 2^-126)
  if (isfinite(bound)) {
    int e = 0;
    const float m = frexpf(bound, &e);  // bound = m 2^e, m in [0.5, 1)
    c = m == 0.5f ? e - 1 : e;
  }
  return ldexpf(1.0f, max(-126, min(126, 14 - c)));
}

// The sum of squares of a 16-byte chunk's eight BF16 values, in their order (one FFMA each): a row norm's part, for
// the conversion pass's max |V_j| and fp16-lowrank's max |dO_i| (token-major kernels, a row's chunks on lanes).
__device__ __forceinline__ float bf16_chunk_sumsq(uint4 w) {
  float sq = 0.0f;
  for (uint32_t x : {w.x, w.y, w.z, w.w}) {
    sq = fmaf(__uint_as_float(x << 16), __uint_as_float(x << 16), sq);
    sq = fmaf(__uint_as_float(x & 0xFFFF0000u), __uint_as_float(x & 0xFFFF0000u), sq);
  }
  return sq;
}
// A row's norm from the parts held by `lanes` consecutive lanes (a power of two up to 32, the group aligned): every
// lane of the group gets it. All 32 lanes of the warp take part.
__device__ __forceinline__ float lanes_row_norm(float sq, int lanes) {
  for (int o = 1; o < lanes; o <<= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
  return sqrtf(sq);
}

// The FP16 copies' power of two for a largest magnitude m (cpu::fp16_head_scale): m s in [2^14, 2^15), the exponent
// within +-126; 1 for a zero or non-finite m.
__device__ __forceinline__ float fp16_head_scale(float m) {
  if (!(m > 0.0f) || !isfinite(m)) return 1.0f;
  return ldexpf(1.0f, max(-126, min(126, 14 - ilogbf(m))));
}

__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }

// fwdfix's candidate for a block whose max rm (finite) is tied: beta rm above 0, 0 below, the lift capped at
// max_shift; the same formula as block_max_candidate in src/cpu/flash_forward.cc.
__device__ __forceinline__ float tied_candidate(float rm, float beta, float max_shift) {
  if (rm > 0.0f) return (beta - 1.0f) * rm <= max_shift ? beta * rm : rm + max_shift;
  if (rm < 0.0f) return -rm <= max_shift ? 0.0f : rm + max_shift;
  return rm;
}

// Last key visible to query i (bottom-right causal alignment), or Nk - 1 when not causal.
__device__ __forceinline__ int last_visible(const KernelParams& p, int i) {
  return p.causal ? i + p.Nk - p.Nq : p.Nk - 1;
}

// The first query row that sees key j0 (0 without causal masking; Nq when none does): a key-major backward CTA
// over keys j0.. starts its query loop at that row's block.
__device__ __forceinline__ int first_query_row(const KernelParams& p, int j0) {
  return p.causal ? max(0, min(p.Nq, j0 - (p.Nk - p.Nq))) : 0;
}

}  // namespace gproj::cuda::detail
