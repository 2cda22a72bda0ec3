// bfloat16 storage type with round-to-nearest-even conversion from float (NaN stays quiet NaN, overflow -> Inf).
// Exercised by tests/core/bf16_test.cc (every one of the 65536 bit patterns, and the tie cases).
#pragma once

#include <cstdint>
#include <cstring>

namespace gproj {

struct bf16 {
  uint16_t bits = 0;

  static bf16 from_bits(uint16_t b) {
    bf16 x;
    x.bits = b;
    return x;
  }

  // Round to nearest, ties to even. Finite values that round past the largest bf16 become +-Inf, as IEEE
  // rounding prescribes; NaN keeps its sign and becomes a quiet NaN (payload's top bits kept, quiet bit set).
  static bf16 from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return from_bits(static_cast<uint16_t>((u >> 16) | 0x0040u));
    const uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;
    return from_bits(static_cast<uint16_t>(u >> 16));
  }

  float to_float() const {
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
};

// The value a float takes after one trip through bf16: the rounding every BF16 point of GUIDE §2 applies.
inline float round_bf16(float f) { return bf16::from_float(f).to_float(); }

inline float bf16_to_float(bf16 x) { return x.to_float(); }

// The smallest float x with round_bf16(x) >= t, for finite t > 0 below the largest bf16. Rounding is monotone,
// so "bf16(x) >= t" is "x >= bf16_threshold(t)": a kernel can test the FP32 value without rounding it first.
// b is the smallest bf16 >= t and a the one below; the floats between them (one binade, evenly spaced) round to
// the nearer, and the midpoint to the one with the even last bit.
inline float bf16_threshold(float t) {
  uint32_t tb;
  std::memcpy(&tb, &t, sizeof tb);
  const uint32_t b = (tb & 0xffffu) == 0 ? tb : (tb & 0xffff0000u) + 0x10000u;
  const uint32_t mid = b - 0x10000u + 0x8000u;
  const uint32_t x = ((b >> 16) & 1u) == 0 ? mid : mid + 1u;
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}

}  // namespace gproj
