// One variant run forward and backward on a state and compared with the float64 oracle (GUIDE §4 metrics).
// Exercised by tests/cpu/* and by `gproj demo`; the audit tool's `check` reports these fields.
#pragma once

#include <string>

#include "gproj/attention.h"
#include "gproj/backend.h"
#include "gproj/compare.h"
#include "gproj/oracle.h"
#include "gproj/state.h"

namespace gproj {

struct OracleRun {
  OracleForward fwd;
  OracleBackward bwd;
  double seconds = 0;
};

struct VariantRun {
  ForwardResult fwd;
  BackwardResult bwd;
  ErrorStats o, lse, dq, dk, dv, delta;
  double seconds_forward = 0, seconds_backward = 0;
};

float state_scale(const AttentionState& s);  // metadata scale or 1/sqrt(D)
OracleRun run_oracle(const AttentionState& s);
// Runs `params` (its causal and scale fields are taken from the state) on `device` and compares with `oracle`.
VariantRun run_variant(const AttentionState& s, FlashParams params, const OracleRun& oracle,
                       Device device = Device::kCpu);

}  // namespace gproj
