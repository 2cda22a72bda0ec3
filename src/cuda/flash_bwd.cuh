// CUDA backward, reference version (v0): preprocess (B1 delta), main loop per key block over query blocks
// with BF16 rounding at B4, the P-weighted projection's statistics and dK sweep, and the postprocess.
// FP32 CUDA-core tiles; same tiles and rounding points as the CPU emulator. Exercised by tests/cuda/*.
#pragma once

#include "cuda/kernel_common.cuh"
#include "cuda/mma.cuh"  // (kLog2e)

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

// The same delta from BF16 O and dO with 16-byte aligned rows: a CTA stages 64 rows of each in shared memory
// with 16-byte loads (coalesced: a warp's load instruction covers two whole rows), then one thread per row sums
// them in the same order. Rows are padded to an odd word count (no bank conflicts). v3.45d (session 38): the rows in
// memory order and each row's offsets formed once (below); 41-45 µs at D = 128, N = 4k with 6 CTAs an SM, 72-75% of
// DRAM's peak (45-49 before; a register-only form without shared memory, v3.45b, took 47: 2 CTAs an SM by its
// registers and 4x the L2 requests; perf-notes, session 38, runs 4-6).
constexpr int kPreRows = 64, kPreThreads = 256;
// kApart: the same kernel, launched with its own preferred shared-memory carveout so that the SMs are reconfigured
// between it and gproj's main kernel (launch.cu: v3.40, v3.45d at D = 128, v3.45e at D = 64).
// kH16 (fp16-lowrank, docs/design-fp16-projection.md): O is the forward's FP16 copy p.o16 = fp16(O s_v) (dense (B,
// Nq, H, D)), delta = (sum_d dO_d o16_d) / s_v (the emulator's delta bit for bit: the scaling is exact), and |dO_i|
// goes to its head's max (p.dmax_bits, an atomic max of the float bits; zeroed before, as dQacc, whose tiles also
// take r_i), the bound the main kernel scales dS by.
// kDoS (kH16 with 1 / l on dO's side; after h16_dout_max_kernel below, which forms max |dO_i| per head): dOh =
// fp16(dO (1 / l) s_do) into p.doh ((B, Nq, H, D) dense), 1 / l = 2^(M - LSE log2e), M = ceil(LSE log2e), s_do =
// fp16_head_scale(2 max_i |dO_i|), and delta' = sum_d dOh_d o16_d (in s_v s_do / l units, the main kernel's dP''s),
// the same order.
template <int D, bool kApart = false, bool kH16 = false, bool kDoS = false>
__global__ void __launch_bounds__(kPreThreads) bwd_preprocess_vec_kernel(const KernelParams p) {
  static_assert(!kDoS || kH16, "1 / l on dO's side is a form of fp16-lowrank");
  constexpr int kWords = D / 2 + 1, kChunks = D / 8;
  __shared__ uint32_t so[kPreRows * kWords], sd[kPreRows * kWords];
  __shared__ int64_t base_o[kPreRows], base_d[kPreRows], out_row[kPreRows];
  __shared__ float s_dof[kDoS ? kPreRows : 1];  // kDoS: the row's factor (1 / l) s_do (exact: s_do a power of two)
  const int64_t total = static_cast<int64_t>(p.B) * p.H * p.Nq, first = static_cast<int64_t>(blockIdx.x) * kPreRows;
  // v3.45c: the CTA's rows in memory order ((b, i, h) with h fastest where O's heads are closer together than its
  // positions, the (B, N, H, D) layout; else (b, h, i)), so that its 64 rows are one stretch of memory; each row's
  // offsets and delta index formed once, by one thread (until v3.45c every 16-byte chunk's loop iteration divided
  // its 64-bit row index three times before its load).
  const auto coords = [&](int rr, int64_t& b, int64_t& i, int64_t& h) {  // row rr of the CTA: (b, i, h)
    const bool h_fast = p.o.s2 <= p.o.s1;
    const int inner = h_fast ? p.H : p.Nq, mid = h_fast ? p.Nq : p.H;
    const int64_t lin = min(first + rr, total - 1), q = lin / inner;
    b = q / mid;
    const int y = static_cast<int>(lin - q * inner), x = static_cast<int>(q - b * mid);
    i = h_fast ? x : y, h = h_fast ? y : x;
  };
  // kH16 (v3.45f, session 46): threads kPreRows .. 2 kPreRows - 1, idle until the chunk loop, find their row's head
  // and load its V scale, which lands during the loop and goes to shared memory after it. (Until v3.45f the row's
  // thread did this after its sum: a 64-bit division, three 32-bit ones and the load's round trip at the end of
  // the CTA, with 2 of its 8 warps still running.)
  // v3.45g (session 47): they also read the head's max |dO_i| as it stands (L2, not L1: __ldcg), and the row's
  // thread adds its own with an atomic only when it is larger. The max only grows, so a stale read costs an atomic,
  // never a wrong max; once the first CTAs have run, most rows skip it (until v3.45g every row sent one: B H Nq
  // atomics onto B H words).
  __shared__ int s_head[kH16 && !kDoS ? kPreRows : 1];
  __shared__ float s_inv_sv[kH16 && !kDoS ? kPreRows : 1];
  __shared__ unsigned s_seen[kH16 && !kDoS ? kPreRows : 1];
  [[maybe_unused]] int head = 0;
  [[maybe_unused]] float s_v = 1.0f;
  [[maybe_unused]] unsigned seen = 0;
  if constexpr (kH16 && !kDoS) {
    if (threadIdx.x >= kPreRows && threadIdx.x < 2 * kPreRows) {
      int64_t b, i, h;
      coords(threadIdx.x - kPreRows, b, i, h);
      head = static_cast<int>(b * p.H + h);
      s_v = p.fp16_scales[fp16_v_slot(p.B, p.H, p.Hkv, static_cast<int>(b), static_cast<int>(h / (p.H / p.Hkv)))];
      seen = __ldcg(p.dmax_bits + head);
    }
  }
  if (threadIdx.x < kPreRows) {
    int64_t b, i, h;
    coords(threadIdx.x, b, i, h);
    base_o[threadIdx.x] = kH16 ? ((b * p.Nq + i) * p.H + h) * D : b * p.o.s0 + i * p.o.s1 + h * p.o.s2;
    base_d[threadIdx.x] = b * p.dout.s0 + i * p.dout.s1 + h * p.dout.s2;
    out_row[threadIdx.x] = (b * p.H + h) * p.Nq + i;
    if constexpr (kDoS) {
      const float l2 = p.lse[(b * p.H + h) * p.Nq + i] * kLog2e;
      const float inv_l = l2 == neg_inf() ? 0.0f : exp2f(ceilf(l2) - l2);
      s_dof[threadIdx.x] = inv_l * fp16_head_scale(2.0f * __uint_as_float(p.dmax_bits[b * p.H + h]));
    }
  }
  __syncthreads();
  for (int x = threadIdx.x; x < kPreRows * kChunks; x += kPreThreads) {
    const int r = x / kChunks, c = x % kChunks;
    if (first + r >= total) continue;
    const auto* o = kH16 ? reinterpret_cast<const __nv_bfloat16*>(p.o16) + base_o[r]
                         : static_cast<const __nv_bfloat16*>(p.o.data) + base_o[r];  // (kH16: FP16 bits)
    const auto* d = static_cast<const __nv_bfloat16*>(p.dout.data) + base_d[r];
    const uint4 vo = reinterpret_cast<const uint4*>(o)[c];
    uint4 vd = reinterpret_cast<const uint4*>(d)[c];
    if constexpr (kDoS) {  // dOh's chunk: fp16(dO (1 / l) s_do), to p.doh and (for delta') to shared memory
      const float f = s_dof[r];
      for (uint32_t* w : {&vd.x, &vd.y, &vd.z, &vd.w}) {
        const __half2 hh = __floats2half2_rn(__uint_as_float(*w << 16) * f, __uint_as_float(*w & 0xFFFF0000u) * f);
        *w = *reinterpret_cast<const uint32_t*>(&hh);
      }
      reinterpret_cast<uint4*>(p.doh + base_o[r])[c] = vd;
    }
    uint32_t* to = so + r * kWords + c * 4;
    uint32_t* td = sd + r * kWords + c * 4;
    to[0] = vo.x, to[1] = vo.y, to[2] = vo.z, to[3] = vo.w;
    td[0] = vd.x, td[1] = vd.y, td[2] = vd.z, td[3] = vd.w;
  }
  if constexpr (kH16 && !kDoS) {
    if (threadIdx.x >= kPreRows && threadIdx.x < 2 * kPreRows) {
      s_head[threadIdx.x - kPreRows] = head;
      s_inv_sv[threadIdx.x - kPreRows] = 1.0f / s_v;  // exact: a power of two
      s_seen[threadIdx.x - kPreRows] = seen;
    }
  }
  __syncthreads();
  const int r = threadIdx.x;
  if (r >= kPreRows || first + r >= total) return;
  float acc = 0.0f, sq = 0.0f;
#pragma unroll 8
  for (int w = 0; w < D / 2; ++w) {
    const uint32_t wo = so[r * kWords + w], wd = sd[r * kWords + w];
    float o0, o1;
    if constexpr (kH16) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&wo));
      o0 = f.x, o1 = f.y;
    } else {
      o0 = __uint_as_float(wo << 16), o1 = __uint_as_float(wo & 0xffff0000u);
    }
    float d0 = __uint_as_float(wd << 16), d1 = __uint_as_float(wd & 0xffff0000u);
    if constexpr (kDoS) {  // (dOh: FP16 bits)
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&wd));
      d0 = f.x, d1 = f.y;
    }
    acc = __fadd_rn(acc, __fmul_rn(d0, o0));
    acc = __fadd_rn(acc, __fmul_rn(d1, o1));
    if constexpr (kH16 && !kDoS) sq = fmaf(d1, d1, fmaf(d0, d0, sq));
  }
  if constexpr (kDoS) {
    p.delta[out_row[r]] = acc;  // delta' (s_v s_do / l units)
  } else if constexpr (kH16) {
    p.delta[out_row[r]] = acc * s_inv_sv[r];
    const unsigned bits = __float_as_uint(sqrtf(sq));  // (non-negative floats order as their bits)
    if (bits > s_seen[r]) atomicMax(p.dmax_bits + s_head[r], bits);
  } else {
    p.delta[out_row[r]] = acc;
  }
}

// fp16-lowrank with 1 / l on dO's side, the preprocess's first pass: max_i |dO_i| per head into p.dmax_bits (an
// atomic max of float bits, zeroed before), token-major as the conversion pass's absmax (convert_fp16.cuh): a
// thread keeps one 16-byte chunk c of the (B, Nq, H, D) rows (its head c / (D / 8)) and walks kDoutMaxTokens
// tokens, a row's norm summed over the head's D / 8 lanes. (Run 6's first pass, bwd_preprocess_vec_kernel's one
// thread a row through shared memory without O, took 36 us for these 64 MB at D = 128, N = 4k under ncu, session 44.)
// grid (ceil(H D / 8 / blockDim.x), ceil(Nq / kDoutMaxTokens), B), blockDim.x = min(256, H D / 8 rounded up to 32).
constexpr int kDoutMaxTokens = 32;
template <int D>
__global__ void __launch_bounds__(256) h16_dout_max_kernel(const KernelParams p) {
  constexpr int hc = D / 8;
  static_assert(32 % hc == 0, "a head's chunks are lanes of one warp");
  const int b = blockIdx.z, n0 = blockIdx.y * kDoutMaxTokens, cpr = p.H * hc;
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const bool in = c < cpr;  // (whole head groups: blockDim and cpr are multiples of hc)
  const auto* base = static_cast<const __nv_bfloat16*>(p.dout.data) + b * p.dout.s0 + (c / hc) * p.dout.s2 +
                     (c % hc) * 8;
  const int tokens = min(kDoutMaxTokens, p.Nq - n0);
  float nmax = 0.0f;
  constexpr int kPer = 8;
  for (int t0 = 0; t0 < tokens; t0 += kPer) {
    uint4 w[kPer];
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      w[u] = in && t0 + u < tokens
                 ? *reinterpret_cast<const uint4*>(base + static_cast<int64_t>(n0 + t0 + u) * p.dout.s1)
                 : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kPer; ++u) nmax = fmaxf(nmax, lanes_row_norm(bf16_chunk_sumsq(w[u]), hc));
  }
  if (in && (threadIdx.x & (hc - 1)) == 0) atomicMax(p.dmax_bits + b * p.H + c / hc, __float_as_uint(nmax));
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

// fp16-lowrank's dQ post-pass (docs/design-fp16-projection.md, build step 5): dQacc is in sigma s_k units (FP16 dS
// times Kh), r_i (after each tile's rows, kH16DqTileFloats) in sigma's; with the forward's record of the row
// (p.fwd_stats: P (K U) / l in columns 0-5, s_i in kStatS) and K's basis p.u,
// dQ = bf16(scale (dQacc / s_k - (r_i / s_i) (P (K U))_i U^T) / sigma), the CPU emulator's order.
// It also leaves r_i / sigma in p.rowsum and s_i in p.psum (the audit's row sums).
// A CTA takes kH16DqRows rows of 8 heads, each warp one head's rows, each lane 4 columns, whose 24 values of U it
// holds in registers, so that the CTA writes 8 heads' 2 KB of each row together (dQ's (B, N, H, D) layout).
// v5: a warp first stages its rows' records in shared memory and forms each row's c = r_i / s_i on the lane of that
// row (one IEEE division a row, not one a lane), then runs its rows in groups of 4 with the next group's dQacc loads
// in flight. (v1, one thread per 4 elements re-reading U and the record per element: 1058 us at D = 128, N = 4k
// under ncu, session 43 run 3; v2-v2.3, 64 rows of one head a CTA: 123-142 us against baseline's 60; v3, 8 rows a
// warp all loaded first, 150 registers, one CTA an SM: 140 us, run 10, ~110 instructions for each 512 bytes of
// dQacc against baseline's ~30: the warp's set-up, 8 IEEE divisions a lane, and 2 warps a scheduler to hide them;
// v3.1, 2 rows a warp: 222 us; v4 / v4.1, a warp a row with U in shared memory: 212 us.) grid (ceil(Nq /
// kH16DqRows), ceil(H / 8), B), 256 threads, D = 128; needs dq_tiled (v3.2's dQacc tiles).
constexpr int kH16DqRows = 32, kH16DqHeads = 8, kH16DqGroup = 4;
// D = 64 or 128: a lane holds C = D / 32 columns (2 or 4) of a row.
template <int D>
__global__ void __launch_bounds__(256, 2) h16_dq_kernel(const KernelParams p) {
  constexpr int R = kH16DqRows, G = kH16DqGroup, C = D / 32;
  static_assert(R == 32, "one row a lane for the records and c");
  static_assert(C == 2 || C == 4, "D = 64 or 128");
  __shared__ float4 s_rec[kH16DqHeads][R][2];  // each row's record: P (K U) / l in 0-5, s_i in 6 (kStatS)
  __shared__ float s_c[kH16DqHeads][R];        // r_i / s_i
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, d = lane * C;
  const int b = blockIdx.z, h = blockIdx.y * kH16DqHeads + warp;
  if (h >= p.H) return;  // (warp-uniform; no CTA barrier below)
  const int64_t bh = static_cast<int64_t>(b) * p.H + h;
  const int i0 = blockIdx.x * R, rows = min(R, p.Nq - i0);
  const float* __restrict__ rec_base = p.fwd_stats + (bh * p.Nq + i0) * kLowRank;
  // dQacc's v3.15 tiles (the v3.2 main kernel's; v3.17's at D = 64): 16 rows of 64 columns a tile, 4 KB
  const int64_t groups16 = (p.Nq + 15) / 16;
  const float* __restrict__ tiles = p.dq_acc + ((bh * groups16 + i0 / 16) * (D / 64) + (d >> 6)) * kH16DqTileFloats;
  __nv_bfloat16* __restrict__ out = p.dq + ((static_cast<int64_t>(b) * p.Nq + i0) * p.H + h) * D + d;
  struct Cols {
    float v[C];
  };
  auto load_x = [&](int r) {  // row r's C columns d .. d + C - 1 (zeros past the last row)
    const float* at = tiles + (r >> 4) * (D / 64) * kH16DqTileFloats + dq_tile_word(r & 15, d & 63);
    Cols x{};
    if (r < rows) {
      if constexpr (C == 4) {
        const float4 f = *reinterpret_cast<const float4*>(at);
        x.v[0] = f.x, x.v[1] = f.y, x.v[2] = f.z, x.v[3] = f.w;
      } else {
        const float2 f = *reinterpret_cast<const float2*>(at);
        x.v[0] = f.x, x.v[1] = f.y;
      }
    }
    return x;
  };
  Cols x[2][G];
#pragma unroll
  for (int r = 0; r < G; ++r) x[0][r] = load_x(r);
  // the records, 1 KB a warp: lane l takes float4 l and l + 32 (rows l / 2 and 16 + l / 2)
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int q = lane + 32 * k;
    if (q / 2 < rows) s_rec[warp][q / 2][q & 1] = *reinterpret_cast<const float4*>(rec_base + q * 4);
  }
  // r_i: the words after row lane's column-block tiles (v3.2-h16c; kernel_common.cuh). D = 128: each column
  // block's tile holds r_i over the keys of the warpgroup that sent it, summed here; D = 64 (v3.17): one column
  // block, into which both warpgroups' tiles were reduce-added.
  float r_i = 0.0f;
  if (lane < rows) {
    const float* rt = p.dq_acc + (bh * groups16 + i0 / 16 + (lane >> 4)) * (D / 64) * kH16DqTileFloats + 1024;
#pragma unroll
    for (int c = 0; c < D / 64; ++c) r_i += rt[c * kH16DqTileFloats + (lane & 15)];
  }
  const int hk = h / (p.H / p.Hkv);
  const float* u = p.u + (static_cast<int64_t>(b) * p.Hkv + hk) * D * kLowRank;
  float uu[C][kTailRank];  // U's rows d .. d + C - 1, columns 0-5
#pragma unroll
  for (int e = 0; e < C; ++e) {
    const float4 lo = *reinterpret_cast<const float4*>(u + (d + e) * kLowRank);
    const float4 hi = *reinterpret_cast<const float4*>(u + (d + e) * kLowRank + 4);
    uu[e][0] = lo.x, uu[e][1] = lo.y, uu[e][2] = lo.z, uu[e][3] = lo.w, uu[e][4] = hi.x, uu[e][5] = hi.y;
  }
  const float inv_sk = 1.0f / p.fp16_scales[fp16_k_slot(p.B, p.H, p.Hkv, b, hk)];
  // out of sigma's units, sigma as the main kernel forms it (exact: a power of two)
  const float unscale = 1.0f / fp16_ds_scale(__uint_as_float(p.dmax_bits[bh]),
                                             p.fp16_scales[fp16_vnorm_slot(p.B, p.H, p.Hkv, b, hk)]);
  __syncwarp();
  if (lane < rows) {
    const float s_i = s_rec[warp][lane][1].z;  // (kStatS = 6)
    s_c[warp][lane] = s_i > 0.0f ? r_i / s_i : 0.0f;
    p.rowsum[bh * p.Nq + i0 + lane] = r_i * unscale;
    p.psum[bh * p.Nq + i0 + lane] = s_i;
  }
  __syncwarp();
  auto run_group = [&](const Cols(&xs)[G], int g) {
#pragma unroll
    for (int r = 0; r < G; ++r) {
      const int row = g * G + r;
      if (row >= rows) break;
      const float4 ra = s_rec[warp][row][0], rb = s_rec[warp][row][1];
      const float rec[kTailRank] = {ra.x, ra.y, ra.z, ra.w, rb.x, rb.y};
      float acc[C];
#pragma unroll
      for (int e = 0; e < C; ++e) acc[e] = xs[r].v[e] * inv_sk;
      if (rb.z > 0.0f) {  // s_i > 0 (kStatS = 6)
        const float c = s_c[warp][row];
#pragma unroll
        for (int e = 0; e < C; ++e) {
          float back = 0.0f;  // (P K U)_i U^T, column d + e
#pragma unroll
          for (int t = 0; t < kTailRank; ++t) back += rec[t] * uu[e][t];
          acc[e] -= c * back;
        }
      }
      float o[C];
#pragma unroll
      for (int e = 0; e < C; ++e) o[e] = p.scale * (acc[e] * unscale);
      store_bf16_vec<C>(out + static_cast<int64_t>(row) * p.H * D, o);
    }
  };
  // groups in pairs, each group's loads issued before the previous group's arithmetic (x[0] / x[1] named, not
  // indexed by a runtime value, so that they stay in registers)
#pragma unroll 1
  for (int g = 0; g * G < rows; g += 2) {
#pragma unroll
    for (int r = 0; r < G; ++r) x[1][r] = load_x((g + 1) * G + r);
    run_group(x[0], g);
    if ((g + 1) * G >= rows) break;
#pragma unroll
    for (int r = 0; r < G; ++r) x[0][r] = load_x((g + 2) * G + r);
    run_group(x[1], g + 1);
  }
}
static_assert(kStatS == 6 && kTailRank == 6, "h16_dq_kernel reads the record as columns 0-5 and s_i at 6");

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
