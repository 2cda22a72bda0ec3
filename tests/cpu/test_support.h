// Shared helpers of the CPU tests: derived tolerances (GUIDE §4) and evidence printing.
// Included by tests/cpu/*_test.cc only.
#pragma once

#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

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

// One shape of the awkward-size sweeps: extents, causality and tile sizes.
struct Case {
  int64_t Nq, Nk, H, Hkv, D;
  bool causal;
  int block_q, block_k;
};

inline std::string case_name(const Case& c) {
  return "q" + std::to_string(c.Nq) + "_k" + std::to_string(c.Nk) + "_h" + std::to_string(c.H) + "x" +
         std::to_string(c.Hkv) + "_d" + std::to_string(c.D) + (c.causal ? "_causal" : "_full") + "_b" +
         std::to_string(c.block_q) + "x" + std::to_string(c.block_k);
}

// The awkward sizes of GUIDE §4 shared by the forward and backward sweeps: length 1, 97, 1025, Nq != Nk both
// ways, fully masked rows (causal, Nq > Nk), GQA and MQA, D in {32, 64, 128}, tiles that do not divide N.
inline std::vector<Case> awkward_cases() {
  return {Case{1, 97, 2, 2, 64, false, 64, 64},      Case{1, 97, 2, 1, 64, true, 64, 64},
          Case{97, 97, 2, 1, 32, true, 64, 64},      Case{97, 97, 2, 2, 128, false, 32, 48},
          Case{1025, 1025, 1, 1, 64, true, 64, 64},  Case{97, 1025, 2, 1, 64, true, 64, 128},
          Case{1025, 97, 1, 1, 32, true, 128, 32},   Case{64, 200, 4, 2, 128, false, 64, 64},
          Case{200, 64, 4, 1, 64, false, 16, 16},    Case{1025, 97, 2, 1, 128, true, 64, 64}};
}

// Names a Case in gtest's messages instead of a byte dump.
inline void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

// Fresh Gaussian inputs (B = 2) of a case; never zeros.
inline AttentionState state_for(const Case& c, uint64_t seed) {
  SyntheticSpec s;
  s.B = 2;
  s.Nq = c.Nq;
  s.Nk = c.Nk;
  s.H = c.H;
  s.Hkv = c.Hkv;
  s.D = c.D;
  s.causal = c.causal;
  s.seed = seed;
  return make_synthetic(s);
}

// Params with the case's tile sizes (variant and projection at their defaults).
inline FlashParams tiles_of(const Case& c) {
  FlashParams p;
  p.block_q = c.block_q;
  p.block_k = c.block_k;
  return p;
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
