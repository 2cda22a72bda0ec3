// Shape, stride, GQA and finiteness checks of attention inputs: each bad input raises a typed, named error.
// Part of core_tests (ctest).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "gproj/error.h"
#include "test_util.h"
#include "gproj/tensor.h"

namespace gproj {
namespace {

struct Inputs {
  Tensor<bf16> q, k, v, dout;
  Inputs(int64_t B, int64_t Nq, int64_t Nk, int64_t H, int64_t Hkv, int64_t D)
      : q({B, Nq, H, D}, bf16::from_float(0.5f)), k({B, Nk, Hkv, D}, bf16::from_float(0.25f)),
        v({B, Nk, Hkv, D}, bf16::from_float(-1.0f)), dout({B, Nq, H, D}, bf16::from_float(2.0f)) {}
};

using test::expect_error;

TEST(AttentionShapes, AcceptsGqaAndReturnsDims) {
  Inputs in(2, 5, 7, 6, 3, 16);
  const AttentionDims d = check_attention_shapes(in.q.view(), in.k.view(), in.v.view(), in.dout.view());
  EXPECT_EQ(d.B, 2);
  EXPECT_EQ(d.Nq, 5);
  EXPECT_EQ(d.Nk, 7);
  EXPECT_EQ(d.H, 6);
  EXPECT_EQ(d.Hkv, 3);
  EXPECT_EQ(d.D, 16);
  EXPECT_EQ(d.group(), 2);
}

TEST(AttentionShapes, RejectsEachMismatchWithItsName) {
  Inputs in(2, 5, 7, 6, 4, 16);
  expect_error(ErrorCode::kShape, "H % Hkv", [&] { check_attention_shapes(in.q.view(), in.k.view(), in.v.view()); });
  Inputs ok(2, 5, 7, 4, 2, 16);
  Tensor<bf16> rank3({2, 5, 64});
  expect_error(ErrorCode::kShape, "q must have rank 4",
               [&] { check_attention_shapes(rank3.view(), ok.k.view(), ok.v.view()); });
  Tensor<bf16> v_short({2, 6, 2, 16});
  expect_error(ErrorCode::kShape, "v has shape",
               [&] { check_attention_shapes(ok.q.view(), ok.k.view(), v_short.view()); });
  Tensor<bf16> k_batch({3, 7, 2, 16}), v_batch({3, 7, 2, 16});
  expect_error(ErrorCode::kShape, "batch of k",
               [&] { check_attention_shapes(ok.q.view(), k_batch.view(), v_batch.view()); });
  Tensor<bf16> k_dim({2, 7, 2, 8}), v_dim({2, 7, 2, 8});
  expect_error(ErrorCode::kShape, "head dim of k",
               [&] { check_attention_shapes(ok.q.view(), k_dim.view(), v_dim.view()); });
  Tensor<bf16> do_bad({2, 4, 4, 16});
  expect_error(ErrorCode::kShape, "do has shape",
               [&] { check_attention_shapes(ok.q.view(), ok.k.view(), ok.v.view(), do_bad.view()); });
  Tensor<bf16> empty({2, 0, 4, 16});
  expect_error(ErrorCode::kShape, "empty extent",
               [&] { check_attention_shapes(empty.view(), ok.k.view(), ok.v.view()); });
}

TEST(AttentionShapes, DescribesStridedLayoutsAndRejectsBadStrides) {
  // A packed (B, N, 3, H, D) QKV buffer: q is every third head-block, described by strides alone.
  const int64_t B = 1, N = 4, H = 2, D = 8;
  std::vector<bf16> packed(static_cast<size_t>(B * N * 3 * H * D), bf16::from_float(1.0f));
  TensorView<const bf16> q{packed.data(), 4, {B, N, H, D}, {N * 3 * H * D, 3 * H * D, D, 1}};
  TensorView<const bf16> k{packed.data() + H * D, 4, {B, N, H, D}, {N * 3 * H * D, 3 * H * D, D, 1}};
  TensorView<const bf16> v{packed.data() + 2 * H * D, 4, {B, N, H, D}, {N * 3 * H * D, 3 * H * D, D, 1}};
  EXPECT_EQ(check_attention_shapes(q, k, v).Nk, N);
  TensorView<const bf16> bad = q;
  bad.stride[3] = 2;
  expect_error(ErrorCode::kShape, "contiguous in D", [&] { check_attention_shapes(bad, k, v); });
  bad = q;
  bad.stride[1] = -1;
  expect_error(ErrorCode::kShape, "negative", [&] { check_attention_shapes(bad, k, v); });
}

TEST(CheckFinite, NamesTensorAndIndex) {
  Tensor<bf16> t({1, 3, 2, 8}, bf16::from_float(1.0f));
  EXPECT_NO_THROW(check_finite("k", t.view()));
  t.at(0, 2, 1, 5) = bf16::from_float(std::nanf(""));
  expect_error(ErrorCode::kNonFinite, "k holds NaN at (0, 2, 1, 5)", [&] { check_finite("k", t.view()); });
  t.at(0, 2, 1, 5) = bf16::from_float(1.0f);
  t.at(0, 0, 0, 1) = bf16::from_float(-INFINITY);
  expect_error(ErrorCode::kNonFinite, "Inf at (0, 0, 0, 1)", [&] { check_finite("k", t.view()); });
}

}  // namespace
}  // namespace gproj
