// Message helpers shared by the file readers: every error names the file (`what`) and then the problem.
// Exercised through tests/io/safetensors_test.cc and tests/io/state_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gproj/error.h"

namespace gproj::io {

[[noreturn]] inline void fail(ErrorCode code, const std::string& what, const std::string& problem) {
  throw Error(code, what + ": " + problem);
}

inline std::string quoted(const std::string& s) { return "\"" + s + "\""; }

inline std::string format_shape(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace gproj::io
