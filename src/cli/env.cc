// Collects the provenance of a report: build facts, the machine, and the parameters of each variant run.
// Exercised by tests/cli/check_test.cc.
#include "cli/env.h"

#include <omp.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <string>

#include "gproj/backend.h"
#include "gproj/build_info.h"

namespace gproj::cli {

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown";
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

nlohmann::json variant_params_json(const FlashParams& p) {
  nlohmann::json j = {{"variant", variant_name(p.variant)},
                      {"block_q", p.block_q},
                      {"block_k", p.block_k},
                      {"accumulation", "ieee_fp32"},
                      {"allow_nonfinite", p.allow_nonfinite},
                      {"deterministic", p.deterministic}};
  if (p.variant == Variant::kFwdfix || p.variant == Variant::kGproj) {
    j["fwdfix_beta"] = p.fwdfix_beta;
    j["fwdfix_tie_tol"] = p.fwdfix_tie_tol;
    j["fwdfix_max_shift"] = p.fwdfix_max_shift;
  }
  if (p.variant == Variant::kGproj) {
    j["projection"] = projection_name(p.projection);
    const Projection q = p.projection;
    if (q == Projection::kTopK || q == Projection::kTopKRest || q == Projection::kTopKLowRank) j["topk"] = p.topk;
    if (q == Projection::kThreshLowRank) {
      j["thresh_k"] = p.thresh_k;
      j["stats_from"] = p.forward_stats ? "forward" : "backward";
      j["basis_from"] = p.basis_from_forward ? "forward" : "backward";
    }
    if (p.dk_compensation_rank != 0) j["dk_compensation_rank"] = p.dk_compensation_rank;
    if (q == Projection::kFp16LowRank) j["inv_l_on"] = p.fp16_dout_side ? "do" : "p";
    if (q == Projection::kLowRank || q == Projection::kTopKLowRank || q == Projection::kThreshLowRank ||
        q == Projection::kFp16LowRank) {
      j["lowrank_rank"] = p.lowrank_rank;
    }
    if (q == Projection::kTopKLowRank || q == Projection::kThreshLowRank || q == Projection::kFp16LowRank) {
      j["basis_key_stride"] = p.basis_key_stride;
    }
  }
  if (p.cuda_backward_warps != 4 || p.cuda_wgmma_forward != -1 || p.cuda_backward_wgmma != -1) {  // chosen kernels
    j["cuda_backward_warps"] = p.cuda_backward_warps;
    j["cuda_wgmma_forward"] = p.cuda_wgmma_forward;
    j["cuda_backward_wgmma"] = p.cuda_backward_wgmma;
  }
  return j;
}

nlohmann::json collect_env(const std::vector<FlashParams>& variants) {
  nlohmann::json j = {{"gproj_version", build_version()},
                      {"git_commit", build_git_commit()},
                      {"build_type", build_type()},
                      {"compiler", build_compiler()},
                      {"cpu_model", cpu_model()},
                      {"threads", omp_get_max_threads()},
                      {"date_utc", utc_now()},
                      {"oracle", "float64, no rounding"}};
  std::string why;
  if (device_available(Device::kCuda, &why)) {
    j["cuda"] = {{"available", true}};
    for (const auto& [key, value] : device_properties(Device::kCuda)) j["cuda"][key] = value;
  } else {
    j["cuda"] = {{"available", false}, {"reason", why}};
  }
  j["variants"] = nlohmann::json::object();
  for (const FlashParams& p : variants) j["variants"][variant_name(p.variant)] = variant_params_json(p);
  return j;
}

}  // namespace gproj::cli
