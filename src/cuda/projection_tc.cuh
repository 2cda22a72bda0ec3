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

// Bench-only ablation (CMake -DGPROJ_ABLATE, see flash_bwd_wg.cuh) of thresh_dq_kernel's listed entries' dK
// corrections: bit 64 drops them all (no per-key table, no atomics), bit 128 only those the warp's table has no
// slot for (their direct atomics). Gradients are then wrong; 0 (every normal build) changes nothing.
#ifndef GPROJ_ABLATE
#define GPROJ_ABLATE 0
#endif
constexpr bool kDqAblateEntriesDk = (GPROJ_ABLATE & 64) != 0, kDqAblateDirectDk = (GPROJ_ABLATE & 128) != 0;

// The rows a rank-8 basis is built for: K per kv head (thresh-lowrank), or Q per query head (kQ: the dK
// compensation, FlashParams::dk_compensation_rank), with where their Gram matrix, basis and projections go.
template <bool kQ>
struct LowRankRows {
  Strided x;
  int n, heads, stride;  // stride: the Gram matrix from every stride-th tile of 64 rows (K only)
  float* gram;
  float* u;
  __nv_bfloat16* xu;
  __device__ explicit LowRankRows(const KernelParams& p)
      : x(kQ ? p.q : p.k), n(kQ ? p.Nq : p.Nk), heads(kQ ? p.H : p.Hkv), stride(kQ ? 1 : p.basis_stride),
        gram(kQ ? p.gram_q : p.gram),
        u(kQ ? p.u_q : p.u), xu(kQ ? p.qu : p.ku) {}
};

// The Gram matrix in chunks of key tiles: at least kGramTiles tiles of 64 keys per chunk and at most
// kGramMaxChunks chunks per head, so the eigenvector kernel, which adds the chunks' partial matrices, reads at
// most kGramMaxChunks of them. With a stride s (FlashParams::basis_key_stride, K's basis only) the matrix is formed
// from every s-th tile (tile 0 always in: the CPU emulator's keys) and a chunk takes at least kGramTiles / s of
// them, so that a head has as many chunks as with s = 1 (4 at N = 4k). The same functions on the host (grid,
// workspace) and in the kernels.
constexpr int kGramTiles = 16, kGramMaxChunks = 16;
__host__ __device__ inline int gram_sampled_tiles(int n, int stride) {
  const int tiles = (n + kBwdBlock - 1) / kBwdBlock;
  return (tiles + stride - 1) / stride;
}
__host__ __device__ inline int gram_chunk_tiles(int n, int stride = 1) {
  const int tiles = gram_sampled_tiles(n, stride);
  const int spread = (tiles + kGramMaxChunks - 1) / kGramMaxChunks, least = kGramTiles / stride;
  return spread > least ? spread : (least > 1 ? least : 1);
}
__host__ __device__ inline int gram_chunks(int n, int stride = 1) {
  const int tiles = gram_sampled_tiles(n, stride), per = gram_chunk_tiles(n, stride);
  return (tiles + per - 1) / per;
}

// gram[b, hk, chunk] = K[chunk]^T K[chunk] on the tensor cores (BF16 K, FP32 accumulation: the products are
// exact), one partial matrix per chunk, stored whole (no atomics: eig_kernel adds the chunks in order, so the
// result does not depend on timing); grid (gram_chunks(Nk, stride), Hkv, B), 4 warps. Key tiles of 64 (every
// stride-th) are double-buffered with cp.async; warp w accumulates the 16-row slices w, w + 4, ... of G with
// warp_atb (the backward's dK = dS^T Q form, T = B = K). kQ: the same for Q per query head (stride 1).
template <int D, bool kQ = false>
__global__ void __launch_bounds__(kBwdThreads) gram_kernel(const KernelParams p) {
  constexpr int kSlices = D / 64;  // 16-row slices of G per warp
  __shared__ __align__(128) bf16_t sK[2 * kBwdBlock * D];
  const LowRankRows<kQ> rows(p);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int b = blockIdx.z, hk = blockIdx.y;
  const int per = gram_chunk_tiles(rows.n, rows.stride);
  const int t0 = blockIdx.x * per, ntiles = min(per, gram_sampled_tiles(rows.n, rows.stride) - t0);  // >= 1
  float acc[kSlices][D / 8][4];
#pragma unroll
  for (int sl = 0; sl < kSlices; ++sl)
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[sl][n][e] = 0.0f;
  const auto load = [&](int t) {
    const int j0 = (t0 + t) * rows.stride * kBwdBlock;
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

// Modified Gram-Schmidt of the kLowRank columns of X ([D][8] row-major in shared memory, the layout Y = G X is
// formed in) by warp 0, lane holding rows lane + 32 m in registers. v1.50b: one reduction over the lanes per column
// (five shuffle steps): column c's squared norm and its dot products with the later columns side by side; then c is
// normalised and each later column takes x_e -= (x_e . x_c / |x_c|) x_c / |x_c|, MGS's projection onto the final
// column c with the dot product formed before the scaling. kReorth (the last step, as top_eigenvectors in
// src/cpu/projection.cc): column c first takes a second sweep against the final columns 0 .. c - 1, classically
// (their dot products side by side from the same x_c, then subtracted in order); where G has rank < 8 a column of
// G X is its earlier columns plus rounding noise, and one sweep leaves it O(1) along them once normalised. The CPU
// does the same steps in double, with MGS's order for both sweeps; the GPU's U agrees with it to FP32 rounding.
// (v1.48 took a norm and a projection step per column, each a chain of five shuffles, and the second sweep one
// column pair at a time: 108 chained reductions over the five calls, ~9 µs of eig_kernel's 28 at D = 128 by its
// source page (session 30 run 1); now 48.)
template <int D, bool kReorth = false>
__device__ void orthonormalise_rows(float* X) {
  if (threadIdx.x >= 32) return;
  constexpr int kM = D / 32;
  const int lane = threadIdx.x;
  float x[kLowRank][kM];
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    const float4 lo = reinterpret_cast<const float4*>(X + (lane + 32 * m) * kLowRank)[0];
    const float4 hi = reinterpret_cast<const float4*>(X + (lane + 32 * m) * kLowRank)[1];
    x[0][m] = lo.x, x[1][m] = lo.y, x[2][m] = lo.z, x[3][m] = lo.w;
    x[4][m] = hi.x, x[5][m] = hi.y, x[6][m] = hi.z, x[7][m] = hi.w;
  }
  // dot[e] = x_e . x_d over all rows for e in [lo, hi), reduced side by side
  const auto dots = [&](float(&dot)[kLowRank], int d, int lo, int hi) {
#pragma unroll
    for (int e = lo; e < hi; ++e) {
      dot[e] = 0.0f;
#pragma unroll
      for (int m = 0; m < kM; ++m) dot[e] = fmaf(x[e][m], x[d][m], dot[e]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int e = lo; e < hi; ++e) dot[e] += __shfl_xor_sync(0xffffffffu, dot[e], o);
  };
#pragma unroll
  for (int c = 0; c < kLowRank; ++c) {
    if constexpr (kReorth) {
      if (c > 0) {
        float dot[kLowRank];
        dots(dot, c, 0, c);  // dot[d] = x_d . x_c for the earlier columns d
#pragma unroll
        for (int d = 0; d < c; ++d)
#pragma unroll
          for (int m = 0; m < kM; ++m) x[c][m] -= dot[d] * x[d][m];
      }
    }
    float dot[kLowRank];
    dots(dot, c, c, kLowRank);  // dot[c]: |x_c|^2
    const float inv = dot[c] > 0.0f ? rsqrtf(dot[c]) : 0.0f;
#pragma unroll
    for (int m = 0; m < kM; ++m) x[c][m] *= inv;
#pragma unroll
    for (int e = c + 1; e < kLowRank; ++e) {
      const float f = dot[e] * inv;
#pragma unroll
      for (int m = 0; m < kM; ++m) x[e][m] -= f * x[c][m];
    }
  }
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    reinterpret_cast<float4*>(X + (lane + 32 * m) * kLowRank)[0] = make_float4(x[0][m], x[1][m], x[2][m], x[3][m]);
    reinterpret_cast<float4*>(X + (lane + 32 * m) * kLowRank)[1] = make_float4(x[4][m], x[5][m], x[6][m], x[7][m]);
  }
}

constexpr int kSubspaceIters = 4;  // as top_eigenvectors in src/cpu/projection.cc (docs/gproj-projection.md)

// Y = G X's threads: part p of the kParts forms rows a of Y over its share of the e.
template <int D>
constexpr int kEigParts = kPostThreads / D;
template <int D>
constexpr size_t eig_smem_bytes() {
  return sizeof(float) * (D * D + D * kLowRank * kEigParts<D>);  // G, X, Y's partial rows of parts 1 ..
}

// u[b, hk] = top-8 eigenvectors of gram[b, hk] by kSubspaceIters steps of subspace iteration; grid (Hkv, B)
// (kQ: (H, B), the queries' basis). v1.50b (session 30): X in the [D][8] layout throughout (no transposes), Y = G X
// over all threads, orthonormalise_rows; the chunks' loads two chunks deep.
template <int D, bool kQ = false>
__global__ void __launch_bounds__(kPostThreads) eig_kernel(const KernelParams p) {
  constexpr int kParts = kEigParts<D>, kSpan = D / kParts;
  static_assert(kPostThreads % D == 0, "whole rows of Y per part");
  extern __shared__ float smem_f[];
  float* G = smem_f;                // [D][D]
  float* X = G + D * D;             // [D][8]
  float* Ypart = X + D * kLowRank;  // [kParts - 1][D][8]
  const LowRankRows<kQ> rows(p);
  const int b = blockIdx.y, hk = blockIdx.x;
  const int chunks = gram_chunks(rows.n, rows.stride);
  const float* gram = rows.gram + (static_cast<int64_t>(b) * rows.heads + hk) * chunks * D * D;
  // The chunks' partial matrices, added in chunk order, ((G_0 + G_1) + G_2) + ... Each thread has kV float4 of
  // two chunks in flight (v1.50b: the next chunk's loads before this chunk's adds; one chunk deep, the sums were
  // ~28% of the kernel's stall samples at D = 128, N = 4k, session 30 run 1).
  constexpr int kV = D * D / (kPostThreads * 4) < 8 ? D * D / (kPostThreads * 4) : 8, kStep = kPostThreads * 4 * kV;
  static_assert((D * D) % (kPostThreads * 4) == 0, "whole float4 per thread");
  const auto load = [&](float4(&t)[kV], int c, int x0) {
#pragma unroll
    for (int v = 0; v < kV; ++v) {
      const int x = x0 + v * kPostThreads * 4;
      t[v] = x < D * D ? *reinterpret_cast<const float4*>(gram + static_cast<int64_t>(c) * D * D + x)
                       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  };
  for (int x0 = threadIdx.x * 4; x0 < D * D; x0 += kStep) {
    float4 sum[kV], cur[kV];
    load(sum, 0, x0);
    if (chunks > 1) load(cur, 1, x0);
    for (int c = 1; c < chunks; ++c) {
      float4 next[kV];
      if (c + 1 < chunks) load(next, c + 1, x0);
#pragma unroll
      for (int v = 0; v < kV; ++v) sum[v].x += cur[v].x, sum[v].y += cur[v].y, sum[v].z += cur[v].z, sum[v].w += cur[v].w;
      if (c + 1 < chunks) {
#pragma unroll
        for (int v = 0; v < kV; ++v) cur[v] = next[v];
      }
    }
#pragma unroll
    for (int v = 0; v < kV; ++v) {
      const int x = x0 + v * kPostThreads * 4;
      if (x < D * D) *reinterpret_cast<float4*>(G + x) = sum[v];
    }
  }
  // Y = G X: thread (part, a) forms row a of Y over its share of the e (G[e][a]: G is symmetric, consecutive lanes
  // read consecutive words; row e of X as two 16-byte broadcasts); parts 1 .. store theirs, part 0 adds them in
  // part order and writes X's row.
  const int a = threadIdx.x % D, part = threadIdx.x / D;
  for (int x = threadIdx.x; x < D * kLowRank; x += kPostThreads) X[x] = start_value(x / kLowRank, x % kLowRank);
  __syncthreads();
  orthonormalise_rows<D>(X);
  __syncthreads();
  for (int it = 0; it < kSubspaceIters; ++it) {
    float y[kLowRank] = {};
#pragma unroll 4
    for (int e = part * kSpan; e < (part + 1) * kSpan; ++e) {
      const float ge = G[e * D + a];
      const float4 x0 = reinterpret_cast<const float4*>(X + e * kLowRank)[0];
      const float4 x1 = reinterpret_cast<const float4*>(X + e * kLowRank)[1];
      y[0] = fmaf(ge, x0.x, y[0]), y[1] = fmaf(ge, x0.y, y[1]), y[2] = fmaf(ge, x0.z, y[2]), y[3] = fmaf(ge, x0.w, y[3]);
      y[4] = fmaf(ge, x1.x, y[4]), y[5] = fmaf(ge, x1.y, y[5]), y[6] = fmaf(ge, x1.z, y[6]), y[7] = fmaf(ge, x1.w, y[7]);
    }
    if (part > 0) {
      float4* to = reinterpret_cast<float4*>(Ypart + ((part - 1) * D + a) * kLowRank);
      to[0] = make_float4(y[0], y[1], y[2], y[3]);
      to[1] = make_float4(y[4], y[5], y[6], y[7]);
    }
    __syncthreads();  // (every read of X done)
    if (part == 0) {
#pragma unroll
      for (int q = 1; q < kParts; ++q) {
        const float4* from = reinterpret_cast<const float4*>(Ypart + ((q - 1) * D + a) * kLowRank);
        const float4 lo = from[0], hi = from[1];
        y[0] += lo.x, y[1] += lo.y, y[2] += lo.z, y[3] += lo.w, y[4] += hi.x, y[5] += hi.y, y[6] += hi.z, y[7] += hi.w;
      }
      reinterpret_cast<float4*>(X + a * kLowRank)[0] = make_float4(y[0], y[1], y[2], y[3]);
      reinterpret_cast<float4*>(X + a * kLowRank)[1] = make_float4(y[4], y[5], y[6], y[7]);
    }
    __syncthreads();
    if (it + 1 < kSubspaceIters) {
      orthonormalise_rows<D>(X);
    } else {
      orthonormalise_rows<D, true>(X);
    }
    __syncthreads();
  }
  float* u = rows.u + (static_cast<int64_t>(b) * rows.heads + hk) * D * kLowRank;  // (D, 8), as X
  for (int x = threadIdx.x; x < D * kLowRank; x += kPostThreads) u[x] = X[x];
}

// ku[b, hk, j] = bf16(K_j U): a tile of 64 keys staged in shared memory (16-byte loads), two threads per key
// with 4 of the 8 columns each; grid (ceil(Nk / 64), Hkv, B), 128 threads (kQ: qu = bf16(Q U_q), grid
// (ceil(Nq / 64), H, B)). kTiles (the forward's statistics): also bf16(K U) into p.ku_tiles, (B, Hkv, Nk, 8), with
// a one in column kStatS and a zero in kStatR; v2.6's forward loads 64 keys of it at a time through a tensor map
// as the third column block of a V stage (columns 8-63 and keys past Nk read as zeros).
// kH16 (fp16-lowrank, with kTiles): the tiles hold FP16 bits, fp16(K U s_ku) with s_ku = fp16_ku_scale(s_k) from the
// conversion pass's scales (p.fp16_scales) and an unscaled one in kStatS; xu (the backward's bf16(K U)) is not
// written: fp16-lowrank's backward has no K U.
template <int D, bool kQ = false, bool kTiles = false, bool kH16 = false>
__global__ void __launch_bounds__(kBwdThreads) ku_kernel(const KernelParams p) {
  static_assert(!kTiles || !kQ, "tiles of K U only");
  static_assert(!kH16 || kTiles, "fp16-lowrank's K U is its forward's tiles");
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
  if constexpr (kH16) {
    const float s_ku = fp16_ku_scale<D>(p.fp16_scales[fp16_k_slot(p.B, p.H, p.Hkv, b, hk)]);
    float w[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) w[c] = c0 + c == kStatS ? 1.0f : acc[c] * s_ku;
    *reinterpret_cast<uint2*>(p.ku_tiles + ((static_cast<int64_t>(b) * p.Hkv + hk) * p.Nk + j0 + r) * kLowRank + c0) =
        make_uint2(pack_f16(w[0], w[1]), pack_f16(w[2], w[3]));
    return;
  }
  store_bf16_vec<4>(rows.xu + ((static_cast<int64_t>(b) * rows.heads + hk) * rows.n + j0 + r) * kLowRank + c0, acc);
  if constexpr (kTiles) {  // v2.6: the key's row of 8 as in xu, with a one in column kStatS (s_i's)
    float w[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) w[c] = c0 + c == kStatS ? 1.0f : acc[c];
    store_bf16_vec<4>(p.ku_tiles + ((static_cast<int64_t>(b) * p.Hkv + hk) * p.Nk + j0 + r) * kLowRank + c0, w);
  }
}

// The listed entries' dK corrections of one warp of the dQ correction (its 8 consecutive rows), summed per key in
// shared memory before they go to dk_acc: rows near each other list the same keys (the diagonal of local
// attention, a sink every row attends to), so one global float4 atomic per key and lane replaces one per entry.
// Each warp has its own kSlots keys (kSlots x D floats; 32 KB for the CTA's 8 warps), so an add is a plain
// read-modify-write of the lane's own columns: no shared-memory float atomics (compare-and-swap loops on sm_90,
// 12% of the kernel's stall samples with one table for the CTA) and no probing. The slots' keys live in lanes
// 0..kSlots-1 (one register); a lookup is two ballots. An entry whose key finds no free slot goes straight to
// dk_acc as before.
// v1.31, kLanes = 16 (two rows per warp at D = 64): each half-warp has half of the warp's slots, their keys in its
// lanes 0..kSlots/2 - 1; a lookup is the same two ballots, each half reading its own bits.
// v1.42: the table is never zeroed. A slot's first add is a store (`fresh`), which covers its whole row: the row's
// lanes together hold all D columns. Before, every CTA zeroed its 32 KB of tables before a barrier, ~80 of a
// warp's ~1470 instructions on rows that never take a slot (Gaussian rows at D = 128).
template <int D, int kLanes = 32>
struct WarpDkTable {
  static constexpr int kSlots = 1024 / D;                    // per warp: 8 at D = 128, 16 at D = 64
  static constexpr int kRowSlots = kSlots * kLanes / 32;     // per row's lanes
  float* acc;                                                // [kSlots][D], this warp's
  int key = -1;                                              // lane: the key of its slot (-1: free)
  // The storage slot of key j for this lane's row (taken if new and `take`; then `fresh`), or -1 when every slot
  // of the row's lanes holds another key. Called by the whole warp (the ballots); each row's lanes may ask for a
  // different j.
  __device__ int slot(int j, int lane, bool take, bool& fresh) {
    fresh = false;
    const int sub = lane & (kLanes - 1);
    const uint32_t mine = kLanes == 32 ? 0xffffffffu : 0xffffu << (lane & 16);
    const uint32_t hit = __ballot_sync(0xffffffffu, sub < kRowSlots && key == j) & mine;
    if constexpr (kLanes == 32) {
      if (hit != 0) return __ffs(hit) - 1;  // (warp-uniform: one row)
    }
    // Both ballots before any return: with two rows the halves may leave at different points, and a full-mask
    // ballot needs every lane.
    const uint32_t free = __ballot_sync(0xffffffffu, sub < kRowSlots && key == -1) & mine;
    if (kLanes != 32 && hit != 0) return to_storage(__ffs(hit) - 1);
    if (free == 0 || !take) return -1;
    const int s = __ffs(free) - 1;
    if (lane == s) key = j;
    fresh = true;
    return to_storage(s);
  }
  // Lane s (a key's holder) to its row of acc: half-warp h's slots follow half 0's.
  __device__ static int to_storage(int s) { return kLanes == 32 ? s : (s & 15) + (s >> 4) * kRowSlots; }
  __device__ static int holder(int slot) { return kLanes == 32 ? slot : slot % kRowSlots + (slot / kRowSlots) * 16; }
};

// The pieces of a row's list arithmetic in thresh_dq_warp_rows (helpers since v1.31-v1.34's row path shared them);
// jt, pt: this lane's entry (key 0, p = 0 past the row's count cnt); the entry loops run to cnt_all (the larger
// count of the warp's two rows with kLanes = 16, else cnt) with the lanes of a shorter row idle.

// acc += sum over the row's entries, in list order, of p_j K_j (this lane's kV columns d0 ..): kG entries' K rows
// in flight at a time (packed BF16 pairs until used). k_row: this lane's entry's row of K (column 0), which the
// entry's lane forms once and the others take by shuffle (v1.38: formed per entry in every lane, the 64-bit
// address arithmetic was ~17 instructions per entry after ptxas rematerialised the head's base).
// v1.45: the walk takes kG = 2 (4 before): a row of one or two entries ran the exchanges and predicated loads of four,
// and on trained-like rows most rows list one to three keys; since v1.44 the K rows are in L1, so two loads in
// flight wait about as long as four. (Two at a time for short rows and four for longer ones spilled 12 bytes into
// the walk's loads at D = 128.) The loads name the global space (__ldg: K is read-only here); from a shuffled
// address they were generic loads.
template <int kV, int kLanes, int kG>
__device__ __forceinline__ void thresh_entries_k(const __nv_bfloat16* k_row, int d0, float pt, int cnt, int cnt_all,
                                                 float (&acc)[kV]) {
  static_assert(kV == 2 || kV == 4, "two or four columns per lane");
  constexpr int kCap = kLanes;
  const auto row_bits = reinterpret_cast<unsigned long long>(k_row);
  for (int t0 = 0; t0 < cnt_all; t0 += kG) {
    uint32_t kw[kG][kV / 2];
    float pj[kG];
#pragma unroll
    for (int u = 0; u < kG; ++u) {
      const auto row = __shfl_sync(0xffffffffu, row_bits, (t0 + u) & (kCap - 1), kLanes);
      pj[u] = __shfl_sync(0xffffffffu, pt, (t0 + u) & (kCap - 1), kLanes);
      if (t0 + u < cnt) {
        const auto* at = reinterpret_cast<const __nv_bfloat16*>(row) + d0;
        if constexpr (kV == 4) {
          const uint2 r = __ldg(reinterpret_cast<const uint2*>(at));
          kw[u][0] = r.x, kw[u][1] = r.y;
        } else {
          kw[u][0] = __ldg(reinterpret_cast<const unsigned int*>(at));
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kG; ++u)
      if (t0 + u < cnt) {
#pragma unroll
        for (int e = 0; e < kV; ++e) {
          const float kf = e % 2 == 0 ? bf16_lo(kw[u][e / 2]) : bf16_hi(kw[u][e / 2]);
          acc[e] = fmaf(pj[u], kf, acc[e]);
        }
      }
  }
}

// rest_i of row i with `cnt` listed entries of P mass `mass`; s and c come in as s_rec and rsum / s_rec and go out
// as the row's values. With the forward's statistics (v3.9), a row whose visible keys are all listed takes its
// listed mass as s_i, so that its dS' sums to zero exactly (the CPU's rule, docs/gproj-forward-stats.md); with
// the backward's they are the same sum. Only there: with the division after the entries' sums for every row,
// thresh_dq_kernel took 158 instead of 130 µs at D = 128, N = 4k (session 12, runs 3-8).
__device__ __forceinline__ float thresh_row_rest(const KernelParams& p, int i, int cnt, float mass, float rsum,
                                                 bool valid, float& s, float& c) {
  const int n_vis = p.causal ? max(0, min(p.Nk, i + p.Nk - p.Nq + 1)) : p.Nk;
  const int n_rest = n_vis - cnt;
  if (p.fwd_stats != nullptr && n_rest <= 0) {
    s = mass;
    c = s > 0.0f ? rsum / s : 0.0f;
  }
  return valid && s > 0.0f && n_rest > 0 ? c * (s - mass) / static_cast<float>(n_rest) : 0.0f;
}

// The listed entries' dK corrections -(c p_j - rest_i) Q_i (qf: this lane's kV columns of Q_i), in list order:
// into the warp's per-key table, or straight to dk_acc (head row bh) when the table has no slot for the key.
template <int D, int kLanes>
__device__ __forceinline__ void thresh_entries_dk(const KernelParams& p, WarpDkTable<D, kLanes>& tab, int64_t bh,
                                                  int jt, float pt, int cnt, int cnt_all, float c, float rest,
                                                  const float (&qf)[D / kLanes], int lane) {
  constexpr int kV = D / kLanes, kCap = kLanes;
  if constexpr (kDqAblateEntriesDk) return;
  const int d0 = (lane % kLanes) * kV;
  for (int t = 0; t < cnt_all; ++t) {
    const int j = __shfl_sync(0xffffffffu, jt, t & (kCap - 1), kLanes);
    const float w = c * __shfl_sync(0xffffffffu, pt, t & (kCap - 1), kLanes) - rest;
    const bool active = t < cnt;  // (always, one row per warp)
    bool fresh;
    const int slot = tab.slot(j, lane, active, fresh);
    if (!active) continue;
    if (slot >= 0) {  // into the warp's per-key sum (the lane's own columns)
      float* a = tab.acc + slot * D + d0;
      if (fresh) {  // the slot's first add, onto zeros as before (v1.42: the table is not zeroed)
        if constexpr (kV == 4) {
          *reinterpret_cast<float4*>(a) = make_float4(fmaf(-w, qf[0], 0.0f), fmaf(-w, qf[1], 0.0f),
                                                      fmaf(-w, qf[2], 0.0f), fmaf(-w, qf[3], 0.0f));
        } else {
          *reinterpret_cast<float2*>(a) = make_float2(fmaf(-w, qf[0], 0.0f), fmaf(-w, qf[1], 0.0f));
        }
      } else if constexpr (kV == 4) {
        float4 t4 = *reinterpret_cast<float4*>(a);
        t4.x = fmaf(-w, qf[0], t4.x), t4.y = fmaf(-w, qf[1], t4.y), t4.z = fmaf(-w, qf[2], t4.z),
        t4.w = fmaf(-w, qf[3], t4.w);
        *reinterpret_cast<float4*>(a) = t4;
      } else {
        float2 t2 = *reinterpret_cast<float2*>(a);
        t2.x = fmaf(-w, qf[0], t2.x), t2.y = fmaf(-w, qf[1], t2.y);
        *reinterpret_cast<float2*>(a) = t2;
      }
      continue;
    }
    if constexpr (kDqAblateDirectDk) continue;
    float v[kV];
#pragma unroll
    for (int e = 0; e < kV; ++e) v[e] = -w * qf[e];
    atomic_add_vec<kV>(p.dk_acc + (bh * p.Nk + j) * D + d0, v);
  }
}

// v1.35: a warp's rows at D / 32 columns per lane (kLanes = 32) in two phases. Before, every row ran the same
// scalar work in all 32 lanes (the record's shuffles, c_i's and rest_i's IEEE divisions, n_vis, 64-bit addresses
// of six arrays, the audit's three stores): 323 warp instructions per row on Gaussian inputs, of which a plain
// conversion needs ~10, and ncu found the kernel issue-bound (68% of issue slots, 39% of DRAM bandwidth; session
// 14). Now lane t first takes row t's scalars for the warp's <= 8 rows at once: its record, list count, c_i and,
// for a row that lists nothing, rest_i and s_i, into the warp's [8][12] floats of shared memory. The rows are then
// walked in order as before, each reading its scalars with three broadcast loads; a row with entries recomputes
// its tail, mass, s_i, c_i and rest_i from its list exactly as the one-row path before v1.35 did (the same
// operations in the same order, so the same bits; since v1.41, at kLanes = 16 too since v1.43,
// thresh_list_scalars forms them for all the warp's rows before the walk instead). rest_i, s_i and r_i go out from
// the table at the end, one row per lane.
// Each row's dQacc and Q columns (and list slots, when its count says it has entries) are loaded a row ahead.
template <int D, int kLanes = 32>
struct ThreshColLoads {
  static constexpr int kV = D / kLanes;
  float dq[kV];
  uint32_t q2[kV / 2];
  int jt;
  float pt;
};

// v1.41 (kLanes = 32; v1.43 kLanes = 16 too, where it does not depend on how the walk maps rows to lanes): the
// list arithmetic of the warp's rows with entries, all rows at once, after the scalar phase (which left s_rec,
// c = r_i / s_rec and the count in `sc`). Before, each row with entries ran it in the walk: its entries' K U loaded
// in that row (a memory round trip), the listed share summed over the row's lanes (group_sum8, 17 exchanges), then
// its rest_i (two IEEE divisions): ~110 of the ~260 instructions a row with entries added, on rows whose keys
// repeat as the captured states' (session 27, runs 3-4). Now lane e takes entry e of the warp's
// entries laid end to end in row order (32 at a time; the rows' offsets from a prefix sum of their counts): its
// slot (j, p), bf16(K U) row and products p (K U)_v, p; a segmented scan over the lanes sums them per row, and each
// row's last lane in the chunk adds its sums into the warp's 8 x 8 floats `acc8` (a row split between two chunks
// gets two adds, in chunk order: deterministic). Then lane t < nr, for a row with entries, subtracts the listed
// share from the record's tail, forms s_i, c_i and rest_i from its mass (thresh_row_rest, as before) and leaves
// them in `sc`, where the walk reads them as it does a row without entries'. The sums' order differs from
// the walk's group_sum8's before (a few units in the last place of the tail and mass); the walk's per-row work on
// entries is left with the K rows (thresh_entries_k) and the dK corrections. A warp whose rows list nothing pays
// one vote. (v1.46, session 28, kept copies of the first 32 entries in shared memory for the walk's reads instead
// of its loads of the list a row ahead: slower on every input with entries, not kept.)
//
// thresh_list_sums: the sums (into acc8), a function of its own (v1.41b): inlined, they changed ptxas's schedule
// of the walk that follows it, and rows without entries, which never run it, took 118 instead of 111 us (session
// 27, run 5). Its arguments are values, not the kernel's parameter block, whose address would put a copy of it in
// local memory.
__device__ __noinline__ void thresh_list_sums(const int* list_j, const float* list_p, int list_cap,
                                              const __nv_bfloat16* ku_head, float* acc8, int64_t row0, int cnt_l,
                                              int lane, const char* k_head, int64_t k_stride, int k_row_bytes) {
  int incl = cnt_l;  // rows 0 .. lane's entries (cnt_l: lane t < nr, row t's count, from the caller; others 0)
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) {
    const int x = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += x;
  }
  const int total = __shfl_sync(0xffffffffu, incl, 7);
  acc8[lane] = 0.0f;
  acc8[lane + 32] = 0.0f;
  __syncwarp();
  for (int base = 0; base < total; base += 32) {
    const int g = base + lane;
    int r = 0;  // the row of entry g: the rows whose entries all come before it (nr for g >= total)
#pragma unroll
    for (int t = 0; t < 8; ++t) r += __shfl_sync(0xffffffffu, incl, t) <= g ? 1 : 0;
    const int before = __shfl_sync(0xffffffffu, incl, max(r - 1, 0));
    const bool live = g < total;
    float y[kTailRank + 1];
#pragma unroll
    for (int v = 0; v <= kTailRank; ++v) y[v] = 0.0f;
    if (live) {
      const int64_t at = (row0 + r) * list_cap + (g - (r > 0 ? before : 0));
      const int j = list_j[at];
      const float pj = list_p[at];
      const auto* kp = reinterpret_cast<const uint32_t*>(ku_head + static_cast<int64_t>(j) * kLowRank);
      const uint2 a = *reinterpret_cast<const uint2*>(kp);
      const uint32_t w[kTailRank / 2] = {a.x, a.y, kp[2]};
#pragma unroll
      for (int v = 0; v < kTailRank; ++v) y[v] = pj * (v % 2 == 0 ? bf16_lo(w[v / 2]) : bf16_hi(w[v / 2]));
      y[kTailRank] = pj;
      // v1.44: the entry's row of K into L1 for the walk, whose lanes each read 8 or 16 bytes of it in the entry's
      // row (without, every row with entries waited there for a round trip to L2).
      const char* kr = k_head + static_cast<int64_t>(j) * k_stride;
      for (int o = 0; o < k_row_bytes; o += 128) asm volatile("prefetch.global.L1 [%0];" ::"l"(kr + o));
    }
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {  // segmented inclusive scan: the rows' entries are contiguous
      const int ro = __shfl_up_sync(0xffffffffu, r, o);
      float yo[kTailRank + 1];
#pragma unroll
      for (int v = 0; v <= kTailRank; ++v) yo[v] = __shfl_up_sync(0xffffffffu, y[v], o);
      if (lane >= o && ro == r) {
#pragma unroll
        for (int v = 0; v <= kTailRank; ++v) y[v] += yo[v];
      }
    }
    const int r_next = __shfl_down_sync(0xffffffffu, r, 1);
    if (live && (lane == 31 || r_next != r)) {  // the row's last entry in this chunk: one lane per row
#pragma unroll
      for (int v = 0; v <= kTailRank; ++v) acc8[r * 8 + v] += y[v];
    }
    __syncwarp();
  }
}

// thresh_list_scalars: the vote, the sums, and each row's tail, s_i, c_i and rest_i.
// k_head: K's row 0 of the kv head (v1.44's prefetches), D its columns.
template <int D>
__device__ __forceinline__ void thresh_list_scalars(const KernelParams& p, const __nv_bfloat16* ku_head, float4* sc,
                                                    float* acc8, int64_t row0, int i_first, int nr, int lane,
                                                    const __nv_bfloat16* k_head) {
  const int cnt_l = lane < nr ? __float_as_int(sc[3 * lane + 2].w) : 0;
  if (!__any_sync(0xffffffffu, cnt_l > 0)) return;
  thresh_list_sums(p.list_j, p.list_p, p.list_cap, ku_head, acc8, row0, cnt_l, lane,
                   reinterpret_cast<const char*>(k_head), p.k.s1 * static_cast<int64_t>(sizeof(__nv_bfloat16)),
                   D * static_cast<int>(sizeof(__nv_bfloat16)));
  if (cnt_l > 0) {  // (lane < nr)
    float4 r0 = sc[3 * lane], r1 = sc[3 * lane + 1];
    const float4 v2 = sc[3 * lane + 2];
    const float* a = acc8 + lane * 8;
    r0.x -= a[0], r0.y -= a[1], r0.z -= a[2], r0.w -= a[3], r1.x -= a[4], r1.y -= a[5];
    float s = r1.z, c = v2.x;  // s_rec, r_i / s_rec
    const float rest = thresh_row_rest(p, i_first + lane, cnt_l, a[kTailRank], r1.w, true, s, c);
    sc[3 * lane] = r0;
    sc[3 * lane + 1] = r1;
    sc[3 * lane + 2] = make_float4(c, rest, s, v2.w);
  }
  __syncwarp();
}

// kLanes = 16 (v1.37, D = 64 when thresh_k <= 16): the same two phases with two rows per step, a half-warp each
// (rows 2 s and 2 s + 1); a half past the warp's last row loads nothing and writes nothing. The entry loops run
// to the larger of the two rows' counts, the lanes of a shorter row idle (v1.43: the rows' scalars come from
// thresh_list_scalars, as at kLanes = 32; before, each step summed its two rows' listed shares in the walk).
// v1.42: every warp of the CTA calls it (one without rows, nr <= 0, for the barrier alone); stage_su() writes the
// thread's share of su from registers loaded before the call, just before the barrier that publishes it.
template <int D, int kLanes, bool kTiled, typename StageSu>
__device__ __forceinline__ void thresh_dq_warp_rows(const KernelParams& p, const float* su,
                                                    const __nv_bfloat16* ku_head, WarpDkTable<D, kLanes>& tab,
                                                    float4* sc, float* acc8, int b, int h, int hk, int i_first,
                                                    int nr, int lane, float (&part)[D / kLanes],
                                                    const StageSu& stage_su) {
  constexpr int kV = D / kLanes, kR = 32 / kLanes;  // columns per lane, rows per step
  const int sub = kLanes == 32 ? lane : lane % kLanes, half = kLanes == 32 ? 0 : lane / kLanes;  // (lane < 32)
  const int64_t bh = static_cast<int64_t>(b) * p.H + h, row0 = bh * p.Nq + i_first;
  const int d0 = sub * kV;
  // Running pointers to this half's row of the step (row half, then + kR per step): its dQacc and Q columns and dQ
  // (one 64-bit add each per step: per-row index arithmetic was ~45 of the walk's instructions in the first build
  // of this form).
  const float* dqa = p.dq_acc + (row0 + half) * D + d0;
  // kTiled (v1.39), v3.15's tiles (p.dq_tiled; at D = 64, v3.17's, a runtime choice): the warp's rows lie in one
  // 16-row group (i_first is a multiple of 8), row t at word dq_tile_word(i_first % 16 + t, d0 % 64) of the tile of
  // this lane's columns.
  const float* dq_tile = p.dq_acc + dq_acc_tiled_index(p, bh, i_first & ~15, d0 & ~63);
  const auto* qr = static_cast<const __nv_bfloat16*>(p.q.data) + b * p.q.s0 +
                   static_cast<int64_t>(i_first + half) * p.q.s1 + h * p.q.s2 + d0;
  const auto col_loads = [&](int t, int cnt) {  // this half's row t (< nr: else zeros and no loads)
    ThreshColLoads<D, kLanes> x = {};
    if (kR == 1 || t < nr) {
      if constexpr (kV == 4) {
        const bool tiled = kTiled || (D == 64 && p.dq_tiled);  // (at D = 64 a runtime choice, v3.17)
        const float* src = tiled ? dq_tile + dq_tile_word(i_first % 16 + t, d0 % 64) : dqa;
        const float4 a = *reinterpret_cast<const float4*>(src);
        x.dq[0] = a.x, x.dq[1] = a.y, x.dq[2] = a.z, x.dq[3] = a.w;
      } else {  // (D = 64, one row per warp)
        const float* src = p.dq_tiled ? dq_tile + dq_tile_word(i_first % 16 + t, d0 % 64) : dqa;
        const float2 a = *reinterpret_cast<const float2*>(src);
        x.dq[0] = a.x, x.dq[1] = a.y;
      }
      load_bf16_packed<kV>(qr, x.q2);
      if (sub < cnt) {  // (cnt = 0 for a row without entries: no list loads)
        const int64_t at = (row0 + t) * p.list_cap + sub;
        x.jt = p.list_j[at];
        x.pt = p.list_p[at];
      }
    }
    return x;
  };
  // The first step's columns and all its list slots in flight during the scalar phase (the counts are not known
  // yet: the slots past them, never written, are zeroed below; without this, a row with entries waited for its
  // list after the scalar phase, and trained-like rows, ~3 entries each, got 2% slower: session 14, run 2).
  ThreshColLoads<D, kLanes> set_a = {};
  if (nr > 0) set_a = col_loads(half, p.list_cap);
  // Scalar phase: lane t < nr, row i_first + t.
  if (lane < nr) {
    const int64_t row = row0 + lane;
    const float4 r0 = *reinterpret_cast<const float4*>(p.pku + row * kLowRank);
    const float4 r1 = *reinterpret_cast<const float4*>(p.pku + row * kLowRank + 4);
    const int cnt = min(p.list_count[row], p.list_cap);
    float s = r1.z, c = s > 0.0f ? r1.w / s : 0.0f, rest = 0.0f;  // s_rec, r_i / s_rec (columns kStatS, kStatR)
    // A row without entries gets its row path's values here (mass 0); one with entries is finished in the walk.
    if (cnt == 0) rest = thresh_row_rest(p, i_first + lane, 0, 0.0f, r1.w, true, s, c);
    sc[3 * lane] = r0;
    sc[3 * lane + 1] = r1;
    sc[3 * lane + 2] = make_float4(c, rest, s, __int_as_float(cnt));
  }
  // The CTA's barrier (v1.42: here, not before the walk, so that the CTA's copy of U and the first rows' loads are
  // in flight together; su's stores after the loads' issue, or the warp would wait for U first): su from every
  // thread, and sc within the warp. A warp without rows leaves after it.
  stage_su();
  __syncthreads();
  if (nr <= 0) return;
  const auto* k_head = static_cast<const __nv_bfloat16*>(p.k.data) + b * p.k.s0 + hk * p.k.s2;
  thresh_list_scalars<D>(p, ku_head, sc, acc8, row0, i_first, nr, lane, k_head);  // v1.41 (kLanes = 16: v1.43)
  if (half < nr && sub >= __float_as_int(sc[3 * half + 2].w)) {
    set_a.jt = 0;
    set_a.pt = 0.0f;
  }
  __nv_bfloat16* dqo = p.dq + ((static_cast<int64_t>(b) * p.Nq + i_first + half) * p.H + h) * D + d0;
  // One step: this half's row t from `x`, the next step's loads into `x_next`. The walk calls it with two sets of
  // registers in turn (v1.38): with one set copied from the other at the end of each step, the copy waited for the
  // next row's loads at the top of the following step instead of where they are used (6% of the stall samples, q4
  // rows).
  const auto step = [&](int t, const ThreshColLoads<D, kLanes>& x, ThreshColLoads<D, kLanes>& x_next) {
    const bool valid = kR == 1 || t < nr;
    if (t - half + kR < nr) {  // (else `x_next` keeps stale values: never read)
      dqa += kR * D;
      qr += kR * p.q.s1;
      x_next = col_loads(t + kR, t + kR < nr ? __float_as_int(sc[3 * (t + kR) + 2].w) : 0);
    }
    float4 v0 = make_float4(0.0f, 0.0f, 0.0f, 0.0f), v1 = v0, v2 = v0;  // a half past the last row: zeros
    if (valid) v0 = sc[3 * t], v1 = sc[3 * t + 1], v2 = sc[3 * t + 2];
    const float tail[kTailRank] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y};
    const float c = v2.x, rest = v2.y;
    const int cnt = __float_as_int(v2.w);
    // The loops' bound: the row's count, or the larger of the two rows' (warp-uniform either way).
    const int cnt_all = kLanes == 32 ? cnt : max(cnt, __shfl_xor_sync(0xffffffffu, cnt, 16));
    float acc[kV], back[kV];
#pragma unroll
    for (int e = 0; e < kV; ++e) acc[e] = back[e] = 0.0f;
    const int jt = x.jt;
    const float pt = x.pt;
    if (cnt_all > 0) {  // v1.41 (v1.43 also at kLanes = 16): the scalars are final in `sc`; the K rows are left
      const auto* k_row = static_cast<const __nv_bfloat16*>(p.k.data) + b * p.k.s0 + hk * p.k.s2 + jt * p.k.s1;
      thresh_entries_k<kV, kLanes, 2>(k_row, d0, pt, cnt, cnt_all, acc);  // v1.45: two at a time
    }
#pragma unroll
    for (int v = 0; v < kTailRank; ++v)
#pragma unroll
      for (int e = 0; e < kV; ++e) back[e] = fmaf(tail[v], su[v * D + d0 + e], back[e]);
    float xs[kV];
#pragma unroll
    for (int e = 0; e < kV; ++e) xs[e] = p.scale * (x.dq[e] - c * (acc[e] + back[e]));
    if (valid) store_bf16_vec<kV>(dqo, xs);
    float qf[kV];  // Q_i's columns (exact)
#pragma unroll
    for (int x2 = 0; x2 < kV / 2; ++x2) qf[2 * x2] = bf16_lo(x.q2[x2]), qf[2 * x2 + 1] = bf16_hi(x.q2[x2]);
#pragma unroll
    for (int e = 0; e < kV; ++e) part[e] = fmaf(rest, qf[e], part[e]);
    thresh_entries_dk<D, kLanes>(p, tab, bh, jt, pt, cnt, cnt_all, c, rest, qf, lane);
    dqo += static_cast<int64_t>(kR) * p.H * D;
  };
  ThreshColLoads<D, kLanes> set_b;
  if constexpr (kLanes == 32) {
    for (int t = 0; t < nr; t += 2) {
      step(t, set_a, set_b);
      if (t + 1 >= nr) break;
      step(t + 1, set_b, set_a);
    }
  } else {  // the copy, as before v1.38: two sets of registers spilled 46 words at <64, 16> (80 registers), and
            // after v1.43 16 bytes in the entry loops (v1.43b, session 28: q x 4 rows +26%)
    for (int t = half; t - half < nr; t += kR) {
      step(t, set_a, set_b);
      set_a = set_b;
    }
  }
  __syncwarp();
  if (lane < nr) {  // rest_i for the uniform part, s_i and r_i for the audit's diagnostics (host_dispatch.cc)
    const int64_t row = row0 + lane;
    const float4 v2 = sc[3 * lane + 2];
    p.rest[row] = v2.y;
    p.psum[row] = v2.z;
    p.rowsum[row] = sc[3 * lane + 1].w;
  }
}

// One warp per row (kLanes = 32), or per two rows, a half-warp each (kLanes = 16, v1.31: at D = 64 a row gives a
// lane only 2 columns, and the row's fixed work, the shuffles, divisions and list handling, was most of the
// kernel): the dQ correction and the output dQ = bf16(scale dQacc'), the listed entries' dK correction (summed per
// key in the warp's table, then atomics into dk_acc) and rest_i for the uniform part. Grid (ceil(Nq / 64), H, B):
// a CTA's rows share one kv head, whose U it stages once in shared memory, transposed ([8][D]: lanes read
// consecutive words). Warp w takes the block's rows 8 w .. 8 w + 7 (consecutive rows list the same keys most),
// in order or two at a time. The CTA also writes part[b, h, blk] = sum over its rows of rest_i Q_i (each warp over
// its rows in order, its halves then added, then the warps in order); without causal masking the last CTA of a
// head to finish (a counter per head, after a fence) adds the blocks in order and stores the total as the head's
// row of `suffix`, the only suffix sum read then.
// kTiled (v1.39): dQacc in v3.15's tiles (p.dq_tiled, D = 128 only), an instance of its own (reading through a
// runtime choice of layout took thresh_dq from 109.8 to 112.9 µs at D = 128, N = 4k; session 16).
template <int D, int kLanes = 32, bool kTiled = false>
__global__ void __launch_bounds__(kPostThreads, 3) thresh_dq_kernel(const KernelParams p) {
  static_assert(kLanes == 32 || kLanes == 16, "a row per warp or per half-warp");
  static_assert(!kTiled || (D == 128 && kLanes == 32), "v3.15's tiles: D = 128, four columns per lane");
  constexpr int kWarps = kPostThreads / 32, kV = D / kLanes, kSlots = WarpDkTable<D, kLanes>::kSlots;
  constexpr int kRowsPerWarp = kSuffixBlock / kWarps, kRowsAtOnce = 32 / kLanes;
  static_assert(kSuffixBlock % kWarps == 0 && kRowsPerWarp % kRowsAtOnce == 0, "whole rows per warp");
  static_assert(kRowsPerWarp <= 32, "v1.35's scalar phase: one row per lane");
  static_assert(16 % kRowsPerWarp == 0, "a warp's rows lie in one of v3.15's 16-row groups of dQacc");
  __shared__ float su[kLowRank * D];
  __shared__ float sp[kWarps * D];
  __shared__ __align__(16) float tab_acc[kWarps * kSlots * D];
  __shared__ float4 scal[kWarps * kRowsPerWarp * 3];  // v1.35: [warp][row][12] scalars
  static_assert(kRowsPerWarp == 8, "v1.41: a warp's rows' sums are 8 x 8 floats");
  __shared__ float acc8[kWarps * 64];  // v1.41: [warp][row][8] listed shares and masses
  __shared__ bool last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, b = blockIdx.z, h = blockIdx.y;
  const int hk = h / (p.H / p.Hkv);
  // v3.43: this head's main-kernel CTAs are done (null main_done: this kernel started after the main kernel)
  wait_main_kernel_head(p, static_cast<int64_t>(b) * p.H + h);
  const float* u = p.u + (static_cast<int64_t>(b) * p.Hkv + hk) * D * kLowRank;
  const __nv_bfloat16* ku_head = p.ku + (static_cast<int64_t>(b) * p.Hkv + hk) * p.Nk * kLowRank;  // bf16(K U) of hk
  // U transposed into su, four of a key column's values per thread (v1.42: one 16-byte load each; u's regions start
  // on 16-byte boundaries). The barrier that publishes su is in thresh_dq_warp_rows, after the first rows' loads
  // are issued, so that the CTA's first wait on memory is one, not two in a row.
  static_assert(kLowRank == 8 && D * kLowRank / 4 <= kPostThreads, "one float4 of U per thread");
  const bool u_thread = threadIdx.x < D * kLowRank / 4;
  float4 ux = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (u_thread) ux = reinterpret_cast<const float4*>(u)[threadIdx.x];
  const auto stage_su = [&] {
    if (!u_thread) return;
    const int d = threadIdx.x / 2, v0 = (threadIdx.x & 1) * 4;
    su[v0 * D + d] = ux.x, su[(v0 + 1) * D + d] = ux.y, su[(v0 + 2) * D + d] = ux.z, su[(v0 + 3) * D + d] = ux.w;
  };
  WarpDkTable<D, kLanes> tab{tab_acc + warp * kSlots * D};  // (not zeroed: v1.42)
  float part[kV];
#pragma unroll
  for (int e = 0; e < kV; ++e) part[e] = 0.0f;
  // The warp's rows in order (this lane's: every kRowsAtOnce-th from its half's): the next rows' loads are issued
  // before these rows' arithmetic. A half past i_end loads row i_end - 1 again and writes nothing.
  const int i_end = min(p.Nq, blockIdx.x * kSuffixBlock + (warp + 1) * kRowsPerWarp);
  const int i = blockIdx.x * kSuffixBlock + warp * kRowsPerWarp;
  // v1.35 (kLanes = 32), v1.37 (16). Every warp calls it, one without rows (nr <= 0) for the CTA barrier alone.
  thresh_dq_warp_rows<D, kLanes, kTiled>(p, su, ku_head, tab, scal + warp * kRowsPerWarp * 3,
                                         acc8 + warp * 64, b, h, hk, i, i_end - i, lane, part,
                                         stage_su);
  const int64_t bh = static_cast<int64_t>(b) * p.H + h;
  // The warp's per-key sums to dk_acc: one vector atomic per key and lane (each lane D / 32 columns of the slot).
  // With two rows per warp a lane wrote D / 16 columns of its half's slots and now reads D / 32 columns of every
  // slot: other lanes' writes, so the warp synchronises first (racecheck found this).
  if constexpr (kLanes == 16) __syncwarp();
  constexpr int kCols = D / 32;
  for (int s = 0; s < kSlots; ++s) {
    const int j = __shfl_sync(0xffffffffu, tab.key, WarpDkTable<D, kLanes>::holder(s));
    if (j < 0) {  // a free slot: each row's lanes take theirs in order
      if constexpr (kLanes == 32) break;
      continue;
    }
    float v[kCols];
#pragma unroll
    for (int e = 0; e < kCols; ++e) v[e] = tab.acc[s * D + lane * kCols + e];
    atomic_add_vec<kCols>(p.dk_acc + (bh * p.Nk + j) * D + lane * kCols, v);
  }
  if constexpr (kLanes == 16) {  // the two halves' sums over their rows, then lanes 0-15 hold the warp's
#pragma unroll
    for (int e = 0; e < kV; ++e) part[e] += __shfl_xor_sync(0xffffffffu, part[e], 16);
  }
  if (lane < kLanes) {
#pragma unroll
    for (int e = 0; e < kV; ++e) sp[warp * D + lane * kV + e] = part[e];
  }
  __syncthreads();
  const int d = threadIdx.x;
  if (d < D) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += sp[w * D + d];
    p.part[(bh * gridDim.x + blockIdx.x) * D + d] = sum;
    // This CTA's block sum is visible before it counts itself done (v1.42: only its writers fence; the barrier
    // below orders the fences before thread 0's count).
    if (!p.causal) __threadfence();
  }
  if (p.causal) return;  // thresh_dkv_causal_kernel forms the suffix sums it needs from the block sums
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&p.head_done[bh], 1) == static_cast<int>(gridDim.x) - 1;
  __syncthreads();
  if (!last || d >= D) return;
  __threadfence();
  float total = 0.0f;
  for (int blk = 0; blk < static_cast<int>(gridDim.x); ++blk) total += __ldcg(p.part + (bh * gridDim.x + blk) * D + d);
  p.suffix[bh * D + d] = total;
}

// thresh-lowrank's dK/dV postprocess with causal masking (without it bwd_postprocess_dkv_kernel<true> subtracts the
// one total): dK_j = bf16(scale sum_g (dKacc_g,j - suffix_g(first(j)))) and dV_j = bf16(sum_g dVacc_g,j) over the
// query heads g of kv head hk, where suffix_g(r) = sum_{i >= r} rest_i Q_i (head g) and first(j) = max(0, j - (Nk -
// Nq)) is the first row that sees key j. Grid (ceil(Nk / 64), Hkv, B): a CTA's 64 keys need the suffix sums of at
// most 64 consecutive rows, r_lo .. r_hi, which are formed per head in shared memory from two parts: the block sums
// that thresh_dq_kernel wrote for the blocks after r_hi's, and the rows from the end of r_hi's block down to r_lo
// (at most 127). v1.26: every thread takes 4 columns and one of kSegs segments of both (the blocks c = top + 1 +
// seg + kSegs m, the rows of its slice), with the loads of each part issued before their first use, so that a head
// waits on memory about twice instead of once per 8 rows (v1.24e walked the rows in order, 8 at a time). Each
// thread sums its blocks and forms its slice's suffix sums from the slice's top; after a barrier it adds the block
// sums of all segments and the row totals of the slices above its own. Fixed orders throughout: deterministic. Then
// every thread applies them to its 4 columns of kPasses keys. The suffix sums never reach global memory (v1.24 in
// docs/perf-notes.md: a separate kernel used to write all B H Nq D of them for this one to read).
template <int D>
__global__ void __launch_bounds__(kPostThreads, D == 64 ? 3 : 2) thresh_dkv_causal_kernel(const KernelParams p) {
  constexpr int kBlk = kSuffixBlock, kCols = D / 4, kSegs = kPostThreads / kCols, kPasses = kBlk / kSegs;
  // The rows of a slice (the walk has at most 2 kBlk - 1 rows) and the block sums loaded together.
  constexpr int kRows = (2 * kBlk - 1 + kSegs - 1) / kSegs, kChunk = 8;
  static_assert(kPostThreads % kCols == 0 && kBlk % kSegs == 0, "thread mapping");
  __shared__ __align__(16) float ssuf[kBlk * D];
  __shared__ __align__(16) float sblk[kSegs * D];  // each segment's sum of block sums
  __shared__ __align__(16) float stot[kSegs * D];  // each slice's row total
  const int b = blockIdx.z, hk = blockIdx.y, j0 = blockIdx.x * kBlk;
  const int group = p.H / p.Hkv, nb = (p.Nq + kBlk - 1) / kBlk, shift = p.Nk - p.Nq;
  const int j_last = min(p.Nk, j0 + kBlk) - 1;
  const int r_lo = max(0, j0 - shift), r_hi = max(0, j_last - shift);  // r_hi < Nq: j_last < Nk
  const int top = r_hi / kBlk, r_end = min(p.Nq, (top + 1) * kBlk);
  const int c4 = (threadIdx.x % kCols) * 4, seg = threadIdx.x / kCols;
  const int slice = (r_end - r_lo + kSegs - 1) / kSegs;  // <= kRows
  const int s_lo = r_lo + seg * slice, s_end = min(r_end, s_lo + slice);  // this thread's rows (maybe none)
  // dV first (no suffix sums: its accumulators are not live during the sums below). v1.36: the query heads
  // outside and the kPasses keys inside, so that a head's kPasses loads are issued together; with the keys
  // outside, the loop over heads (a runtime count) kept each key's load behind the previous key's add: kPasses
  // memory latencies in a row, 35% of the kernel's stall samples (session 14, run 1's source page). The same
  // sums in the same order. (v3.34: not where the main kernel stored dV itself, p.dkv_direct bit 1.)
  if ((p.dkv_direct & 1) == 0) {
    float4 dv[kPasses];
#pragma unroll
    for (int k = 0; k < kPasses; ++k) dv[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int g = 0; g < group; ++g) {
      const float* head = p.dv_acc + (static_cast<int64_t>(b) * p.H + hk * group + g) * p.Nk * D + c4;
      float4 v[kPasses];  // unconditional loads (keys past Nk read the last key again and are not added)
#pragma unroll
      for (int k = 0; k < kPasses; ++k)
        v[k] = *reinterpret_cast<const float4*>(head + static_cast<int64_t>(min(j0 + seg + k * kSegs, p.Nk - 1)) * D);
#pragma unroll
      for (int k = 0; k < kPasses; ++k)
        if (j0 + seg + k * kSegs < p.Nk) dv[k].x += v[k].x, dv[k].y += v[k].y, dv[k].z += v[k].z, dv[k].w += v[k].w;
    }
#pragma unroll
    for (int k = 0; k < kPasses; ++k) {
      const int j = j0 + seg + k * kSegs;
      if (j >= p.Nk) continue;
      store_bf16_vec<4>(p.dv + ((static_cast<int64_t>(b) * p.Nk + j) * p.Hkv + hk) * D + c4,
                        {dv[k].x, dv[k].y, dv[k].z, dv[k].w});
    }
  }
  float4 dk[kPasses];
#pragma unroll
  for (int k = 0; k < kPasses; ++k) dk[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int g = 0; g < group; ++g) {
    const int h = hk * group + g;
    const int64_t bh = static_cast<int64_t>(b) * p.H + h;
    // This segment's block sums: blocks top + 1 + seg, + kSegs, ..., kChunk of them in flight at once.
    float4 blk = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int c0 = top + 1 + seg; c0 < nb; c0 += kChunk * kSegs) {
      float4 v[kChunk];
#pragma unroll
      for (int x = 0; x < kChunk; ++x) {
        const int c = min(c0 + x * kSegs, nb - 1);
        v[x] = *reinterpret_cast<const float4*>(p.part + (bh * nb + c) * D + c4);
      }
#pragma unroll
      for (int x = 0; x < kChunk; ++x)
        if (c0 + x * kSegs < nb) blk.x += v[x].x, blk.y += v[x].y, blk.z += v[x].z, blk.w += v[x].w;
    }
    // This slice's rows: Q's 4 columns and rest, every load before the first use (rows past the slice read the
    // walk's last row again and count as zero; r_end - 1 >= r_lo is a row of the walk).
    float rv[kRows];
    uint2 qv[kRows];  // 4 BF16, unpacked at their use (registers: kRows is 16 at D = 128)
    const auto* qh = static_cast<const __nv_bfloat16*>(p.q.data) + b * p.q.s0 + h * p.q.s2 + c4;
#pragma unroll
    for (int x = 0; x < kRows; ++x) {
      const int r = min(s_lo + x, r_end - 1);
      rv[x] = p.rest[bh * p.Nq + r];
      qv[x] = *reinterpret_cast<const uint2*>(qh + r * p.q.s1);  // rows 16-byte aligned (checked by the launcher)
    }
    // The slice's suffix sums from its top row down (relative to the slice's end); its total for the slices below.
    float4 run = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int x = kRows - 1; x >= 0; --x) {
      const int r = s_lo + x;
      if (r < s_end) {
        run.x = fmaf(rv[x], bf16_lo(qv[x].x), run.x), run.y = fmaf(rv[x], bf16_hi(qv[x].x), run.y);
        run.z = fmaf(rv[x], bf16_lo(qv[x].y), run.z), run.w = fmaf(rv[x], bf16_hi(qv[x].y), run.w);
        if (r <= r_hi) *reinterpret_cast<float4*>(ssuf + (r - r_lo) * D + c4) = run;
      }
    }
    *reinterpret_cast<float4*>(sblk + seg * D + c4) = blk;
    *reinterpret_cast<float4*>(stot + seg * D + c4) = run;
    __syncthreads();  // every segment's block sum and row total
    float4 off = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s2 = 0; s2 < kSegs; ++s2) {  // all block sums, then the rows of the slices above this one
      const float4 a = *reinterpret_cast<const float4*>(sblk + s2 * D + c4);
      off.x += a.x, off.y += a.y, off.z += a.z, off.w += a.w;
    }
    for (int s2 = kSegs - 1; s2 > seg; --s2) {
      const float4 a = *reinterpret_cast<const float4*>(stot + s2 * D + c4);
      off.x += a.x, off.y += a.y, off.z += a.z, off.w += a.w;
    }
    for (int r = s_lo; r < min(s_end, r_hi + 1); ++r) {
      float4* s = reinterpret_cast<float4*>(ssuf + (r - r_lo) * D + c4);
      const float4 a = *s;
      *s = make_float4(a.x + off.x, a.y + off.y, a.z + off.z, a.w + off.w);
    }
    __syncthreads();  // the head's suffix sums are in ssuf
#pragma unroll
    for (int k = 0; k < kPasses; ++k) {
      const int j = j0 + seg + k * kSegs;
      if (j >= p.Nk) continue;
      const int64_t row = bh * p.Nk + j;
      const float4 a = *reinterpret_cast<const float4*>(p.dk_acc + row * D + c4);
      const float4 s = *reinterpret_cast<const float4*>(ssuf + (max(0, j - shift) - r_lo) * D + c4);
      dk[k].x += a.x - s.x, dk[k].y += a.y - s.y, dk[k].z += a.z - s.z, dk[k].w += a.w - s.w;
    }
    __syncthreads();  // every thread has read ssuf, sblk and stot before the next head's sums overwrite them
  }
#pragma unroll
  for (int k = 0; k < kPasses; ++k) {
    const int j = j0 + seg + k * kSegs;
    if (j >= p.Nk) continue;
    const int64_t idx = ((static_cast<int64_t>(b) * p.Nk + j) * p.Hkv + hk) * D + c4;
    store_bf16_vec<4>(p.dk + idx, {p.scale * dk[k].x, p.scale * dk[k].y, p.scale * dk[k].z, p.scale * dk[k].w});
  }
}

}  // namespace gproj::cuda::detail
