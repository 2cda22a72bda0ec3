// `gproj check`: every variant on every case against the float64 oracle, forward and backward separately,
// with provenance, reports and --fail-above bounds. Exercised by tests/cli/check_test.cc and the README.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace gproj::cli {

struct CheckOptions {
  std::string suite;                  // "stress" or empty
  std::vector<std::string> cases;     // restrict the suite to these case or group names
  std::vector<std::string> states;    // state files
  std::string variants = "fp32,baseline,fwdfix,gproj";
  std::string device = "cpu";         // cpu | cuda | all
  std::string json_path, markdown_path;
  std::string fail_above;             // "[variant:]metric=value,..."
  std::string data_dir;               // where the real states are; empty: default_data_dir()
  bool allow_nonfinite = false;
  bool deterministic = false;         // CUDA: no atomics in the backward (same bits every run)
  std::string projection;             // GProj's projection for the gproj variant; empty: the default
  int dk_compensation_rank = 0;       // FlashParams::dk_compensation_rank (gproj variant, CPU)
  bool forward_stats = false;  // FlashParams::forward_stats (thresh-lowrank: --stats-from forward|backward)
  bool fp16_dout_side = false;  // FlashParams::fp16_dout_side (fp16-lowrank, CPU: --fp16-dout-side)
  bool basis_from_forward = false;  // FlashParams::basis_from_forward (thresh-lowrank: --basis-from forward|backward)
  bool quiet = false;                 // no progress on stderr
};

// Returns the exit code: 0 all within bounds, 1 a bound exceeded; throws gproj::Error on bad input.
int run_check(const CheckOptions& options, std::FILE* out);

}  // namespace gproj::cli
