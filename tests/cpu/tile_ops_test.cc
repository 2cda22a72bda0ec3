// Accuracy of the vectorised exp_fp32 against double-precision exp, and round_bf16_row against bf16.
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

}  // namespace
}  // namespace gproj::cpu
