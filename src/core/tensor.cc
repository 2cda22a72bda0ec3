// Shape, stride and finiteness checks of attention inputs, with messages that name the tensor and the mismatch.
// Exercised by tests/core/tensor_test.cc.
#include "gproj/tensor.h"

#include <cmath>
#include <string>

#include "gproj/error.h"

namespace gproj {

Extents contiguous_strides(const Extents& shape) {
  Extents s{0, 0, 0, 0};
  int64_t acc = 1;
  for (int i = 3; i >= 0; --i) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

// No iostreams in the library's error paths: in the CUDA build of the PyTorch extension on the GPU machine the
// first ostream insertion crashed inside the extension (device run 5, docs/pytorch.md); strings are built by hand.
std::string format_extents(int rank, const Extents& shape) {
  std::string s = "(";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

std::string format_index(const TensorView<const bf16>& t, int64_t flat) {
  Extents idx{0, 0, 0, 0};
  for (int i = 3; i >= 0; --i) {
    idx[i] = flat % t.shape[i];
    flat /= t.shape[i];
  }
  return format_extents(t.rank, idx);
}

bool cpu_supports_head_dim(int64_t D) { return D >= 8 && D <= 256 && D % 8 == 0; }

namespace {

void check_rank4(const char* name, const char* letters, const TensorView<const bf16>& t) {
  if (t.data == nullptr && t.rank == 0) {
    throw Error(ErrorCode::kInvalidArgument, std::string(name) + " is missing (null data)");
  }
  if (t.rank != 4) {
    throw Error(ErrorCode::kShape, std::string(name) + " must have rank 4 " + letters + ", got rank " +
                                       std::to_string(t.rank) + " " + format_extents(t.rank, t.shape));
  }
  for (int i = 0; i < 4; ++i) {
    if (t.shape[i] < 1) {
      throw Error(ErrorCode::kShape, std::string(name) + " " + letters + " has an empty extent: " +
                                         format_extents(4, t.shape));
    }
  }
  for (int i = 0; i < 4; ++i) {
    if (t.stride[i] < 0 || (t.shape[i] > 1 && t.stride[i] == 0)) {
      throw Error(ErrorCode::kShape, std::string(name) + " stride " + std::to_string(t.stride[i]) +
                                         " of dim " + std::to_string(i) + " is negative or aliases elements");
    }
  }
  if (t.data == nullptr) throw Error(ErrorCode::kInvalidArgument, std::string(name) + " has null data");
  if (t.stride[3] != 1) {
    throw Error(ErrorCode::kShape, std::string(name) + " must be contiguous in D (stride 1), got stride " +
                                       std::to_string(t.stride[3]));
  }
}

void expect_same(const char* name, const TensorView<const bf16>& t, const char* ref_name,
                 const TensorView<const bf16>& ref) {
  if (t.shape != ref.shape) {
    throw Error(ErrorCode::kShape, std::string(name) + " has shape " + format_extents(4, t.shape) + " but " +
                                       ref_name + " has " + format_extents(4, ref.shape) + "; they must match");
  }
}

}  // namespace

AttentionDims check_attention_shapes(const TensorView<const bf16>& q, const TensorView<const bf16>& k,
                                     const TensorView<const bf16>& v, const TensorView<const bf16>& dout,
                                     const TensorView<const bf16>& out) {
  check_rank4("q", "(B, Nq, H, D)", q);
  check_rank4("k", "(B, Nk, Hkv, D)", k);
  check_rank4("v", "(B, Nk, Hkv, D)", v);
  expect_same("v", v, "k", k);
  AttentionDims d{q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3]};
  if (k.shape[0] != d.B) {
    throw Error(ErrorCode::kShape, "batch of k (" + std::to_string(k.shape[0]) + ") differs from batch of q (" +
                                       std::to_string(d.B) + ")");
  }
  if (k.shape[3] != d.D) {
    throw Error(ErrorCode::kShape, "head dim of k (" + std::to_string(k.shape[3]) + ") differs from head dim of q (" +
                                       std::to_string(d.D) + ")");
  }
  if (d.H % d.Hkv != 0) {
    throw Error(ErrorCode::kShape, "H = " + std::to_string(d.H) + " query heads is not a multiple of Hkv = " +
                                       std::to_string(d.Hkv) + " key/value heads (GQA needs H % Hkv == 0)");
  }
  if (dout.data != nullptr) {
    check_rank4("do", "(B, Nq, H, D)", dout);
    expect_same("do", dout, "q", q);
  }
  if (out.data != nullptr) {
    check_rank4("o", "(B, Nq, H, D)", out);
    expect_same("o", out, "q", q);
  }
  return d;
}

namespace {

template <class T, class ToFloat>
void check_finite_impl(const std::string& name, const TensorView<const T>& t, ToFloat to_float) {
  for (int64_t a = 0; a < t.shape[0]; ++a)
    for (int64_t b = 0; b < t.shape[1]; ++b)
      for (int64_t c = 0; c < t.shape[2]; ++c)
        for (int64_t e = 0; e < t.shape[3]; ++e) {
          const float x = to_float(t.at(a, b, c, e));
          if (!std::isfinite(x)) {
            throw Error(ErrorCode::kNonFinite,
                        name + " holds " + (std::isnan(x) ? "NaN" : "Inf") + " at " +
                            format_extents(t.rank, Extents{a, b, c, e}) +
                            " (C++: FlashParams::allow_nonfinite, CLI: --allow-nonfinite compute anyway; the PyTorch op always refuses)");
          }
        }
}

}  // namespace

void check_finite(const std::string& name, const TensorView<const bf16>& t) {
  check_finite_impl(name, t, [](bf16 x) { return x.to_float(); });
}

void check_finite(const std::string& name, const TensorView<const float>& t) {
  check_finite_impl(name, t, [](float x) { return x; });
}

void check_finite_inputs(const std::vector<std::pair<std::string, TensorView<const bf16>>>& named) {
  for (const auto& [name, view] : named) check_finite(name, view);
}

}  // namespace gproj
