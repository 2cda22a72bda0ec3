// The thresh-lowrank projection on the GPU (docs/gproj-projection.md), around flash_bwd_tc_kernel<..., kThresh>:
// a pre-pass per kv head (Gram matrix of K, 8 columns of subspace iteration towards its top eigenvectors U as
// in src/cpu/projection.cc, of which the tail uses the first kTailRank = 6; bf16(K U)), and a postprocess that
// applies the corrections once r_i and s_i are known:
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

// The rows a rank-8 basis is built for: K per kv head (thresh-lowrank), or Q per query head (kQ: the dK
// compensation, FlashParams::dk_compensation_rank), with where their Gram matrix, basis and projections go.
template <bool kQ>
struct LowRankRows {
  Strided x;
  int n, heads;
  float* gram;
  float* u;
  __nv_bfloat16* xu;
  __device__ explicit LowRankRows(const KernelParams& p)
      : x(kQ ? p.q : p.k), n(kQ ? p.Nq : p.Nk), heads(kQ ? p.H : p.Hkv), gram(kQ ? p.gram_q : p.gram),
        u(kQ ? p.u_q : p.u), xu(kQ ? p.qu : p.ku) {}
};

// The Gram matrix in chunks of key tiles: at least kGramTiles tiles of 64 keys per chunk and at most
// kGramMaxChunks chunks per head, so the eigenvector kernel, which adds the chunks' partial matrices, reads at
// most kGramMaxChunks of them. The same function on the host (grid, workspace) and in the kernels.
constexpr int kGramTiles = 16, kGramMaxChunks = 16;
__host__ __device__ inline int gram_chunk_tiles(int n) {
  const int tiles = (n + kBwdBlock - 1) / kBwdBlock;
  const int spread = (tiles + kGramMaxChunks - 1) / kGramMaxChunks;
  return spread > kGramTiles ? spread : kGramTiles;
}
__host__ __device__ inline int gram_chunks(int n) {
  const int tiles = (n + kBwdBlock - 1) / kBwdBlock, per = gram_chunk_tiles(n);
  return (tiles + per - 1) / per;
}

// gram[b, hk, chunk] = K[chunk]^T K[chunk] on the tensor cores (BF16 K, FP32 accumulation: the products are
// exact), one partial matrix per chunk, stored whole (no atomics: eig_kernel adds the chunks in order, so the
// result does not depend on timing); grid (gram_chunks(Nk), Hkv, B), 4 warps. Key tiles of 64 are
// double-buffered with cp.async; warp w accumulates the 16-row slices w, w + 4, ... of G with warp_atb (the
// backward's dK = dS^T Q form, T = B = K). kQ: the same for Q per query head.
template <int D, bool kQ = false>
__global__ void __launch_bounds__(kBwdThreads) gram_kernel(const KernelParams p) {
  constexpr int kSlices = D / 64;  // 16-row slices of G per warp
  __shared__ __align__(128) bf16_t sK[2 * kBwdBlock * D];
  const LowRankRows<kQ> rows(p);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int b = blockIdx.z, hk = blockIdx.y;
  const int per = gram_chunk_tiles(rows.n);
  const int t0 = blockIdx.x * per, ntiles = min(per, (rows.n + kBwdBlock - 1) / kBwdBlock - t0);  // >= 1
  float acc[kSlices][D / 8][4];
#pragma unroll
  for (int sl = 0; sl < kSlices; ++sl)
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[sl][n][e] = 0.0f;
  const auto load = [&](int t) {
    const int j0 = (t0 + t) * kBwdBlock;
    load_tile_async<kBwdBlock, D, kBwdThreads>(sK + (t & 1) * kBwdBlock * D, rows.x.data, rows.x.s0, rows.x.s1,
                                                rows.x.s2, b, j0, min(kBwdBlock, rows.n - j0), hk);  // zeros past n
  };
  load(0);
  cp_async_commit();
  for (int t = 0; t < ntiles; ++t) {
    if (t + 1 < ntiles) load(t + 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const bf16_t* kt = sK + (t & 1) * kBwdBlock * D;
#pragma unroll
    for (int sl = 0; sl < kSlices; ++sl) warp_atb<D, D>(acc[sl], kt, kt, (warp + 4 * sl) * 16, lane);
    __syncthreads();
  }
  float* gram = rows.gram + ((static_cast<int64_t>(b) * rows.heads + hk) * gridDim.x + blockIdx.x) * D * D;
#pragma unroll
  for (int sl = 0; sl < kSlices; ++sl)
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = (warp + 4 * sl) * 16 + g + 8 * half, col = n * 8 + 2 * tq;
        *reinterpret_cast<float2*>(&gram[row * D + col]) = make_float2(acc[sl][n][2 * half], acc[sl][n][2 * half + 1]);
      }
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

// Modified Gram-Schmidt of the kLowRank columns of X (column-major [8][D] in shared memory) by warp 0, the
// columns in registers (lane holds rows lane + 32 m): the order of operations of orthonormalise in
// src/cpu/projection.cc, in FP32.
template <int D, int kSweeps = 1>
__device__ void orthonormalise_columns(float* X) {
  if (threadIdx.x >= 32) return;
  constexpr int kM = D / 32;
  const int lane = threadIdx.x;
  float x[kLowRank][kM];
#pragma unroll
  for (int c = 0; c < kLowRank; ++c)
#pragma unroll
    for (int m = 0; m < kM; ++m) x[c][m] = X[c * D + lane + 32 * m];
#pragma unroll
  for (int c = 0; c < kLowRank; ++c) {
#pragma unroll
    for (int sweep = 0; sweep < kSweeps; ++sweep)  // the last call: twice (top_eigenvectors says why)
#pragma unroll
      for (int d = 0; d < c; ++d) {
        float dot = 0.0f;
#pragma unroll
        for (int m = 0; m < kM; ++m) dot = fmaf(x[c][m], x[d][m], dot);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
#pragma unroll
        for (int m = 0; m < kM; ++m) x[c][m] -= dot * x[d][m];
      }
    float norm = 0.0f;
#pragma unroll
    for (int m = 0; m < kM; ++m) norm = fmaf(x[c][m], x[c][m], norm);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) norm += __shfl_xor_sync(0xffffffffu, norm, o);
    const float inv = norm > 0.0f ? rsqrtf(norm) : 0.0f;
#pragma unroll
    for (int m = 0; m < kM; ++m) x[c][m] *= inv;
  }
#pragma unroll
  for (int c = 0; c < kLowRank; ++c)
#pragma unroll
    for (int m = 0; m < kM; ++m) X[c * D + lane + 32 * m] = x[c][m];
}

constexpr int kSubspaceIters = 4;  // as top_eigenvectors in src/cpu/projection.cc (docs/gproj-projection.md)

template <int D>
constexpr size_t eig_smem_bytes() {
  return sizeof(float) * (D * D + 2 * D * kLowRank);
}

// u[b, hk] = top-8 eigenvectors of gram[b, hk] by kSubspaceIters steps of subspace iteration; grid (Hkv, B)
// (kQ: (H, B), the queries' basis). Y = G X: thread a (< D) forms row a of Y, all 8 columns, reading G[e][a]
// (G is symmetric: consecutive lanes, consecutive words) and row e of X as two 16-byte broadcasts.
template <int D, bool kQ = false>
__global__ void __launch_bounds__(kPostThreads) eig_kernel(const KernelParams p) {
  extern __shared__ float smem_f[];
  float* G = smem_f;            // [D][D]
  float* X = G + D * D;         // [8][D] (orthonormalise_columns)
  float* Y = X + D * kLowRank;  // [D][8]
  const LowRankRows<kQ> rows(p);
  const int b = blockIdx.y, hk = blockIdx.x;
  const int chunks = gram_chunks(rows.n);
  const float* gram = rows.gram + (static_cast<int64_t>(b) * rows.heads + hk) * chunks * D * D;
  // The chunks' partial matrices, added in chunk order. Each thread has kV float4 of G in flight per chunk: one
  // element per thread and load waited ~64 x chunks memory round trips per CTA at D = 128 (eig_kernel took 88 µs
  // under ncu at N = 4k, 4 chunks, most of it here); now 2 x chunks.
  constexpr int kV = 8, kStep = kPostThreads * 4 * kV;
  static_assert((D * D) % (kPostThreads * 4) == 0, "whole float4 per thread");
  for (int x0 = threadIdx.x * 4; x0 < D * D; x0 += kStep) {
    float4 sum[kV];
#pragma unroll
    for (int v = 0; v < kV; ++v) {
      const int x = x0 + v * kPostThreads * 4;
      sum[v] = x < D * D ? *reinterpret_cast<const float4*>(gram + x) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    for (int c = 1; c < chunks; ++c) {
      float4 t[kV];
#pragma unroll
      for (int v = 0; v < kV; ++v) {
        const int x = x0 + v * kPostThreads * 4;
        t[v] = x < D * D ? *reinterpret_cast<const float4*>(gram + static_cast<int64_t>(c) * D * D + x)
                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int v = 0; v < kV; ++v) sum[v].x += t[v].x, sum[v].y += t[v].y, sum[v].z += t[v].z, sum[v].w += t[v].w;
    }
#pragma unroll
    for (int v = 0; v < kV; ++v) {
      const int x = x0 + v * kPostThreads * 4;
      if (x < D * D) *reinterpret_cast<float4*>(G + x) = sum[v];
    }
  }
  for (int x = threadIdx.x; x < D * kLowRank; x += kPostThreads) X[x] = start_value(x % D, x / D);
  __syncthreads();
  orthonormalise_columns<D>(X);
  __syncthreads();
  for (int it = 0; it < kSubspaceIters; ++it) {
    for (int x = threadIdx.x; x < D * kLowRank; x += kPostThreads) Y[(x % D) * kLowRank + x / D] = X[x];
    __syncthreads();
    const int a = threadIdx.x;
    float y[kLowRank] = {};
    if (a < D) {
#pragma unroll 4
      for (int e = 0; e < D; ++e) {
        const float g = G[e * D + a];
        const float4 x0 = reinterpret_cast<const float4*>(Y + e * kLowRank)[0];
        const float4 x1 = reinterpret_cast<const float4*>(Y + e * kLowRank)[1];
        y[0] = fmaf(g, x0.x, y[0]), y[1] = fmaf(g, x0.y, y[1]), y[2] = fmaf(g, x0.z, y[2]), y[3] = fmaf(g, x0.w, y[3]);
        y[4] = fmaf(g, x1.x, y[4]), y[5] = fmaf(g, x1.y, y[5]), y[6] = fmaf(g, x1.z, y[6]), y[7] = fmaf(g, x1.w, y[7]);
      }
    }
    __syncthreads();
    if (a < D) {
#pragma unroll
      for (int c = 0; c < kLowRank; ++c) X[c * D + a] = y[c];
    }
    __syncthreads();
    if (it + 1 < kSubspaceIters) {
      orthonormalise_columns<D>(X);
    } else {
      orthonormalise_columns<D, 2>(X);
    }
    __syncthreads();
  }
  float* u = rows.u + (static_cast<int64_t>(b) * rows.heads + hk) * D * kLowRank;
  for (int x = threadIdx.x; x < D * kLowRank; x += kPostThreads) u[x] = X[(x % kLowRank) * D + x / kLowRank];
}

// ku[b, hk, j] = bf16(K_j U): a tile of 64 keys staged in shared memory (16-byte loads), two threads per key
// with 4 of the 8 columns each; grid (ceil(Nk / 64), Hkv, B), 128 threads (kQ: qu = bf16(Q U_q), grid
// (ceil(Nq / 64), H, B)).
template <int D, bool kQ = false>
__global__ void __launch_bounds__(kBwdThreads) ku_kernel(const KernelParams p) {
  __shared__ __align__(128) bf16_t sK[kBwdBlock * D];
  __shared__ __align__(16) float su[D * kLowRank];
  const LowRankRows<kQ> rows(p);
  const int b = blockIdx.z, hk = blockIdx.y, j0 = blockIdx.x * kBwdBlock;
  const int count = min(kBwdBlock, rows.n - j0);
  load_tile_async<kBwdBlock, D, kBwdThreads>(sK, rows.x.data, rows.x.s0, rows.x.s1, rows.x.s2, b, j0, count, hk);
  cp_async_commit();
  const float* u = rows.u + (static_cast<int64_t>(b) * rows.heads + hk) * D * kLowRank;
  // K U is bf16(K bf16(U)) (the product the v3 kernels form on the tensor cores; the CPU emulator's form); the
  // dK compensation's Q U keeps the FP32 basis.
  for (int x = threadIdx.x; x < D * kLowRank; x += kBwdThreads) su[x] = kQ ? u[x] : round_bf16(u[x]);
  cp_async_wait<0>();
  __syncthreads();
  const int r = threadIdx.x >> 1, c0 = (threadIdx.x & 1) * 4;
  if (r >= count) return;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  // Eight elements of the key per 16-byte load, four columns of U per 16-byte (broadcast) load: shared memory
  // served 40 loads per 32 FMAs when each was read alone. Per column the same FMAs in the same order.
#pragma unroll 4
  for (int ch = 0; ch < D / 8; ++ch) {
    const uint4 raw = *reinterpret_cast<const uint4*>(sK + swz<D>(r, ch));
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float x = (e & 1) ? bf16_hi(w[e / 2]) : bf16_lo(w[e / 2]);
      const float4 uu = *reinterpret_cast<const float4*>(su + (ch * 8 + e) * kLowRank + c0);
      acc[0] = fmaf(x, uu.x, acc[0]);
      acc[1] = fmaf(x, uu.y, acc[1]);
      acc[2] = fmaf(x, uu.z, acc[2]);
      acc[3] = fmaf(x, uu.w, acc[3]);
    }
  }
  if (!kQ && c0 + 4 > kTailRank) {  // K U's columns past the tail's rank are zero: the record's s_i, r_i go there
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[c] = c0 + c < kTailRank ? acc[c] : 0.0f;
  }
  store_bf16_vec<4>(rows.xu + ((static_cast<int64_t>(b) * rows.heads + hk) * rows.n + j0 + r) * kLowRank + c0, acc);
}

// The listed entries' dK corrections of one warp of the dQ correction (its 8 consecutive rows), summed per key in
// shared memory before they go to dk_acc: rows near each other list the same keys (the diagonal of local
// attention, a sink every row attends to), so one global float4 atomic per key and lane replaces one per entry.
// Each warp has its own kSlots keys (kSlots x D floats; 32 KB for the CTA's 8 warps), so an add is a plain
// read-modify-write of the lane's own columns: no shared-memory float atomics (compare-and-swap loops on sm_90,
// 12% of the kernel's stall samples with one table for the CTA) and no probing. The slots' keys live in lanes
// 0..kSlots-1 (one register); a lookup is two ballots. An entry whose key finds no free slot goes straight to
// dk_acc as before.
template <int D>
struct WarpDkTable {
  static constexpr int kSlots = 1024 / D;  // per warp: 8 at D = 128, 16 at D = 64
  float* acc;                              // [kSlots][D], this warp's
  int key = -1;                            // lane s < kSlots: the key of slot s (-1: free)
  // The slot of key j (warp-uniform; taken if new), or -1 when every slot holds another key.
  __device__ int slot(int j, int lane) {
    const uint32_t hit = __ballot_sync(0xffffffffu, lane < kSlots && key == j);
    if (hit != 0) return __ffs(hit) - 1;
    const uint32_t free = __ballot_sync(0xffffffffu, lane < kSlots && key == -1);
    if (free == 0) return -1;
    const int s = __ffs(free) - 1;
    if (lane == s) key = j;
    return s;
  }
};

// What the dQ correction of one row reads before any of its arithmetic (thresh_dq_row): every value that depends
// on the row alone, issued together so that a row waits for one memory latency instead of one per use. Lanes
// past the list's count hold j = 0, p = 0 once `cnt` is known (the slots past it were never written).
template <int D>
struct ThreshRowLoads {
  static constexpr int kV = D / 32;
  float rec;           // column lane % 8 of the row's statistics record: P (K U) (< kTailRank), s_i, r_i
  int cnt, jt;         // the list's length; this lane's entry (lane < cnt)
  float pt;
  float dq[kV], q[kV];  // the lane's kV columns of dQacc and of Q_i
};

template <int D>
__device__ __forceinline__ ThreshRowLoads<D> thresh_row_loads(const KernelParams& p, int b, int h, int i, int lane) {
  constexpr int kV = D / 32;
  const int64_t row = (static_cast<int64_t>(b) * p.H + h) * p.Nq + i;
  const int d0 = lane * kV;
  ThreshRowLoads<D> x;
  x.rec = p.pku[row * kLowRank + (lane & (kLowRank - 1))];
  x.cnt = min(p.list_count[row], p.list_cap);
  x.jt = 0;
  x.pt = 0.0f;
  if (lane < p.list_cap) {  // all slots at once; the count decides below which are real
    x.jt = p.list_j[row * p.list_cap + lane];
    x.pt = p.list_p[row * p.list_cap + lane];
  }
  if constexpr (kV == 4) {
    const float4 a = *reinterpret_cast<const float4*>(p.dq_acc + row * D + d0);
    x.dq[0] = a.x, x.dq[1] = a.y, x.dq[2] = a.z, x.dq[3] = a.w;
  } else {
    const float2 a = *reinterpret_cast<const float2*>(p.dq_acc + row * D + d0);
    x.dq[0] = a.x, x.dq[1] = a.y;
  }
  load_bf16_vec<kV>(p.q, b, i, h, d0, x.q);
  return x;
}

// kRing (experimental, `cuda_thresh_dq_ring`): each warp keeps kRingRows rows' inputs in flight in a shared-memory
// ring filled by cp.async (which holds no registers), instead of one row ahead in registers: its dQacc and Q
// rows, the statistics record, the list's count and its slots. One slot, 16-byte aligned parts.
constexpr int kRingRows = 3;
template <int D>
struct RingSlot {
  static constexpr int kCap = 32;  // list_cap <= 32 (launch.cu)
  float dq[D];
  __nv_bfloat16 q[D];
  float rec[kLowRank];
  int j[kCap];
  float pp[kCap];
  int cnt[4];
};
template <int D>
constexpr size_t ring_smem_bytes() {
  return sizeof(RingSlot<D>) * kRingRows * (kPostThreads / 32);
}
static_assert(sizeof(RingSlot<64>) % 16 == 0 && sizeof(RingSlot<128>) % 16 == 0, "16-byte aligned slots");

// 4-byte global -> shared copy (cp.async.ca: the 16-byte form requires 16-byte aligned sources; a list row is
// list_cap words from a word boundary).
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}

// Row i's inputs into `slot` (the whole warp calls it; the copies land when this thread's group completes).
template <int D>
__device__ __forceinline__ void ring_issue(const KernelParams& p, RingSlot<D>* slot, int b, int h, int i, int lane) {
  const int64_t row = (static_cast<int64_t>(b) * p.H + h) * p.Nq + i;
  if (lane < D / 4) cp_async16(smem_u32(slot->dq + 4 * lane), p.dq_acc + row * D + 4 * lane, true);
  if (lane < D / 8) {
    const auto* q = static_cast<const __nv_bfloat16*>(p.q.data) + b * p.q.s0 + i * p.q.s1 + h * p.q.s2;
    cp_async16(smem_u32(slot->q + 8 * lane), q + 8 * lane, true);
  }
  if (lane < 2) cp_async16(smem_u32(slot->rec + 4 * lane), p.pku + row * kLowRank + 4 * lane, true);
  if (lane < p.list_cap) {
    cp_async4(smem_u32(slot->j + lane), p.list_j + row * p.list_cap + lane);
    cp_async4(smem_u32(slot->pp + lane), p.list_p + row * p.list_cap + lane);
  }
  if (lane == 0) cp_async4(smem_u32(slot->cnt), p.list_count + row);
  asm volatile("" ::: "memory");  // no shared-memory access of the slot moves above its copies
}

// thresh_row_loads' values, from a landed ring slot.
template <int D>
__device__ __forceinline__ ThreshRowLoads<D> ring_row_loads(const KernelParams& p, const RingSlot<D>* slot, int lane) {
  constexpr int kV = D / 32;
  const int d0 = lane * kV;
  ThreshRowLoads<D> x;
  x.rec = slot->rec[lane & (kLowRank - 1)];
  x.cnt = min(slot->cnt[0], p.list_cap);
  x.jt = 0;
  x.pt = 0.0f;
  if (lane < p.list_cap) {
    x.jt = slot->j[lane];
    x.pt = slot->pp[lane];
  }
  if constexpr (kV == 4) {
    const float4 a = *reinterpret_cast<const float4*>(slot->dq + d0);
    x.dq[0] = a.x, x.dq[1] = a.y, x.dq[2] = a.z, x.dq[3] = a.w;
    const uint2 w = *reinterpret_cast<const uint2*>(slot->q + d0);
    x.q[0] = bf16_lo(w.x), x.q[1] = bf16_hi(w.x), x.q[2] = bf16_lo(w.y), x.q[3] = bf16_hi(w.y);
  } else {
    const float2 a = *reinterpret_cast<const float2*>(slot->dq + d0);
    x.dq[0] = a.x, x.dq[1] = a.y;
    const uint32_t w = *reinterpret_cast<const uint32_t*>(slot->q + d0);
    x.q[0] = bf16_lo(w), x.q[1] = bf16_hi(w);
  }
  return x;
}

// The dQ correction of row i (one warp), for thresh_dq_kernel, from its loads `x` (thresh_row_loads); adds
// rest_i Q_i to the lane's columns of `part`. The listed keys' rows of K and K U are the second (and last) round
// of loads; then only arithmetic, the dQ store and the dK atomics.
template <int D>
__device__ __forceinline__ void thresh_dq_row(const KernelParams& p, const float* su, WarpDkTable<D>& tab, int b,
                                              int h, int hk, int i, int lane, ThreshRowLoads<D> x,
                                              float (&part)[D / 32]) {
  constexpr int kV = D / 32, kCap = 32;  // list_cap <= 32 (launch.cu): one slot per lane
  const int64_t row = (static_cast<int64_t>(b) * p.H + h) * p.Nq + i;
  const int d0 = lane * kV;
  const float s = __shfl_sync(0xffffffffu, x.rec, kStatS), rsum = __shfl_sync(0xffffffffu, x.rec, kStatR);
  const float c = s > 0.0f ? rsum / s : 0.0f;
  const int cnt = x.cnt;
  if (lane >= cnt) {
    x.jt = 0;
    x.pt = 0.0f;
  }
  const int jt = x.jt;
  const float pt = x.pt;
  // Second round: this lane's entry's bf16(K U) (one 16-byte load) and, for every entry, the lane's columns of K_j.
  float kuv[kLowRank];
  {
    uint4 raw = make_uint4(0, 0, 0, 0);
    if (lane < cnt) raw = *reinterpret_cast<const uint4*>(p.ku + ((static_cast<int64_t>(b) * p.Hkv + hk) * p.Nk + jt) * kLowRank);
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int v = 0; v < kLowRank / 2; ++v) {
      kuv[2 * v] = bf16_lo(w[v]);
      kuv[2 * v + 1] = bf16_hi(w[v]);
    }
  }
  float acc[kV], back[kV];
#pragma unroll
  for (int e = 0; e < kV; ++e) acc[e] = back[e] = 0.0f;
  // Four entries' K rows in flight at a time; per element the same FMAs in list order as one at a time.
  for (int t0 = 0; t0 < cnt; t0 += 4) {
    float kv[4][kV];
    int jj[4];
    float pj[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      jj[u] = __shfl_sync(0xffffffffu, jt, (t0 + u) & (kCap - 1));
      pj[u] = __shfl_sync(0xffffffffu, pt, (t0 + u) & (kCap - 1));
      if (t0 + u < cnt) load_bf16_vec<kV>(p.k, b, jj[u], hk, d0, kv[u]);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u)
      if (t0 + u < cnt) {
#pragma unroll
        for (int e = 0; e < kV; ++e) acc[e] = fmaf(pj[u], kv[u][e], acc[e]);
      }
  }
  float tail[kTailRank];
#pragma unroll
  for (int v = 0; v < kTailRank; ++v) {
    float y = 0.0f;
    if (cnt > 0) {  // the listed entries' own share of P (K U)
      y = lane < cnt ? pt * kuv[v] : 0.0f;
      for (int o = 16; o > 0; o >>= 1) y += __shfl_xor_sync(0xffffffffu, y, o);
    }
    tail[v] = __shfl_sync(0xffffffffu, x.rec, v) - y;
  }
  float mass = pt;
  for (int o = 16; o > 0; o >>= 1) mass += __shfl_xor_sync(0xffffffffu, mass, o);
  const int n_vis = p.causal ? max(0, min(p.Nk, i + p.Nk - p.Nq + 1)) : p.Nk;
  const int n_rest = n_vis - cnt;
  const float rest = s > 0.0f && n_rest > 0 ? c * (s - mass) / static_cast<float>(n_rest) : 0.0f;
  // Lane owns kV consecutive columns d0.. (one vector access each: the dQ store and the dK atomics); per element
  // the same operations in the same order as one column at a time.
#pragma unroll
  for (int v = 0; v < kTailRank; ++v)
#pragma unroll
    for (int e = 0; e < kV; ++e) back[e] = fmaf(tail[v], su[v * D + d0 + e], back[e]);
  float xs[kV];
#pragma unroll
  for (int e = 0; e < kV; ++e) xs[e] = p.scale * (x.dq[e] - c * (acc[e] + back[e]));
  store_bf16_vec<kV>(p.dq + ((static_cast<int64_t>(b) * p.Nq + i) * p.H + h) * D + d0, xs);
  if (lane == 0) {
    p.rest[row] = rest;
    p.psum[row] = s;  // for the audit's diagnostics (host_dispatch.cc reads r_i and s_i there)
    p.rowsum[row] = rsum;
  }
#pragma unroll
  for (int e = 0; e < kV; ++e) part[e] = fmaf(rest, x.q[e], part[e]);
  for (int t = 0; t < cnt; ++t) {
    const int j = __shfl_sync(0xffffffffu, jt, t);
    const float w = c * __shfl_sync(0xffffffffu, pt, t) - rest;
    const int slot = tab.slot(j, lane);
    if (slot >= 0) {  // into the warp's per-key sum (the lane's own columns)
      float* a = tab.acc + slot * D + d0;
      if constexpr (kV == 4) {
        float4 t = *reinterpret_cast<float4*>(a);
        t.x = fmaf(-w, x.q[0], t.x), t.y = fmaf(-w, x.q[1], t.y), t.z = fmaf(-w, x.q[2], t.z), t.w = fmaf(-w, x.q[3], t.w);
        *reinterpret_cast<float4*>(a) = t;
      } else {
        float2 t = *reinterpret_cast<float2*>(a);
        t.x = fmaf(-w, x.q[0], t.x), t.y = fmaf(-w, x.q[1], t.y);
        *reinterpret_cast<float2*>(a) = t;
      }
      continue;
    }
    float v[kV];
#pragma unroll
    for (int e = 0; e < kV; ++e) v[e] = -w * x.q[e];
    atomic_add_vec<kV>(p.dk_acc + ((static_cast<int64_t>(b) * p.H + h) * p.Nk + j) * D + d0, v);
  }
}

// One warp per row: the dQ correction and the output dQ = bf16(scale dQacc'), the listed entries' dK correction
// (summed per key in the warp's table, then atomics into dk_acc) and rest_i for the uniform part. Grid
// (ceil(Nq / 64), H, B): a CTA's rows share one kv head, whose U it stages once in shared memory, transposed
// ([8][D]: lanes read consecutive words). Warp w takes the block's rows 8 w .. 8 w + 7 (consecutive rows list
// the same keys most). The CTA also writes part[b, h, blk] = sum over its rows of rest_i Q_i (each warp over its
// rows in order, then the warps in order); without causal masking the last CTA of a head to finish (a counter
// per head, after a fence) adds the blocks in order and stores the total as suffix row 0, the only suffix sum
// read then.
// kRing: the rows' inputs through the warp's cp.async ring (above); the same arithmetic in the same order.
template <int D, bool kRing = false>
__global__ void __launch_bounds__(kPostThreads, 3) thresh_dq_kernel(const KernelParams p) {
  constexpr int kWarps = kPostThreads / 32, kV = D / 32, kSlots = WarpDkTable<D>::kSlots;
  constexpr int kRowsPerWarp = kSuffixBlock / kWarps;
  static_assert(kSuffixBlock % kWarps == 0, "whole rows per warp");
  __shared__ float su[kLowRank * D];
  __shared__ float sp[kWarps * D];
  __shared__ __align__(16) float tab_acc[kWarps * kSlots * D];
  __shared__ bool last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, b = blockIdx.z, h = blockIdx.y;
  const int hk = h / (p.H / p.Hkv);
  const float* u = p.u + (static_cast<int64_t>(b) * p.Hkv + hk) * D * kLowRank;
  for (int x = threadIdx.x; x < D * kLowRank; x += kPostThreads) su[(x % kLowRank) * D + x / kLowRank] = u[x];
  WarpDkTable<D> tab{tab_acc + warp * kSlots * D};
  // The warp's own table, zeroed lane-strided: a lane later adds into columns other lanes zeroed, so the barrier
  // below (for su too) is needed for the table as well.
  for (int x = lane; x < kSlots * D; x += 32) tab.acc[x] = 0.0f;
  __syncthreads();
  float part[kV];
#pragma unroll
  for (int e = 0; e < kV; ++e) part[e] = 0.0f;
  // The warp's rows in order: the next row's loads are issued before this row's arithmetic.
  const int i_end = min(p.Nq, blockIdx.x * kSuffixBlock + (warp + 1) * kRowsPerWarp);
  int i = blockIdx.x * kSuffixBlock + warp * kRowsPerWarp;
  if constexpr (kRing) {
    extern __shared__ __align__(16) unsigned char ring_raw[];
    RingSlot<D>* ring = reinterpret_cast<RingSlot<D>*>(ring_raw) + warp * kRingRows;
    const int i0 = i, rows = max(0, i_end - i0);
    // kRingRows - 1 rows ahead, one commit group per row (empty past the warp's rows, so the count stays even).
#pragma unroll
    for (int t = 0; t < kRingRows - 1; ++t) {
      if (t < rows) ring_issue<D>(p, ring + t, b, h, i0 + t, lane);
      cp_async_commit();
    }
    for (int t = 0; t < rows; ++t) {
      __syncwarp();  // every lane has read slot (t - 1) % kRingRows, which the next copy reuses
      if (t + kRingRows - 1 < rows) ring_issue<D>(p, ring + (t + kRingRows - 1) % kRingRows, b, h, i0 + t + kRingRows - 1, lane);
      cp_async_commit();
      cp_async_wait<kRingRows - 1>();  // this thread's copies of row t have landed
      __syncwarp();                    // and every lane's
      thresh_dq_row<D>(p, su, tab, b, h, hk, i0 + t, lane, ring_row_loads<D>(p, ring + t % kRingRows, lane), part);
    }
    cp_async_wait<0>();
  } else if (i < i_end) {
    ThreshRowLoads<D> cur = thresh_row_loads<D>(p, b, h, i, lane);
    for (; i < i_end; ++i) {
      const ThreshRowLoads<D> next = i + 1 < i_end ? thresh_row_loads<D>(p, b, h, i + 1, lane) : cur;
      thresh_dq_row<D>(p, su, tab, b, h, hk, i, lane, cur, part);
      cur = next;
    }
  }
  const int64_t bh = static_cast<int64_t>(b) * p.H + h;
  for (int s = 0; s < kSlots; ++s) {  // the warp's per-key sums to dk_acc: one vector atomic per lane and key
    const int j = __shfl_sync(0xffffffffu, tab.key, s);
    if (j < 0) break;  // slots are taken in order
    float v[kV];
#pragma unroll
    for (int e = 0; e < kV; ++e) v[e] = tab.acc[s * D + lane * kV + e];
    atomic_add_vec<kV>(p.dk_acc + (bh * p.Nk + j) * D + lane * kV, v);
  }
#pragma unroll
  for (int e = 0; e < kV; ++e) sp[warp * D + lane * kV + e] = part[e];
  __syncthreads();
  const int d = threadIdx.x;
  if (d < D) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += sp[w * D + d];
    p.part[(bh * gridDim.x + blockIdx.x) * D + d] = sum;
  }
  if (p.causal) return;  // suffix_kernel forms every row's suffix sum from the block sums
  __threadfence();       // this CTA's block sum is visible before it counts itself done
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&p.head_done[bh], 1) == static_cast<int>(gridDim.x) - 1;
  __syncthreads();
  if (!last || d >= D) return;
  __threadfence();
  float total = 0.0f;
  for (int blk = 0; blk < static_cast<int>(gridDim.x); ++blk) total += __ldcg(p.part + (bh * gridDim.x + blk) * D + d);
  p.suffix[bh * p.Nq * D + d] = total;
}

// suffix[b, h, i, d] = sum_{i' >= i} rest_i' Q_i'[d] with causal masking: the block sums after blk (sequential
// over the few blocks), then down the block's own rows; grid (ceil(Nq / 64), H, B), D threads. (Without
// causal masking thresh_dq_kernel stores the total, row 0, itself.)
template <int D>
__global__ void suffix_kernel(const KernelParams p) {
  const int b = blockIdx.z, h = blockIdx.y, blk = blockIdx.x, d = threadIdx.x;
  const int64_t bh = static_cast<int64_t>(b) * p.H + h;
  float run = 0.0f;
  for (int later = gridDim.x - 1; later > blk; --later) run += p.part[(bh * gridDim.x + later) * D + d];
  // Sixteen rows' rest_i and Q_i[d] are loaded together (independent loads, in flight at once: in a loop that
  // stores as it goes, each load would wait behind the previous row's store), then the running sum over them, as
  // before from the last row up.
  constexpr int kChunk = 16;
  static_assert(kSuffixBlock % kChunk == 0, "whole chunks per block");
  const int i0 = blk * kSuffixBlock, i1 = min(p.Nq, i0 + kSuffixBlock);
  for (int c0 = i0 + kSuffixBlock - kChunk; c0 >= i0; c0 -= kChunk) {
    float rv[kChunk], qv[kChunk];
#pragma unroll
    for (int x = 0; x < kChunk; ++x) {
      rv[x] = qv[x] = 0.0f;
      if (c0 + x < i1) {
        rv[x] = p.rest[bh * p.Nq + c0 + x];
        qv[x] = load_bf16(p.q, b, c0 + x, h, d);
      }
    }
#pragma unroll
    for (int x = kChunk - 1; x >= 0; --x) {
      if (c0 + x < i1) {
        run = fmaf(rv[x], qv[x], run);
        p.suffix[(bh * p.Nq + c0 + x) * D + d] = run;
      }
    }
  }
}

}  // namespace gproj::cuda::detail
