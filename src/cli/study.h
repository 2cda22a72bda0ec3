// `gproj study`: the projection candidates of GUIDE §3 side by side on states, as a Markdown table.
// Exercised by docs/gproj-projection.md (its table is this command's output) and a CLI smoke test.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "gproj/attention.h"

namespace gproj {

struct StudyOptions {
  std::vector<std::string> states;  // state files; empty -> synthetic cases only
  bool synthetic = true;            // add the seeded synthetic cases
  int lowrank_rank = 6;
  std::vector<int> topk{1, 2, 4, 8};  // the k values of the top-k projection to compare
  int block = 64;                   // block_q = block_k
  // FlashParams::basis_key_stride values for the low-rank tails' rows (default: the library's)
  std::vector<int> basis_strides = {FlashParams{}.basis_key_stride};
};

int run_study(const StudyOptions& options, std::FILE* out);

}  // namespace gproj
