// The gproj command line: `check` (the audit), `run` (one variant's outputs), `stress` (the built-in cases),
// `study` (projection candidates). Exit codes: 0 ok, 1 --fail-above bounds exceeded, 2 error.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cstdio>
#include <exception>

#include "cli/check.h"
#include "cli/commands.h"
#include "cli/study.h"
#include "gproj/error.h"
#include "gproj/stress.h"

namespace {
// --stats-from forward|backward: where thresh-lowrank's P (K U) and s_i come from (FlashParams::forward_stats).
void add_stats_from(CLI::App* cmd, bool& forward_stats) {
  cmd->add_option_function<std::string>(
         "--stats-from", [&forward_stats](const std::string& v) { forward_stats = v == "forward"; },
         "thresh-lowrank: P (K U) and s_i from the backward's bf16(P) (backward, the default) or from the "
         "forward's (forward: CUDA forward v2.3 and backward v3.9; docs/gproj-forward-stats.md)")
      ->check(CLI::IsMember({"forward", "backward"}));
}
// --basis-from forward|backward: where thresh-lowrank's basis of K is formed on CUDA (FlashParams::basis_from_forward).
void add_basis_from(CLI::App* cmd, bool& from_forward) {
  cmd->add_option_function<std::string>(
         "--basis-from", [&from_forward](const std::string& v) { from_forward = v == "forward"; },
         "thresh-lowrank on CUDA: K's basis formed by the backward (backward, the default) or beside the forward "
         "kernel and handed to the backward, as the PyTorch op does (forward; docs/gproj-forward-basis.md). The "
         "same basis either way; the CPU has one form")
      ->check(CLI::IsMember({"forward", "backward"}));
}
// --fp16-dout-side: fp16-lowrank's form with 1 / l on dO's side (FlashParams::fp16_dout_side; CPU emulator only).
void add_fp16_dout_side(CLI::App* cmd, bool& flag) {
  cmd->add_flag("--fp16-dout-side", flag,
                "fp16-lowrank (variant gproj), experimental, CPU emulator only so far: 1 / l on dO's side (dP, "
                "delta and dV from fp16(dO / l); docs/design-fp16-projection.md)");
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gproj: audit BF16 attention forward and backward against a float64 oracle"};
  app.require_subcommand(1);
  app.set_version_flag("--version", GPROJ_VERSION);

  gproj::cli::CheckOptions check;
  CLI::App* check_cmd = app.add_subcommand("check", "Check variants on the stress suite and/or state files");
  check_cmd->add_option("--suite", check.suite, "built-in suite to run (stress)");
  check_cmd->add_option("--cases", check.cases, "only these stress cases or groups (synthetic, real)")->delimiter(',');
  check_cmd->add_option("--state", check.states, "attention state files (safetensors: q, k, v, do)");
  check_cmd->add_option("--variants", check.variants, "comma-separated: fp32, baseline, fwdfix, gproj")
      ->capture_default_str();
  check_cmd->add_option("--device", check.device, "cpu, cuda or all (all: CPU, and CUDA when present)")
      ->capture_default_str();
  check_cmd->add_option("--json", check.json_path, "write the JSON report here (atomically)");
  check_cmd->add_option("--markdown", check.markdown_path, "write a Markdown report here (atomically)");
  check_cmd->add_option("--fail-above", check.fail_above,
                        "exit 1 if exceeded: [variant:]metric=fraction,... metric in o, dq, dk, dv");
  check_cmd->add_option("--data-dir", check.data_dir, "folder of the real captured states (default: tests/data)");
  check_cmd->add_flag("--allow-nonfinite", check.allow_nonfinite, "compute on NaN/Inf inputs instead of refusing");
  check_cmd->add_flag("--deterministic", check.deterministic,
                      "CUDA: backward without atomics (same bits every run; gproj: with --projection pweighted)");
  check_cmd->add_option("--projection", check.projection,
                        "GProj's projection for the gproj variant (default fp16-lowrank; e.g. thresh-lowrank, "
                        "pweighted)");
  check_cmd->add_option("--dk-compensation", check.dk_compensation_rank,
                        "gproj variant with --projection thresh-lowrank, experimental: compensate dK's BF16 rounding "
                        "through this many directions of Q (0: off)")
      ->check(CLI::Range(0, 256));
  add_stats_from(check_cmd, check.forward_stats);
  add_basis_from(check_cmd, check.basis_from_forward);
  add_fp16_dout_side(check_cmd, check.fp16_dout_side);
  check_cmd->add_flag("--quiet", check.quiet, "no progress on stderr");

  gproj::cli::RunOptions run;
  CLI::App* run_cmd = app.add_subcommand("run", "Run one variant on a state and write its outputs (F32 safetensors)");
  run_cmd->add_option("--state", run.state, "attention state file")->required();
  run_cmd->add_option("--variant", run.variant, "fp32, baseline, fwdfix or gproj")->capture_default_str();
  run_cmd->add_option("--device", run.device, "cpu or cuda")->capture_default_str();
  run_cmd->add_option("--out", run.out, "output file: o, lse, dq, dk, dv as F32")->required();
  run_cmd->add_flag("--allow-nonfinite", run.allow_nonfinite, "compute on NaN/Inf inputs instead of refusing");
  run_cmd->add_flag("--deterministic", run.deterministic,
                    "CUDA: backward without atomics (same bits every run; gproj: with --projection pweighted)");
  run_cmd->add_option("--projection", run.projection, "GProj's projection for the gproj variant (default fp16-lowrank)");
  run_cmd->add_option("--dk-compensation", run.dk_compensation_rank,
                      "gproj variant with --projection thresh-lowrank, experimental: compensate dK's BF16 rounding "
                      "through this many directions of Q")
      ->check(CLI::Range(0, 256));

  add_stats_from(run_cmd, run.forward_stats);
  add_basis_from(run_cmd, run.basis_from_forward);
  add_fp16_dout_side(run_cmd, run.fp16_dout_side);

  bool list = false;
  std::string write_dir, data_dir;
  CLI::App* stress_cmd = app.add_subcommand("stress", "List the built-in stress cases or write them as state files");
  stress_cmd->add_flag("--list", list, "describe every case");
  stress_cmd->add_option("--write", write_dir, "write every case as DIR/<case>.safetensors");
  stress_cmd->add_option("--data-dir", data_dir, "folder of the real captured states (default: tests/data)");

  gproj::StudyOptions study;
  CLI::App* study_cmd = app.add_subcommand("study", "Compare the GProj projection candidates on states (Markdown)");
  study_cmd->add_option("--state", study.states, "state files (safetensors)");
  study_cmd->add_flag("!--no-synthetic", study.synthetic, "skip the seeded synthetic cases");
  study_cmd->add_option("--rank", study.lowrank_rank, "rank of the low-rank projection")->check(CLI::Range(1, 256));
  study_cmd->add_option("--topk", study.topk, "k values of the top-k projection")->check(CLI::Range(1, 64));
  study_cmd->add_option("--block", study.block, "tile size (block_q = block_k)")->check(CLI::Range(1, 1024));
  study_cmd->add_option("--basis-stride", study.basis_strides,
                        "low-rank tails: the basis from every s-th block of 64 keys (values to compare; default: "
                        "the library's, 4)")
      ->check(CLI::Range(1, 1024));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  try {
    if (check_cmd->parsed()) return gproj::cli::run_check(check, stdout);
    if (run_cmd->parsed()) return gproj::cli::run_one(run, stdout);
    if (stress_cmd->parsed()) {
      const std::string dir = data_dir.empty() ? gproj::default_data_dir() : data_dir;
      if (!write_dir.empty()) return gproj::cli::write_stress(write_dir, dir, stdout);
      if (list) return gproj::cli::list_stress(dir, stdout);
      fmt::print(stderr, "gproj stress: give --list or --write DIR\n");
      return 2;
    }
    if (study_cmd->parsed()) return gproj::run_study(study, stdout);
  } catch (const gproj::Error& e) {
    fmt::print(stderr, "gproj: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "gproj: unexpected error: {}\n", e.what());
    return 2;
  }
  return 0;
}
