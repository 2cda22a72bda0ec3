// Error metrics of GUIDE §4: relative Frobenius error and max-abs error with its index, against float64.
// Exercised by tests/core/compare_test.cc and by every numerics test and report.
#pragma once

#include <string>

#include "gproj/tensor.h"

namespace gproj {

struct ErrorStats {
  double rel_fro = 0;      // ||x - ref||_F / ||ref||_F (0 when both are zero; inf when only ref is zero)
  double max_abs = 0;      // max |x - ref|
  Extents max_index{0, 0, 0, 0};  // where max_abs occurs
  double ref_norm = 0;     // ||ref||_F
};

ErrorStats compare(const TensorView<const bf16>& x, const TensorView<const double>& ref);
ErrorStats compare(const TensorView<const float>& x, const TensorView<const double>& ref);
ErrorStats compare(const TensorView<const double>& x, const TensorView<const double>& ref);

// ||bf16(ref) - ref||_F / ||ref||_F: the error of one output rounding, a term of every derived tolerance.
double bf16_rounding_error(const TensorView<const double>& ref);

// ||sum_j x_j|| / ||x|| over the N axis of a (B, N, H, D) tensor, summed per (B, H): 0 for exact dK.
double column_sum_ratio(const TensorView<const bf16>& x);
double column_sum_ratio(const TensorView<const double>& x);

std::string describe(const ErrorStats& e);  // "rel 1.23e-03, max-abs 4.5e-04 at (0, 17, 3, 5)"

}  // namespace gproj
