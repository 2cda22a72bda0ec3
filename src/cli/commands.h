// The small subcommands of `gproj`: `run` (one variant on a state, outputs to a file) and `stress`
// (list or write the built-in cases). Exercised by tests/cli/commands_test.cc.
#pragma once

#include <cstdio>
#include <string>

#include "gproj/attention.h"

namespace gproj::cli {

// --stats-from forward and --basis-from forward are thresh-lowrank's options: with another projection of the gproj
// variant (fp16-lowrank takes its statistics from the forward always; the others have none) they are refused, not
// ignored.
void check_thresh_options(const FlashParams& p);

struct RunOptions {
  std::string state, variant = "gproj", device = "cpu", out;
  bool allow_nonfinite = false;
  bool deterministic = false;  // CUDA: no atomics in the backward
  std::string projection;      // GProj's projection for the gproj variant; empty: the default
  int dk_compensation_rank = 0;  // FlashParams::dk_compensation_rank (gproj variant, CPU)
  bool forward_stats = false;  // FlashParams::forward_stats (thresh-lowrank: --stats-from forward|backward)
  bool fp16_dout_side = false;  // FlashParams::fp16_dout_side (fp16-lowrank, CPU: --fp16-dout-side)
  bool basis_from_forward = false;  // FlashParams::basis_from_forward (thresh-lowrank: --basis-from forward|backward)
};

// Writes o, lse, dq, dk, dv as F32 (exactly the values the variant produced) and provenance metadata.
int run_one(const RunOptions& options, std::FILE* out);

// Prints each case: name, group, shapes, causal, mechanism.
int list_stress(const std::string& data_dir, std::FILE* out);

// Writes every case as DIR/<name>.safetensors (the directory is created if missing).
int write_stress(const std::string& dir, const std::string& data_dir, std::FILE* out);

}  // namespace gproj::cli
