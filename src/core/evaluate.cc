// Runs a variant of the CPU emulator on a state and measures its errors against the float64 oracle.
// Exercised by tests/cpu/* and `gproj demo`.
#include "gproj/evaluate.h"

#include <chrono>
#include <cmath>

namespace gproj {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Compares LSE only where the oracle row is non-empty (both are -inf on empty rows).
ErrorStats compare_lse(const Tensor<float>& lse, const Tensor<double>& ref) {
  Tensor<float> a = lse;
  Tensor<double> r = ref;
  for (size_t i = 0; i < r.values.size(); ++i)
    if (std::isinf(r.values[i]) && r.values[i] < 0 && std::isinf(a.values[i]) && a.values[i] < 0) {
      r.values[i] = 0;
      a.values[i] = 0;
    }
  return compare(a.view(), r.view());
}

}  // namespace

float state_scale(const AttentionState& s) {
  return s.softmax_scale ? *s.softmax_scale : 1.0f / std::sqrt(static_cast<float>(s.q.shape[3]));
}

OracleRun run_oracle(const AttentionState& s) {
  const auto t0 = std::chrono::steady_clock::now();
  const Tensor<double> q = to_double(s.q.view()), k = to_double(s.k.view()), v = to_double(s.v.view()),
                       dout = to_double(s.dout.view());
  OracleRun r;
  const double scale = state_scale(s);
  r.fwd = oracle_forward(q.view(), k.view(), v.view(), s.causal, scale);
  r.bwd = oracle_backward(q.view(), k.view(), v.view(), dout.view(), s.causal, scale);
  r.seconds = seconds_since(t0);
  return r;
}

VariantRun run_variant(const AttentionState& s, FlashParams params, const OracleRun& oracle, Device device) {
  params.causal = s.causal;
  params.softmax_scale = state_scale(s);
  VariantRun r;
  auto t0 = std::chrono::steady_clock::now();
  r.fwd = attention_forward(device, s.q.view(), s.k.view(), s.v.view(), params);
  r.seconds_forward = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  r.bwd = attention_backward(device, s.q.view(), s.k.view(), s.v.view(), r.fwd.o.view(), r.fwd.o_fp32.view(),
                             r.fwd.lse.view(), s.dout.view(), params);
  r.seconds_backward = seconds_since(t0);
  r.o = compare(r.fwd.o.view(), oracle.fwd.o.view());
  r.lse = compare_lse(r.fwd.lse, oracle.fwd.lse);
  r.dq = compare(r.bwd.dq.view(), oracle.bwd.dq.view());
  r.dk = compare(r.bwd.dk.view(), oracle.bwd.dk.view());
  r.dv = compare(r.bwd.dv.view(), oracle.bwd.dv.view());
  r.delta = compare(r.bwd.delta.view(), oracle.bwd.delta.view());
  return r;
}

}  // namespace gproj
