// The audit report of `gproj check`: one row per (case, variant, device), its JSON, Markdown and terminal forms,
// and the --fail-above bounds. Exercised by tests/cli/report_test.cc and tests/cli/check_test.cc.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gproj/compare.h"

namespace gproj::cli {

struct CaseInfo {
  std::string name, group, mechanism;
  std::vector<int64_t> q_shape, k_shape;  // (B, Nq, H, D), (B, Nk, Hkv, D)
  bool causal = false;
  double softmax_scale = 0;
  double oracle_seconds = 0;
};

struct CheckRow {
  std::string case_name, variant, device;
  ErrorStats o, lse, dq, dk, dv;
  double rowsum_max_before = 0, rowsum_max_after = 0, dk_colsum_ratio = 0;
  double seconds = 0;  // forward + backward of the variant
  std::string skipped;  // non-empty: the device cannot run this case (e.g. an unsupported D); no numbers
  std::string kernels;  // what ran: "cpu emulator", or the CUDA kernels of the forward and the backward
};

// "--fail-above [variant:]metric=value,...": metric one of o, dq, dk, dv; a bound without a variant applies
// to every variant. Values are fractions (0.005 = 0.5%).
struct Bound {
  std::string variant;  // empty: all
  std::string metric;
  double limit = 0;
};
std::vector<Bound> parse_bounds(const std::string& spec);  // throws kInvalidArgument with the offending item

// The bounds a row exceeds, as "dq 0.0123 > 0.005"; NaN errors always exceed.
std::vector<std::string> violations(const CheckRow& row, const std::vector<Bound>& bounds);

struct CheckReport {
  nlohmann::json env;
  std::vector<CaseInfo> cases;
  std::vector<CheckRow> rows;
  std::vector<Bound> bounds;
};

nlohmann::json to_json(const CheckReport& r);
std::string to_markdown(const CheckReport& r);
std::string to_table(const CheckReport& r);  // fixed-width text for the terminal

}  // namespace gproj::cli
