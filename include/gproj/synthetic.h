// Seeded synthetic attention states, each isolating one mechanism (shared key component, ties, ...).
// Exercised by tests/cpu/* and by `gproj demo`; the stress suite of the audit tool builds on these.
#pragma once

#include <cstdint>

#include "gproj/state.h"

namespace gproj {

struct SyntheticSpec {
  int64_t B = 1, Nq = 128, Nk = 128, H = 2, Hkv = 2, D = 64;
  bool causal = false;
  uint64_t seed = 1;
  float q_std = 1.0f, k_std = 1.0f, v_std = 1.0f, do_std = 1.0f;
  float shared_key = 0.0f;    // every key gets + shared_key * u (u a random unit vector times sqrt(D))
  float shared_query = 0.0f;  // likewise for queries
  float v_mean = 0.0f;        // constant added to every element of V
};

// The spec of one batch (B = 1) of Nq queries and Nk keys, H query heads on Hkv kv heads, unit scales.
SyntheticSpec synthetic_spec(int64_t Nq, int64_t Nk, int64_t H, int64_t Hkv, int64_t D, bool causal, uint64_t seed);

// Gaussian q, k, v, do drawn from a counter-based generator (same values on every platform).
AttentionState make_synthetic(const SyntheticSpec& spec);

// Deterministic standard normal sample #index of stream `seed` (splitmix64 + Box-Muller).
double gaussian(uint64_t seed, uint64_t index);

}  // namespace gproj
