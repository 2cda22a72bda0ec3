// fp16-lowrank's conversion pass (docs/design-fp16-projection.md, build step 2; its forward runs it): each head's
// max |x| of q, k and v, its power of two s (max |x| s in [2^14, 2^15), as the CPU emulator's cpu::fp16_head_scale),
// then FP16 copies x s rounded to nearest even: qh as q, kht = K^T per (b, kv head) (keys contiguous: the
// backward's K-major B for dQ and MN-major A for S^T), vh as v. Launched by launch.cu
// (convert_fp16_copies); exercised by tests/cuda/convert_fp16_test.cc against the CPU's round_fp16.
#pragma once

#include <cuda_fp16.h>

#include "cuda/kernel_common.cuh"

namespace gproj::cuda::detail {

struct ConvertParams {
  Strided q, k, v;        // BF16 (B, N, H, D), D contiguous
  __half* qh;             // (B, Nq, H, D) dense
  __half* kht;            // (B, Hkv, D, ld), ld = Nk rounded up to a multiple of 8 (fp16_kht_ld), keys Nk.. zero
  __half* vh;             // (B, Nk, Hkv, D) dense
  unsigned int* maxbits;  // per head, max |x| as float bits (non-negative floats order as their bits): q's B H
                          // heads (b H + h), then k's B Hkv, then v's B Hkv (b Hkv + hk); zeroed before
  float* scales;          // the same layout: s per head
  int B, Nq, Nk, H, Hkv, D;
};

constexpr int kConvertThreads = 256, kConvertTokens = 32;

// v2 (session 43; with v1, one element per thread and a launch per tensor, the whole forward of fp16-lowrank took
// 1.79 ms against gproj-fs's 1.28 at D = 128, N = 4k, H200): 16-byte loads and stores (the rows are 16-byte aligned:
// launch.cu checks), every head's max of q, k and v in one launch, and max |x| on the BF16 bits as 16-bit unsigned
// integers (non-negative floats order as their bits), NaN ignored as the CPU's fmax does.
// v3 (session 44): token-major. A thread keeps one 16-byte chunk c of a token's row (heads x D, H D / 8 chunks) and
// walks kConvertTokens tokens, so its head c / (D / 8) and scale are fixed, a CTA reads whole 512-byte pieces of
// consecutive rows, and no index needs a division per chunk. (v2 took a CTA per 64 rows of one head, 256-byte
// pieces 4 KB apart: the absmax 100 us for 192 MB at D = 128, N = 4k under ncu; the plain copy a 64-bit division
// chain per chunk: 78 us for q.) A head's chunks are D / 8 consecutive lanes (D / 8 divides 32: D = 64, 128, 256).

// The launch shape of a token-major kernel over rows of `cpr` chunks: threads (a multiple of 32 up to
// kConvertThreads) and the CTAs a row takes.
struct ChunkShape {
  int threads, blocks;
};
inline ChunkShape chunk_shape(int cpr) {
  const int threads = cpr >= kConvertThreads ? kConvertThreads : (cpr + 31) / 32 * 32;
  return {threads, (cpr + threads - 1) / threads};
}

// maxbits[slot] = max |x| of each head (an atomic max over the CTAs), for q, k and v: grid (chunk_shape(heads D /
// 8).blocks, ceil(max(Nq, Nk) / kConvertTokens), 3 B), blockIdx.z = tensor * B + b (0 q, 1 k, 2 v).
__global__ void __launch_bounds__(kConvertThreads) fp16_absmax_kernel(const ConvertParams p) {
  const int tensor = blockIdx.z / p.B, b = blockIdx.z % p.B;
  const Strided x = tensor == 0 ? p.q : tensor == 1 ? p.k : p.v;
  const int n = tensor == 0 ? p.Nq : p.Nk, heads = tensor == 0 ? p.H : p.Hkv;
  const int n0 = blockIdx.y * kConvertTokens;
  if (n0 >= n) return;
  const int hc = p.D / 8, cpr = heads * hc, c = blockIdx.x * blockDim.x + threadIdx.x;
  const bool in = c < cpr;  // (a whole head group is in or out: cpr and blockDim are multiples of hc)
  const int h = c / hc;
  const int slot = tensor == 0 ? b * p.H + h : p.B * p.H + (tensor - 1) * p.B * p.Hkv + b * p.Hkv + h;
  const bool norms = tensor == 2;  // v also gives its largest row norm |V_j| (fp16-lowrank's dS scale)
  const auto* base = static_cast<const __nv_bfloat16*>(x.data) + b * x.s0 + (c / hc) * x.s2 + (c % hc) * 8;
  const int tokens = min(kConvertTokens, n - n0);
  uint32_t m = 0;      // two BF16 magnitudes
  float nmax = 0.0f;  // v: the largest row norm of this head
  constexpr int kPer = 8;  // tokens in flight a thread
  for (int t0 = 0; t0 < tokens; t0 += kPer) {
    uint4 w[kPer];
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      w[u] = in && t0 + u < tokens ? *reinterpret_cast<const uint4*>(base + static_cast<int64_t>(n0 + t0 + u) * x.s1)
                                   : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      for (uint32_t v : {w[u].x, w[u].y, w[u].z, w[u].w}) {
        v &= 0x7FFF7FFFu;
        v &= ~__vcmpgtu2(v, 0x7F807F80u);  // NaN halves -> 0
        m = __vmaxu2(m, v);
      }
      if (norms) {  // (uniform per CTA) the token's row of this head: a sum over the head's hc lanes
        nmax = fmaxf(nmax, lanes_row_norm(bf16_chunk_sumsq(w[u]), hc));
      }
    }
  }
  uint32_t bits = max(m & 0xFFFFu, m >> 16) << 16;  // the largest as float bits
  for (int o = 1; o < hc; o <<= 1) bits = max(bits, __shfl_xor_sync(0xffffffffu, bits, o));
  if (in && (threadIdx.x & (hc - 1)) == 0) {
    atomicMax(p.maxbits + slot, bits);
    if (norms) atomicMax(p.maxbits + slot + p.B * p.Hkv, __float_as_uint(nmax));
  }
}

// scales[i] from maxbits[i], i < scale_count: fp16_head_scale (kernel_common.cuh, the CPU's cpu::fp16_head_scale).
// From scale_count to count: v's row norms, as they are.
__global__ void fp16_head_scale_kernel(const unsigned int* maxbits, float* scales, int scale_count, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const float m = __uint_as_float(maxbits[i]);
  scales[i] = i >= scale_count ? m : fp16_head_scale(m);
}

// Eight BF16 (one 16-byte chunk) times s, rounded to FP16 (RNE): one 16-byte chunk of the copy.
__device__ __forceinline__ uint4 fp16_chunk(uint4 w, float s) {
  uint4 o;
  uint32_t* out = reinterpret_cast<uint32_t*>(&o);
  const uint32_t in[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2 h = __floats2half2_rn(__uint_as_float(in[i] << 16) * s, __uint_as_float(in[i] & 0xFFFF0000u) * s);
    out[i] = *reinterpret_cast<const uint32_t*>(&h);
  }
  return o;
}

// out (B, N, heads, D) dense = fp16(x s_head): token-major as fp16_absmax_kernel, grid (chunk_shape(heads D /
// 8).blocks, ceil(N / kConvertTokens), B).
__global__ void __launch_bounds__(kConvertThreads)
    fp16_convert_kernel(Strided x, int N, int heads, int D, const float* scales, __half* out) {
  const int b = blockIdx.z, n0 = blockIdx.y * kConvertTokens, hc = D / 8, cpr = heads * hc;
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cpr) return;
  const float s = scales[b * heads + c / hc];
  const auto* base = static_cast<const __nv_bfloat16*>(x.data) + b * x.s0 + (c / hc) * x.s2 + (c % hc) * 8;
  uint4* dst = reinterpret_cast<uint4*>(out) + (static_cast<int64_t>(b) * N + n0) * cpr + c;
  const int tokens = min(kConvertTokens, N - n0);
  constexpr int kPer = 8;
  for (int t0 = 0; t0 < tokens; t0 += kPer) {
    uint4 w[kPer];
#pragma unroll
    for (int u = 0; u < kPer; ++u)
      if (t0 + u < tokens) w[u] = *reinterpret_cast<const uint4*>(base + static_cast<int64_t>(n0 + t0 + u) * x.s1);
#pragma unroll
    for (int u = 0; u < kPer; ++u)
      if (t0 + u < tokens) dst[static_cast<int64_t>(t0 + u) * cpr] = fp16_chunk(w[u], s);
  }
}

// kht (B, Hkv, D, ld) = fp16(K s_head)^T, ld = Nk rounded up to a multiple of 8 (keys Nk.. zero). v3 (session 44;
// v2, a 64 x 64 tile through shared memory with 2-byte stores 8 ways in conflict, 57 us for 128 MB at D = 128, N =
// 4k under ncu): a thread converts 8 keys x 8 d (one 16-byte chunk of 8 key rows) and transposes them in registers
// (one byte permutation a 32-bit word), then stores 8 d-rows of 8 keys (16 bytes each). A warp's 32 tasks are 4
// chunks x 8 key groups, so that its loads read 64-byte pieces of 8 rows and its stores write 128 contiguous bytes
// of each d-row. grid (ceil(Nk / kTransposeKeys), 1, B Hkv), 256 threads.
constexpr int kTransposeKeys = 128;
__global__ void __launch_bounds__(kConvertThreads)
    fp16_convert_transpose_kernel(Strided k, int Nk, int ld, int Hkv, int D, const float* scales, __half* kht) {
  const int bh = blockIdx.z, b = bh / Hkv, hk = bh % Hkv, j0 = blockIdx.x * kTransposeKeys, hc = D / 8;
  const float s = scales[bh];
  const auto* base = static_cast<const __nv_bfloat16*>(k.data) + b * k.s0 + hk * k.s2;
  const int tasks = (kTransposeKeys / 8) * hc;  // (hc a multiple of 4: D = 64, 128 or 256)
  for (int task = threadIdx.x; task < tasks; task += blockDim.x) {
    const int lane = task & 31, w = task >> 5, quads = hc / 4;
    const int c = (w % quads) * 4 + (lane & 3), g = (w / quads) * 8 + (lane >> 2);
    const int j = j0 + g * 8;
    if (j >= ld) continue;
    uint4 in[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const uint4 x = j + u < Nk ? *reinterpret_cast<const uint4*>(base + static_cast<int64_t>(j + u) * k.s1 + c * 8)
                                 : make_uint4(0, 0, 0, 0);
      in[u] = fp16_chunk(x, s);
    }
    // out[i], d = 8 c + i: word m holds keys 2m (low half) and 2m + 1 of in[2m], in[2m + 1]'s half i
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      uint32_t o[4];
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const uint32_t lo = reinterpret_cast<const uint32_t*>(&in[2 * m])[i / 2];
        const uint32_t hi = reinterpret_cast<const uint32_t*>(&in[2 * m + 1])[i / 2];
        o[m] = __byte_perm(lo, hi, (i & 1) ? 0x7632 : 0x5410);
      }
      *reinterpret_cast<uint4*>(kht + (static_cast<int64_t>(bh) * D + c * 8 + i) * ld + j) =
          make_uint4(o[0], o[1], o[2], o[3]);
    }
  }
}

}  // namespace gproj::cuda::detail
