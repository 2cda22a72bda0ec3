// CUDA backward, reference version (v0): preprocess (B1 delta), main loop per key block over query blocks
// with BF16 rounding at B4, the P-weighted projection's statistics and dK sweep, and the postprocess.
// FP32 CUDA-core tiles; same tiles and rounding points as the CPU emulator. Exercised by tests/cuda/*.
#pragma once

#include "cuda/kernel_common.cuh"

namespace gproj::cuda::detail {

// B1: delta_i = sum_d dO_id O_id in FP32 (sequential over d, like the CPU), from the BF16 O or the FP32 O.
// One thread per row: the reference form (the fp32 variant's FP32 O, rows not 16-byte aligned).
__global__ void bwd_preprocess_kernel(const KernelParams p) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // over (B, H, Nq)
  if (idx >= static_cast<int64_t>(p.B) * p.H * p.Nq) return;
  const int i = static_cast<int>(idx % p.Nq), h = static_cast<int>((idx / p.Nq) % p.H);
  const int b = static_cast<int>(idx / (static_cast<int64_t>(p.Nq) * p.H));
  float acc = 0.0f;
  for (int d = 0; d < p.D; ++d) {
    const float o = p.o_fp32 ? p.o_fp32[((static_cast<int64_t>(b) * p.Nq + i) * p.H + h) * p.D + d]
                             : load_bf16(p.o, b, i, h, d);
    acc = __fadd_rn(acc, __fmul_rn(load_bf16(p.dout, b, i, h, d), o));
  }
  p.delta[idx] = acc;
}

// The same delta from BF16 O and dO with 16-byte aligned rows (v3.45): still one thread per row, summing in the same
// order, but the row is read straight into registers, no shared memory. The two lanes of a pair (2m, 2m + 1) hold
// rows ra = 2m and ra + 1 of the warp's 32; each load instruction has both lanes read 16 bytes of the same row side
// by side (chunks 2k and 2k + 1: one whole 32-byte sector per pair and instruction), first of row ra, then of ra + 1,
// and one shuffle per word then gives each lane the half of its own row that its partner read. Half a row of both
// tensors (128 bytes each) per step, its 16 loads issued together: the launch bounds' minimum of 2 CTAs lets ptxas
// use the registers (94-96); without it, it sank each k's loads to their use, 4 of 16 in flight. No shared memory,
// so launch.cu asks for the smallest carveout and every main kernel after it finds its SMs reconfigured. (Until
// v3.45 a CTA staged 64 rows of both in 33 KB of shared memory and 64 of its 256 threads summed them: ~49 µs for
// 134 MB at D = 64 and 128, ~65 µs in gproj's backward at D = 128, where v3.40's half carveout left 3 of those CTAs
// an SM. This one: ~53 µs in both; perf-notes, session 38.)
constexpr int kPreThreads = 256;  // rows per CTA
template <int D>
__global__ void __launch_bounds__(kPreThreads, 2) bwd_preprocess_vec_kernel(const KernelParams p) {
  static_assert(D % 64 == 0, "whole steps of 8 chunks of 16 bytes");
  constexpr int kSteps = D / 64, kLoads = 4;  // per step: chunks 2 k + (lane & 1), k < kLoads, of both rows
  const int64_t total = static_cast<int64_t>(p.B) * p.H * p.Nq;
  const int par = threadIdx.x & 1;
  const int64_t own = static_cast<int64_t>(blockIdx.x) * kPreThreads + threadIdx.x, ra = own - par;
  // Rows in memory order (v3.45b): the row index runs over (b, i, h) with h fastest where O's heads are closer
  // together than its positions (the (B, N, H, D) layout), else over (b, h, i), so that a warp's rows are one stretch
  // of memory. Rows ra and ra + 1 of the pair; a row past the last reads row 0 (or ra) instead, unconditionally, so
  // that a step's loads go out together, and its sum is not stored.
  const bool h_fast = p.o.s2 <= p.o.s1;
  const int inner = h_fast ? p.H : p.Nq, mid = h_fast ? p.Nq : p.H;
  const int64_t a = ra < total ? ra : 0, q_a = a / inner, b_a = q_a / mid;
  const int y_a = static_cast<int>(a - q_a * inner), x_a = static_cast<int>(q_a - b_a * mid);
  int64_t b_b = b_a;  // row ra + 1: the next y, carried into x and b
  int y_b = y_a + 1, x_b = x_a;
  if (y_b == inner) y_b = 0, x_b = x_a + 1;
  if (x_b == mid) x_b = 0, b_b = b_a + 1;
  if (ra + 1 >= total) b_b = b_a, x_b = x_a, y_b = y_a;
  const auto chunks = [&](const Strided& t, int64_t b, int x, int y) {  // row (b, x, y)'s chunks from this lane's
    const int i = h_fast ? x : y, h = h_fast ? y : x;
    return reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(t.data) + b * t.s0 +
                                          static_cast<int64_t>(i) * t.s1 + static_cast<int64_t>(h) * t.s2) + par;
  };
  const uint4 *oa = chunks(p.o, b_a, x_a, y_a), *da = chunks(p.dout, b_a, x_a, y_a);
  const uint4 *ob = chunks(p.o, b_b, x_b, y_b), *db = chunks(p.dout, b_b, x_b, y_b);
  // This lane's delta index, (b, h, i)
  const int64_t b_o = par ? b_b : b_a;
  const int x_o = par ? x_b : x_a, y_o = par ? y_b : y_a;
  const int64_t out = (b_o * p.H + (h_fast ? y_o : x_o)) * p.Nq + (h_fast ? x_o : y_o);
  float acc = 0.0f;
  const auto add_word = [&acc](uint32_t wo, uint32_t wd) {  // elements 2 w, 2 w + 1, as the reference kernel
    const float o0 = __uint_as_float(wo << 16), o1 = __uint_as_float(wo & 0xffff0000u);
    const float d0 = __uint_as_float(wd << 16), d1 = __uint_as_float(wd & 0xffff0000u);
    acc = __fadd_rn(acc, __fmul_rn(d0, o0));
    acc = __fadd_rn(acc, __fmul_rn(d1, o1));
  };
#pragma unroll 1
  for (int st = 0; st < kSteps; ++st) {
    uint4 xo[2][kLoads], xd[2][kLoads];  // [row ra, ra + 1][k]: chunk 8 st + 2 k + par
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
      const int c = 8 * st + 2 * k;
      xo[0][k] = oa[c];
      xd[0][k] = da[c];
      xo[1][k] = ob[c];
      xd[1][k] = db[c];
    }
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
      uint32_t so[4], sd[4], mo[4], md[4];  // what this lane sends (the partner's row) and keeps (its own)
      const uint32_t* a_o = &xo[0][k].x, *a_d = &xd[0][k].x, *b_o = &xo[1][k].x, *b_d = &xd[1][k].x;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        so[w] = par ? a_o[w] : b_o[w];
        sd[w] = par ? a_d[w] : b_d[w];
        mo[w] = par ? b_o[w] : a_o[w];
        md[w] = par ? b_d[w] : a_d[w];
      }
      uint32_t ro[4], rd[4];
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        ro[w] = __shfl_xor_sync(0xffffffffu, so[w], 1);
        rd[w] = __shfl_xor_sync(0xffffffffu, sd[w], 1);
      }
      // Chunk 2 k of the own row, then 2 k + 1: lane 2m read the even one itself, lane 2m + 1 the odd one.
#pragma unroll
      for (int w = 0; w < 4; ++w) add_word(par ? ro[w] : mo[w], par ? rd[w] : md[w]);
#pragma unroll
      for (int w = 0; w < 4; ++w) add_word(par ? mo[w] : ro[w], par ? md[w] : rd[w]);
    }
  }
  if (own < total) p.delta[out] = acc;
}

// Dynamic shared memory: sK, sQ (rows, D+1), sV, sdO (rows, D+1), sP, sdS (BQ, BK+1), sL, sDelta (BQ).
template <int D>
constexpr size_t bwd_smem_bytes() {
  return sizeof(float) * (4 * kBlockQ * (D + 1) + 2 * kBlockQ * (kBlockK + 1) + 2 * kBlockQ);
}

// P of the tile row r, columns half*32.., recomputed from the LSE; masked and empty rows give 0.
template <int D>
__device__ __forceinline__ void p_row(const KernelParams& p, const float* sQ, const float* sK, const float* sL,
                                      int r, int half, int i0, int j0, int rows, int cols, float* out) {
  constexpr int kCols = kBlockK / 2;
  const int limit = last_visible(p, i0 + r);
  const float L = sL[r];
#pragma unroll 4
  for (int c = 0; c < kCols; ++c) {
    const int jj = half * kCols + c;
    float dot = 0.0f;
#pragma unroll 8
    for (int d = 0; d < D; ++d) dot = fmaf(sQ[r * (D + 1) + d], sK[jj * (D + 1) + d], dot);
    const bool visible = r < rows && jj < cols && j0 + jj <= limit && L != neg_inf();
    out[c] = visible ? expf(p.scale * dot - L) : 0.0f;
  }
}

// dS and bf16(P) of tile row r, columns half*32.. (B4 rounding), written to sdS / sP; returns the row's sums of
// the stored dS and P over the whole tile (both threads of the row get them).
template <int D, bool kRound>
__device__ __forceinline__ float2 ds_row(const float* pr, const float* sdO, const float* sV, const float* sDelta,
                                         int r, int half, float* sP, float* sdS) {
  constexpr int kCols = kBlockK / 2;
  float rsum = 0.0f, psum = 0.0f;
#pragma unroll 4
  for (int c = 0; c < kCols; ++c) {
    const int jj = half * kCols + c;
    float dp = 0.0f;
#pragma unroll 8
    for (int d = 0; d < D; ++d) dp = fmaf(sdO[r * (D + 1) + d], sV[jj * (D + 1) + d], dp);
    const float ds = pr[c] * (dp - sDelta[r]);
    const float dsb = kRound ? round_bf16(ds) : ds;  // B4
    const float pb = kRound ? round_bf16(pr[c]) : pr[c];
    sdS[r * (kBlockK + 1) + jj] = dsb;
    sP[r * (kBlockK + 1) + jj] = pb;
    rsum += dsb;
    psum += pb;
  }
  rsum += __shfl_xor_sync(0xffffffffu, rsum, 1);
  psum += __shfl_xor_sync(0xffffffffu, psum, 1);
  return make_float2(rsum, psum);
}

template <int D>
__device__ __forceinline__ void load_rows(const KernelParams& p, const Strided& src, float* dst, int b, int h,
                                          int n0, int count, int N) {
  for (int x = threadIdx.x; x < kBlockQ * D; x += kThreads) {
    const int rr = x / D, d = x % D;
    dst[rr * (D + 1) + d] = rr < count && n0 + rr < N ? load_bf16(src, b, n0 + rr, h, d) : 0.0f;
  }
}

// kAtomicDq: also accumulate dQ, P K and the row sums here with atomics (fast, run-to-run order varies);
// without it (deterministic mode) flash_bwd_dq_kernel computes them.
template <int D, bool kRound, bool kPWeighted, bool kAtomicDq>
__global__ void __launch_bounds__(kThreads) flash_bwd_kernel(const KernelParams p) {
  extern __shared__ float smem[];
  float* sK = smem;                          // (BK, D+1)
  float* sV = sK + kBlockK * (D + 1);        // (BK, D+1)
  float* sQ = sV + kBlockK * (D + 1);        // (BQ, D+1)
  float* sdO = sQ + kBlockQ * (D + 1);       // (BQ, D+1)
  float* sP = sdO + kBlockQ * (D + 1);       // (BQ, BK+1), bf16(P) (or P for fp32)
  float* sdS = sP + kBlockQ * (kBlockK + 1); // (BQ, BK+1), bf16(dS) (or dS)
  float* sL = sdS + kBlockQ * (kBlockK + 1); // (BQ)
  float* sDelta = sL + kBlockQ;              // (BQ)
  constexpr int kCols = kBlockK / 2, kHalfD = D / 2;
  const int b = blockIdx.z, h = blockIdx.y, j0 = blockIdx.x * kBlockK;
  const int hk = h / (p.H / p.Hkv);
  const int t = threadIdx.x, r = t >> 1, half = t & 1;
  const int cols = min(kBlockK, p.Nk - j0);
  const int64_t bh = static_cast<int64_t>(b) * p.H + h;
  load_rows<D>(p, p.k, sK, b, hk, j0, cols, p.Nk);
  load_rows<D>(p, p.v, sV, b, hk, j0, cols, p.Nk);
  float dk[kHalfD], dv[kHalfD];
#pragma unroll
  for (int e = 0; e < kHalfD; ++e) dk[e] = dv[e] = 0.0f;
  const int first = first_query_row(p, j0);
  for (int i0 = first / kBlockQ * kBlockQ; i0 < p.Nq; i0 += kBlockQ) {
    const int rows = min(kBlockQ, p.Nq - i0);
    __syncthreads();
    load_rows<D>(p, p.q, sQ, b, h, i0, rows, p.Nq);
    load_rows<D>(p, p.dout, sdO, b, h, i0, rows, p.Nq);
    if (t < kBlockQ) {
      sL[t] = t < rows ? p.lse[bh * p.Nq + i0 + t] : neg_inf();
      sDelta[t] = t < rows ? p.delta[bh * p.Nq + i0 + t] : 0.0f;
    }
    __syncthreads();
    float pr[kCols];
    p_row<D>(p, sQ, sK, sL, r, half, i0, j0, rows, cols, pr);
    const float2 sums = ds_row<D, kRound>(pr, sdO, sV, sDelta, r, half, sP, sdS);
    if (kAtomicDq && half == 0 && r < rows) {
      atomicAdd(&p.rowsum[bh * p.Nq + i0 + r], sums.x);
      atomicAdd(&p.psum[bh * p.Nq + i0 + r], sums.y);
    }
    __syncthreads();
    // dV_j += P^T dO, dK_j += dS^T Q for key row r of this block (thread's half of D).
#pragma unroll
    for (int e = 0; e < kHalfD; ++e) {
      const int d = half * kHalfD + e;
      float a = dv[e], c = dk[e];
      for (int ii = 0; ii < rows; ++ii) {
        a = fmaf(sP[ii * (kBlockK + 1) + r], sdO[ii * (D + 1) + d], a);
        c = fmaf(sdS[ii * (kBlockK + 1) + r], sQ[ii * (D + 1) + d], c);
      }
      dv[e] = a;
      dk[e] = c;
    }
    // dQ_i += dS K (and P K for the projection) for query row r of this block.
    if (kAtomicDq && r < rows) {
      float* dq = p.dq_acc + (bh * p.Nq + i0 + r) * D;
      float* pk = kPWeighted ? p.pk + (bh * p.Nq + i0 + r) * D : nullptr;
      for (int e = 0; e < kHalfD; ++e) {
        const int d = half * kHalfD + e;
        float a = 0.0f, c = 0.0f;
        for (int jj = 0; jj < cols; ++jj) {
          a = fmaf(sdS[r * (kBlockK + 1) + jj], sK[jj * (D + 1) + d], a);
          if (kPWeighted) c = fmaf(sP[r * (kBlockK + 1) + jj], sK[jj * (D + 1) + d], c);
        }
        atomicAdd(&dq[d], a);
        if (kPWeighted) atomicAdd(&pk[d], c);
      }
    }
  }
  if (r >= cols) return;
  float* dka = p.dk_acc + (bh * p.Nk + j0 + r) * D;
  float* dva = p.dv_acc + (bh * p.Nk + j0 + r) * D;
#pragma unroll
  for (int e = 0; e < kHalfD; ++e) {
    dka[half * kHalfD + e] = dk[e];
    dva[half * kHalfD + e] = dv[e];
  }
}

// Deterministic mode: one CTA per query block loops over the key blocks in order and accumulates dQ, P K
// and the row sums r_i, s_i in registers (recomputing S, P, dP and dS), then stores them: no atomics.
template <int D, bool kRound, bool kPWeighted>
__global__ void __launch_bounds__(kThreads) flash_bwd_dq_kernel(const KernelParams p) {
  extern __shared__ float smem[];
  float* sK = smem;                          // (BK, D+1)
  float* sV = sK + kBlockK * (D + 1);        // (BK, D+1)
  float* sQ = sV + kBlockK * (D + 1);        // (BQ, D+1)
  float* sdO = sQ + kBlockQ * (D + 1);       // (BQ, D+1)
  float* sP = sdO + kBlockQ * (D + 1);       // (BQ, BK+1)
  float* sdS = sP + kBlockQ * (kBlockK + 1); // (BQ, BK+1)
  float* sL = sdS + kBlockQ * (kBlockK + 1); // (BQ)
  float* sDelta = sL + kBlockQ;              // (BQ)
  constexpr int kCols = kBlockK / 2, kHalfD = D / 2;
  const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * kBlockQ;
  const int hk = h / (p.H / p.Hkv);
  const int t = threadIdx.x, r = t >> 1, half = t & 1;
  const int rows = min(kBlockQ, p.Nq - i0);
  const int64_t bh = static_cast<int64_t>(b) * p.H + h;
  load_rows<D>(p, p.q, sQ, b, h, i0, rows, p.Nq);
  load_rows<D>(p, p.dout, sdO, b, h, i0, rows, p.Nq);
  if (t < kBlockQ) {
    sL[t] = t < rows ? p.lse[bh * p.Nq + i0 + t] : neg_inf();
    sDelta[t] = t < rows ? p.delta[bh * p.Nq + i0 + t] : 0.0f;
  }
  float dq[kHalfD], pk[kHalfD];
#pragma unroll
  for (int e = 0; e < kHalfD; ++e) dq[e] = pk[e] = 0.0f;
  float rsum = 0.0f, psum = 0.0f;
  const int j_end = p.causal ? max(0, min(p.Nk, i0 + rows + p.Nk - p.Nq)) : p.Nk;
  for (int j0 = 0; j0 < j_end; j0 += kBlockK) {
    const int cols = min(kBlockK, p.Nk - j0);
    __syncthreads();
    load_rows<D>(p, p.k, sK, b, hk, j0, cols, p.Nk);
    load_rows<D>(p, p.v, sV, b, hk, j0, cols, p.Nk);
    __syncthreads();
    float pr[kCols];
    p_row<D>(p, sQ, sK, sL, r, half, i0, j0, rows, cols, pr);
    const float2 sums = ds_row<D, kRound>(pr, sdO, sV, sDelta, r, half, sP, sdS);
    rsum += sums.x;
    psum += sums.y;
    __syncthreads();
#pragma unroll
    for (int e = 0; e < kHalfD; ++e) {
      const int d = half * kHalfD + e;
      float a = dq[e], c = pk[e];
      for (int jj = 0; jj < cols; ++jj) {
        a = fmaf(sdS[r * (kBlockK + 1) + jj], sK[jj * (D + 1) + d], a);
        if (kPWeighted) c = fmaf(sP[r * (kBlockK + 1) + jj], sK[jj * (D + 1) + d], c);
      }
      dq[e] = a;
      pk[e] = c;
    }
  }
  if (r >= rows) return;
  float* dqa = p.dq_acc + (bh * p.Nq + i0 + r) * D;
#pragma unroll
  for (int e = 0; e < kHalfD; ++e) {
    dqa[half * kHalfD + e] = dq[e];
    if (kPWeighted) p.pk[(bh * p.Nq + i0 + r) * D + half * kHalfD + e] = pk[e];
  }
  if (half == 0) {
    p.rowsum[bh * p.Nq + i0 + r] = rsum;
    p.psum[bh * p.Nq + i0 + r] = psum;
  }
}

// P-weighted projection, dK side: dK_j -= sum_i bf16(P_ij) c_i Q_i with c_i = r_i / s_i (known only now).
template <int D, bool kRound>
__global__ void __launch_bounds__(kThreads) flash_bwd_dk_sweep_kernel(const KernelParams p) {
  extern __shared__ float smem[];
  float* sK = smem;
  float* sQ = sK + kBlockK * (D + 1);
  float* sW = sQ + kBlockQ * (D + 1);        // (BQ, BK+1): bf16(P_ij) c_i
  float* sL = sW + kBlockQ * (kBlockK + 1);
  float* sC = sL + kBlockQ;
  constexpr int kCols = kBlockK / 2, kHalfD = D / 2;
  const int b = blockIdx.z, h = blockIdx.y, j0 = blockIdx.x * kBlockK;
  const int hk = h / (p.H / p.Hkv);
  const int t = threadIdx.x, r = t >> 1, half = t & 1;
  const int cols = min(kBlockK, p.Nk - j0);
  const int64_t bh = static_cast<int64_t>(b) * p.H + h;
  load_rows<D>(p, p.k, sK, b, hk, j0, cols, p.Nk);
  float corr[kHalfD];
#pragma unroll
  for (int e = 0; e < kHalfD; ++e) corr[e] = 0.0f;
  const int first = first_query_row(p, j0);
  for (int i0 = first / kBlockQ * kBlockQ; i0 < p.Nq; i0 += kBlockQ) {
    const int rows = min(kBlockQ, p.Nq - i0);
    __syncthreads();
    load_rows<D>(p, p.q, sQ, b, h, i0, rows, p.Nq);
    if (t < kBlockQ) {
      const bool in = t < rows;
      sL[t] = in ? p.lse[bh * p.Nq + i0 + t] : neg_inf();
      const float s = in ? p.psum[bh * p.Nq + i0 + t] : 0.0f;
      sC[t] = s > 0.0f ? p.rowsum[bh * p.Nq + i0 + t] / s : 0.0f;
    }
    __syncthreads();
    float pr[kCols];
    p_row<D>(p, sQ, sK, sL, r, half, i0, j0, rows, cols, pr);
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const float pb = kRound ? round_bf16(pr[c]) : pr[c];
      sW[r * (kBlockK + 1) + half * kCols + c] = pb * sC[r];
    }
    __syncthreads();
#pragma unroll
    for (int e = 0; e < kHalfD; ++e) {
      const int d = half * kHalfD + e;
      float a = corr[e];
      for (int ii = 0; ii < rows; ++ii) a = fmaf(sW[ii * (kBlockK + 1) + r], sQ[ii * (D + 1) + d], a);
      corr[e] = a;
    }
  }
  if (r >= cols) return;
  float* dka = p.dk_acc + (bh * p.Nk + j0 + r) * D;
#pragma unroll
  for (int e = 0; e < kHalfD; ++e) dka[half * kHalfD + e] -= corr[e];
}

template <int D>
constexpr size_t dk_sweep_smem_bytes() {
  return sizeof(float) * (kBlockK * (D + 1) + kBlockQ * (D + 1) + kBlockQ * (kBlockK + 1) + 2 * kBlockQ);
}

// dQ = bf16(scale (dQacc - c_i PK_i)); one thread per 4 elements of (B, Nq, H, D) (D % 4 == 0; the
// workspace regions are 16-byte aligned, the output 8-byte aligned: launch.cu checks).
template <bool kPWeighted>
__global__ void bwd_postprocess_dq_kernel(const KernelParams p) {
  const uint32_t idx = (blockIdx.x * blockDim.x + threadIdx.x) * 4u;
  if (idx >= static_cast<uint32_t>(p.B) * p.Nq * p.H * p.D) return;
  const auto [b, i, h, d] = decode_bnhd(idx, p.Nq, p.H, p.D);
  const int64_t row = (static_cast<int64_t>(b) * p.H + h) * p.Nq + i;
  float4 x = *reinterpret_cast<const float4*>(p.dq_acc + dq_acc_index(p, static_cast<int64_t>(b) * p.H + h, i, d));
  if (kPWeighted) {
    const float s = p.psum[row];
    if (s > 0.0f) {
      const float c = p.rowsum[row] / s;
      const float4 k = *reinterpret_cast<const float4*>(p.pk + row * p.D + d);
      x.x -= c * k.x, x.y -= c * k.y, x.z -= c * k.z, x.w -= c * k.w;
    }
  }
  store_bf16_vec<4>(p.dq + idx, {p.scale * x.x, p.scale * x.y, p.scale * x.z, p.scale * x.w});
}

// dK = bf16(scale sum_g dKacc), dV = bf16(sum_g dVacc) over the query heads g of a kv head, in head order; one
// thread per 4 elements. kSuffix (thresh-lowrank without causal masking): each head's dKacc first loses its uniform
// part, the head's total sum_i rest_i Q_i (its row of the suffix region; with causal masking
// thresh_dkv_causal_kernel in src/cuda/projection_tc.cuh takes this kernel's place).
template <bool kSuffix>
__global__ void bwd_postprocess_dkv_kernel(const KernelParams p) {
  const uint32_t idx = (blockIdx.x * blockDim.x + threadIdx.x) * 4u;
  if (idx >= static_cast<uint32_t>(p.B) * p.Nk * p.Hkv * p.D) return;
  const auto [b, j, hk, d] = decode_bnhd(idx, p.Nk, p.Hkv, p.D);
  const int group = p.H / p.Hkv;
  const bool with_dv = (p.dkv_direct & 1) == 0;  // v3.34 bit 1: the main kernel stored dV (bits 1 and 2: not run)
  float4 dk = make_float4(0.0f, 0.0f, 0.0f, 0.0f), dv = dk;
  for (int g = 0; g < group; ++g) {
    const int64_t bh = static_cast<int64_t>(b) * p.H + hk * group + g, row = bh * p.Nk + j;
    float4 a = *reinterpret_cast<const float4*>(p.dk_acc + row * p.D + d);
    if (kSuffix) {
      const float4 s = *reinterpret_cast<const float4*>(p.suffix + bh * p.D + d);
      a.x -= s.x, a.y -= s.y, a.z -= s.z, a.w -= s.w;
    }
    dk.x += a.x, dk.y += a.y, dk.z += a.z, dk.w += a.w;
    if (with_dv) {
      const float4 v = *reinterpret_cast<const float4*>(p.dv_acc + row * p.D + d);
      dv.x += v.x, dv.y += v.y, dv.z += v.z, dv.w += v.w;
    }
  }
  store_bf16_vec<4>(p.dk + idx, {p.scale * dk.x, p.scale * dk.y, p.scale * dk.z, p.scale * dk.w});
  if (with_dv) store_bf16_vec<4>(p.dv + idx, {dv.x, dv.y, dv.z, dv.w});
}

// v3.35: bwd_postprocess_dkv_kernel<true> where the main kernel stored dV (p.dkv_direct == 1: thresh-lowrank
// without causal masking, one query head per kv head, dK 16-byte aligned): dK = bf16(scale (dKacc - suffix)) alone,
// the same operations and bits. D is a constant (shifts for the index), there is no loop over query heads, and a
// thread takes 8 elements with one 16-byte store. The general kernel took 71 us for this at D = 128, N = 4k, where
// the dQ postprocess moves the same bytes in 55 (ncu, session 26: issue slots 78% busy, DRAM 45%).
template <int D>
__global__ void bwd_postprocess_dk_suffix_kernel(const KernelParams p) {
  static_assert(D % 8 == 0, "8 elements a thread");
  const uint32_t idx = (blockIdx.x * blockDim.x + threadIdx.x) * 8u;
  if (idx >= static_cast<uint32_t>(p.B) * p.Nk * p.H * D) return;
  const uint32_t rest = idx / D, d = idx % D, h = rest % static_cast<uint32_t>(p.H), bj = rest / p.H;
  const uint32_t j = bj % static_cast<uint32_t>(p.Nk), b = bj / p.Nk;
  const int64_t bh = static_cast<int64_t>(b) * p.H + h;
  const float* acc = p.dk_acc + (bh * p.Nk + j) * D + d;
  const float* suf = p.suffix + bh * D + d;
  const float4 a0 = *reinterpret_cast<const float4*>(acc), a1 = *reinterpret_cast<const float4*>(acc + 4);
  const float4 s0 = *reinterpret_cast<const float4*>(suf), s1 = *reinterpret_cast<const float4*>(suf + 4);
  const float x[8] = {a0.x - s0.x, a0.y - s0.y, a0.z - s0.z, a0.w - s0.w,
                      a1.x - s1.x, a1.y - s1.y, a1.z - s1.z, a1.w - s1.w};
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // 0 + x as the general kernel's sum over heads (a zero's sign included)
    const __nv_bfloat162 v =
        __floats2bfloat162_rn(p.scale * (0.0f + x[2 * i]), p.scale * (0.0f + x[2 * i + 1]));
    w[i] = *reinterpret_cast<const uint32_t*>(&v);
  }
  *reinterpret_cast<uint4*>(p.dk + idx) = make_uint4(w[0], w[1], w[2], w[3]);
}

}  // namespace gproj::cuda::detail
