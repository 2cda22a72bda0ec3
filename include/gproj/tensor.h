// Strided views and owning contiguous tensors of rank <= 4, plus the shape contract of attention inputs.
// Exercised by tests/core/tensor_test.cc (shape, stride, GQA and non-finite checks and their messages).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gproj/bf16.h"

namespace gproj {

using Extents = std::array<int64_t, 4>;

// A view of someone else's memory: extents and strides in elements, so a caller's non-contiguous layout
// (e.g. a slice of a packed QKV buffer) can be described without a copy. Unused trailing dims have extent 1.
template <class T>
struct TensorView {
  T* data = nullptr;
  int rank = 0;
  Extents shape{1, 1, 1, 1};
  Extents stride{0, 0, 0, 0};

  T& at(int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) const {
    return data[i0 * stride[0] + i1 * stride[1] + i2 * stride[2] + i3 * stride[3]];
  }
  int64_t numel() const { return shape[0] * shape[1] * shape[2] * shape[3]; }
  operator TensorView<const T>() const { return {data, rank, shape, stride}; }
};

Extents contiguous_strides(const Extents& shape);

template <class T>
TensorView<T> make_view(T* data, std::initializer_list<int64_t> shape) {
  TensorView<T> v;
  v.data = data;
  v.rank = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) v.shape[i++] = s;
  v.stride = contiguous_strides(v.shape);
  return v;
}

// An owning, contiguous, row-major tensor.
template <class T>
struct Tensor {
  int rank = 0;
  Extents shape{1, 1, 1, 1};
  std::vector<T> values;

  Tensor() = default;
  Tensor(std::initializer_list<int64_t> extents, T fill = T()) {
    for (int64_t s : extents) shape[rank++] = s;
    values.assign(static_cast<size_t>(shape[0] * shape[1] * shape[2] * shape[3]), fill);
  }
  TensorView<T> view() { return {values.data(), rank, shape, contiguous_strides(shape)}; }
  TensorView<const T> view() const { return {values.data(), rank, shape, contiguous_strides(shape)}; }
  T& at(int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) { return view().at(i0, i1, i2, i3); }
  const T& at(int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) const {
    return view().at(i0, i1, i2, i3);
  }
  int64_t numel() const { return static_cast<int64_t>(values.size()); }
};

// Extents of one attention problem. q, o, do: (B, Nq, H, D); k, v: (B, Nk, Hkv, D); lse: (B, H, Nq).
struct AttentionDims {
  int64_t B = 0, Nq = 0, Nk = 0, H = 0, Hkv = 0, D = 0;
  int64_t group() const { return H / Hkv; }
};

// Head dimensions the CPU path accepts: multiples of 8 from 8 to 256.
bool cpu_supports_head_dim(int64_t D);

// Checks ranks, extents, strides and H % Hkv of the inputs and returns the dims; throws gproj::Error
// naming the tensor and the mismatch. `dout` and `out` may be null views (data == nullptr) when absent.
AttentionDims check_attention_shapes(const TensorView<const bf16>& q, const TensorView<const bf16>& k,
                                     const TensorView<const bf16>& v, const TensorView<const bf16>& dout = {},
                                     const TensorView<const bf16>& out = {});

// Throws ErrorCode::kNonFinite naming `name` and the first offending index if any element is NaN or Inf.
void check_finite(const std::string& name, const TensorView<const bf16>& t);
void check_finite(const std::string& name, const TensorView<const float>& t);

// check_finite on each named input, in order (the first offender is reported).
void check_finite_inputs(const std::vector<std::pair<std::string, TensorView<const bf16>>>& named);

std::string format_index(const TensorView<const bf16>& t, int64_t flat);
std::string format_extents(int rank, const Extents& shape);

}  // namespace gproj
