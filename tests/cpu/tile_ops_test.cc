// Accuracy of the vectorised exp_fp32 against double-precision exp, round_bf16_row against bf16, and round_fp16
// against binary16 values decoded by hand.
// Part of cpu_tests (ctest).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "cpu/tile_ops.h"

namespace gproj::cpu {
namespace {

double ulp_error(float got, double want) {
  const float wf = static_cast<float>(want);
  const double ulp = std::nextafter(wf, std::numeric_limits<float>::infinity()) - wf;
  return std::fabs(got - want) / ulp;
}

TEST(TileOps, ExpWithinTwoUlpOverTheNormalRange) {
  double worst = 0, worst_x = 0;
  // Every 97th float from -87.3 to 88.7 (about 25 million points tested would be slow; this is ~2.2 million).
  float lo = -87.33f, hi = 88.72f;
  uint32_t a, b;
  for (float x = lo; x < hi; x = std::nextafter(x, hi)) {
    const double e = ulp_error(exp_fp32(x), std::exp(static_cast<double>(x)));
    if (e > worst) worst = e, worst_x = x;
    std::memcpy(&a, &x, 4);
    b = a + (x < 0 ? -97u : 97u);
    float nx;
    std::memcpy(&nx, &b, 4);
    if (x < 0 && nx > 0) nx = 0.0f;
    if (!(nx > x)) nx = std::nextafter(x, hi);
    x = std::nextafter(nx, lo);
  }
  std::printf("  worst exp_fp32 error %.3f ulp at x = %.9g\n", worst, worst_x);
  EXPECT_LE(worst, 2.0);
}

TEST(TileOps, ExpEdgeValues) {
  EXPECT_EQ(exp_fp32(0.0f), 1.0f);
  EXPECT_EQ(exp_fp32(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(exp_fp32(-100.0f), 0.0f);  // flush to zero below the normal range
  EXPECT_TRUE(std::isinf(exp_fp32(89.0f)));
  EXPECT_TRUE(std::isnan(exp_fp32(std::nanf(""))));
}

TEST(TileOps, RoundRowMatchesBf16) {
  float s[64], d[64];
  for (int i = 0; i < 64; ++i) s[i] = std::ldexp(1.0f + i / 64.0f + 1e-3f * i, i % 11 - 5) * (i % 2 ? -1 : 1);
  round_bf16_row(d, s, 64);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(d[i], round_bf16(s[i])) << i;
}

// The binary16 value of half-precision bits h (sign, 5 exponent bits, 10 fraction bits), decoded by hand.
double half_value(uint16_t h) {
  const int e = (h >> 10) & 31, f = h & 1023;
  const double mag = e == 0 ? std::ldexp(f, -24) : e == 31 ? (f ? NAN : INFINITY) : std::ldexp(1024 + f, e - 25);
  return (h & 0x8000) ? -mag : mag;
}

TEST(TileOps, RoundFp16KeepsEveryHalfAndRoundsMidpointsToEven) {
  int checked = 0;
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // every finite non-negative half; the sign is symmetric
    const float x = static_cast<float>(half_value(static_cast<uint16_t>(h)));
    ASSERT_EQ(round_fp16(x), x) << "half " << h;
    ASSERT_EQ(round_fp16(-x), -x) << "half " << h;
    if (h + 1 < 0x7c00) {  // the midpoint to the next half, exact in float, goes to the even one of the two
      const double next = half_value(static_cast<uint16_t>(h + 1));
      const float mid = static_cast<float>((double(x) + next) / 2);
      ASSERT_EQ(double(mid), (double(x) + next) / 2);
      ASSERT_EQ(double(round_fp16(mid)), (h & 1) ? next : double(x)) << "midpoint after half " << h;
      // Just off the midpoint, each side goes to its nearer neighbour.
      ASSERT_EQ(double(round_fp16(std::nextafter(mid, 0.0f))), double(x)) << h;
      ASSERT_EQ(double(round_fp16(std::nextafter(mid, INFINITY))), next) << h;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 0x7c00 - 1);
  EXPECT_EQ(round_fp16(65519.99f), 65504.0f);
  EXPECT_TRUE(std::isinf(round_fp16(65520.0f)));  // the midpoint to 65536 rounds to the even, infinite one
  EXPECT_TRUE(std::isinf(round_fp16(-1e6f)) && round_fp16(-1e6f) < 0);
  EXPECT_TRUE(std::isnan(round_fp16(std::nanf(""))));
  EXPECT_EQ(round_fp16(0x1.0p-25f), 0.0f);            // half of the smallest subnormal: to even (zero)
  EXPECT_EQ(round_fp16(0x1.8p-25f), 0x1.0p-24f);       // above half of it: the smallest subnormal
  EXPECT_TRUE(std::signbit(round_fp16(-0x1.0p-30f)));  // a negative value that rounds to zero keeps its sign
}

// fp16-lowrank's dS scale: ceil(log2 bound) exact at and just above powers of two (where std::log2 in float is not),
// sigma bound in (2^13, 2^14] (so |sigma dS| <= 2^14 for any |dS| <= bound), the exponent's clamps, a zero bound.
TEST(TileOps, Fp16DsScaleTakesCeilLog2Exactly) {
  for (int k = -100; k <= 100; ++k) {
    const float p2 = std::ldexp(1.0f, k);                   // bound = 2 dmax vmax with dmax = 2^(k - 1), vmax = 1
    EXPECT_EQ(fp16_ds_scale(p2 / 2, 1.0f), std::ldexp(1.0f, 14 - k)) << k;  // exactly 2^k: ceil is k
    const float above = std::nextafter(p2, INFINITY);       // just above: k + 1
    EXPECT_EQ(fp16_ds_scale(above / 2, 1.0f), std::ldexp(1.0f, 13 - k)) << k;
    // the scaled bound lies in (2^13, 2^14]: every |sigma dS| <= 2^14, FP16's largest binades used
    EXPECT_EQ(p2 * fp16_ds_scale(p2 / 2, 1.0f), 16384.0f) << k;
    EXPECT_GT(above * fp16_ds_scale(above / 2, 1.0f), 8192.0f) << k;
    EXPECT_LE(above * fp16_ds_scale(above / 2, 1.0f), 16384.0f) << k;
  }
  EXPECT_EQ(fp16_ds_scale(0.0f, 3.0f), 1.0f);
  EXPECT_EQ(fp16_ds_scale(1e-20f, 1e-20f), std::ldexp(1.0f, 126));  // all but zero (2e-40): clamped at 2^126
  EXPECT_EQ(fp16_ds_scale(1e-30f, 1e-30f), 1.0f);  // a bound that underflows to zero (dS is zero in FP32 too)
  EXPECT_EQ(fp16_ds_scale(1e30f, 1e30f), std::ldexp(1.0f, -126));   // infinite bound: 2^-126
}

// K U's FP16 scale from K's: |K U_c| <= max |K| |U_c|_1 <= max |K| sqrt(D) (1 + 2^-8), reached by a row of equal
// entries against a column of equal ones; K U s_ku stays below 2^15 there, and the shift is 4 at D = 64 and 128
// (4^4 = 256 >= 128 (1 + 2^-8)^2).
TEST(TileOps, Fp16KuScaleKeepsKUBelowTwoToFifteen) {
  for (int D : {64, 128}) {
    const float k_scale = fp16_head_scale(3.0f);  // max |K| = 3
    EXPECT_EQ(fp16_ku_scale(k_scale, D), k_scale / 16) << D;
    // U's column of equal entries 1/sqrt(D) (orthonormal), rounded to BF16 as the kernels do, against a row of 3s:
    // |K U| = 3 sqrt(D) (1 + bf16 error), the bound's case.
    const float u = round_bf16(1.0f / std::sqrt(static_cast<float>(D)));
    const float ku = 3.0f * u * D;
    EXPECT_LT(ku * fp16_ku_scale(k_scale, D), 32768.0f) << D;
  }
  EXPECT_EQ(fp16_ku_scale(std::ldexp(1.0f, -124), 128), std::ldexp(1.0f, -126));  // clamped to a normal float
}

}  // namespace
}  // namespace gproj::cpu
