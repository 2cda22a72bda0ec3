// Helpers shared by the test suites: checking that a call raises a gproj::Error of a given code and message, and
// where the real captured states are.
// Included by tests/*/*_test.cc only.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>

#include "gproj/error.h"

namespace gproj::test {

// Expects f() to throw gproj::Error with `code` and a message containing `needle`.
inline void expect_error(ErrorCode code, const std::string& needle, const std::function<void()>& f) {
  try {
    f();
    ADD_FAILURE() << "no error thrown; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// The real captured states (tests/data): $GPROJ_DATA_DIR when set, as the library's default_data_dir() reads it,
// else the source tree's tests/data at build time. scripts/device_env.sh sets it: a test binary built by
// scripts/device_prebuild.sh in another checkout (a git worktree) runs from a copy at another path.
inline std::string data_dir() {
  const char* env = std::getenv("GPROJ_DATA_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(GPROJ_TEST_DATA);
}

}  // namespace gproj::test
