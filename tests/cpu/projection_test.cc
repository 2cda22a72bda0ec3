// GProj on the CPU: the shared-key phenomenon and its fix, the zero-row-sum invariant after projection, the
// dK column-sum ratio, and every projection candidate selectable by name. Part of cpu_tests (ctest).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cpu/test_support.h"
#include "gproj/stress.h"

namespace gproj {
namespace {

AttentionState shared_key_state(bool causal) {
  // Keys share one large component (16x the per-coordinate noise): S is blind to it (softmax shift
  // invariance), but any row residual r_i of bf16(dS) multiplies it into dQ.
  SyntheticSpec s;
  s.B = 1;
  s.Nq = s.Nk = 512;
  s.H = s.Hkv = 4;
  s.D = 64;
  s.causal = causal;
  s.shared_key = 16.0f;
  s.seed = 77;
  return make_synthetic(s);
}

class SharedKey : public ::testing::TestWithParam<bool> {};

TEST_P(SharedKey, BaselineDqBiasIsRemovedByGproj) {
  const AttentionState s = shared_key_state(GetParam());
  const OracleRun oracle = run_oracle(s);
  const VariantRun base = run_variant(s, test::params_for(Variant::kBaseline), oracle);
  const VariantRun fix = run_variant(s, test::params_for(Variant::kGproj), oracle);
  test::print_evidence("baseline", base);
  test::print_evidence("gproj (default projection)", fix);
  EXPECT_GE(base.dq.rel_fro, 10 * fix.dq.rel_fro) << "the phenomenon: baseline dQ at least 10x gproj's";
  EXPECT_LE(fix.dq.rel_fro, 0.005);
  EXPECT_LE(fix.dk.rel_fro, 0.005);
}

INSTANTIATE_TEST_SUITE_P(CausalAndNot, SharedKey, ::testing::Values(false, true));

TEST(Projection, EffectiveRowsSumToZeroAndDkColumnsCancel) {
  // After projection r'_i = r_i - c_i s_i with c_i = r_i / s_i in FP32: two roundings, so
  // |r'_i| <= 2 * 2^-24 * |r_i| (the same for the uniform form's r_i - n_i (r_i / n_i)); top-k sums k shares
  // c w_t, adding k roundings: |r'_i| <= (k + 2) * 2^-24 * |r_i|.
  const AttentionState s = shared_key_state(true);
  const OracleRun oracle = run_oracle(s);
  const VariantRun fp = run_variant(s, test::params_for(Variant::kFp32), oracle);
  const VariantRun base = run_variant(s, test::params_for(Variant::kBaseline), oracle);
  for (Projection p : {Projection::kUniform, Projection::kPWeighted, Projection::kPWeightedDq, Projection::kLowRank,
                       Projection::kTopK, Projection::kTopKRest, Projection::kTopKLowRank,
                       Projection::kThreshLowRank}) {
    const VariantRun r = run_variant(s, test::params_for(Variant::kGproj, p), oracle);
    for (size_t i = 0; i < r.bwd.rowsum.values.size(); ++i) {
      const bool topk = p == Projection::kTopK || p == Projection::kTopKRest || p == Projection::kTopKLowRank ||
                        p == Projection::kThreshLowRank;
      const double roundings = topk ? 2 * std::max(FlashParams{}.topk, FlashParams{}.thresh_k) + 4 : 2;
      ASSERT_LE(std::fabs(r.bwd.rowsum_after.values[i]), roundings * 0x1.0p-24 * std::fabs(r.bwd.rowsum.values[i]) + 1e-30)
          << projection_name(p) << " row " << i;
    }
    std::printf("  %-12s max|r| %.3e -> %.3e, ||sum_j dK_j||/||dK|| %.3e (baseline %.3e, fp32 %.3e)\n",
                projection_name(p), r.bwd.diag.rowsum_max_before, r.bwd.diag.rowsum_max_after,
                r.bwd.diag.dk_colsum_ratio, base.bwd.diag.dk_colsum_ratio, fp.bwd.diag.dk_colsum_ratio);
    // What is left of sum_j dK_j is the BF16 rounding of dK itself, the same as the fp32 variant's.
    EXPECT_LT(r.bwd.diag.dk_colsum_ratio, base.bwd.diag.dk_colsum_ratio) << projection_name(p);
    EXPECT_LE(r.bwd.diag.dk_colsum_ratio, 1.5 * fp.bwd.diag.dk_colsum_ratio) << projection_name(p);
  }
}

TEST(Projection, DefaultIsThreshLowRank) {
  // docs/gproj-projection.md: within every bar on both real states and every stress case, CPU and H200, at a
  // third of pweighted's backward overhead on the GPU (CheapFormsTrackFullPWeighting below checks it against
  // the exact form; the CUDA tests check the bars and the CPU agreement).
  EXPECT_EQ(FlashParams{}.projection, Projection::kThreshLowRank);
  EXPECT_EQ(FlashParams{}.thresh_k, 16);
  EXPECT_EQ(FlashParams{}.lowrank_rank, 8);
  EXPECT_EQ(FlashParams{}.variant, Variant::kGproj);
}

// docs/gproj-projection.md: the cheap forms meant for the GPU kernel, topk-lowrank (k = 8, r = 8) and
// thresh-lowrank (threshold 1/16, r = 8: a per-entry test a backward kernel applies tile by tile), must stay
// within 10% of the full P-weighted projection where the cheaper forms failed (the diffuse-P sink case, where
// plain top-k leaves 0.78%) and on a captured state.
TEST(Projection, CheapFormsTrackFullPWeighting) {
  std::vector<AttentionState> states;
  states.push_back(stress_suite(GPROJ_TEST_DATA, {"sink-ties-positive"}).at(0).make());
  states.push_back(load_state(std::string(GPROJ_TEST_DATA) + "/real_step5000_layer3.safetensors"));
  for (const AttentionState& s : states) {
    const OracleRun oracle = run_oracle(s);
    const VariantRun full = run_variant(s, test::params_for(Variant::kGproj, Projection::kPWeighted), oracle);
    const VariantRun top = run_variant(s, test::params_for(Variant::kGproj, Projection::kTopK), oracle);
    std::printf("  pweighted dQ %.4f%% dK %.4f%%; plain topk dQ %.4f%% dK %.4f%%\n", 100 * full.dq.rel_fro,
                100 * full.dk.rel_fro, 100 * top.dq.rel_fro, 100 * top.dk.rel_fro);
    for (Projection cheap_form : {Projection::kTopKLowRank, Projection::kThreshLowRank}) {  // thresh_k = 16
      const VariantRun cheap = run_variant(s, test::params_for(Variant::kGproj, cheap_form), oracle);
      std::printf("  %-14s dQ %.4f%% dK %.4f%%\n", projection_name(cheap_form), 100 * cheap.dq.rel_fro,
                  100 * cheap.dk.rel_fro);
      EXPECT_LE(cheap.dq.rel_fro, 1.1 * full.dq.rel_fro) << projection_name(cheap_form);
      EXPECT_LE(cheap.dk.rel_fro, 1.1 * full.dk.rel_fro) << projection_name(cheap_form);
    }
  }
}

TEST(Projection, EveryCandidateRunsByNameWithinTolerancesOnRandomInputs) {
  // On random inputs (no shared component) no projection may make things worse than the derived tolerance.
  SyntheticSpec spec;
  spec.B = 1;
  spec.Nq = 150;
  spec.Nk = 230;
  spec.H = 4;
  spec.Hkv = 2;
  spec.D = 64;
  spec.causal = true;
  spec.seed = 5;
  const AttentionState s = make_synthetic(spec);
  const OracleRun oracle = run_oracle(s);
  const VariantRun fp = run_variant(s, test::params_for(Variant::kFp32), oracle);
  const test::Tolerances tol = test::derive_tolerances(fp, oracle);
  for (Projection p : all_projections()) {
    const VariantRun r = run_variant(s, test::params_for(Variant::kGproj, parse_projection(projection_name(p))), oracle);
    test::print_evidence(std::string("gproj/") + projection_name(p), r);
    EXPECT_LE(r.dq.rel_fro, tol.dq) << projection_name(p);
    EXPECT_LE(r.dk.rel_fro, tol.dk) << projection_name(p);
  }
}

}  // namespace
}  // namespace gproj
