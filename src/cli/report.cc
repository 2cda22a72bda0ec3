// JSON, Markdown and terminal forms of the audit report, and the --fail-above bounds.
// Exercised by tests/cli/report_test.cc.
#include "cli/report.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "gproj/error.h"

namespace gproj::cli {

namespace {

double metric(const CheckRow& row, const std::string& name) {
  if (name == "o") return row.o.rel_fro;
  if (name == "dq") return row.dq.rel_fro;
  if (name == "dk") return row.dk.rel_fro;
  return row.dv.rel_fro;
}

nlohmann::json error_json(const ErrorStats& e) {
  auto num = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
  return {{"rel_fro", num(e.rel_fro)},
          {"max_abs", num(e.max_abs)},
          {"max_index", std::vector<int64_t>(e.max_index.begin(), e.max_index.end())},
          {"ref_norm", num(e.ref_norm)}};
}

std::string pct(double x) { return std::isfinite(x) ? fmt::format("{:.3f}%", 100 * x) : std::string("nan"); }

}  // namespace

std::vector<Bound> parse_bounds(const std::string& spec) {
  std::vector<Bound> out;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    Bound b;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      throw Error(ErrorCode::kInvalidArgument, "--fail-above item '" + item + "' is not [variant:]metric=value");
    }
    std::string key = item.substr(0, eq);
    const size_t colon = key.find(':');
    if (colon != std::string::npos) {
      b.variant = key.substr(0, colon);
      key = key.substr(colon + 1);
    }
    if (key != "o" && key != "dq" && key != "dk" && key != "dv") {
      throw Error(ErrorCode::kInvalidArgument,
                  "--fail-above metric '" + key + "' in '" + item + "' is not one of o, dq, dk, dv");
    }
    b.metric = key;
    const std::string value = item.substr(eq + 1);
    char* end = nullptr;
    b.limit = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !std::isfinite(b.limit) || b.limit < 0) {
      throw Error(ErrorCode::kInvalidArgument,
                  "--fail-above value '" + value + "' in '" + item + "' is not a finite fraction >= 0 (0.005 = 0.5%)");
    }
    out.push_back(b);
  }
  return out;
}

std::vector<std::string> violations(const CheckRow& row, const std::vector<Bound>& bounds) {
  std::vector<std::string> out;
  if (!row.skipped.empty()) return out;
  for (const Bound& b : bounds) {
    if (!b.variant.empty() && b.variant != row.variant) continue;
    const double x = metric(row, b.metric);
    if (!(x <= b.limit)) out.push_back(fmt::format("{} {:.4g} > {:.4g}", b.metric, x, b.limit));
  }
  return out;
}

nlohmann::json to_json(const CheckReport& r) {
  nlohmann::json j;
  j["env"] = r.env;
  j["cases_info"] = nlohmann::json::array();
  for (const CaseInfo& c : r.cases) {
    j["cases_info"].push_back({{"case", c.name},
                               {"group", c.group},
                               {"mechanism", c.mechanism},
                               {"q_shape", c.q_shape},
                               {"k_shape", c.k_shape},
                               {"causal", c.causal},
                               {"softmax_scale", c.softmax_scale},
                               {"oracle_seconds", c.oracle_seconds}});
  }
  j["cases"] = nlohmann::json::array();
  bool ok = true;
  for (const CheckRow& row : r.rows) {
    auto num = [](double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); };
    const std::vector<std::string> v = violations(row, r.bounds);
    ok = ok && v.empty();
    j["cases"].push_back({{"case", row.case_name},
                          {"variant", row.variant},
                          {"device", row.device},
                          {"errors", {{"o", num(row.o.rel_fro)}, {"dq", num(row.dq.rel_fro)},
                                      {"dk", num(row.dk.rel_fro)}, {"dv", num(row.dv.rel_fro)},
                                      {"lse", num(row.lse.rel_fro)}}},
                          {"details", {{"o", error_json(row.o)}, {"dq", error_json(row.dq)},
                                       {"dk", error_json(row.dk)}, {"dv", error_json(row.dv)}}},
                          {"rowsum_max", num(row.rowsum_max_after)},
                          {"rowsum_max_before_projection", num(row.rowsum_max_before)},
                          {"dk_colsum_ratio", num(row.dk_colsum_ratio)},
                          {"seconds", row.seconds},
                          {"skipped", row.skipped.empty() ? nlohmann::json(nullptr) : nlohmann::json(row.skipped)},
                          {"kernels", row.kernels.empty() ? nlohmann::json(nullptr) : nlohmann::json(row.kernels)},
                          {"violations", v}});
  }
  j["bounds"] = nlohmann::json::array();
  for (const Bound& b : r.bounds) j["bounds"].push_back({{"variant", b.variant}, {"metric", b.metric}, {"limit", b.limit}});
  j["passed"] = ok;
  return j;
}

std::string to_markdown(const CheckReport& r) {
  std::string s = "# gproj check\n\n";
  s += fmt::format("gproj {} ({}), {} build, {}; {} threads on {}.\n\n", r.env.value("gproj_version", "?"),
                   r.env.value("git_commit", "?"), r.env.value("build_type", "?"), r.env.value("compiler", "?"),
                   r.env.value("threads", 0), r.env.value("cpu_model", "?"));
  s += "Errors are ||x - x_ref||_F / ||x_ref||_F against a float64 oracle.\n\n";
  s += "| case | variant | device | O | dQ | dK | dV | max abs r | sum dK ratio | s | bounds |\n";
  s += "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const CheckRow& row : r.rows) {
    if (!row.skipped.empty()) {
      s += fmt::format("| {} | {} | {} | | | | | | | | skipped: {} |\n", row.case_name, row.variant, row.device,
                       row.skipped);
      continue;
    }
    const std::vector<std::string> v = violations(row, r.bounds);
    std::string b = v.empty() ? "ok" : "";
    for (const std::string& x : v) b += (b.empty() ? "" : "; ") + x;
    s += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {:.2e} | {:.2e} | {:.2f} | {} |\n", row.case_name,
                     row.variant, row.device, pct(row.o.rel_fro), pct(row.dq.rel_fro), pct(row.dk.rel_fro),
                     pct(row.dv.rel_fro), row.rowsum_max_after, row.dk_colsum_ratio, row.seconds, b);
  }
  // What ran: each device and variant's kernels (a CUDA launch names them; rows with other kernels listed apart)
  // and the variants' parameters, so a report shows e.g. whether auto mode fell back to v1.
  std::vector<std::pair<std::string, std::string>> ran;  // ("variant on device", kernels), first-seen order
  for (const CheckRow& row : r.rows) {
    if (!row.skipped.empty() || row.kernels.empty()) continue;
    const std::pair<std::string, std::string> k{row.variant + " on " + row.device, row.kernels};
    if (std::find(ran.begin(), ran.end(), k) == ran.end()) ran.push_back(k);
  }
  const nlohmann::json* variants = r.env.contains("variants") ? &r.env.at("variants") : nullptr;
  if (!ran.empty() || (variants != nullptr && variants->is_object())) {
    s += "\n## What ran\n\n";
    for (const auto& [who, kernels] : ran) s += fmt::format("- {}: {}\n", who, kernels);
    if (variants != nullptr && variants->is_object()) {
      for (auto it = variants->begin(); it != variants->end(); ++it) {
        if (!it.value().contains("projection")) continue;
        std::string params;
        for (const char* key : {"projection", "thresh_k", "lowrank_rank", "topk", "dk_compensation_rank"}) {
          if (it.value().contains(key)) params += fmt::format("{}{} {}", params.empty() ? "" : ", ", key, it.value().at(key).dump());
        }
        s += fmt::format("- {} parameters: {}\n", it.key(), params);
      }
    }
  }
  s += "\n## Cases\n\n| case | group | q (B, Nq, H, D) | k (B, Nk, Hkv, D) | causal | what it isolates |\n";
  s += "|---|---|---|---|---|---|\n";
  for (const CaseInfo& c : r.cases) {
    auto shape = [](const std::vector<int64_t>& v) {
      std::string t = "(";
      for (size_t i = 0; i < v.size(); ++i) t += (i ? ", " : "") + std::to_string(v[i]);
      return t + ")";
    };
    s += fmt::format("| {} | {} | {} | {} | {} | {} |\n", c.name, c.group, shape(c.q_shape), shape(c.k_shape),
                     c.causal ? "yes" : "no", c.mechanism);
  }
  return s;
}

std::string to_table(const CheckReport& r) {
  std::string s = fmt::format("{:<24} {:<9} {:<5} {:>8} {:>8} {:>8} {:>8} {:>10} {:>9} {:>7}  {}\n", "case", "variant",
                              "dev", "O", "dQ", "dK", "dV", "max|r|", "|sum dK|", "sec", "bounds");
  for (const CheckRow& row : r.rows) {
    if (!row.skipped.empty()) {
      s += fmt::format("{:<24} {:<9} {:<5} skipped: {}\n", row.case_name, row.variant, row.device, row.skipped);
      continue;
    }
    const std::vector<std::string> v = violations(row, r.bounds);
    std::string b = r.bounds.empty() ? "" : v.empty() ? "ok" : "FAIL";
    for (const std::string& x : v) b += " " + x;
    s += fmt::format("{:<24} {:<9} {:<5} {:>8} {:>8} {:>8} {:>8} {:>10.2e} {:>9.2e} {:>7.2f}  {}\n", row.case_name,
                     row.variant, row.device, pct(row.o.rel_fro), pct(row.dq.rel_fro), pct(row.dk.rel_fro),
                     pct(row.dv.rel_fro), row.rowsum_max_after, row.dk_colsum_ratio, row.seconds, b);
  }
  return s;
}

}  // namespace gproj::cli
