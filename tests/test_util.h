// Helpers shared by the test suites: checking that a call raises a gproj::Error of a given code and message.
// Included by tests/*/*_test.cc only.
#pragma once

#include <gtest/gtest.h>

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

}  // namespace gproj::test
