// CUDA backward v1: tensor cores (mma.sync m16n8k16 BF16), FlashAttention-2 structure. One CTA (4 warps) per
// key block of 64 loops over query blocks of 64 (double-buffered cp.async of Q and dO): S = Q K^T and
// dP = dO V^T per warp (16 query rows), P = exp(S - LSE), dS = P (dP - delta), B4 rounding of P and dS into
// shared memory, then dV += bf16(P)^T dO and dK += bf16(dS)^T Q per warp (16 keys) and dQ += bf16(dS) K
// (FP32 atomics). The P-weighted projection adds P K next to dS K, the row sums r_i, s_i, and a dK sweep.
// Same rounding points as the CPU emulator. Exercised by tests/cuda/flash_cuda_test.cc.
#pragma once

#include "cuda/kernel_common.cuh"
#include "cuda/mma.cuh"

namespace gproj::cuda::detail {

constexpr int kBwdBlock = 64;   // keys per CTA and query rows per step
constexpr int kBwdThreads = 128;

template <int D>
constexpr size_t bwd_tc_smem_bytes() {
  return sizeof(bf16_t) * (6 * kBwdBlock * D + 2 * kBwdBlock * kBwdBlock + kBwdBlock * kLowRank);
}
template <int D>
constexpr size_t dq_tc_smem_bytes() {
  return sizeof(bf16_t) * (6 * kBwdBlock * D);
}
template <int D>
constexpr size_t sweep_tc_smem_bytes() {
  return sizeof(bf16_t) * (3 * kBwdBlock * D + kBwdBlock * kBwdBlock);
}

// acc (16 x 64) += A[r0 .. r0+15] B^T for swizzled [64][D] tiles A, B (rows = query rows, keys).
template <int D>
__device__ __forceinline__ void warp_abt(float (&acc)[8][4], const bf16_t* a, const bf16_t* bt, int r0, int lane) {
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc) {
    uint32_t af[4];
    ldsm_x4(af, smem_u32(a + swz<D>(r0 + (lane & 15), kc * 2 + (lane >> 4))));
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t bf[4];
      ldsm_x4(bf, smem_u32(bt + swz<D>(np * 16 + (lane & 7) + ((lane >> 4) << 3), kc * 2 + ((lane >> 3) & 1))));
      mma16816(acc[2 * np], af, bf[0], bf[1]);
      mma16816(acc[2 * np + 1], af, bf[2], bf[3]);
    }
  }
}

// acc (16 keys x D) += T[:, kw .. kw+15]^T B for a swizzled [64][64] tile T (rows = query rows) and a swizzled
// [64][D] tile B (rows = query rows). kTW: the width (keys) of T's rows.
template <int D, int kTW = kBwdBlock>
__device__ __forceinline__ void warp_atb(float (&acc)[D / 8][4], const bf16_t* t, const bf16_t* bm, int kw, int lane) {
#pragma unroll
  for (int kc = 0; kc < kBwdBlock / 16; ++kc) {
    uint32_t af[4];
    ldsm_x4_t(af, smem_u32(t + swz<kTW>(kc * 16 + (lane & 7) + ((lane >> 4) << 3), kw / 8 + ((lane >> 3) & 1))));
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t bf[4];
      ldsm_x4_t(bf, smem_u32(bm + swz<D>(kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, dp * 2 + (lane >> 4))));
      mma16816(acc[2 * dp], af, bf[0], bf[1]);
      mma16816(acc[2 * dp + 1], af, bf[2], bf[3]);
    }
  }
}

// On sm_90 as PTX `red` (v3.46, session 39): atomicAdd(float2 *) / (float4 *) give `atom` with results nobody
// reads, which ptxas kept as returning ATOMGs in thresh_dq's dK corrections (`red`: -46 to -68 us on q x 4 rows) and
// in the thresh-lowrank main kernel's record, while it made REDG elsewhere. The vector forms exist only for the
// global state space; every caller passes global memory (dQacc, dKacc, the records), whose generic addresses are
// its global ones (converting them first with cvta.to.global changed 18 kernels by -64 to +224 instructions,
// session 39). The "memory" clobber keeps other accesses from moving across the reduction.
__device__ __forceinline__ void atomic_add2(float* dst, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(x), "f"(y) : "memory");
#else
  atomicAdd(dst, x);
  atomicAdd(dst + 1, y);
#endif
}

// One float added without a return value (PTX `red` on sm_90, as atomic_add2): ptxas kept the forward-statistics
// form's scalar r_i atomicAdds as returning ATOMGs, which cost that form's D = 128 main kernel 261 µs at N = 4k
// (v3.49, session 40; scripts/sass_atomics.py finds such atomics in a build).
__device__ __forceinline__ void atomic_add1(float* dst, float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(dst), "f"(x) : "memory");
#else
  atomicAdd(dst, x);
#endif
}

// kV = 2 or 4 consecutive floats added with one vector atomic (sm_90; dst aligned to 4 kV bytes), element by
// element before sm_90.
template <int kV>
__device__ __forceinline__ void atomic_add_vec(float* dst, const float (&x)[kV]) {
  static_assert(kV == 2 || kV == 4, "two or four elements");
  if constexpr (kV == 2) {
    atomic_add2(dst, x[0], x[1]);
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "f"(x[0]), "f"(x[1]), "f"(x[2]),
                 "f"(x[3])
                 : "memory");
#else
    for (int e = 0; e < 4; ++e) atomicAdd(dst + e, x[e]);
#endif
  }
}

// Visibility of (row, col) for the P recomputation: inside the problem, causal limit, non-empty row.
__device__ __forceinline__ bool visible(const KernelParams& p, int row, int col, float L) {
  return row < p.Nq && col < p.Nk && col <= last_visible(p, row) && L != neg_inf();
}

// P = exp(scale S - LSE) of the warp's tile (masked entries 0), in place.
__device__ __forceinline__ void warp_p(const KernelParams& p, float (&s)[8][4], bool need_mask, int row_a, int j0,
                                       int tq, float L_a, float L_b) {
  const float la = L_a * kLog2e, lb = L_b * kLog2e, sc = p.scale * kLog2e;
#pragma unroll
  for (int n = 0; n < 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float x = fast_exp2(s[n][e] * sc - (e < 2 ? la : lb));
      bool vis = true;
      if (need_mask) vis = visible(p, e < 2 ? row_a : row_a + 8, j0 + n * 8 + 2 * tq + (e & 1), e < 2 ? L_a : L_b);
      s[n][e] = vis ? x : 0.0f;
    }
  }
}

// S = A B^T of a warp's 16 rows x 64 keys from zero (warp_abt): the S = Q K^T and dP = dO V^T every backward
// tile starts with.
template <int D>
__device__ __forceinline__ void warp_abt0(float (&acc)[8][4], const bf16_t* a, const bf16_t* bt, int r0, int lane) {
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
  warp_abt<D>(acc, a, bt, r0, lane);
}

// warp_p for the tile of rows i0 + r0 .. + 15 and keys j0 .. + 63: the per-element mask only where the tile
// crosses the end of the rows or keys, an empty row (its LSE is -inf) or the causal limit.
__device__ __forceinline__ void tile_p(const KernelParams& p, float (&s)[8][4], int i0, int r0, int j0, int lane,
                                       float L_a, float L_b) {
  const bool need_mask = i0 + r0 + 16 > p.Nq || j0 + 64 > p.Nk || L_a == neg_inf() ||
                         (p.causal && j0 + 63 > last_visible(p, i0 + r0));
  warp_p(p, s, __any_sync(0xffffffffu, need_mask), i0 + r0 + (lane >> 2), j0, lane & 3, L_a, L_b);
}

// LSE and delta of the thread's rows row_a and row_a + 8 (0 past Nq: those rows are masked).
struct RowInputs {
  float L_a, L_b, dl_a, dl_b;
};
__device__ __forceinline__ RowInputs load_row_inputs(const KernelParams& p, int64_t bh, int row_a) {
  const int row_b = row_a + 8;
  return {row_a < p.Nq ? p.lse[bh * p.Nq + row_a] : 0.0f, row_b < p.Nq ? p.lse[bh * p.Nq + row_b] : 0.0f,
          row_a < p.Nq ? p.delta[bh * p.Nq + row_a] : 0.0f, row_b < p.Nq ? p.delta[bh * p.Nq + row_b] : 0.0f};
}

// B4 for a warp's 16 x 64 tile: dS = P (dP - delta), bf16(P) and bf16(dS) stored at rows r, r + 8 and 16-byte
// chunks chunk0 + n of the [BQ][kTW] tiles sP, sdS. With kStats the stored values' row sums are added to
// sums = {r_a, r_b, s_a, s_b} (this thread's part). on_p(n, pa, pb) sees each n-tile's bf16(P) of both rows.
struct NoPHook {
  __device__ void operator()(int, __nv_bfloat162, __nv_bfloat162) const {}
};
template <int kTW, bool kStats, class OnP = NoPHook>
__device__ __forceinline__ void store_p_ds(const float (&s)[8][4], const float (&dp)[8][4], const RowInputs& in,
                                           bf16_t* sP, bf16_t* sdS, int r, int chunk0, int tq, float (&sums)[4],
                                           OnP on_p = OnP()) {
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    const float ds0 = s[n][0] * (dp[n][0] - in.dl_a), ds1 = s[n][1] * (dp[n][1] - in.dl_a);
    const float ds2 = s[n][2] * (dp[n][2] - in.dl_b), ds3 = s[n][3] * (dp[n][3] - in.dl_b);
    const __nv_bfloat162 pa = __floats2bfloat162_rn(s[n][0], s[n][1]), pb = __floats2bfloat162_rn(s[n][2], s[n][3]);
    const __nv_bfloat162 da = __floats2bfloat162_rn(ds0, ds1), db = __floats2bfloat162_rn(ds2, ds3);  // B4
    if (kStats) {  // r_i and s_i: the projection's statistics and the audit's row residual
      sums[0] += __low2float(da) + __high2float(da);
      sums[1] += __low2float(db) + __high2float(db);
      sums[2] += __low2float(pa) + __high2float(pa);
      sums[3] += __low2float(pb) + __high2float(pb);
    }
    on_p(n, pa, pb);
    const int ca = swz<kTW>(r, chunk0 + n) + 2 * tq, cb = swz<kTW>(r + 8, chunk0 + n) + 2 * tq;
    *reinterpret_cast<__nv_bfloat162*>(sP + ca) = pa;
    *reinterpret_cast<__nv_bfloat162*>(sP + cb) = pb;
    *reinterpret_cast<__nv_bfloat162*>(sdS + ca) = da;
    *reinterpret_cast<__nv_bfloat162*>(sdS + cb) = db;
  }
}

// Sums a quad's partial row statistics: every lane of the quad ends with the totals.
__device__ __forceinline__ void reduce_row_stats(float (&sums)[4]) {
#pragma unroll
  for (int o = 1; o <= 2; o <<= 1)
#pragma unroll
    for (int v = 0; v < 4; ++v) sums[v] += __shfl_xor_sync(0xffffffffu, sums[v], o);
}

// Sums a quad's partial row statistics and adds them to r_i, s_i of rows row_a and row_a + 8 (FP32 atomics).
__device__ __forceinline__ void add_row_stats(const KernelParams& p, int64_t bh, int row_a, int tq, float (&sums)[4]) {
  reduce_row_stats(sums);
  if (tq == 0 && row_a < p.Nq) {
    atomicAdd(&p.rowsum[bh * p.Nq + row_a], sums[0]);
    atomicAdd(&p.psum[bh * p.Nq + row_a], sums[2]);
  }
  if (tq == 0 && row_a + 8 < p.Nq) {
    atomicAdd(&p.rowsum[bh * p.Nq + row_a + 8], sums[1]);
    atomicAdd(&p.psum[bh * p.Nq + row_a + 8], sums[3]);
  }
}

// Stores a warp's dK and dV accumulators (16 keys from key0: key0 + g and key0 + g + 8) as FP32 rows; kDv = false:
// dK's only (v3.34's thresh-lowrank, whose dV the main kernel stored itself).
template <int D, bool kDv = true>
__device__ __forceinline__ void store_dk_dv(const KernelParams& p, int64_t bh, int key0, int g, int tq,
                                            const float (&dk)[D / 8][4], const float (&dv)[D / 8][4]) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int j = key0 + g + 8 * half;
    if (j >= p.Nk) continue;
    float* dka = p.dk_acc + (bh * p.Nk + j) * D;
    float* dva = p.dv_acc + (bh * p.Nk + j) * D;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<float2*>(dka + n * 8 + 2 * tq) = make_float2(dk[n][2 * half], dk[n][2 * half + 1]);
      if constexpr (kDv)
        *reinterpret_cast<float2*>(dva + n * 8 + 2 * tq) = make_float2(dv[n][2 * half], dv[n][2 * half + 1]);
    }
  }
}

// thresh-lowrank: appends this thread's entries with bf16(P) >= thresh (rows r, r + 8 of the warp's 16 x 64 tile
// in sP, columns n 8 + 2 tq + {0, 1}) to their rows' lists; an atomic counter gives the slot. Out of line, with
// the few fields it needs by value (a KernelParams reference would copy the parameters to the stack).
struct ListRef {
  int* count;
  int* j;
  float* p;
  int cap, nq;
  float thresh;
};
__device__ __noinline__ void append_large_entries(ListRef list, const bf16_t* sP, int64_t bh, int r, int row_a,
                                                  int j0, int tq) {
  for (int half = 0; half < 2; ++half) {
    const int row = row_a + 8 * half;
    if (row >= list.nq) continue;
    for (int n = 0; n < 8; ++n)
      for (int e = 0; e < 2; ++e) {
        const float pv = __bfloat162float(sP[swz<kBwdBlock>(r + 8 * half, n) + 2 * tq + e]);
        if (!(pv >= list.thresh)) continue;
        const int64_t rr = bh * list.nq + row;
        const int slot = atomicAdd(&list.count[rr], 1);
        if (slot < list.cap) {
          list.j[rr * list.cap + slot] = j0 + n * 8 + 2 * tq + e;
          list.p[rr * list.cap + slot] = pv;
        }
      }
  }
}

// kStats: also sum r_i and s_i (the projection's statistics; the audit's max |r_i| for the other variants). A
// compile-time switch: as a runtime flag it cost the baseline 8% of its speed (register allocation).
// kThresh (thresh-lowrank, docs/gproj-projection.md): entries with bf16(P) >= p.thresh go to their row's list
// (p.list_cap slots, an atomic counter), and P (K U) accumulates next to dQ (one n = 8 column tile).
template <int D, bool kPWeighted, bool kAtomicDq, bool kStats, bool kThresh = false>
__global__ void __launch_bounds__(kBwdThreads, 1) flash_bwd_tc_kernel(const KernelParams p) {
  constexpr int BQ = kBwdBlock, BK = kBwdBlock, kNt = D / 8;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16_t* sK = reinterpret_cast<bf16_t*>(smem_raw);  // [BK][D]
  bf16_t* sV = sK + BK * D;                           // [BK][D]
  bf16_t* sQ = sV + BK * D;                           // [2][BQ][D]
  bf16_t* sdO = sQ + 2 * BQ * D;                      // [2][BQ][D]
  bf16_t* sP = sdO + 2 * BQ * D;                      // [BQ][BK] bf16(P)
  bf16_t* sdS = sP + BQ * BK;                         // [BQ][BK] bf16(dS)
  bf16_t* sKU = sdS + BQ * BK;                        // [BK][8] bf16(K U) (thresh-lowrank)
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int b = blockIdx.z, h = blockIdx.y, j0 = blockIdx.x * BK;
  const int hk = h / (p.H / p.Hkv);
  const int64_t bh = static_cast<int64_t>(b) * p.H + h;
  const int first = first_query_row(p, j0);
  const int qb0 = first / BQ, nqb = (p.Nq + BQ - 1) / BQ;
  const int kcount = min(BK, p.Nk - j0);

  if (kThresh && threadIdx.x < BK) {  // one 16-byte row of K U per key
    const int jj = threadIdx.x;
    const bool in = jj < kcount;
    const bf16_t* src = p.ku + ((static_cast<int64_t>(b) * p.Hkv + hk) * p.Nk + (in ? j0 + jj : 0)) * kLowRank;
    cp_async16(smem_u32(sKU + jj * kLowRank), src, in);
  }
  load_tile_async<BK, D, kBwdThreads>(sK, p.k.data, p.k.s0, p.k.s1, p.k.s2, b, j0, kcount, hk);
  load_tile_async<BK, D, kBwdThreads>(sV, p.v.data, p.v.s0, p.v.s1, p.v.s2, b, j0, kcount, hk);
  if (qb0 < nqb) {
    const int cnt = min(BQ, p.Nq - qb0 * BQ);
    load_tile_async<BQ, D, kBwdThreads>(sQ, p.q.data, p.q.s0, p.q.s1, p.q.s2, b, qb0 * BQ, cnt, h);
    load_tile_async<BQ, D, kBwdThreads>(sdO, p.dout.data, p.dout.s0, p.dout.s1, p.dout.s2, b, qb0 * BQ, cnt, h);
  }
  cp_async_commit();

  float dk[kNt][4], dv[kNt][4];
#pragma unroll
  for (int n = 0; n < kNt; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.0f;
  const int r0 = warp * 16, kw = warp * 16;
  constexpr bool stats = kAtomicDq && (kPWeighted || kStats || kThresh);

  for (int qb = qb0; qb < nqb; ++qb) {
    const int buf = (qb - qb0) & 1, i0 = qb * BQ;
    if (qb + 1 < nqb) {
      const int in = i0 + BQ, cnt = min(BQ, p.Nq - in);
      load_tile_async<BQ, D, kBwdThreads>(sQ + (buf ^ 1) * BQ * D, p.q.data, p.q.s0, p.q.s1, p.q.s2, b, in, cnt, h);
      load_tile_async<BQ, D, kBwdThreads>(sdO + (buf ^ 1) * BQ * D, p.dout.data, p.dout.s0, p.dout.s1, p.dout.s2, b,
                                          in, cnt, h);
    }
    cp_async_commit();
    const int row_a = i0 + r0 + g, row_b = row_a + 8;
    const RowInputs in = load_row_inputs(p, bh, row_a);
    cp_async_wait<1>();
    __syncthreads();
    const bf16_t* qt = sQ + buf * BQ * D;
    const bf16_t* ot = sdO + buf * BQ * D;

    float s[8][4], dp[8][4];
    warp_abt0<D>(s, qt, sK, r0, lane);
    warp_abt0<D>(dp, ot, sV, r0, lane);
    tile_p(p, s, i0, r0, j0, lane, in.L_a, in.L_b);
    float sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    // thresh-lowrank: the row's large entries go to its list (rare: at most list_cap per row over all key
    // blocks). The hot path only compares; a warp with a hit appends from its own bf16(P) in sP.
    bool hit = false;
    const auto mark = [&](int, __nv_bfloat162 pa, __nv_bfloat162 pb) {
      if (!kThresh) return;
      const float m = fmaxf(fmaxf(__low2float(pa), __high2float(pa)), fmaxf(__low2float(pb), __high2float(pb)));
      hit |= m >= p.thresh;
    };
    store_p_ds<BK, stats>(s, dp, in, sP, sdS, r0 + g, 0, tq, sums, mark);
    if (kThresh && __any_sync(0xffffffffu, hit)) {
      if (hit)
        append_large_entries({p.list_count, p.list_j, p.list_p, p.list_cap, p.Nq, p.thresh}, sP, bh, r0 + g, row_a, j0,
                             tq);
    }
    if (kThresh) {
      reduce_row_stats(sums);  // s_i, r_i go into the pku record with P (K U) below
    } else if (stats) {
      add_row_stats(p, bh, row_a, tq, sums);
    }
    __syncthreads();
    warp_atb<D>(dv, sP, ot, kw, lane);   // dV += bf16(P)^T dO
    warp_atb<D>(dk, sdS, qt, kw, lane);  // dK += bf16(dS)^T Q
    if (kAtomicDq) {  // dQ += bf16(dS) K (and P K for the projection), 16 columns at a time
      uint32_t dsf[4][4], pf[4][4];
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) {
        ldsm_x4(dsf[kc], smem_u32(sdS + swz<BK>(r0 + (lane & 15), kc * 2 + (lane >> 4))));
        if (kPWeighted || kThresh) ldsm_x4(pf[kc], smem_u32(sP + swz<BK>(r0 + (lane & 15), kc * 2 + (lane >> 4))));
      }
      if (kThresh) {  // P (K U): B fragments of the [64][8] tile, two 16-key chunks per ldmatrix.x4.trans
        float u[4] = {0, 0, 0, 0};
#pragma unroll
        for (int kc = 0; kc < 4; kc += 2) {
          uint32_t bf[4];
          ldsm_x4_t(bf, smem_u32(sKU + (kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8 + (lane >> 4) * 16) * kLowRank));
          mma16816(u, pf[kc], bf[0], bf[1]);
          mma16816(u, pf[kc + 1], bf[2], bf[3]);
        }
        if (tq == 3) {  // columns kStatS, kStatR (K U's are zero there): s_i and r_i of rows row_a, row_b
          u[0] += sums[2], u[1] += sums[0];
          u[2] += sums[3], u[3] += sums[1];
        }
        if (row_a < p.Nq) atomic_add2(p.pku + (bh * p.Nq + row_a) * kLowRank + 2 * tq, u[0], u[1]);
        if (row_b < p.Nq) atomic_add2(p.pku + (bh * p.Nq + row_b) * kLowRank + 2 * tq, u[2], u[3]);
      }
#pragma unroll
      for (int dpi = 0; dpi < D / 16; ++dpi) {
        float a0[4] = {0, 0, 0, 0}, a1[4] = {0, 0, 0, 0}, c0[4] = {0, 0, 0, 0}, c1[4] = {0, 0, 0, 0};
#pragma unroll
        for (int kc = 0; kc < 4; ++kc) {
          uint32_t bf[4];
          ldsm_x4_t(bf, smem_u32(sK + swz<D>(kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, dpi * 2 + (lane >> 4))));
          mma16816(a0, dsf[kc], bf[0], bf[1]);
          mma16816(a1, dsf[kc], bf[2], bf[3]);
          if (kPWeighted) {
            mma16816(c0, pf[kc], bf[0], bf[1]);
            mma16816(c1, pf[kc], bf[2], bf[3]);
          }
        }
        const int col = dpi * 16 + 2 * tq;
        if (row_a < p.Nq) {
          float* q = p.dq_acc + (bh * p.Nq + row_a) * D + col;
          atomic_add2(q, a0[0], a0[1]);
          atomic_add2(q + 8, a1[0], a1[1]);
          if (kPWeighted) {
            float* k = p.pk + (bh * p.Nq + row_a) * D + col;
            atomic_add2(k, c0[0], c0[1]);
            atomic_add2(k + 8, c1[0], c1[1]);
          }
        }
        if (row_b < p.Nq) {
          float* q = p.dq_acc + (bh * p.Nq + row_b) * D + col;
          atomic_add2(q, a0[2], a0[3]);
          atomic_add2(q + 8, a1[2], a1[3]);
          if (kPWeighted) {
            float* k = p.pk + (bh * p.Nq + row_b) * D + col;
            atomic_add2(k, c0[2], c0[3]);
            atomic_add2(k + 8, c1[2], c1[3]);
          }
        }
      }
    }
    __syncthreads();
  }
  cp_async_wait<0>();
  store_dk_dv<D>(p, bh, j0 + kw, g, tq, dk, dv);
}

// Wide backward (experimental, FlashParams::cuda_backward_warps = 8; baseline and fwdfix, no projection): one CTA
// of 8 warps per 128 keys, query blocks of 64. S and dP: warp w takes query rows 16 (w % 4) and key half w / 4;
// dV and dK: warp w takes keys 16 w; dQ: warp w takes rows 16 (w % 4) and the column half w / 4 over all 128
// keys. Twice the warps per SM of flash_bwd_tc_kernel and half its dQ atomics per key; same rounding points.
constexpr int kWideKeys = 128, kWideThreads = 256;

template <int D>
constexpr size_t bwd_wide_smem_bytes() {
  return sizeof(bf16_t) * (2 * kWideKeys * D + 4 * kBwdBlock * D + 2 * kBwdBlock * kWideKeys);
}

template <int D, bool kStats>
__global__ void __launch_bounds__(kWideThreads, 1) flash_bwd_tc_wide_kernel(const KernelParams p) {
  constexpr int BQ = kBwdBlock, BK = kWideKeys, kNt = D / 8, kHalfD = D / 2;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16_t* sK = reinterpret_cast<bf16_t*>(smem_raw);  // [BK][D]
  bf16_t* sV = sK + BK * D;                           // [BK][D]
  bf16_t* sQ = sV + BK * D;                           // [2][BQ][D]
  bf16_t* sdO = sQ + 2 * BQ * D;                      // [2][BQ][D]
  bf16_t* sP = sdO + 2 * BQ * D;                      // [BQ][BK] bf16(P)
  bf16_t* sdS = sP + BQ * BK;                         // [BQ][BK] bf16(dS)
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int b = blockIdx.z, h = blockIdx.y, j0 = blockIdx.x * BK;
  const int hk = h / (p.H / p.Hkv);
  const int64_t bh = static_cast<int64_t>(b) * p.H + h;
  const int first = first_query_row(p, j0);
  const int qb0 = first / BQ, nqb = (p.Nq + BQ - 1) / BQ;
  const int kcount = min(BK, p.Nk - j0);

  load_tile_async<BK, D, kWideThreads>(sK, p.k.data, p.k.s0, p.k.s1, p.k.s2, b, j0, kcount, hk);
  load_tile_async<BK, D, kWideThreads>(sV, p.v.data, p.v.s0, p.v.s1, p.v.s2, b, j0, kcount, hk);
  if (qb0 < nqb) {
    const int cnt = min(BQ, p.Nq - qb0 * BQ);
    load_tile_async<BQ, D, kWideThreads>(sQ, p.q.data, p.q.s0, p.q.s1, p.q.s2, b, qb0 * BQ, cnt, h);
    load_tile_async<BQ, D, kWideThreads>(sdO, p.dout.data, p.dout.s0, p.dout.s1, p.dout.s2, b, qb0 * BQ, cnt, h);
  }
  cp_async_commit();

  float dk[kNt][4], dv[kNt][4];
#pragma unroll
  for (int n = 0; n < kNt; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.0f;
  const int r0 = 16 * (warp & 3), kh = warp >> 2, kw = 16 * warp;
  const int jw = j0 + 64 * kh;  // first key of this warp's half in the S / dP phase

  for (int qb = qb0; qb < nqb; ++qb) {
    const int buf = (qb - qb0) & 1, i0 = qb * BQ;
    if (qb + 1 < nqb) {
      const int in = i0 + BQ, cnt = min(BQ, p.Nq - in);
      load_tile_async<BQ, D, kWideThreads>(sQ + (buf ^ 1) * BQ * D, p.q.data, p.q.s0, p.q.s1, p.q.s2, b, in, cnt, h);
      load_tile_async<BQ, D, kWideThreads>(sdO + (buf ^ 1) * BQ * D, p.dout.data, p.dout.s0, p.dout.s1, p.dout.s2,
                                           b, in, cnt, h);
    }
    cp_async_commit();
    const int row_a = i0 + r0 + g, row_b = row_a + 8;
    const RowInputs in = load_row_inputs(p, bh, row_a);
    cp_async_wait<1>();
    __syncthreads();
    const bf16_t* qt = sQ + buf * BQ * D;
    const bf16_t* ot = sdO + buf * BQ * D;

    float s[8][4], dp[8][4];
    warp_abt0<D>(s, qt, sK + 64 * kh * D, r0, lane);
    warp_abt0<D>(dp, ot, sV + 64 * kh * D, r0, lane);
    tile_p(p, s, i0, r0, jw, lane, in.L_a, in.L_b);
    float sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    store_p_ds<BK, kStats>(s, dp, in, sP, sdS, r0 + g, 8 * kh, tq, sums);  // chunks of this warp's key half
    if (kStats) add_row_stats(p, bh, row_a, tq, sums);
    __syncthreads();
    warp_atb<D, BK>(dv, sP, ot, kw, lane);   // dV += bf16(P)^T dO
    warp_atb<D, BK>(dk, sdS, qt, kw, lane);  // dK += bf16(dS)^T Q
    {  // dQ += bf16(dS) K for rows r0.., columns [kh D/2, kh D/2 + D/2), over all 128 keys
      float acc[kHalfD / 8][4];
#pragma unroll
      for (int n = 0; n < kHalfD / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
      for (int kc = 0; kc < BK / 16; ++kc) {
        uint32_t af[4];
        ldsm_x4(af, smem_u32(sdS + swz<BK>(r0 + (lane & 15), kc * 2 + (lane >> 4))));
#pragma unroll
        for (int dpi = 0; dpi < kHalfD / 16; ++dpi) {
          uint32_t bf[4];
          const int chunk = kh * (kHalfD / 8) + dpi * 2 + (lane >> 4);
          ldsm_x4_t(bf, smem_u32(sK + swz<D>(kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, chunk)));
          mma16816(acc[2 * dpi], af, bf[0], bf[1]);
          mma16816(acc[2 * dpi + 1], af, bf[2], bf[3]);
        }
      }
#pragma unroll
      for (int n = 0; n < kHalfD / 8; ++n) {
        const int col = kh * kHalfD + n * 8 + 2 * tq;
        if (row_a < p.Nq) atomic_add2(p.dq_acc + (bh * p.Nq + row_a) * D + col, acc[n][0], acc[n][1]);
        if (row_b < p.Nq) atomic_add2(p.dq_acc + (bh * p.Nq + row_b) * D + col, acc[n][2], acc[n][3]);
      }
    }
    __syncthreads();
  }
  cp_async_wait<0>();
  store_dk_dv<D>(p, bh, j0 + kw, g, tq, dk, dv);
}

// Deterministic mode: one CTA (4 warps, 16 query rows each) per query block loops over the key blocks in order
// (K, V double-buffered) and accumulates dQ, P K and the row sums r_i, s_i in registers, then stores them: no
// atomics. S, P, dP and dS are computed by the same code as in flash_bwd_tc_kernel, so their bits agree; only
// the order of the dQ summation differs from the atomic mode.
template <int D, bool kPWeighted>
__global__ void __launch_bounds__(kBwdThreads, 1) flash_bwd_tc_dq_kernel(const KernelParams p) {
  constexpr int BQ = kBwdBlock, BK = kBwdBlock, kNt = D / 8;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16_t* sQ = reinterpret_cast<bf16_t*>(smem_raw);  // [BQ][D]
  bf16_t* sdO = sQ + BQ * D;                          // [BQ][D]
  bf16_t* sK = sdO + BQ * D;                          // [2][BK][D]
  bf16_t* sV = sK + 2 * BK * D;                       // [2][BK][D]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * BQ;
  const int hk = h / (p.H / p.Hkv);
  const int64_t bh = static_cast<int64_t>(b) * p.H + h;
  const int rows = min(BQ, p.Nq - i0);
  const int j_end = p.causal ? max(0, min(p.Nk, i0 + rows + p.Nk - p.Nq)) : p.Nk;
  const int nkb = (j_end + BK - 1) / BK;
  load_tile_async<BQ, D, kBwdThreads>(sQ, p.q.data, p.q.s0, p.q.s1, p.q.s2, b, i0, rows, h);
  load_tile_async<BQ, D, kBwdThreads>(sdO, p.dout.data, p.dout.s0, p.dout.s1, p.dout.s2, b, i0, rows, h);
  if (nkb > 0) {
    load_tile_async<BK, D, kBwdThreads>(sK, p.k.data, p.k.s0, p.k.s1, p.k.s2, b, 0, min(BK, p.Nk), hk);
    load_tile_async<BK, D, kBwdThreads>(sV, p.v.data, p.v.s0, p.v.s1, p.v.s2, b, 0, min(BK, p.Nk), hk);
  }
  cp_async_commit();
  const int r0 = warp * 16, row_a = i0 + r0 + g, row_b = row_a + 8;
  const RowInputs in = load_row_inputs(p, bh, row_a);
  float dq[kNt][4], pk[kNt][4];
#pragma unroll
  for (int n = 0; n < kNt; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dq[n][e] = pk[n][e] = 0.0f;
  float rs_a = 0.0f, rs_b = 0.0f, ps_a = 0.0f, ps_b = 0.0f;
  for (int jb = 0; jb < nkb; ++jb) {
    const int buf = jb & 1, j0 = jb * BK;
    if (jb + 1 < nkb) {
      const int jn = j0 + BK, cnt = min(BK, p.Nk - jn);
      load_tile_async<BK, D, kBwdThreads>(sK + (buf ^ 1) * BK * D, p.k.data, p.k.s0, p.k.s1, p.k.s2, b, jn, cnt, hk);
      load_tile_async<BK, D, kBwdThreads>(sV + (buf ^ 1) * BK * D, p.v.data, p.v.s0, p.v.s1, p.v.s2, b, jn, cnt, hk);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const bf16_t* kt = sK + buf * BK * D;
    const bf16_t* vt = sV + buf * BK * D;
    float s[8][4], dpv[8][4];
    warp_abt0<D>(s, sQ, kt, r0, lane);
    warp_abt0<D>(dpv, sdO, vt, r0, lane);
    tile_p(p, s, i0, r0, j0, lane, in.L_a, in.L_b);
    uint32_t dsf[4][4], pf[4][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const __nv_bfloat162 pa = __floats2bfloat162_rn(s[n][0], s[n][1]), pb = __floats2bfloat162_rn(s[n][2], s[n][3]);
      const __nv_bfloat162 da = __floats2bfloat162_rn(s[n][0] * (dpv[n][0] - in.dl_a), s[n][1] * (dpv[n][1] - in.dl_a));
      const __nv_bfloat162 db = __floats2bfloat162_rn(s[n][2] * (dpv[n][2] - in.dl_b), s[n][3] * (dpv[n][3] - in.dl_b));
      rs_a += __low2float(da) + __high2float(da);
      rs_b += __low2float(db) + __high2float(db);
      ps_a += __low2float(pa) + __high2float(pa);
      ps_b += __low2float(pb) + __high2float(pb);
      dsf[n >> 1][(n & 1) * 2] = *reinterpret_cast<const uint32_t*>(&da);
      dsf[n >> 1][(n & 1) * 2 + 1] = *reinterpret_cast<const uint32_t*>(&db);
      pf[n >> 1][(n & 1) * 2] = *reinterpret_cast<const uint32_t*>(&pa);
      pf[n >> 1][(n & 1) * 2 + 1] = *reinterpret_cast<const uint32_t*>(&pb);
    }
#pragma unroll
    for (int kc = 0; kc < 4; ++kc) {
#pragma unroll
      for (int dpi = 0; dpi < D / 16; ++dpi) {
        uint32_t bf[4];
        ldsm_x4_t(bf, smem_u32(kt + swz<D>(kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, dpi * 2 + (lane >> 4))));
        mma16816(dq[2 * dpi], dsf[kc], bf[0], bf[1]);
        mma16816(dq[2 * dpi + 1], dsf[kc], bf[2], bf[3]);
        if (kPWeighted) {
          mma16816(pk[2 * dpi], pf[kc], bf[0], bf[1]);
          mma16816(pk[2 * dpi + 1], pf[kc], bf[2], bf[3]);
        }
      }
    }
    __syncthreads();
  }
  cp_async_wait<0>();
#pragma unroll
  for (int o = 1; o <= 2; o <<= 1) {
    rs_a += __shfl_xor_sync(0xffffffffu, rs_a, o);
    rs_b += __shfl_xor_sync(0xffffffffu, rs_b, o);
    ps_a += __shfl_xor_sync(0xffffffffu, ps_a, o);
    ps_b += __shfl_xor_sync(0xffffffffu, ps_b, o);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int i = half ? row_b : row_a;
    if (i >= p.Nq) continue;
    float* dqa = p.dq_acc + (bh * p.Nq + i) * D;
    float* pka = p.pk + (bh * p.Nq + i) * D;
#pragma unroll
    for (int n = 0; n < kNt; ++n) {
      *reinterpret_cast<float2*>(dqa + n * 8 + 2 * tq) = make_float2(dq[n][2 * half], dq[n][2 * half + 1]);
      if (kPWeighted)
        *reinterpret_cast<float2*>(pka + n * 8 + 2 * tq) = make_float2(pk[n][2 * half], pk[n][2 * half + 1]);
    }
    if (tq == 0) {
      p.rowsum[bh * p.Nq + i] = half ? rs_b : rs_a;
      p.psum[bh * p.Nq + i] = half ? ps_b : ps_a;
    }
  }
}

// P-weighted projection, dK side: dK_j -= sum_i bf16(bf16(P_ij) c_i) Q_i with c_i = r_i / s_i (known only after
// the main kernel). The weight is rounded to BF16 for the tensor cores: a relative 2^-9 of a correction that is
// itself of the size of the BF16 error, far below the output rounding.
template <int D>
__global__ void __launch_bounds__(kBwdThreads, 1) flash_bwd_tc_dk_sweep_kernel(const KernelParams p) {
  constexpr int BQ = kBwdBlock, BK = kBwdBlock, kNt = D / 8;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16_t* sK = reinterpret_cast<bf16_t*>(smem_raw);  // [BK][D]
  bf16_t* sQ = sK + BK * D;                           // [2][BQ][D]
  bf16_t* sW = sQ + 2 * BQ * D;                       // [BQ][BK]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int b = blockIdx.z, h = blockIdx.y, j0 = blockIdx.x * BK;
  const int hk = h / (p.H / p.Hkv);
  const int64_t bh = static_cast<int64_t>(b) * p.H + h;
  const int first = first_query_row(p, j0);
  const int qb0 = first / BQ, nqb = (p.Nq + BQ - 1) / BQ;
  load_tile_async<BK, D, kBwdThreads>(sK, p.k.data, p.k.s0, p.k.s1, p.k.s2, b, j0, min(BK, p.Nk - j0), hk);
  if (qb0 < nqb)
    load_tile_async<BQ, D, kBwdThreads>(sQ, p.q.data, p.q.s0, p.q.s1, p.q.s2, b, qb0 * BQ,
                                        min(BQ, p.Nq - qb0 * BQ), h);
  cp_async_commit();
  float corr[kNt][4];
#pragma unroll
  for (int n = 0; n < kNt; ++n) corr[n][0] = corr[n][1] = corr[n][2] = corr[n][3] = 0.0f;
  const int r0 = warp * 16, kw = warp * 16;
  for (int qb = qb0; qb < nqb; ++qb) {
    const int buf = (qb - qb0) & 1, i0 = qb * BQ;
    if (qb + 1 < nqb)
      load_tile_async<BQ, D, kBwdThreads>(sQ + (buf ^ 1) * BQ * D, p.q.data, p.q.s0, p.q.s1, p.q.s2, b, i0 + BQ,
                                          min(BQ, p.Nq - i0 - BQ), h);
    cp_async_commit();
    const int row_a = i0 + r0 + g, row_b = row_a + 8;
    const float L_a = row_a < p.Nq ? p.lse[bh * p.Nq + row_a] : 0.0f;
    const float L_b = row_b < p.Nq ? p.lse[bh * p.Nq + row_b] : 0.0f;
    const float sa = row_a < p.Nq ? p.psum[bh * p.Nq + row_a] : 0.0f;
    const float sb = row_b < p.Nq ? p.psum[bh * p.Nq + row_b] : 0.0f;
    const float c_a = sa > 0.0f ? p.rowsum[bh * p.Nq + row_a] / sa : 0.0f;
    const float c_b = sb > 0.0f ? p.rowsum[bh * p.Nq + row_b] / sb : 0.0f;
    cp_async_wait<1>();
    __syncthreads();
    const bf16_t* qt = sQ + buf * BQ * D;
    float s[8][4];
    warp_abt0<D>(s, qt, sK, r0, lane);
    tile_p(p, s, i0, r0, j0, lane, L_a, L_b);
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const float w0 = round_bf16(s[n][0]) * c_a, w1 = round_bf16(s[n][1]) * c_a;
      const float w2 = round_bf16(s[n][2]) * c_b, w3 = round_bf16(s[n][3]) * c_b;
      *reinterpret_cast<__nv_bfloat162*>(sW + swz<BK>(r0 + g, n) + 2 * tq) = __floats2bfloat162_rn(w0, w1);
      *reinterpret_cast<__nv_bfloat162*>(sW + swz<BK>(r0 + g + 8, n) + 2 * tq) = __floats2bfloat162_rn(w2, w3);
    }
    __syncthreads();
    warp_atb<D>(corr, sW, qt, kw, lane);
    __syncthreads();
  }
  cp_async_wait<0>();
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int j = j0 + kw + g + 8 * half;
    if (j >= p.Nk) continue;
    float* dka = p.dk_acc + (bh * p.Nk + j) * D;
#pragma unroll
    for (int n = 0; n < kNt; ++n) {
      float2* x = reinterpret_cast<float2*>(dka + n * 8 + 2 * tq);
      const float2 v = *x;
      *x = make_float2(v.x - corr[n][2 * half], v.y - corr[n][2 * half + 1]);
    }
  }
}

}  // namespace gproj::cuda::detail
