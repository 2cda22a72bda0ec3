// Exhaustive tests of the bf16 conversion: every 16-bit pattern, every tie between neighbours, overflow, NaN.
// Part of core_tests (ctest).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gproj/bf16.h"

namespace gproj {
namespace {

float from_bits32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

bool is_nan_bits(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0; }

TEST(Bf16, EveryPatternRoundTrips) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const bf16 x = bf16::from_bits(static_cast<uint16_t>(b));
    const bf16 y = bf16::from_float(x.to_float());
    if (is_nan_bits(x.bits)) {
      EXPECT_TRUE(is_nan_bits(y.bits)) << std::hex << b;
      EXPECT_EQ(y.bits & 0x8040u, (b & 0x8000u) | 0x0040u) << "NaN keeps its sign and is quiet: " << std::hex << b;
    } else {
      EXPECT_EQ(y.bits, x.bits) << std::hex << b;
    }
  }
}

// For every pair of neighbouring finite bf16 values, the float exactly halfway rounds to the even one, and the
// floats one float-ulp either side of it round to the nearer one.
TEST(Bf16, EveryTieRoundsToEven) {
  int ties = 0;
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    if ((b & 0x7f80u) == 0x7f80u) continue;  // Inf/NaN have no upper neighbour to tie with
    const uint32_t lo = b << 16;
    const uint32_t mid = lo | 0x8000u;
    const uint16_t even = (b & 1u) ? static_cast<uint16_t>(b + 1) : static_cast<uint16_t>(b);
    EXPECT_EQ(bf16::from_float(from_bits32(mid)).bits, even) << std::hex << b;
    EXPECT_EQ(bf16::from_float(from_bits32(mid - 1)).bits, static_cast<uint16_t>(b)) << std::hex << b;
    EXPECT_EQ(bf16::from_float(from_bits32(mid + 1)).bits, static_cast<uint16_t>(b + 1)) << std::hex << b;
    ++ties;
  }
  EXPECT_EQ(ties, 2 * (0x7f80 + 0));  // positive and negative finite patterns
}

TEST(Bf16, AgreesWithNearestInDoubleOnAGrid) {
  // Independent reference: pick the nearer of the two bf16 neighbours in double arithmetic.
  for (uint32_t u = 0x00800000u; u < 0x7f000000u; u += 0x00012345u) {
    const float f = from_bits32(u);
    const bf16 down = bf16::from_bits(static_cast<uint16_t>(u >> 16));
    const bf16 up = bf16::from_bits(static_cast<uint16_t>((u >> 16) + 1));
    const double dd = f - double(down.to_float()), du = double(up.to_float()) - f;
    const uint16_t want = dd < du ? down.bits : du < dd ? up.bits : ((down.bits & 1u) ? up.bits : down.bits);
    ASSERT_EQ(bf16::from_float(f).bits, want) << f;
  }
}

TEST(Bf16, OverflowAndInfinity) {
  const float max_bf16 = bf16::from_bits(0x7f7fu).to_float();
  EXPECT_EQ(bf16::from_float(std::numeric_limits<float>::max()).bits, 0x7f80u);  // rounds past max -> +Inf
  EXPECT_EQ(bf16::from_float(-std::numeric_limits<float>::max()).bits, 0xff80u);
  EXPECT_EQ(bf16::from_float(max_bf16).bits, 0x7f7fu);
  EXPECT_EQ(bf16::from_float(std::numeric_limits<float>::infinity()).bits, 0x7f80u);
  EXPECT_EQ(bf16::from_float(-std::numeric_limits<float>::infinity()).bits, 0xff80u);
  EXPECT_TRUE(std::isnan(bf16::from_float(std::nanf("")).to_float()));
  EXPECT_EQ(bf16::from_float(-0.0f).bits, 0x8000u);
  EXPECT_EQ(round_bf16(1.0f + 0x1.0p-8f), 1.0f);             // tie at 1 + half ulp -> even (1)
  EXPECT_EQ(round_bf16(1.0f + 3 * 0x1.0p-8f), 1.0f + 0x1.0p-6f);  // tie -> even (upper)
}

}  // namespace
}  // namespace gproj

namespace gproj {
namespace {

// bf16_threshold(t) is exactly the boundary of "round_bf16(x) >= t": it passes and the float below it does not,
// for thresh-lowrank's thresholds 1/k, bf16 values themselves (both parities of the last bit), and values between.
TEST(Bf16, ThresholdIsTheBoundaryOfRoundingAtOrAbove) {
  std::vector<float> ts;
  for (int k = 1; k <= 32; ++k) ts.push_back(1.0f / static_cast<float>(k));
  for (uint32_t bits = 0x3a00u; bits < 0x3f90u; bits += 7u) {  // bf16 values from ~5e-4 to ~1.1
    const float b = bf16::from_bits(static_cast<uint16_t>(bits)).to_float();
    ts.push_back(b);
    ts.push_back(std::nextafter(b, 2.0f));  // just above a bf16 value: the next one is the boundary's b
  }
  for (float t : ts) {
    const float x = bf16_threshold(t);
    EXPECT_GE(round_bf16(x), t) << t;
    EXPECT_LT(round_bf16(std::nextafter(x, 0.0f)), t) << t;
  }
}

}  // namespace
}  // namespace gproj
