// `gproj run` and `gproj stress`: one variant's outputs as a safetensors file; the stress suite listed or
// written as state files. Exercised by tests/cli/commands_test.cc.
#include "cli/commands.h"

#include <fmt/core.h>

#include <cstring>
#include <filesystem>
#include <utility>

#include "cli/env.h"
#include "gproj/backend.h"
#include "gproj/build_info.h"
#include "gproj/error.h"
#include "gproj/evaluate.h"
#include "gproj/safetensors.h"
#include "gproj/stress.h"
#include "io/file.h"

namespace gproj::cli {

namespace {

template <class T>
StoredTensor as_f32(const Tensor<T>& t, const std::function<float(T)>& to_float) {
  StoredTensor s;
  s.dtype = DType::kF32;
  s.shape.assign(t.shape.begin(), t.shape.begin() + t.rank);
  s.bytes.resize(t.values.size() * sizeof(float));
  for (size_t i = 0; i < t.values.size(); ++i) {
    const float x = to_float(t.values[i]);
    std::memcpy(&s.bytes[i * sizeof(float)], &x, sizeof(float));  // little-endian hosts only (x86-64, arm64)
  }
  return s;
}

std::string shape_text(const Tensor<bf16>& t) { return format_extents(t.rank, t.shape); }

}  // namespace

void check_thresh_options(const FlashParams& p) {
  if (p.variant != Variant::kGproj || effective_projection(p) == Projection::kThreshLowRank) return;
  for (const auto& [set, flag] : {std::pair<bool, const char*>{p.forward_stats, "--stats-from forward"},
                                  {p.basis_from_forward, "--basis-from forward"}}) {
    if (set) {
      throw Error(ErrorCode::kInvalidArgument, std::string(flag) + " is an option of projection thresh-lowrank; the " +
                                                   "gproj variant runs " + projection_name(p.projection) +
                                                   " (add --projection thresh-lowrank)");
    }
  }
}

int run_one(const RunOptions& o, std::FILE* out) {
  const Device device = parse_device(o.device);
  FlashParams p;
  p.variant = parse_variant(o.variant);
  p.allow_nonfinite = o.allow_nonfinite;
  p.deterministic = o.deterministic;
  if (!o.projection.empty()) p.projection = parse_projection(o.projection);
  p.dk_compensation_rank = o.dk_compensation_rank;
  p.forward_stats = o.forward_stats;
  p.basis_from_forward = o.basis_from_forward;
  p.fp16_dout_side = o.fp16_dout_side;
  check_thresh_options(p);
  const AttentionState s = load_state(o.state, o.allow_nonfinite);
  check_writable(o.out);  // before the work, not after it
  p.causal = s.causal;
  p.softmax_scale = state_scale(s);
  const ForwardResult f = attention_forward(device, s.q.view(), s.k.view(), s.v.view(), p);
  const BackwardResult b = attention_backward(device, s.q.view(), s.k.view(), s.v.view(), f.o.view(),
                                              f.o_fp32.view(), f.lse.view(), s.dout.view(), p);
  SafetensorsFile file;
  const std::function<float(bf16)> from_bf16 = [](bf16 x) { return x.to_float(); };
  const std::function<float(float)> same = [](float x) { return x; };
  file.tensors["o"] = as_f32(f.o, from_bf16);
  file.tensors["lse"] = as_f32(f.lse, same);
  file.tensors["dq"] = as_f32(b.dq, from_bf16);
  file.tensors["dk"] = as_f32(b.dk, from_bf16);
  file.tensors["dv"] = as_f32(b.dv, from_bf16);
  file.metadata = {{"variant", variant_name(p.variant)},
                   {"device", device_name(device)},
                   {"params", variant_params_json(p).dump()},
                   {"source_state", o.state},
                   {"causal", s.causal ? "true" : "false"},
                   {"softmax_scale", fmt::format("{:.9g}", *p.softmax_scale)},
                   {"gproj_version", build_version()},
                   {"git_commit", build_git_commit()}};
  write_safetensors(o.out, file);
  fmt::print(out, "wrote {}: o, lse, dq, dk, dv (F32) of variant {} on {}; q {} k {}\n", o.out,
             variant_name(p.variant), device_name(device), shape_text(s.q), shape_text(s.k));
  return 0;
}

int list_stress(const std::string& data_dir, std::FILE* out) {
  for (const StressCase& c : stress_suite(data_dir)) {
    const AttentionState s = c.make();
    fmt::print(out, "{:<24} {:<9} q {:<22} k {:<22} {:<7} {}\n", c.name, c.group, shape_text(s.q), shape_text(s.k),
               s.causal ? "causal" : "full", c.mechanism);
  }
  if (real_stress_cases(data_dir).empty()) {
    fmt::print(out, "(no real states found in {}; set GPROJ_DATA_DIR to the project's tests/data)\n", data_dir);
  }
  return 0;
}

int write_stress(const std::string& dir, const std::string& data_dir, std::FILE* out) {
  std::filesystem::create_directories(dir);
  for (const StressCase& c : stress_suite(data_dir)) {
    const std::string path = (std::filesystem::path(dir) / (c.name + ".safetensors")).string();
    AttentionState s = c.make();
    s.provenance["case"] = c.name;
    save_state(path, s);
    fmt::print(out, "wrote {}\n", path);
  }
  return 0;
}

}  // namespace gproj::cli
