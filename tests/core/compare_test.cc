// Error metrics on hand-computed values: relative Frobenius, max-abs and its index, column-sum ratio.
// Part of core_tests (ctest).
#include <gtest/gtest.h>

#include <cmath>

#include "gproj/compare.h"

namespace gproj {
namespace {

TEST(Compare, RelativeFrobeniusAndMaxAbs) {
  Tensor<double> ref({1, 2, 1, 2});
  Tensor<float> x({1, 2, 1, 2});
  ref.values = {3.0, 4.0, 0.0, 0.0};  // ||ref|| = 5
  x.values = {3.0f, 4.0f, 0.0f, 0.5f};
  const ErrorStats e = compare(x.view(), ref.view());
  EXPECT_DOUBLE_EQ(e.rel_fro, 0.1);
  EXPECT_DOUBLE_EQ(e.max_abs, 0.5);
  EXPECT_EQ(e.max_index, (Extents{0, 1, 0, 1}));
  x.values[1] = NAN;
  EXPECT_TRUE(std::isnan(compare(x.view(), ref.view()).rel_fro)) << "NaN must not hide behind a max";
}

TEST(Compare, ColumnSumRatio) {
  Tensor<double> t({1, 2, 1, 1});
  t.values = {1.0, -1.0};
  EXPECT_DOUBLE_EQ(column_sum_ratio(t.view()), 0.0);
  t.values = {1.0, 1.0};
  EXPECT_DOUBLE_EQ(column_sum_ratio(t.view()), std::sqrt(2.0));  // |2| / sqrt(2)
}

TEST(Compare, Bf16RoundingErrorOfExactValuesIsZero) {
  Tensor<double> t({1, 1, 1, 3});
  t.values = {1.0, -0.5, 3.0};
  EXPECT_EQ(bf16_rounding_error(t.view()), 0.0);
  t.values = {1.0 + 0x1.0p-9, 0.0, 0.0};  // a quarter ulp above 1: rounds to 1
  EXPECT_NEAR(bf16_rounding_error(t.view()), 0x1.0p-9 / (1.0 + 0x1.0p-9), 1e-15);
}

}  // namespace
}  // namespace gproj
