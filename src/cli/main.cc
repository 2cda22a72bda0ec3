// The gproj command line. For now one subcommand, `demo`: the dQ bias of a BF16 backward and its fix on the CPU.
// Exercised by the README's main-job command and tests/cli (exit codes); `gproj check` replaces it next.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cstdio>
#include <exception>

#include "cli/demo.h"
#include "cli/study.h"
#include "gproj/error.h"

int main(int argc, char** argv) {
  CLI::App app{"gproj: BF16 attention whose gradients are right (CPU emulator, float64 oracle)"};
  app.require_subcommand(1);
  gproj::DemoOptions demo;
  CLI::App* demo_cmd = app.add_subcommand("demo", "Show the dQ bias of BF16 attention and GProj's fix on seeded states");
  demo_cmd->add_option("--seq", demo.seq, "sequence length N of the synthetic states")->check(CLI::Range(1, 65536));
  demo_cmd->add_option("--heads", demo.heads, "heads H")->check(CLI::Range(1, 256));
  demo_cmd->add_option("--dim", demo.dim, "head dimension D")->check(CLI::Range(8, 256));
  demo_cmd->add_option("--seed", demo.seed, "random seed");
  demo_cmd->add_option("--state", demo.states, "also run on these state files (safetensors)");
  gproj::StudyOptions study;
  CLI::App* study_cmd = app.add_subcommand("study", "Compare the GProj projection candidates on states (Markdown)");
  study_cmd->add_option("--state", study.states, "state files (safetensors)");
  study_cmd->add_flag("!--no-synthetic", study.synthetic, "skip the seeded synthetic cases");
  study_cmd->add_option("--rank", study.lowrank_rank, "rank of the low-rank projection")->check(CLI::Range(1, 256));
  study_cmd->add_option("--topk", study.topk, "k values of the top-k projection")->check(CLI::Range(1, 64));
  study_cmd->add_option("--block", study.block, "tile size (block_q = block_k)")->check(CLI::Range(1, 1024));
  CLI11_PARSE(app, argc, argv);
  try {
    if (demo_cmd->parsed()) return gproj::run_demo(demo, stdout);
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
