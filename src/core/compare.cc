// Relative Frobenius and max-abs errors against float64 references, and the column-sum ratio of dK.
// Exercised by tests/core/compare_test.cc and every numerics test.
#include "gproj/compare.h"

#include <cmath>
#include <limits>
#include <cstdio>
#include <string>

#include "gproj/error.h"

namespace gproj {

namespace {

template <class T, class ToDouble>
ErrorStats compare_impl(const TensorView<const T>& x, const TensorView<const double>& ref, ToDouble to_double) {
  if (x.shape != ref.shape) {
    throw Error(ErrorCode::kShape, "compare: shape " + format_extents(x.rank, x.shape) + " vs reference " +
                                       format_extents(ref.rank, ref.shape));
  }
  ErrorStats e;
  double diff2 = 0, ref2 = 0;
  for (int64_t a = 0; a < x.shape[0]; ++a)
    for (int64_t b = 0; b < x.shape[1]; ++b)
      for (int64_t c = 0; c < x.shape[2]; ++c)
        for (int64_t d = 0; d < x.shape[3]; ++d) {
          const double r = ref.at(a, b, c, d);
          const double diff = to_double(x.at(a, b, c, d)) - r;
          diff2 += diff * diff;
          ref2 += r * r;
          if (!(std::fabs(diff) <= e.max_abs)) {  // also catches NaN
            e.max_abs = std::isnan(diff) ? std::numeric_limits<double>::quiet_NaN() : std::fabs(diff);
            e.max_index = {a, b, c, d};
            if (std::isnan(diff)) return ErrorStats{diff, diff, e.max_index, std::sqrt(ref2)};
          }
        }
  e.ref_norm = std::sqrt(ref2);
  if (ref2 == 0) {
    e.rel_fro = diff2 == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  } else {
    e.rel_fro = std::sqrt(diff2 / ref2);
  }
  return e;
}

template <class T, class ToDouble>
double column_sum_ratio_impl(const TensorView<const T>& x, ToDouble to_double) {
  double sum2 = 0, norm2 = 0;
  for (int64_t b = 0; b < x.shape[0]; ++b)
    for (int64_t h = 0; h < x.shape[2]; ++h)
      for (int64_t d = 0; d < x.shape[3]; ++d) {
        double col = 0;
        for (int64_t n = 0; n < x.shape[1]; ++n) {
          const double v = to_double(x.at(b, n, h, d));
          col += v;
          norm2 += v * v;
        }
        sum2 += col * col;
      }
  return norm2 == 0 ? 0.0 : std::sqrt(sum2 / norm2);
}

}  // namespace

ErrorStats compare(const TensorView<const bf16>& x, const TensorView<const double>& ref) {
  return compare_impl(x, ref, [](bf16 v) { return static_cast<double>(v.to_float()); });
}

ErrorStats compare(const TensorView<const float>& x, const TensorView<const double>& ref) {
  return compare_impl(x, ref, [](float v) { return static_cast<double>(v); });
}

ErrorStats compare(const TensorView<const double>& x, const TensorView<const double>& ref) {
  return compare_impl(x, ref, [](double v) { return v; });
}

double bf16_rounding_error(const TensorView<const double>& ref) {
  double diff2 = 0, ref2 = 0;
  for (int64_t a = 0; a < ref.shape[0]; ++a)
    for (int64_t b = 0; b < ref.shape[1]; ++b)
      for (int64_t c = 0; c < ref.shape[2]; ++c)
        for (int64_t d = 0; d < ref.shape[3]; ++d) {
          const double r = ref.at(a, b, c, d);
          const double diff = static_cast<double>(round_bf16(static_cast<float>(r))) - r;
          diff2 += diff * diff;
          ref2 += r * r;
        }
  return ref2 == 0 ? 0.0 : std::sqrt(diff2 / ref2);
}

double column_sum_ratio(const TensorView<const bf16>& x) {
  return column_sum_ratio_impl(x, [](bf16 v) { return static_cast<double>(v.to_float()); });
}

double column_sum_ratio(const TensorView<const double>& x) {
  return column_sum_ratio_impl(x, [](double v) { return v; });
}

std::string describe(const ErrorStats& e) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "rel %.3e, max-abs %.3e at ", e.rel_fro, e.max_abs);
  return buf + format_extents(4, e.max_index);
}

}  // namespace gproj
