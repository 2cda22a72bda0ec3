// The built-in stress suite: named, seeded states that each isolate one mechanism of BF16 attention error,
// plus the real captured states of the project's test data as the group `real`.
// Exercised by tests/core/stress_test.cc and `gproj stress` / `gproj check --suite stress`.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "gproj/state.h"

namespace gproj {

struct StressCase {
  std::string name;         // unique, used on the command line and in reports
  std::string group;        // "synthetic" or "real"
  std::string mechanism;    // what it isolates, one line
  std::function<AttentionState()> make;  // deterministic: the same state on every call and machine
};

// The synthetic cases (always available).
const std::vector<StressCase>& synthetic_stress_cases();

// The real captured states found in `data_dir` (the project's tests/data); missing files are left out.
std::vector<StressCase> real_stress_cases(const std::string& data_dir);

// Where the real states live: $GPROJ_DATA_DIR if set, else the source tree's tests/data at build time.
std::string default_data_dir();

// Synthetic cases followed by the real ones; `only`, when not empty, keeps the cases whose name or group is
// listed there and throws kInvalidArgument naming any entry that matches nothing.
std::vector<StressCase> stress_suite(const std::string& data_dir, const std::vector<std::string>& only = {});

}  // namespace gproj
