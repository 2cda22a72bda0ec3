// float64 reference attention: no rounding anywhere, causal with bottom-right alignment, empty rows -> 0.
// Exercised by tests/cpu/oracle_test.cc (central finite differences) and as the yardstick of every other test.
#pragma once

#include "gproj/tensor.h"

namespace gproj {

struct OracleForward {
  Tensor<double> o;    // (B, Nq, H, D)
  Tensor<double> lse;  // (B, H, Nq); -inf for rows with no visible key
};

struct OracleBackward {
  Tensor<double> dq;     // (B, Nq, H, D)
  Tensor<double> dk;     // (B, Nk, Hkv, D)
  Tensor<double> dv;     // (B, Nk, Hkv, D)
  Tensor<double> delta;  // (B, H, Nq): sum_j P_ij dP_ij (= dO_i . O_i exactly)
};

// Inputs are double views so finite differences can perturb them; bf16 inputs convert exactly.
// q: (B, Nq, H, D), k, v: (B, Nk, Hkv, D), dout: (B, Nq, H, D). scale must be > 0.
OracleForward oracle_forward(const TensorView<const double>& q, const TensorView<const double>& k,
                             const TensorView<const double>& v, bool causal, double scale);
OracleBackward oracle_backward(const TensorView<const double>& q, const TensorView<const double>& k,
                               const TensorView<const double>& v, const TensorView<const double>& dout,
                               bool causal, double scale);

Tensor<double> to_double(const TensorView<const bf16>& t);  // exact widening, contiguous result

// Key j is visible to query i iff j <= i + Nk - Nq (bottom-right alignment) when causal.
inline bool key_visible(bool causal, int64_t i, int64_t j, int64_t Nq, int64_t Nk) {
  return !causal || j <= i + Nk - Nq;
}

}  // namespace gproj
