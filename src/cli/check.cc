// `gproj check`: runs the chosen variants on the stress suite and/or state files, compares each with the
// float64 oracle, prints a table, writes JSON/Markdown reports. Exercised by tests/cli/check_test.cc.
#include "cli/check.h"

#include <fmt/core.h>

#include <chrono>
#include <sstream>

#include "cli/commands.h"
#include "cli/env.h"
#include "cli/report.h"
#include "gproj/error.h"
#include "gproj/evaluate.h"
#include "gproj/stress.h"
#include "io/file.h"

namespace gproj::cli {

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::vector<Device> devices_for(const std::string& name, std::FILE* log) {
  if (name == "all") {
    std::vector<Device> d{Device::kCpu};
    std::string why;
    if (device_available(Device::kCuda, &why)) {
      d.push_back(Device::kCuda);
    } else if (log) {
      fmt::print(log, "gproj check: --device all runs the CPU only: cuda {}\n", why);
    }
    return d;
  }
  const Device d = parse_device(name);
  std::string why;
  if (!device_available(d, &why)) throw Error(ErrorCode::kUnsupported, "--device " + name + ": " + why);
  return {d};
}

}  // namespace

int run_check(const CheckOptions& o, std::FILE* out) {
  std::FILE* log = o.quiet ? nullptr : stderr;
  if (o.suite.empty() && o.states.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "nothing to check: give --suite stress and/or --state FILE...");
  }
  if (!o.suite.empty() && o.suite != "stress") {
    throw Error(ErrorCode::kInvalidArgument, "unknown suite '" + o.suite + "' (valid: stress)");
  }
  if (o.suite.empty() && !o.cases.empty()) throw Error(ErrorCode::kInvalidArgument, "--cases needs --suite stress");
  std::vector<FlashParams> variants;
  for (const std::string& name : split(o.variants)) {
    FlashParams p;
    p.variant = parse_variant(name);
    p.allow_nonfinite = o.allow_nonfinite;
    p.deterministic = o.deterministic;
    if (!o.projection.empty()) p.projection = parse_projection(o.projection);
    p.dk_compensation_rank = o.dk_compensation_rank;
    p.forward_stats = o.forward_stats;
    p.basis_from_forward = o.basis_from_forward;
    p.fp16_dout_side = o.fp16_dout_side && p.variant == Variant::kGproj;  // (gproj's form; the others have none)
    check_thresh_options(p);
    variants.push_back(p);
  }
  if (variants.empty()) throw Error(ErrorCode::kInvalidArgument, "--variants lists no variant");
  const std::vector<Device> devices = devices_for(o.device, log);

  std::vector<StressCase> cases;
  if (!o.suite.empty()) cases = stress_suite(o.data_dir.empty() ? default_data_dir() : o.data_dir, o.cases);
  // Each state file is read once before any case runs (and again, one at a time, when its turn comes), so that a
  // missing, truncated or non-finite file fails at once instead of after the cases before it, whose results would
  // be lost with it.
  for (const std::string& path : o.states) (void)load_state(path, o.allow_nonfinite);
  if (!o.json_path.empty()) check_writable(o.json_path);  // and that the reports can be written
  if (!o.markdown_path.empty()) check_writable(o.markdown_path);
  for (const std::string& path : o.states) {
    cases.push_back({path, "file", "state file", [path, allow = o.allow_nonfinite] { return load_state(path, allow); }});
  }

  CheckReport report;
  report.env = collect_env(variants);
  report.bounds = parse_bounds(o.fail_above);
  bool line_open = false;  // a case's progress line is on stderr without its newline
  try {
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const StressCase& c = cases[ci];
      if (log) fmt::print(log, "[{}/{}] {}: float64 oracle ...", ci + 1, cases.size(), c.name);
      if (log) std::fflush(log);
      line_open = log != nullptr;
      const AttentionState state = c.make();
      const OracleRun oracle = run_oracle(state);
      CaseInfo info{c.name, c.group, c.mechanism,
                    std::vector<int64_t>(state.q.shape.begin(), state.q.shape.end()),
                    std::vector<int64_t>(state.k.shape.begin(), state.k.shape.end()), state.causal,
                    state_scale(state), oracle.seconds};
      report.cases.push_back(info);
      if (log) fmt::print(log, " {:.1f}s;", oracle.seconds);
      for (Device d : devices)
        for (const FlashParams& p : variants) {
          VariantRun r;
          try {
            r = run_variant(state, p, oracle, d);
          } catch (const Error& e) {
            // A device that cannot run this case (an unsupported D on CUDA) is reported, not fatal.
            if (d == Device::kCpu || e.code() != ErrorCode::kUnsupported) throw;
            CheckRow row;
            row.case_name = c.name;
            row.variant = variant_name(p.variant);
            row.device = device_name(d);
            row.skipped = e.what();
            report.rows.push_back(row);
            if (log) fmt::print(log, " {} skipped", variant_name(p.variant));
            continue;
          }
          report.rows.push_back({c.name, variant_name(p.variant), device_name(d), r.o, r.lse, r.dq, r.dk, r.dv,
                                 r.bwd.diag.rowsum_max_before, r.bwd.diag.rowsum_max_after,
                                 r.bwd.diag.dk_colsum_ratio, r.seconds_forward + r.seconds_backward, "",
                                 r.fwd.kernels == r.bwd.kernels ? r.fwd.kernels
                                                                : r.fwd.kernels + "; " + r.bwd.kernels});
          if (log) fmt::print(log, " {} {:.1f}s", variant_name(p.variant), r.seconds_forward + r.seconds_backward);
          if (log) std::fflush(log);
        }
      if (log) fmt::print(log, "\n");
      line_open = false;
    }
  } catch (...) {
    if (line_open) fmt::print(log, "\n");  // the error's message on a line of its own
    throw;
  }

  fmt::print(out, "{}", to_table(report));
  if (!o.json_path.empty()) write_text_atomic(o.json_path, to_json(report).dump(2) + "\n");
  if (!o.markdown_path.empty()) write_text_atomic(o.markdown_path, to_markdown(report));
  int failed = 0;
  for (const CheckRow& row : report.rows) failed += violations(row, report.bounds).empty() ? 0 : 1;
  if (!report.bounds.empty()) {
    fmt::print(out, "{}: {} of {} rows exceed the --fail-above bounds\n", failed ? "FAILED" : "passed", failed,
               report.rows.size());
  }
  return failed ? 1 : 0;
}

}  // namespace gproj::cli
