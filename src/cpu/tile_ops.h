// Element-wise tile operations of the CPU emulator written so the compiler vectorises them: exp and the
// BF16 rounding of rows. Exercised by tests/cpu/tile_ops_test.cc (accuracy of exp_fp32 against double).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "gproj/bf16.h"

namespace gproj::cpu {

// exp(x) in FP32 within 2 ulp of the correctly rounded value for x in [-87.33, 88.72]; 0 below that range
// (flush-to-zero, as the GPU's ex2.approx.ftz does), +Inf above, NaN for NaN. Cody-Waite reduction
// x = n ln2 + r, |r| <= ln2/2, and a degree-7 Taylor polynomial (truncation 5e-9 relative). glibc's expf
// would be as accurate but is not vectorised without -ffast-math, which this project never uses.
inline float exp_fp32(float x) {
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x / ln2), |n| < 2^22
  float r = x - n * 0.693145751953125f;                                    // ln2 high part (exact product)
  r = r - n * 1.428606765330187045e-06f;                                   // ln2 low part
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t bits;
  std::memcpy(&bits, &p, sizeof bits);
  bits += static_cast<int32_t>(n) * (1 << 23);
  float y;
  std::memcpy(&y, &bits, sizeof y);
  y = x < -87.33654475f ? 0.0f : y;
  y = x > 88.72283906f ? __builtin_inff() : y;
  return x != x ? x : y;
}

// s[j] = exp(s[j] - m) for j < n.
inline void exp_sub_row(float* __restrict s, int n, float m) {
#pragma omp simd
  for (int j = 0; j < n; ++j) s[j] = exp_fp32(s[j] - m);
}

// d[j] = bf16(s[j]) as float for j < n (round to nearest even; inputs here are finite).
inline void round_bf16_row(float* d, const float* s, int n) {  // d may equal s
#pragma omp simd
  for (int j = 0; j < n; ++j) {
    uint32_t u;
    std::memcpy(&u, &s[j], sizeof u);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    std::memcpy(&d[j], &u, sizeof u);
  }
}

// The value a float takes after one trip through IEEE binary16 (round to nearest even; subnormals below 2^-14 on
// the grid of 2^-24; magnitudes from 65520 up become Inf; NaN stays NaN). Projection::kFp16LowRank's rounding
// points: the forward's P^, dS, and the FP16 copies of Q, K, V and K U.
inline float round_fp16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint32_t sign = u & 0x80000000u, mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u) return x;  // NaN
  if (mag >= 0x477ff000u) {         // 65520 = 65504 + half a step: rounds (to even) past the largest binary16
    const uint32_t inf = sign | 0x7f800000u;
    float y;
    std::memcpy(&y, &inf, sizeof y);
    return y;
  }
  if (mag < 0x38800000u) {  // below 2^-14: the subnormal grid, 2^-24; the float sum rounds to nearest even
    float a;
    std::memcpy(&a, &mag, sizeof a);
    const float q = (a * 16777216.0f + 12582912.0f) - 12582912.0f;  // rint(a 2^24), exact: a 2^24 < 2^10
    float y = q * 5.9604644775390625e-08f;                          // 2^-24
    uint32_t v;
    std::memcpy(&v, &y, sizeof v);
    v |= sign;
    std::memcpy(&y, &v, sizeof y);
    return y;
  }
  u = (mag + 0xfffu + ((mag >> 13) & 1u)) & 0xffffe000u;  // 11 significant bits
  u |= sign;
  float y;
  std::memcpy(&y, &u, sizeof y);
  return y;
}

// fp16-lowrank's per-head scale of an FP16 copy: the power of two s with max_abs s in [2^14, 2^15), so that the
// head's largest value keeps FP16's 11 bits, none overflows, and values down to 2^-28 of the largest stay normal.
// The exponent is kept within +-126 (s and 1/s finite normal floats); 1 for an all-zero or non-finite max.
inline float fp16_head_scale(float max_abs) {
  if (!(max_abs > 0.0f) || !std::isfinite(max_abs)) return 1.0f;
  int e = 0;
  std::frexp(max_abs, &e);  // max_abs in [2^(e-1), 2^e)
  const int a = 15 - e;
  return std::ldexp(1.0f, a < -126 ? -126 : a > 126 ? 126 : a);
}

// fp16-lowrank's FP16 copy of K U (the forward's statistics operand): |(K bf16(U))_jc| <= max |K| ||bf16(U)_c||_1
// <= max |K| sqrt(D) (1 + 2^-8) for orthonormal columns of U, so K's head scale over 2^c with 2^c >= sqrt(D) (1 +
// 2^-8) keeps every value below 2^15 without a pass over K U for its max (the kernels form the scale from K's
// alone). Values below the largest by more than ~2^-25 become FP16 subnormals: contributions below P's rounding.
inline float fp16_ku_scale(float k_scale, int D) {
  int c = 0;
  while (std::ldexp(1.0, 2 * c) < D * (1.0 + 1.0 / 256) * (1.0 + 1.0 / 256)) ++c;  // 4^c >= D (1 + 2^-8)^2
  return std::fmax(std::ldexp(k_scale, -c), std::ldexp(1.0f, -126));
}

// fp16-lowrank's dS scale: sigma = 2^(14 - ceil(log2 bound)), bound = 2 dmax vmax (dmax = max_i |dO_i|, vmax = max_j
// |V_j|, so |sigma dS_ij| <= 2^14 since |dS_ij| <= P_ij |dO_i| (|V_j| + |O_i|) <= bound). ceil(log2) exactly, from
// the bound's exponent and mantissa (std::log2 in float rounds to an integer just above a power of two); the exponent
// within +-126 (sigma and 1 / sigma finite normal floats; an infinite bound gives 2^-126); 1 for a zero bound. The
// kernels' fp16_ds_scale (src/cuda/kernel_common.cuh) is the same formula.
inline float fp16_ds_scale(float dmax, float vmax) {
  const float bound = 2.0f * dmax * vmax;
  if (!(bound > 0.0f)) return 1.0f;
  int c = 140, e = 0;
  if (std::isfinite(bound)) c = std::frexp(bound, &e) == 0.5f ? e - 1 : e;  // bound = m 2^e, m in [0.5, 1)
  return std::ldexp(1.0f, std::clamp(14 - c, -126, 126));
}

inline float max_abs(const float* x, size_t n) {
  float m = 0.0f;
  for (size_t i = 0; i < n; ++i) m = std::fmax(m, std::fabs(x[i]));
  return m;
}

// x[i] = fp16(x[i] s) / s for i < n, s a power of two: the values an FP16 copy scaled by s holds, in x's units (the
// scaling is exact, so the emulator's FP32 products give what scaled FP16 operands give, unscaled).
inline void round_fp16_scaled(float* x, size_t n, float s) {
  const float inv = 1.0f / s;
  for (size_t i = 0; i < n; ++i) x[i] = round_fp16(x[i] * s) * inv;
}

// The same with the head's own scale, s = fp16_head_scale(max |x|).
inline void round_fp16_head(float* x, size_t n) { round_fp16_scaled(x, n, fp16_head_scale(max_abs(x, n))); }

}  // namespace gproj::cpu
