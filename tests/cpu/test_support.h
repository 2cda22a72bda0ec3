// Shared helpers of the CPU tests: derived tolerances (GUIDE §4) and evidence printing.
// Included by tests/cpu/*_test.cc only.
#pragma once

#include <cstdio>
#include <string>

#include "gproj/evaluate.h"
#include "gproj/synthetic.h"

namespace gproj::test {

// GUIDE §4: a kernel passes when its error is at most 2x the error of the plain FP32-math reference (the fp32
// variant, which rounds only inputs and outputs to BF16) plus twice one output rounding (the error of
// bf16(oracle) itself). Both terms are measured on the same inputs, never typed in.
struct Tolerances {
  double o, dq, dk, dv;
};

inline double derived(const ErrorStats& fp32_err, const TensorView<const double>& ref) {
  return 2.0 * fp32_err.rel_fro + 2.0 * bf16_rounding_error(ref);
}

inline Tolerances derive_tolerances(const VariantRun& fp32, const OracleRun& oracle) {
  return {derived(fp32.o, oracle.fwd.o.view()), derived(fp32.dq, oracle.bwd.dq.view()),
          derived(fp32.dk, oracle.bwd.dk.view()), derived(fp32.dv, oracle.bwd.dv.view())};
}

inline FlashParams params_for(Variant v, Projection p = FlashParams{}.projection) {
  FlashParams f;
  f.variant = v;
  f.projection = p;
  return f;
}

inline void print_evidence(const std::string& label, const VariantRun& r) {
  std::printf("  %-28s O %s\n  %-28s dQ %s\n  %-28s dK %s\n  %-28s dV %s | max|r| %.2e -> %.2e, |sum dK| %.2e\n",
              label.c_str(), describe(r.o).c_str(), "", describe(r.dq).c_str(), "", describe(r.dk).c_str(), "",
              describe(r.dv).c_str(), r.bwd.diag.rowsum_max_before, r.bwd.diag.rowsum_max_after,
              r.bwd.diag.dk_colsum_ratio);
}

}  // namespace gproj::test
