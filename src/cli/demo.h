// `gproj demo`: the dQ bias of a BF16 attention backward and GProj's fix, on seeded states and state files.
// Exercised by the README's main-job command; replaced by `gproj check` when the audit tool lands.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace gproj {

struct DemoOptions {
  int64_t seq = 512, heads = 4, dim = 64;
  uint64_t seed = 7;
  std::vector<std::string> states;
};

int run_demo(const DemoOptions& options, std::FILE* out);

}  // namespace gproj
