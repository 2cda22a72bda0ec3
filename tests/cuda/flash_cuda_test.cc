// The CUDA kernels against the float64 oracle (derived tolerances) and against the CPU emulator of the same
// variant, on the awkward sizes and the stress suite. Skipped, with the reason, where no GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cpu/test_support.h"
#include <cuda_runtime.h>

#include "gproj/backend.h"
#include "gproj/cuda/attention_cuda.h"
#include "gproj/error.h"
#include "gproj/stress.h"
#include "gproj/synthetic.h"

namespace gproj {
namespace {

std::string gpu_missing() {
  std::string why;
  return device_available(Device::kCuda, &why) ? std::string() : why;
}

// Skips the calling test, with the reason, when no GPU is usable (GTEST_SKIP returns from the test body).
#define GPROJ_REQUIRE_GPU()                                                            \
  if (const std::string why = gpu_missing(); !why.empty()) GTEST_SKIP() << "CUDA tests need a GPU: " << why

// GPU and CPU run the same algorithm with the same tiles; they differ only in FP32 summation order, so
// their outputs may differ by a few BF16 rounding flips: at most a third of one output rounding, relative.
void expect_close_to_cpu(const ErrorStats& gpu_vs_cpu, const TensorView<const double>& ref, const char* what) {
  EXPECT_LE(gpu_vs_cpu.rel_fro, bf16_rounding_error(ref) / 3 + 1e-7) << what << ": " << describe(gpu_vs_cpu);
}

// A GPU run against the float64 oracle (tolerances derived from `ref`, the CUDA fp32 variant on the same state)
// and against `cpu`, the CPU emulator's run of the same variant: the forward's O, the backward's dQ, dK, dV, or
// both (`parts`).
enum Parts { kForward = 1, kBackward = 2 };
void expect_matches_oracle_and_cpu(const VariantRun& gpu, const VariantRun& cpu, const VariantRun& ref,
                                   const OracleRun& oracle, int parts, const std::string& what) {
  if (parts & kForward) {
    EXPECT_LE(gpu.o.rel_fro, test::derived(ref.o, oracle.fwd.o.view())) << what;
    const Tensor<double> cpu_o = to_double(cpu.fwd.o.view());
    expect_close_to_cpu(compare(gpu.fwd.o.view(), cpu_o.view()), oracle.fwd.o.view(), (what + " O vs CPU").c_str());
  }
  if (parts & kBackward) {
    const test::Tolerances tol = test::derive_tolerances(ref, oracle);
    EXPECT_LE(gpu.dq.rel_fro, tol.dq) << what;
    EXPECT_LE(gpu.dk.rel_fro, tol.dk) << what;
    EXPECT_LE(gpu.dv.rel_fro, tol.dv) << what;
    const Tensor<double> cpu_dq = to_double(cpu.bwd.dq.view()), cpu_dk = to_double(cpu.bwd.dk.view()),
                         cpu_dv = to_double(cpu.bwd.dv.view());
    expect_close_to_cpu(compare(gpu.bwd.dq.view(), cpu_dq.view()), oracle.bwd.dq.view(), (what + " dQ vs CPU").c_str());
    expect_close_to_cpu(compare(gpu.bwd.dk.view(), cpu_dk.view()), oracle.bwd.dk.view(), (what + " dK vs CPU").c_str());
    expect_close_to_cpu(compare(gpu.bwd.dv.view(), cpu_dv.view()), oracle.bwd.dv.view(), (what + " dV vs CPU").c_str());
  }
}

class CudaSweep : public ::testing::TestWithParam<test::Case> {};

// A variant's parameters for the tests below that sweep variants or take gproj's thresh-lowrank kernels: thresh-lowrank
// named rather than FlashParams' default projection, so that those kernels stay covered whatever the default is
// (fp16-lowrank's kernels have tests of their own: Fp16LowRankMatchesOracleAndCpu, fp16_lowrank_forward_test.cc).
FlashParams sweep_params(Variant v) { return test::params_for(v, Projection::kThreshLowRank); }

// An awkward case at the kernels' tiles (64 x 64): its state (seeded per test and size), the float64 oracle and
// the CUDA fp32 run, the reference of the derived tolerances.
struct SweepInputs {
  AttentionState s;
  OracleRun oracle;
  VariantRun ref;
};
SweepInputs sweep_inputs(test::Case c, uint64_t seed) {
  c.block_q = c.block_k = 64;
  SweepInputs in{test::state_for(c, seed + c.Nq * 3 + c.Nk), {}, {}};
  in.oracle = run_oracle(in.s);
  in.ref = run_variant(in.s, test::params_for(Variant::kFp32), in.oracle, Device::kCuda);
  return in;
}
#define GPROJ_REQUIRE_CUDA_HEAD_DIM(c) \
  if ((c).D != 64 && (c).D != 128) GTEST_SKIP() << "CUDA kernels support D = 64, 128"

TEST_P(CudaSweep, EveryVariantMatchesOracleAndCpu) {
  GPROJ_REQUIRE_GPU();
  const test::Case c = GetParam();
  GPROJ_REQUIRE_CUDA_HEAD_DIM(c);
  const SweepInputs in = sweep_inputs(c, 3000);
  const AttentionState& s = in.s;
  const OracleRun& oracle = in.oracle;
  const VariantRun& ref = in.ref;
  for (Variant v : all_variants()) {
    const VariantRun gpu = run_variant(s, sweep_params(v), oracle, Device::kCuda);
    const VariantRun cpu = run_variant(s, sweep_params(v), oracle, Device::kCpu);
    test::print_evidence(std::string("cuda ") + variant_name(v), gpu);
    expect_matches_oracle_and_cpu(gpu, cpu, ref, oracle, kForward | kBackward, variant_name(v));
  }
}

// The experimental wide backward (FlashParams::cuda_backward_warps = 8) for the variants it serves.
TEST_P(CudaSweep, WideBackwardMatchesOracleAndCpu) {
  GPROJ_REQUIRE_GPU();
  const test::Case c = GetParam();
  GPROJ_REQUIRE_CUDA_HEAD_DIM(c);
  const SweepInputs in = sweep_inputs(c, 5000);
  const AttentionState& s = in.s;
  const OracleRun& oracle = in.oracle;
  const VariantRun& ref = in.ref;
  for (Variant v : {Variant::kBaseline, Variant::kFwdfix}) {
    FlashParams p = test::params_for(v);
    p.cuda_backward_warps = 8;
    const VariantRun gpu = run_variant(s, p, oracle, Device::kCuda);
    const VariantRun cpu = run_variant(s, test::params_for(v), oracle, Device::kCpu);
    expect_matches_oracle_and_cpu(gpu, cpu, ref, oracle, kBackward, std::string("wide ") + variant_name(v));
  }
}

// Each backward main kernel for baseline and fwdfix (FlashParams::cuda_backward_wgmma: 0 = the v1 mma.sync
// kernels, 1 = v3.0, 2 = v3.1, 3 = v3.2, 4 = v3.3 at D = 128; auto takes v3.2 at D = 128, v3.1 at D = 64): the same oracle and CPU
// agreement; refusals in
// Cuda.UnsupportedRequestsAreErrors.
TEST_P(CudaSweep, WgmmaBackwardMatchesOracleAndCpu) {
  GPROJ_REQUIRE_GPU();
  const test::Case c = GetParam();
  GPROJ_REQUIRE_CUDA_HEAD_DIM(c);
  const SweepInputs in = sweep_inputs(c, 11000);
  for (Variant v : {Variant::kBaseline, Variant::kFwdfix}) {
    const VariantRun cpu = run_variant(in.s, test::params_for(v), in.oracle, Device::kCpu);
    for (int version : {0, 1, 2, 3, 4}) {  // v1 (mma.sync), v3.0 (wgmma, cp.async), v3.1 (wgmma, TMA), v3.2, v3.3
      if (version == 4 && c.D != 128) continue;
      FlashParams p = test::params_for(v);
      p.cuda_backward_wgmma = version;
      const VariantRun gpu = run_variant(in.s, p, in.oracle, Device::kCuda);
      expect_matches_oracle_and_cpu(gpu, cpu, in.ref, in.oracle, kBackward,
                                    "wgmma bwd v" + std::to_string(version) + " " + variant_name(v));
      // The audit's row residuals come from the same kernel (its kStats form). They are sums of BF16 rounding
      // errors, so a rounding that lands the other way on the GPU moves them: the same size, not the same bits.
      const double r_gpu = gpu.bwd.diag.rowsum_max_before, r_cpu = cpu.bwd.diag.rowsum_max_before;
      EXPECT_GE(r_gpu, 0.5 * r_cpu) << "v" << version << " " << variant_name(v);
      EXPECT_LE(r_gpu, 2.0 * r_cpu + 1e-6) << "v" << version << " " << variant_name(v);
    }
  }
}

// The wgmma forwards (FlashParams::cuda_wgmma_forward; v2.2 is the default where it applies): O within the
// derived tolerance and within a third of a BF16 rounding of the CPU emulator; LSE as close as the FP32 variant's.
TEST_P(CudaSweep, WgmmaForwardMatchesOracleAndCpu) {
  GPROJ_REQUIRE_GPU();
  const test::Case c = GetParam();
  GPROJ_REQUIRE_CUDA_HEAD_DIM(c);
  const SweepInputs in = sweep_inputs(c, 7000);
  const AttentionState& s = in.s;
  const OracleRun& oracle = in.oracle;
  const VariantRun& ref = in.ref;
  for (Variant v : {Variant::kBaseline, Variant::kFwdfix, Variant::kGproj}) {
    const VariantRun cpu = run_variant(s, sweep_params(v), oracle, Device::kCpu);
    for (int version : {1, 2}) {  // v2.1 (cp.async) and v2.2 (TMA)
      FlashParams p = sweep_params(v);
      p.cuda_wgmma_forward = version;
      const VariantRun gpu = run_variant(s, p, oracle, Device::kCuda);
      expect_matches_oracle_and_cpu(gpu, cpu, ref, oracle, kForward,
                                    "wgmma v2." + std::to_string(version) + " " + variant_name(v));
      EXPECT_LE(gpu.lse.rel_fro, 2 * ref.lse.rel_fro + 1e-6) << variant_name(v) << " v2." << version;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Awkward, CudaSweep, ::testing::ValuesIn(test::awkward_cases()),
                         [](const auto& param_info) { return test::case_name(param_info.param); });

// The bars on every stress case (dQ, dK <= 0.5%; the real states <= 0.3%) for both projections that have
// CUDA kernels, thresh-lowrank and fp16-lowrank, whichever is the default.
TEST(Cuda, StressSuiteBars) {
  GPROJ_REQUIRE_GPU();
  for (const StressCase& c : stress_suite(::gproj::default_data_dir())) {
    const AttentionState s = c.make();
    const OracleRun oracle = run_oracle(s);
    const VariantRun base = run_variant(s, test::params_for(Variant::kBaseline), oracle, Device::kCuda);
    for (Projection proj : {Projection::kThreshLowRank, Projection::kFp16LowRank}) {
      const VariantRun fix = run_variant(s, test::params_for(Variant::kGproj, proj), oracle, Device::kCuda);
      std::printf("  %-24s cuda baseline dQ %.3f%%, gproj / %s dQ %.3f%% dK %.3f%%\n", c.name.c_str(),
                  100 * base.dq.rel_fro, projection_name(proj), 100 * fix.dq.rel_fro, 100 * fix.dk.rel_fro);
      const double bar = c.group == "real" ? 0.003 : 0.005;
      EXPECT_LE(fix.dq.rel_fro, bar) << c.name << " " << projection_name(proj);
      EXPECT_LE(fix.dk.rel_fro, bar) << c.name << " " << projection_name(proj);
      if (c.name == "shared-keys") {
        EXPECT_GE(base.dq.rel_fro, 10 * fix.dq.rel_fro) << projection_name(proj);
      }
    }
  }
}

// thresh-lowrank on the awkward sweep: the same oracle and CPU agreement as every variant (there the inputs
// are well conditioned and the GPU and CPU differ only by FP32 summation order).
// fp16-lowrank (docs/design-fp16-projection.md): the v2.3-h16 forward and the v3.2-h16 (D = 128) or v3.17-h16
// (D = 64) backward against the oracle's derived tolerances and the CPU emulator of the same projection.
TEST_P(CudaSweep, Fp16LowRankMatchesOracleAndCpu) {
  GPROJ_REQUIRE_GPU();
  const test::Case c = GetParam();
  if (c.D != 64 && c.D != 128) GTEST_SKIP() << "fp16-lowrank's CUDA kernels take D = 64 or 128";
  const SweepInputs in = sweep_inputs(c, 9500);
  const FlashParams p = test::params_for(Variant::kGproj, Projection::kFp16LowRank);
  const VariantRun cpu = run_variant(in.s, p, in.oracle, Device::kCpu);
  const VariantRun gpu = run_variant(in.s, p, in.oracle, Device::kCuda);
  test::print_evidence("cuda gproj fp16-lowrank", gpu);
  test::print_evidence("cpu gproj fp16-lowrank", cpu);
  EXPECT_NE(gpu.bwd.kernels.find(c.D == 64 ? "v3.17-h16" : "v3.2-h16"), std::string::npos) << gpu.bwd.kernels;
  expect_matches_oracle_and_cpu(gpu, cpu, in.ref, in.oracle, kForward | kBackward, "fp16-lowrank");
  // 1 / l on dO's side (FlashParams::fp16_dout_side): against its own emulator
  FlashParams pd = p;
  pd.fp16_dout_side = true;
  const VariantRun cpu_d = run_variant(in.s, pd, in.oracle, Device::kCpu);
  const VariantRun gpu_d = run_variant(in.s, pd, in.oracle, Device::kCuda);
  test::print_evidence("cuda gproj fp16-lowrank, 1/l on dO", gpu_d);
  EXPECT_NE(gpu_d.bwd.kernels.find("1/l on dO"), std::string::npos) << gpu_d.bwd.kernels;
  expect_matches_oracle_and_cpu(gpu_d, cpu_d, in.ref, in.oracle, kForward | kBackward, "fp16-lowrank, 1/l on dO");
}

TEST_P(CudaSweep, ThreshLowRankMatchesOracleAndCpu) {
  GPROJ_REQUIRE_GPU();
  const test::Case c = GetParam();
  GPROJ_REQUIRE_CUDA_HEAD_DIM(c);
  const SweepInputs in = sweep_inputs(c, 9000);
  const AttentionState& s = in.s;
  const OracleRun& oracle = in.oracle;
  const VariantRun& ref = in.ref;
  FlashParams p = test::params_for(Variant::kGproj, Projection::kThreshLowRank);
  const VariantRun cpu = run_variant(s, p, oracle, Device::kCpu);
  for (int version : {0, 2, 3, 4}) {  // on the v1 kernel, v3.1 (the default at D = 64), v3.2 and v3.3 (D = 128)
    if (version == 4 && c.D != 128) continue;
    p.cuda_backward_wgmma = version;
    const VariantRun gpu = run_variant(s, p, oracle, Device::kCuda);
    expect_matches_oracle_and_cpu(gpu, cpu, ref, oracle, kBackward, "thresh-lowrank v" + std::to_string(version));
  }
  {  // The basis from all keys (basis_key_stride 1; the default takes every 4th block of 64) on the default kernel.
    FlashParams all = test::params_for(Variant::kGproj, Projection::kThreshLowRank);
    all.basis_key_stride = 1;
    const VariantRun cpu_all = run_variant(s, all, oracle, Device::kCpu);
    const VariantRun gpu = run_variant(s, all, oracle, Device::kCuda);
    expect_matches_oracle_and_cpu(gpu, cpu_all, ref, oracle, kBackward, "thresh-lowrank, basis from all keys");
  }
  // The statistics from the forward (v2.3 forward, v3.9 backward; the CPU emulator's forward_stats form).
  p.forward_stats = true;
  const VariantRun cpu_fs = run_variant(s, p, oracle, Device::kCpu);
  for (int version : {2, 3}) {
    p.cuda_backward_wgmma = version;
    const VariantRun gpu = run_variant(s, p, oracle, Device::kCuda);
    EXPECT_NE(gpu.bwd.kernels.find("statistics from the forward"), std::string::npos) << gpu.bwd.kernels;
    expect_matches_oracle_and_cpu(gpu, cpu_fs, ref, oracle, kBackward,
                                  "thresh-lowrank, forward statistics, v" + std::to_string(version));
  }
}

// dK compensation (FlashParams::dk_compensation_rank = 8; the v3.1 thresh-lowrank kernel at D = 64): the same
// oracle and CPU agreement as every variant, on the awkward D = 64 cases.
TEST_P(CudaSweep, DkCompensationMatchesOracleAndCpu) {
  GPROJ_REQUIRE_GPU();
  const test::Case c = GetParam();
  if (c.D != 64) GTEST_SKIP() << "the CUDA dK compensation runs at D = 64 only so far";
  const SweepInputs in = sweep_inputs(c, 13000);
  FlashParams p = test::params_for(Variant::kGproj, Projection::kThreshLowRank);
  p.dk_compensation_rank = 8;
  const VariantRun cpu = run_variant(in.s, p, in.oracle, Device::kCpu);
  const VariantRun gpu = run_variant(in.s, p, in.oracle, Device::kCuda);
  expect_matches_oracle_and_cpu(gpu, cpu, in.ref, in.oracle, kBackward, "dK compensation");
}

// The same on the D = 64 stress cases and the layer-1 training state whose dK it is for: as accurate as the CPU
// emulator (a third of an output rounding), and that state's dK under the 0.3% bar of the captured states.
TEST(Cuda, DkCompensationAsAccurateAsTheCpu) {
  GPROJ_REQUIRE_GPU();
  std::vector<std::pair<std::string, AttentionState>> states;
  for (const StressCase& c : stress_suite(::gproj::default_data_dir())) {
    AttentionState s = c.make();
    if (s.q.shape[3] == 64) states.emplace_back(c.name, std::move(s));
  }
  states.emplace_back("training layer 1", load_state(::gproj::default_data_dir() + "/real_s2_step5000_layer1.safetensors"));
  for (const auto& [name, s] : states) {
    const OracleRun oracle = run_oracle(s);
    FlashParams p = test::params_for(Variant::kGproj, Projection::kThreshLowRank);
    p.dk_compensation_rank = 8;
    const VariantRun cpu = run_variant(s, p, oracle, Device::kCpu);
    const VariantRun gpu = run_variant(s, p, oracle, Device::kCuda);
    std::printf("  %-24s cuda dK compensation dQ %.3f%% dK %.3f%% (cpu %.3f%% %.3f%%)\n", name.c_str(), 100 * gpu.dq.rel_fro,
                100 * gpu.dk.rel_fro, 100 * cpu.dq.rel_fro, 100 * cpu.dk.rel_fro);
    EXPECT_LE(gpu.dq.rel_fro, cpu.dq.rel_fro + bf16_rounding_error(oracle.bwd.dq.view()) / 3) << name;
    EXPECT_LE(gpu.dk.rel_fro, cpu.dk.rel_fro + bf16_rounding_error(oracle.bwd.dk.view()) / 3) << name;
    if (name == "training layer 1") {
      EXPECT_LE(gpu.dk.rel_fro, 0.003) << name;
    }
  }
}

// thresh-lowrank (threshold 1/16, rank 6), the cheap projection meant to replace pweighted on the GPU, on the
// stress suite: the same bars as the default, and as accurate as the CPU emulator of the same projection (its
// error against float64 at most a third of an output rounding above the emulator's). Not the sweep's direct
// GPU-vs-CPU agreement: on these states dK is an ill-conditioned sum (shared query components, sinks) and the
// tensor cores' accumulation differs from IEEE FP32 (GUIDE section 2), so the two differ by up to 0.8 of a
// rounding for every projection; measured on the H200 (2026-11-30, gproj run --device cuda/cpu), dK GPU vs CPU:
// shared-queries 1.21e-3 (pweighted) / 1.27e-3 (thresh-lowrank), sink-ties-large 7.9e-4 / 7.8e-4, ties-negative
// 6.1e-4 / 6.4e-4, while both sides stay within 0.01 percentage points of each other against float64.
TEST(Cuda, ThreshLowRankMeetsTheBarsAsAccuratelyAsTheCpu) {
  GPROJ_REQUIRE_GPU();
  for (const StressCase& c : stress_suite(::gproj::default_data_dir())) {
    const AttentionState s = c.make();
    const OracleRun oracle = run_oracle(s);
    // The v1 kernel, v3.1 and v3.2 (the default at D = 128) with the backward's statistics; then v3.1 and v3.2
    // with the forward's (v2.3 forward, v3.9 backward).
    for (const auto& [forward_stats, version] : {std::pair{false, 0}, {false, 2}, {false, 3}, {true, 2}, {true, 3}}) {
      FlashParams p = test::params_for(Variant::kGproj, Projection::kThreshLowRank);
      p.forward_stats = forward_stats;
      const VariantRun cpu = run_variant(s, p, oracle, Device::kCpu);
      p.cuda_backward_wgmma = version;
      const VariantRun gpu = run_variant(s, p, oracle, Device::kCuda);
      const std::string what = c.name + " v" + std::to_string(version) + (forward_stats ? " (forward statistics)" : "");
      std::printf("  %-24s cuda thresh-lowrank v%d%s dQ %.3f%% dK %.3f%% (cpu %.3f%% %.3f%%)\n", c.name.c_str(),
                  version, forward_stats ? " fs" : "", 100 * gpu.dq.rel_fro, 100 * gpu.dk.rel_fro, 100 * cpu.dq.rel_fro,
                  100 * cpu.dk.rel_fro);
      const double bar = c.group == "real" ? 0.003 : 0.005;
      EXPECT_LE(gpu.dq.rel_fro, bar) << what;
      EXPECT_LE(gpu.dk.rel_fro, bar) << what;
      EXPECT_LE(gpu.dq.rel_fro, cpu.dq.rel_fro + bf16_rounding_error(oracle.bwd.dq.view()) / 3) << what;
      EXPECT_LE(gpu.dk.rel_fro, cpu.dk.rel_fro + bf16_rounding_error(oracle.bwd.dk.view()) / 3) << what;
    }
  }
}

// A Gaussian state (B = 1) with H query heads on Hkv kv heads and queries scaled by q_std (sharper rows), for the
// thresh-lowrank tests below.
SyntheticSpec gqa_spec(int64_t Nq, int64_t Nk, int64_t H, int64_t Hkv, int64_t D, bool causal, float q_std,
                       uint64_t seed) {
  SyntheticSpec spec = synthetic_spec(Nq, Nk, H, Hkv, D, causal, seed);
  spec.q_std = q_std;
  return spec;
}

// thresh-lowrank on a synthetic state on the default CUDA kernels: within the stress bar (0.5%) and as accurate
// as the CPU emulator (its error against float64 at most a third of an output rounding above the emulator's).
void expect_thresh_within_bar_and_cpu(const SyntheticSpec& spec, const std::string& label,
                                      int basis_key_stride = FlashParams{}.basis_key_stride,
                                      int thresh_k = FlashParams{}.thresh_k) {
  const AttentionState s = make_synthetic(spec);
  const OracleRun oracle = run_oracle(s);
  FlashParams p = test::params_for(Variant::kGproj, Projection::kThreshLowRank);
  p.basis_key_stride = basis_key_stride;
  p.thresh_k = thresh_k;
  const VariantRun cpu = run_variant(s, p, oracle, Device::kCpu);
  const VariantRun gpu = run_variant(s, p, oracle, Device::kCuda);
  std::printf("  %-28s cuda dQ %.3f%% dK %.3f%% (cpu %.3f%% %.3f%%); %s\n", label.c_str(), 100 * gpu.dq.rel_fro,
              100 * gpu.dk.rel_fro, 100 * cpu.dq.rel_fro, 100 * cpu.dk.rel_fro, gpu.bwd.kernels.c_str());
  EXPECT_LE(gpu.dq.rel_fro, 0.005) << label;
  EXPECT_LE(gpu.dk.rel_fro, 0.005) << label;
  EXPECT_LE(gpu.dq.rel_fro, cpu.dq.rel_fro + bf16_rounding_error(oracle.bwd.dq.view()) / 3) << label;
  EXPECT_LE(gpu.dk.rel_fro, cpu.dk.rel_fro + bf16_rounding_error(oracle.bwd.dk.view()) / 3) << label;
}

// thresh-lowrank on sharp rows at D = 128 (queries x 4: ~3 entries >= 1/16 a row, as in trained attention; the
// stress suite's sharp cases are D = 64): the default v3.2 kernel's list appends, K U formed in the kernel, and
// the dQ correction's per-key dK table past its 64 slots (64 rows listing ~190 distinct keys). GQA (4 query heads
// on 2 kv heads), causal and not.
TEST(Cuda, ThreshLowRankOnSharpRowsAtD128) {
  GPROJ_REQUIRE_GPU();
  for (bool causal : {false, true}) {
    expect_thresh_within_bar_and_cpu(gqa_spec(1024, 1024, 4, 2, 128, causal, 4.0f, 77),
                                     std::string("sharp d128 ") + (causal ? "causal" : "full"));
  }
}

// thresh-lowrank with thresh_k = 32 (entries >= 1/32, up to 32 a row; ~2x the entries of the default on these
// rows) on sharp rows: the dQ correction with a 32-slot list (every lane of a row holds a slot), and at D = 64 its
// one-row-per-warp kernel (thresh_dq_kernel<64, 32>, v1.35's walk at two columns per lane), which the default
// thresh_k = 16 never selects (the pairs kernel runs there). GQA, causal and not. The CPU emulator gives dQ and dK
// errors of 0.21% on all four (session 14; added then, first run on a GPU in session 15).
TEST(Cuda, ThreshLowRankWithThirtyTwoSlotsARow) {
  GPROJ_REQUIRE_GPU();
  for (int d : {64, 128})
    for (bool causal : {false, true}) {
      expect_thresh_within_bar_and_cpu(gqa_spec(640, 640, 4, 2, d, causal, 4.0f, 78),
                                       "thresh_k 32 d" + std::to_string(d) + (causal ? " causal" : " full"),
                                       FlashParams{}.basis_key_stride, 32);
    }
}

// thresh-lowrank with 20480 keys (320 tiles, 80 of them in the default basis): the Gram matrix's chunks grow past
// the minimum (kGramTiles / stride tiles) so that a head has at most 16 partial matrices
// (src/cuda/projection_tc.cuh, gram_chunk_tiles), the one shape family where the chunk size is not the minimum.
// D = 64 and 128, causal (bottom-right) and not, GQA; the basis from every 4th tile (default) and from all.
TEST(Cuda, ThreshLowRankWithManyKeysUsesEveryGramChunk) {
  GPROJ_REQUIRE_GPU();
  for (int64_t D : {64, 128}) {
    for (bool causal : {false, true}) {
      const SyntheticSpec spec = gqa_spec(64, 20480, 2, 1, D, causal, 2.0f, 91);
      for (int stride : {4, 1}) {
        expect_thresh_within_bar_and_cpu(spec, "20480 keys d" + std::to_string(D) + (causal ? " causal" : " full") +
                                                   " basis 1/" + std::to_string(stride), stride);
      }
    }
  }
}

// Each forward (v1 and the default v2.2) on the stress suite, ties at the row max included: O as accurate as the
// CPU emulator's (its error against float64 at most a third of an output rounding above), for baseline and
// fwdfix. fwdfix's tie decisions are per key block of 64 on both sides: a decision the GPU missed would leave
// it with baseline's larger error on the tie cases. Not the direct GPU-vs-CPU agreement, for the reason given
// above ThreshLowRankMeetsTheBarsAsAccuratelyAsTheCpu.
TEST(Cuda, StressSuiteForwardsAsAccurateAsTheCpu) {
  GPROJ_REQUIRE_GPU();
  for (const StressCase& c : stress_suite(::gproj::default_data_dir())) {
    const AttentionState s = c.make();
    const OracleRun oracle = run_oracle(s);
    const double rounding = bf16_rounding_error(oracle.fwd.o.view());
    for (Variant v : {Variant::kBaseline, Variant::kFwdfix}) {
      const VariantRun cpu = run_variant(s, test::params_for(v), oracle, Device::kCpu);
      for (int version : {0, 2}) {
        FlashParams p = test::params_for(v);
        p.cuda_wgmma_forward = version;
        const VariantRun gpu = run_variant(s, p, oracle, Device::kCuda);
        std::printf("  %-24s %-8s forward v%s O %.3f%% (cpu %.3f%%)\n", c.name.c_str(), variant_name(v),
                    version == 0 ? "1" : "2.2", 100 * gpu.o.rel_fro, 100 * cpu.o.rel_fro);
        EXPECT_LE(gpu.o.rel_fro, cpu.o.rel_fro + rounding / 3) << c.name << " " << variant_name(v) << " v" << version;
      }
    }
  }
}

TEST(Cuda, DeterministicModeGivesTheSameBitsEveryRun) {
  GPROJ_REQUIRE_GPU();
  const AttentionState s = stress_suite(::gproj::default_data_dir(), {"shared-keys-causal-gqa"}).at(0).make();
  const OracleRun oracle = run_oracle(s);
  for (Variant v : {Variant::kBaseline, Variant::kGproj}) {
    FlashParams p = test::params_for(v, Projection::kPWeighted);  // the projection deterministic mode implements
    p.deterministic = true;
    const VariantRun a = run_variant(s, p, oracle, Device::kCuda), b = run_variant(s, p, oracle, Device::kCuda);
    for (size_t i = 0; i < a.bwd.dq.values.size(); ++i) ASSERT_EQ(a.bwd.dq.values[i].bits, b.bwd.dq.values[i].bits) << i;
    for (size_t i = 0; i < a.bwd.dk.values.size(); ++i) ASSERT_EQ(a.bwd.dk.values[i].bits, b.bwd.dk.values[i].bits) << i;
    // Same algorithm as the atomic mode, other summation order: as close to it as to the CPU.
    const VariantRun fast = run_variant(s, test::params_for(v, Projection::kPWeighted), oracle, Device::kCuda);
    const Tensor<double> fast_dq = to_double(fast.bwd.dq.view());
    expect_close_to_cpu(compare(a.bwd.dq.view(), fast_dq.view()), oracle.bwd.dq.view(), "deterministic dQ");
    std::printf("  %-8s deterministic dQ %s\n", variant_name(v), describe(a.dq).c_str());
    EXPECT_LE(a.dq.rel_fro, v == Variant::kGproj ? 0.005 : 1.0);
  }
}

// Deterministic mode with a projection whose backward adds with atomics is refused with the core's sentence
// (cuda_deterministic_refusal, which the PyTorch op asks before its forward), not run nondeterministically.
TEST(Cuda, DeterministicModeRefusesTheProjectionsWithoutIt) {
  GPROJ_REQUIRE_GPU();
  test::Case c{64, 64, 2, 2, 128, false, 64, 64};
  const AttentionState s = test::state_for(c, 3);
  for (Projection proj : {Projection::kThreshLowRank, Projection::kFp16LowRank}) {
    FlashParams p = test::params_for(Variant::kGproj, proj);
    const ForwardResult f = attention_forward(Device::kCuda, s.q.view(), s.k.view(), s.v.view(), p);
    p.deterministic = true;
    const std::string why = cuda_deterministic_refusal(p);
    ASSERT_NE(why, "") << projection_name(proj);
    try {
      attention_backward(Device::kCuda, s.q.view(), s.k.view(), s.v.view(), f.o.view(), f.o_fp32.view(),
                         f.lse.view(), s.dout.view(), p);
      ADD_FAILURE() << projection_name(proj) << ": deterministic mode was expected to be refused";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  }
}

// B H Nq odd (here 1 x 1 x 1025): the workspace's per-row regions must still leave dQacc, dK/dV and the thresh
// lists 16-byte aligned (float2 atomics, cp.async); an odd count once misaligned every region after them.
TEST(Cuda, OddRowCountKeepsTheWorkspaceAligned) {
  GPROJ_REQUIRE_GPU();
  SyntheticSpec spec;
  spec.B = 1;
  spec.Nq = 1025;
  spec.Nk = 97;
  spec.H = spec.Hkv = 1;
  spec.D = 64;
  spec.causal = true;
  spec.seed = 77;
  const AttentionState s = make_synthetic(spec);
  const OracleRun oracle = run_oracle(s);
  const VariantRun ref = run_variant(s, test::params_for(Variant::kFp32), oracle, Device::kCuda);
  const test::Tolerances tol = test::derive_tolerances(ref, oracle);
  for (Projection proj : {Projection::kPWeighted, Projection::kThreshLowRank}) {
    FlashParams p = test::params_for(Variant::kGproj, proj);
    const VariantRun gpu = run_variant(s, p, oracle, Device::kCuda);
    EXPECT_LE(gpu.dq.rel_fro, tol.dq) << projection_name(proj);
    EXPECT_LE(gpu.dk.rel_fro, tol.dk) << projection_name(proj);
    EXPECT_LE(gpu.dv.rel_fro, tol.dv) << projection_name(proj);
  }
}

// One head of 64 queries and keys, gproj with thresh-lowrank: the launch API's argument checks below.
static cuda::Problem small_gproj_problem(int D) {
  cuda::Problem p;
  p.B = 1, p.Nq = p.Nk = 64, p.H = p.Hkv = 1, p.D = D;
  p.softmax_scale = 0.125f;
  p.params = test::params_for(Variant::kGproj, Projection::kThreshLowRank);
  return p;
}

// A workspace off a 16-byte boundary is refused before anything runs (v3.15's bulk reduce-adds into dQacc, and the
// 16-byte loads and cp.async of its other regions, would fault on it).
TEST(Cuda, MisalignedWorkspaceIsRefused) {
  GPROJ_REQUIRE_GPU();
  const cuda::Problem p = small_gproj_problem(128);
  const size_t n = 64 * 128;
  void *x = nullptr, *lse = nullptr, *g = nullptr, *ws = nullptr;
  ASSERT_EQ(cudaMalloc(&x, n * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&lse, 64 * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&g, 3 * n * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&ws, cuda::backward_workspace_bytes(p) + 16), cudaSuccess);
  cuda::DeviceTensor t, tl, none, dq, dk, dv;
  t.data = x;
  t.stride[0] = t.stride[1] = 128, t.stride[2] = 128, t.stride[3] = 1;
  tl.data = lse;
  dq = dk = dv = t;
  dq.data = g;
  dk.data = static_cast<char*>(g) + n * 2;
  dv.data = static_cast<char*>(g) + 2 * n * 2;
  const cuda::Status st = cuda::backward(p, t, t, t, t, none, tl, t, dq, dk, dv, static_cast<char*>(ws) + 8, nullptr);
  EXPECT_FALSE(st.ok);
  EXPECT_EQ(st.code, ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message.find("16-byte aligned"), std::string::npos) << st.message;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (void* ptr : {x, lse, g, ws}) cudaFree(ptr);
}

// Device memory for the launch API's tests, freed when it goes out of scope (an ASSERT's early return included),
// and dense (1, rows, heads, D) views of it.
cuda::DeviceTensor dense_view(void* ptr, int64_t rows, int64_t heads, int64_t D) {
  cuda::DeviceTensor t;
  t.data = ptr;
  t.stride[0] = rows * heads * D, t.stride[1] = heads * D, t.stride[2] = D, t.stride[3] = 1;
  return t;
}
struct DeviceScratch {
  std::vector<void*> held;
  DeviceScratch() = default;
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  ~DeviceScratch() {
    for (void* ptr : held) cudaFree(ptr);
  }
  void* alloc(size_t bytes) {
    void* ptr = nullptr;
    EXPECT_EQ(cudaMalloc(&ptr, bytes), cudaSuccess);
    held.push_back(ptr);
    return ptr;
  }
  cuda::DeviceTensor upload(const Tensor<bf16>& t, int64_t rows, int64_t heads, int64_t D) {
    void* ptr = alloc(t.values.size() * 2);
    EXPECT_EQ(cudaMemcpy(ptr, t.values.data(), t.values.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    return dense_view(ptr, rows, heads, D);
  }
};

// A one-batch problem of the launch API's tests: 1/sqrt(D) scaling, thresh-lowrank as the projection.
cuda::Problem one_batch_problem(int64_t Nq, int64_t Nk, int64_t H, int64_t Hkv, int64_t D, Variant var, bool causal) {
  cuda::Problem p;
  p.B = 1, p.Nq = Nq, p.Nk = Nk, p.H = H, p.Hkv = Hkv, p.D = D;
  p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(D));
  p.params = test::params_for(var, Projection::kThreshLowRank);
  p.params.causal = causal;
  return p;
}

// A state's Q, K, V and dO on the device (dense (1, N, H, D) views), with room for the forward's O and LSE.
struct DeviceInputs {
  cuda::DeviceTensor q, k, v, dout, o, lse;
};
DeviceInputs upload_inputs(DeviceScratch& mem, const AttentionState& s, int64_t Nq, int64_t Nk, int64_t H, int64_t Hkv,
                           int64_t D) {
  DeviceInputs in;
  in.q = mem.upload(s.q, Nq, H, D), in.k = mem.upload(s.k, Nk, Hkv, D), in.v = mem.upload(s.v, Nk, Hkv, D);
  in.dout = mem.upload(s.dout, Nq, H, D);
  in.o = dense_view(mem.alloc(static_cast<size_t>(Nq * H * D) * 2), Nq, H, D);
  in.lse.data = mem.alloc(static_cast<size_t>(H * Nq) * 4);
  return in;
}

// One BF16 output of two runs that should agree: bit for bit (a zero's sign aside), or, where it comes from FP32
// atomics whose order varies (`atomics`), each element within one BF16 unit of the other (2^-7 of it), so that
// the difference's norm is at most 2^-7 of the output's.
void expect_same_output(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, bool atomics,
                        const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  if (atomics) {
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
      const double x = bf16::from_bits(a[i]).to_float(), y = bf16::from_bits(b[i]).to_float();
      diff += (x - y) * (x - y), norm += x * x;
    }
    EXPECT_GT(norm, 0.0) << what;
    EXPECT_LE(std::sqrt(diff), std::ldexp(std::sqrt(norm), -7)) << what;
    return;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i] == b[i] || ((a[i] | b[i]) & 0x7fffu) == 0) << what << " element " << i;
  }
}

// v3.34: with one query head per kv head and 16-byte aligned dK, dV, the wgmma main kernel stores them itself
// (baseline: no dK/dV postprocess; gproj: dV, its dK still through dKacc). dK, dV only 8-byte aligned take the FP32
// accumulators and the postprocess, as before v3.34. Both must give the same bits (a zero's sign aside), at D = 64
// and 128, causal, with Nk not a multiple of the CTA's 128 keys. (gproj's dK is left out: both paths form it alike,
// and thresh_dq's atomics for the listed entries make its last bits differ from run to run.)
TEST(Cuda, DirectDkDvStoresGiveThePostprocessBits) {
  GPROJ_REQUIRE_GPU();
  const int64_t Nq = 200, Nk = 200, H = 2;
  for (int64_t D : {64, 128}) {
    const AttentionState s = make_synthetic(synthetic_spec(Nq, Nk, H, H, D, true, 91));
    const size_t n = static_cast<size_t>(Nq * H * D);  // elements of each (1, N, H, D) tensor
    DeviceScratch mem;
    const auto dense = [&](void* ptr) { return dense_view(ptr, Nq, H, D); };
    const auto [q, k, v, dout, o, lse] = upload_inputs(mem, s, Nq, Nk, H, H, D);
    const cuda::DeviceTensor none;
    for (Variant var : {Variant::kBaseline, Variant::kGproj}) {
      const cuda::Problem p = one_batch_problem(Nq, Nk, H, H, D, var, true);
      ASSERT_TRUE(cuda::forward(p, q, k, v, o, lse, none, nullptr).ok);
      std::vector<uint16_t> out[2][2];  // [aligned, 8 bytes past][dK, dV]
      for (int shift : {0, 8}) {
        char* g = static_cast<char*>(mem.alloc(2 * n * 2 + 64));  // dK at g + shift, dV 32 bytes past its end
        cuda::DeviceTensor dq = dense(mem.alloc(n * 2)), dk = dense(g + shift), dv = dense(g + n * 2 + 32 + shift);
        const cuda::Status st = cuda::backward(p, q, k, v, o, none, lse, dout, dq, dk, dv,
                                               mem.alloc(cuda::backward_workspace_bytes(p)), nullptr);
        ASSERT_TRUE(st.ok) << st.message;
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        for (int t = 0; t < 2; ++t) {
          std::vector<uint16_t>& h = out[shift != 0][t];
          h.resize(n);
          ASSERT_EQ(cudaMemcpy(h.data(), t == 0 ? dk.data : dv.data, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        }
      }
      for (int t = var == Variant::kGproj ? 1 : 0; t < 2; ++t)
        for (size_t i = 0; i < n; ++i) {
          const uint16_t a = out[0][t][i], b = out[1][t][i];
          ASSERT_TRUE(a == b || ((a | b) & 0x7fffu) == 0)  // equal, or +0 and -0
              << variant_name(var) << " D = " << D << (t == 0 ? " dK" : " dV") << " element " << i;
        }
    }
  }
}

// Since v3.45b the delta preprocess takes its rows in memory order: (b, i, h) for the (B, N, H, D) layout, (b, h, i)
// where O's heads lie further apart than its positions. O and dO stored heads-major (element (i, h, d) at
// (h Nq + i) D + d) must give the bits of the dense layout: dK and dV bit for bit (baseline's main kernel stores them
// from registers, and delta enters every element), dQ within its atomics' spread. H = 3 and Nq = 200 put row pairs
// across heads and positions in both orders.
TEST(Cuda, HeadsMajorOAndDoutGiveTheDenseLayoutsBits) {
  GPROJ_REQUIRE_GPU();
  const int64_t Nq = 200, Nk = 136, H = 3;
  for (int64_t D : {64, 128}) {
    const AttentionState s = make_synthetic(synthetic_spec(Nq, Nk, H, H, D, false, 93));
    const size_t n = static_cast<size_t>(Nq * H * D), nkv = static_cast<size_t>(Nk * H * D);
    DeviceScratch mem;
    const auto [q, k, v, dout, o, lse] = upload_inputs(mem, s, Nq, Nk, H, H, D);
    const cuda::DeviceTensor none;
    const cuda::Problem p = one_batch_problem(Nq, Nk, H, H, D, Variant::kBaseline, false);
    ASSERT_TRUE(cuda::forward(p, q, k, v, o, lse, none, nullptr).ok);
    // Heads-major copies of O and dO.
    const auto heads_major = [&](const cuda::DeviceTensor& t) {
      std::vector<uint16_t> dense(n), hm(n);
      EXPECT_EQ(cudaMemcpy(dense.data(), t.data, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      for (int64_t i = 0; i < Nq; ++i)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < D; ++d) hm[(h * Nq + i) * D + d] = dense[(i * H + h) * D + d];
      cuda::DeviceTensor out;
      out.data = mem.alloc(n * 2);
      EXPECT_EQ(cudaMemcpy(out.data, hm.data(), n * 2, cudaMemcpyHostToDevice), cudaSuccess);
      out.stride[0] = static_cast<int64_t>(n), out.stride[1] = D, out.stride[2] = Nq * D, out.stride[3] = 1;
      return out;
    };
    const cuda::DeviceTensor o_hm = heads_major(o), dout_hm = heads_major(dout);
    std::vector<uint16_t> got[2][3];  // [dense, heads-major][dQ, dK, dV]
    for (int form = 0; form < 2; ++form) {
      const cuda::DeviceTensor dq = dense_view(mem.alloc(n * 2), Nq, H, D), dk = dense_view(mem.alloc(nkv * 2), Nk, H, D),
                               dv = dense_view(mem.alloc(nkv * 2), Nk, H, D);
      const cuda::Status st = cuda::backward(p, q, k, v, form == 0 ? o : o_hm, none, lse, form == 0 ? dout : dout_hm,
                                             dq, dk, dv, mem.alloc(cuda::backward_workspace_bytes(p)), nullptr);
      ASSERT_TRUE(st.ok) << st.message;
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const cuda::DeviceTensor* outs[3] = {&dq, &dk, &dv};
      for (int t = 0; t < 3; ++t) {
        got[form][t].resize(t == 0 ? n : nkv);
        ASSERT_EQ(cudaMemcpy(got[form][t].data(), outs[t]->data, got[form][t].size() * 2, cudaMemcpyDeviceToHost),
                  cudaSuccess);
      }
    }
    const std::string at = "D = " + std::to_string(D);
    expect_same_output(got[0][0], got[1][0], true, "dQ, " + at);
    expect_same_output(got[0][1], got[1][1], false, "dK, " + at);
    expect_same_output(got[0][2], got[1][2], false, "dV, " + at);
  }
}

// backward_workspace_bytes with the tensors: where the main kernel stores dK and dV itself (v3.34) the FP32
// accumulators it does not use are left out (baseline: dK and dV, gproj: dV, its dK correction reads dKacc); with
// dK, dV 8 bytes past alignment or two query heads per kv head nothing is. A backward in exactly that many bytes
// (memcheck runs it) gives the bits of one in backward_workspace_bytes(p), dQ within one BF16 unit (its FP32
// atomics add in any order), and a byte fewer is refused.
TEST(Cuda, WorkspaceSizedForTheTensorsLeavesOutUnusedAccumulators) {
  GPROJ_REQUIRE_GPU();
  const int64_t Nq = 200, Nk = 200, H = 2;
  for (int64_t D : {64, 128})
    for (int64_t Hkv : {H, H / 2}) {
      const AttentionState s = make_synthetic(synthetic_spec(Nq, Nk, H, Hkv, D, true, 92));
      const size_t n = static_cast<size_t>(Nq * H * D), nkv = static_cast<size_t>(Nk * Hkv * D);
      DeviceScratch mem;
      const auto [q, k, v, dout, o, lse] = upload_inputs(mem, s, Nq, Nk, H, Hkv, D);
      const cuda::DeviceTensor none;
      for (int form = 0; form < 4; ++form) {  // baseline, gproj; each without and with causal masking
        const Variant var = form < 2 ? Variant::kBaseline : Variant::kGproj;
        const bool causal = form % 2 != 0;
        const cuda::Problem p = one_batch_problem(Nq, Nk, H, Hkv, D, var, causal);
        ASSERT_TRUE(cuda::forward(p, q, k, v, o, lse, none, nullptr).ok);
        const size_t full = cuda::backward_workspace_bytes(p), acc = sizeof(float) * static_cast<size_t>(H * Nk * D);
        for (int shift : {0, 8}) {
          const std::string what = std::string(variant_name(var)) + (causal ? " causal" : "") + " D = " +
                                   std::to_string(D) + " Hkv = " + std::to_string(Hkv) + " dK, dV " +
                                   std::to_string(shift) + " bytes past alignment";
          std::vector<uint16_t> out[2][3];  // [full, for the tensors][dQ, dK, dV]
          size_t slim = 0;
          for (int sized : {0, 1}) {
            char* g = static_cast<char*>(mem.alloc(2 * nkv * 2 + 64));
            const cuda::DeviceTensor dq = dense_view(mem.alloc(n * 2), Nq, H, D),
                                     dk = dense_view(g + shift, Nk, Hkv, D),
                                     dv = dense_view(g + nkv * 2 + 32 + shift, Nk, Hkv, D);
            cuda::Problem ps = p;
            if (sized) {
              slim = cuda::backward_workspace_bytes(p, q, k, v, dout, dq, dk, dv);
              const size_t left_out = shift != 0 || Hkv != H ? 0 : var == Variant::kBaseline ? 2 * acc : acc;
              ASSERT_EQ(slim, full - left_out) << what;
              ps.workspace_bytes = slim;
              cuda::Problem short_by_one = ps;
              short_by_one.workspace_bytes = slim - 1;
              const cuda::Status refused = cuda::backward(short_by_one, q, k, v, o, none, lse, dout, dq, dk, dv,
                                                          mem.alloc(slim), nullptr);
              EXPECT_FALSE(refused.ok) << what;
              EXPECT_EQ(refused.code, ErrorCode::kInvalidArgument) << what;
              EXPECT_NE(refused.message.find("workspace holds"), std::string::npos) << refused.message;
            }
            const cuda::Status st = cuda::backward(ps, q, k, v, o, none, lse, dout, dq, dk, dv,
                                                   mem.alloc(sized ? slim : full), nullptr);
            ASSERT_TRUE(st.ok) << what << ": " << st.message;
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
            for (int t = 0; t < 3; ++t) {
              std::vector<uint16_t>& h = out[sized][t];
              h.resize(t == 0 ? n : nkv);
              ASSERT_EQ(cudaMemcpy(h.data(), t == 0 ? dq.data : t == 1 ? dk.data : dv.data, h.size() * 2,
                                   cudaMemcpyDeviceToHost),
                        cudaSuccess);
            }
          }
          // dK, dV: the same bits. dQ and gproj's dK come from FP32 atomics, whose order varies.
          for (int t = 0; t < 3; ++t) {
            const char* name = t == 0 ? " dQ" : t == 1 ? " dK" : " dV";
            expect_same_output(out[0][t], out[1][t], t == 0 || (t == 1 && var == Variant::kGproj), what + name);
          }
        }
      }
    }
}

// Auto mode picks the wgmma kernels where they apply and says so (cuda::Status::kernels, in the audit's JSON).
TEST(Cuda, DefaultsNameTheKernelsThatRan) {
  GPROJ_REQUIRE_GPU();
  for (int D : {64, 128}) {
    test::Case c{64, 64, 2, 2, D, true, 64, 64};
    const AttentionState s = test::state_for(c, 3);
    // The default projection, fp16-lowrank: its forward (with the FP16 conversion) and its backward.
    const FlashParams d = test::params_for(Variant::kGproj);
    const ForwardResult fd = attention_forward(Device::kCuda, s.q.view(), s.k.view(), s.v.view(), d);
    const BackwardResult bd = attention_backward(Device::kCuda, s.q.view(), s.k.view(), s.v.view(), fd.o.view(),
                                                 fd.o_fp32.view(), fd.lse.view(), s.dout.view(), d);
    EXPECT_EQ(fd.kernels.rfind("forward v2.3-h16 (wgmma, TMA, fp16-lowrank", 0), 0u) << D << ": " << fd.kernels;
    EXPECT_EQ(bd.kernels.rfind(D == 128 ? "backward v3.2-h16d (wgmma, TMA, fp16-lowrank"
                                         : "backward v3.17-h16d (wgmma, TMA, fp16-lowrank",
                               0),
              0u) << D << ": " << bd.kernels;
    // thresh-lowrank, named
    FlashParams p = sweep_params(Variant::kGproj);
    const ForwardResult f = attention_forward(Device::kCuda, s.q.view(), s.k.view(), s.v.view(), p);
    const BackwardResult b = attention_backward(Device::kCuda, s.q.view(), s.k.view(), s.v.view(), f.o.view(),
                                                f.o_fp32.view(), f.lse.view(), s.dout.view(), p);
    EXPECT_EQ(f.kernels, "forward v2.2 (wgmma, TMA)") << D;
    const std::string bwd = D == 128 ? "backward v3.2 (wgmma, TMA, dQ columns split), thresh-lowrank"
                                     : "backward v3.1 (wgmma, TMA), thresh-lowrank";
    EXPECT_EQ(b.kernels, bwd) << D;
    // The statistics from the forward: the host path runs the v2.3 forward for them and says so.
    p.forward_stats = true;
    const BackwardResult bs = attention_backward(Device::kCuda, s.q.view(), s.k.view(), s.v.view(), f.o.view(),
                                                 f.o_fp32.view(), f.lse.view(), s.dout.view(), p);
    EXPECT_EQ(bs.kernels, bwd + ", statistics from the forward; statistics by forward v2.3 (wgmma, TMA, "
                                "thresh-lowrank statistics) (+ thresh-lowrank basis and K U tiles)")
        << D;
    const ForwardResult f32 = attention_forward(Device::kCuda, s.q.view(), s.k.view(), s.v.view(),
                                                test::params_for(Variant::kFp32));
    EXPECT_EQ(f32.kernels, "forward v0 (FP32 CUDA cores)") << D;
  }
}

// The launch API's forward statistics (Problem::forward_stats): refused with a status naming the requirement where
// they do not apply (another variant, a v1 backward, no forward workspace), never ignored.
TEST(Cuda, ForwardStatisticsAreRefusedWhereTheyDoNotApply) {
  GPROJ_REQUIRE_GPU();
  cuda::Problem p = small_gproj_problem(64);
  p.params.forward_stats = true;
  ASSERT_TRUE(cuda::forward_stats_apply(p));
  const size_t n = 64 * 64;
  void *q = nullptr, *o = nullptr, *lse = nullptr, *stats = nullptr, *fws = nullptr, *ws = nullptr;
  ASSERT_EQ(cudaMalloc(&q, n * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&o, n * 2), cudaSuccess);
  ASSERT_EQ(cudaMemset(q, 0, n * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&lse, 64 * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&stats, cuda::forward_stats_bytes(p)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&fws, cuda::forward_workspace_bytes(p)), cudaSuccess);
  cuda::DeviceTensor t, tl, none;
  t.data = q;
  t.stride[0] = t.stride[1] = 64, t.stride[2] = 64, t.stride[3] = 1;
  cuda::DeviceTensor to = t;
  to.data = o;
  tl.data = lse;
  p.forward_stats = stats;
  // No workspace for the Gram matrices.
  cuda::Status st = cuda::forward(p, t, t, t, to, tl, none, nullptr);
  EXPECT_FALSE(st.ok);
  EXPECT_EQ(st.code, ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message.find("forward_workspace"), std::string::npos) << st.message;
  p.forward_workspace = fws;
  st = cuda::forward(p, t, t, t, to, tl, none, nullptr);
  EXPECT_TRUE(st.ok) << st.message;
  EXPECT_NE(st.kernels.find("forward v2.3"), std::string::npos) << st.kernels;
  // Another variant, and the v1 backward: refused.
  cuda::Problem base = p;
  base.params.variant = Variant::kBaseline;
  EXPECT_FALSE(cuda::forward_stats_apply(base));
  EXPECT_EQ(cuda::forward_stats_bytes(base), 0u);
  st = cuda::forward(base, t, t, t, to, tl, none, nullptr);
  EXPECT_FALSE(st.ok);
  EXPECT_EQ(st.code, ErrorCode::kUnsupported);
  EXPECT_NE(st.message.find("forward_stats"), std::string::npos) << st.message;
  cuda::Problem v1 = p;
  v1.params.cuda_backward_wgmma = 0;
  ASSERT_EQ(cudaMalloc(&ws, cuda::backward_workspace_bytes(v1)), cudaSuccess);
  void* g = nullptr;
  ASSERT_EQ(cudaMalloc(&g, 3 * n * 2), cudaSuccess);
  cuda::DeviceTensor dq = t, dk = t, dv = t;
  dq.data = g;
  dk.data = static_cast<char*>(g) + n * 2;
  dv.data = static_cast<char*>(g) + 2 * n * 2;
  st = cuda::backward(v1, t, t, t, to, none, tl, t, dq, dk, dv, ws, nullptr);
  EXPECT_FALSE(st.ok);
  EXPECT_EQ(st.code, ErrorCode::kUnsupported);
  EXPECT_NE(st.message.find("forward_stats"), std::string::npos) << st.message;
  // And where they apply, the backward takes them.
  st = cuda::backward(p, t, t, t, to, none, tl, t, dq, dk, dv, ws, nullptr);
  EXPECT_TRUE(st.ok) << st.message;
  EXPECT_NE(st.kernels.find("statistics from the forward"), std::string::npos) << st.kernels;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (void* ptr : {q, o, lse, stats, fws, ws, g}) cudaFree(ptr);
}

// K's basis from the forward (Problem::forward_basis): U is a function of k alone, so the backward that takes it
// gives the gradients of the one that forms it: dV the same bits, dQ and dK (FP32 atomics in any order) within one
// BF16 unit an element, on the v3 kernels and the v1 ones (which then form only bf16(K U)), with and without causal
// masking, with one and two query heads per kv head (GQA), at an awkward Nk. The forward's own outputs do not move.
TEST(Cuda, ForwardBasisGivesTheBackwardsGradients) {
  GPROJ_REQUIRE_GPU();
  const int64_t Nq = 200, Nk = 328, H = 2;
  for (int64_t D : {64, 128})
    for (int64_t Hkv : {H, H / 2}) {
      const AttentionState s = make_synthetic(synthetic_spec(Nq, Nk, H, Hkv, D, true, 93));
      const size_t n = static_cast<size_t>(Nq * H * D), nkv = static_cast<size_t>(Nk * Hkv * D);
      DeviceScratch mem;
      const cuda::DeviceTensor q = mem.upload(s.q, Nq, H, D), k = mem.upload(s.k, Nk, Hkv, D),
                               v = mem.upload(s.v, Nk, Hkv, D), dout = mem.upload(s.dout, Nq, H, D);
      cuda::DeviceTensor none;
      for (int form = 0; form < 4; ++form) {  // v3 (auto) and v1; each without and with causal masking
        cuda::Problem p;
        p.B = 1, p.Nq = Nq, p.Nk = Nk, p.H = H, p.Hkv = Hkv, p.D = D;
        p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(D));
        p.params = test::params_for(Variant::kGproj, Projection::kThreshLowRank);
        p.params.causal = form % 2 != 0;
        p.params.cuda_backward_wgmma = form < 2 ? -1 : 0;
        const std::string what = std::string(form < 2 ? "v3" : "v1") + (p.params.causal ? " causal" : "") +
                                 " D = " + std::to_string(D) + " Hkv = " + std::to_string(Hkv);
        ASSERT_TRUE(cuda::forward_basis_apply(p)) << what;
        ASSERT_EQ(cuda::forward_basis_bytes(p), sizeof(float) * static_cast<size_t>(Hkv * D * 8)) << what;
        std::vector<uint16_t> out[2][4];  // [formed by the backward, from the forward][O, dQ, dK, dV]
        for (int from_forward : {0, 1}) {
          cuda::Problem pf = p;
          if (from_forward) {
            pf.forward_basis = mem.alloc(cuda::forward_basis_bytes(p));
            pf.forward_workspace = mem.alloc(cuda::forward_workspace_bytes(p));
          }
          const cuda::DeviceTensor o = dense_view(mem.alloc(n * 2), Nq, H, D);
          cuda::DeviceTensor lse;
          lse.data = mem.alloc(H * Nq * 4);
          const cuda::Status fs = cuda::forward(pf, q, k, v, o, lse, none, nullptr);
          ASSERT_TRUE(fs.ok) << what << ": " << fs.message;
          EXPECT_EQ(fs.kernels.find("basis beside it") != std::string::npos, from_forward != 0) << fs.kernels;
          const cuda::DeviceTensor dq = dense_view(mem.alloc(n * 2), Nq, H, D),
                                   dk = dense_view(mem.alloc(nkv * 2), Nk, Hkv, D),
                                   dv = dense_view(mem.alloc(nkv * 2), Nk, Hkv, D);
          const cuda::Status bs = cuda::backward(pf, q, k, v, o, none, lse, dout, dq, dk, dv,
                                                 mem.alloc(cuda::backward_workspace_bytes(pf)), nullptr);
          ASSERT_TRUE(bs.ok) << what << ": " << bs.message;
          EXPECT_EQ(bs.kernels.find("basis from the forward") != std::string::npos, from_forward != 0) << bs.kernels;
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
          for (int t = 0; t < 4; ++t) {
            std::vector<uint16_t>& h = out[from_forward][t];
            h.resize(t < 2 ? n : nkv);
            const void* src = t == 0 ? o.data : t == 1 ? dq.data : t == 2 ? dk.data : dv.data;
            ASSERT_EQ(cudaMemcpy(h.data(), src, h.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
          }
        }
        for (int t = 0; t < 4; ++t) {  // O and dV the same bits; dQ and dK come from FP32 atomics
          const char* name = t == 0 ? " O" : t == 1 ? " dQ" : t == 2 ? " dK" : " dV";
          expect_same_output(out[0][t], out[1][t], t == 1 || t == 2, what + name);
        }
      }
    }
}

// Problem::forward_basis where it does not apply (another variant, with forward_stats) or without its Gram
// workspace: refused by forward() and backward() with a status naming it, never ignored.
TEST(Cuda, ForwardBasisIsRefusedWhereItDoesNotApply) {
  GPROJ_REQUIRE_GPU();
  cuda::Problem p = small_gproj_problem(64);
  ASSERT_TRUE(cuda::forward_basis_apply(p));
  const size_t n = 64 * 64;
  DeviceScratch mem;
  cuda::DeviceTensor t = dense_view(mem.alloc(n * 2), 64, 1, 64), to = dense_view(mem.alloc(n * 2), 64, 1, 64), tl,
                     none;
  ASSERT_EQ(cudaMemset(t.data, 0, n * 2), cudaSuccess);
  tl.data = mem.alloc(64 * 4);
  p.forward_basis = mem.alloc(cuda::forward_basis_bytes(p));
  cuda::Status st = cuda::forward(p, t, t, t, to, tl, none, nullptr);  // no forward_workspace
  EXPECT_FALSE(st.ok);
  EXPECT_EQ(st.code, ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message.find("forward_workspace"), std::string::npos) << st.message;
  p.forward_workspace = mem.alloc(cuda::forward_workspace_bytes(p));
  st = cuda::forward(p, t, t, t, to, tl, none, nullptr);
  EXPECT_TRUE(st.ok) << st.message;
  const cuda::DeviceTensor dq = dense_view(mem.alloc(n * 2), 64, 1, 64), dk = dense_view(mem.alloc(n * 2), 64, 1, 64),
                           dv = dense_view(mem.alloc(n * 2), 64, 1, 64);
  void* ws = mem.alloc(cuda::backward_workspace_bytes(p));
  for (int which = 0; which < 2; ++which) {  // baseline; gproj with forward_stats
    cuda::Problem bad = p;
    if (which == 0) bad.params.variant = Variant::kBaseline;
    else bad.params.forward_stats = true;
    EXPECT_FALSE(cuda::forward_basis_apply(bad)) << which;
    EXPECT_EQ(cuda::forward_basis_bytes(bad), 0u) << which;
    st = cuda::forward(bad, t, t, t, to, tl, none, nullptr);
    EXPECT_FALSE(st.ok) << which;
    EXPECT_EQ(st.code, ErrorCode::kUnsupported) << which;
    EXPECT_NE(st.message.find("forward_basis"), std::string::npos) << st.message;
    st = cuda::backward(bad, t, t, t, to, none, tl, t, dq, dk, dv, ws, nullptr);
    EXPECT_FALSE(st.ok) << which;
    EXPECT_EQ(st.code, ErrorCode::kUnsupported) << which;
    EXPECT_NE(st.message.find("forward_basis"), std::string::npos) << st.message;
  }
  st = cuda::backward(p, t, t, t, to, none, tl, t, dq, dk, dv, ws, nullptr);
  EXPECT_TRUE(st.ok) << st.message;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// The CUDA backward of `s` (with the forward `f`) under `p` must be refused as unsupported, naming `needle`.
void expect_backward_unsupported(const AttentionState& s, const ForwardResult& f, const FlashParams& p,
                                 const std::string& needle, const std::string& what) {
  try {
    attention_backward(Device::kCuda, s.q.view(), s.k.view(), s.v.view(), f.o.view(), f.o_fp32.view(), f.lse.view(),
                       s.dout.view(), p);
    ADD_FAILURE() << what << " was expected to be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << what << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Cuda, UnsupportedRequestsAreErrors) {
  GPROJ_REQUIRE_GPU();
  test::Case c{64, 64, 2, 2, 32, false, 64, 64};
  const AttentionState s = test::state_for(c, 1);
  FlashParams p;
  try {
    attention_forward(Device::kCuda, s.q.view(), s.k.view(), s.v.view(), p);
    ADD_FAILURE() << "D = 32 was expected to be refused";
  } catch (const Error& e) {  // the launch API's status code reaches the caller's error type
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("D = 32"), std::string::npos) << e.what();
  }
  // An explicit wgmma backward is refused, not rerouted, where it does not apply: v3.0 with the gproj variant,
  // v3.1 with the pweighted projection and with deterministic mode.
  test::Case c128{64, 64, 2, 2, 128, false, 64, 64};
  const AttentionState s128 = test::state_for(c128, 2);
  const FlashParams base = sweep_params(Variant::kGproj);
  const ForwardResult f = attention_forward(Device::kCuda, s128.q.view(), s128.k.view(), s128.v.view(), base);
  FlashParams v30 = base, v31_pw = test::params_for(Variant::kGproj, Projection::kPWeighted), v31_det = v31_pw;
  v30.cuda_backward_wgmma = 1;
  v31_pw.cuda_backward_wgmma = 2;
  v31_det.cuda_backward_wgmma = 2;
  v31_det.deterministic = true;
  FlashParams dk_comp = base;  // the CPU emulator's experiment only
  dk_comp.dk_compensation_rank = 8;
  for (const auto& [what, q] : {std::pair<const char*, FlashParams>{"v3.0 with gproj", v30}, {"v3.1 with pweighted", v31_pw},
                                {"v3.1 deterministic", v31_det}, {"dk compensation", dk_comp}}) {
    try {
      attention_backward(Device::kCuda, s128.q.view(), s128.k.view(), s128.v.view(), f.o.view(), f.o_fp32.view(),
                         f.lse.view(), s128.dout.view(), q);
      ADD_FAILURE() << what << " was expected to be refused";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << what << ": " << e.what();
      const std::string msg = e.what();
      EXPECT_TRUE(msg.find("cuda_backward_wgmma") != std::string::npos ||
                  msg.find("dk_compensation_rank") != std::string::npos) << msg;
    }
  }
  // v3.3 (experimental) is a D = 128 kernel: at D = 64 the request is refused too.
  test::Case c64{64, 64, 2, 2, 64, false, 64, 64};
  const AttentionState s64 = test::state_for(c64, 3);
  const ForwardResult f64 = attention_forward(Device::kCuda, s64.q.view(), s64.k.view(), s64.v.view(), base);
  FlashParams v33 = base;
  v33.cuda_backward_wgmma = 4;
  expect_backward_unsupported(s64, f64, v33, "cuda_backward_wgmma = 4", "v3.3 at D = 64");
}

}  // namespace
}  // namespace gproj
