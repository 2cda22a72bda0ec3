// Copies one head of a strided (B, N, H, D) view into a contiguous (N, D) buffer of another element type.
// Exercised through the oracle and the CPU emulator (tests/cpu).
#pragma once

#include <vector>

#include "gproj/tensor.h"

namespace gproj::cpu {

template <class Dst, class Src, class Convert>
void gather_head(std::vector<Dst>& dst, const TensorView<const Src>& t, int64_t b, int64_t h, Convert convert) {
  const int64_t N = t.shape[1], D = t.shape[3];
  dst.resize(static_cast<size_t>(N * D));
  for (int64_t n = 0; n < N; ++n) {
    const Src* row = &t.at(b, n, h, 0);
    for (int64_t d = 0; d < D; ++d) dst[n * D + d] = convert(row[d]);
  }
}

}  // namespace gproj::cpu
