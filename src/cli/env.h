// Provenance recorded with every report: gproj version and commit, build, compiler, CPU, threads, devices,
// time, and each variant's parameters. Exercised by tests/cli/check_test.cc (the JSON schema).
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "gproj/attention.h"

namespace gproj::cli {

nlohmann::json variant_params_json(const FlashParams& p);
nlohmann::json collect_env(const std::vector<FlashParams>& variants);

}  // namespace gproj::cli
