// The CPU FlashAttention backward of every variant against the float64 oracle, stage by stage (delta, dS row
// sums, the FP32 dQ accumulator, final dQ/dK/dV), on awkward sizes, GQA and bad inputs. Part of cpu_tests.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "cpu/test_support.h"
#include "gproj/error.h"
#include "test_util.h"

namespace gproj {
namespace {

using test::Case;
using test::state_for;

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return test::case_name(info.param); }

class BackwardSweep : public ::testing::TestWithParam<Case> {};

TEST_P(BackwardSweep, EveryVariantWithinDerivedTolerance) {
  const Case c = GetParam();
  const AttentionState s = state_for(c, 2000 + c.Nq * 5 + c.Nk);
  const OracleRun oracle = run_oracle(s);
  const FlashParams base = test::tiles_of(c);
  FlashParams fp = base;
  fp.variant = Variant::kFp32;
  const VariantRun ref = run_variant(s, fp, oracle);  // the fp32 reference of the derived tolerances
  const test::Tolerances tol = test::derive_tolerances(ref, oracle);
  std::printf("  derived tolerances (2 x fp32 variant + 2 x one rounding): dQ %.3e dK %.3e dV %.3e\n", tol.dq,
              tol.dk, tol.dv);
  // Stage: the FP32 dQ accumulator of the fp32 variant is far more accurate than one BF16 output rounding; this
  // is what makes "BF16 only at inputs and outputs" true of that variant.
  const ErrorStats acc = compare(ref.bwd.dq_fp32.view(), oracle.bwd.dq.view());
  std::printf("  fp32 dQ accumulator vs oracle: %s\n", describe(acc).c_str());
  EXPECT_LE(acc.rel_fro, 0.1 * bf16_rounding_error(oracle.bwd.dq.view()));
  for (Variant v : all_variants()) {
    FlashParams p = base;
    p.variant = v;
    const VariantRun r = run_variant(s, p, oracle);
    test::print_evidence(variant_name(v), r);
    EXPECT_LE(r.dq.rel_fro, tol.dq) << variant_name(v);
    EXPECT_LE(r.dk.rel_fro, tol.dk) << variant_name(v);
    EXPECT_LE(r.dv.rel_fro, tol.dv) << variant_name(v);
    // Stage: delta. |delta_i - delta_ref_i| <= |dO_i| |O_i - O_ref_i| (Cauchy-Schwarz) for the O the variant
    // used, plus FP32 summation rounding D * 2^-24 * sum_d |dO_id O_id|; checked row by row with slack 2.
    const bool fp32_o = v == Variant::kFp32;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t i = 0; i < c.Nq; ++i) {
          double ndo = 0, nerr = 0, absdot = 0;
          for (int64_t e = 0; e < c.D; ++e) {
            const double o = fp32_o ? r.fwd.o_fp32.at(b, i, h, e) : r.fwd.o.at(b, i, h, e).to_float();
            const double dout = s.dout.at(b, i, h, e).to_float();
            ndo += dout * dout;
            nerr += (o - oracle.fwd.o.at(b, i, h, e)) * (o - oracle.fwd.o.at(b, i, h, e));
            absdot += std::fabs(dout * o);
          }
          const double bound = 2 * (std::sqrt(ndo * nerr) + c.D * 0x1.0p-24 * absdot);
          ASSERT_LE(std::fabs(r.bwd.delta.at(b, h, i) - oracle.bwd.delta.at(b, h, i)), bound)
              << variant_name(v) << " delta row " << i;
        }
  }
}

// gproj with projection fp16-lowrank (docs/design-fp16-projection.md), whose rounding points differ from the
// variants' above (docs/numerics.md): O and the gradients within the same derived tolerances on every awkward size
// (rows with no visible key, length 1, GQA and MQA, tiles that do not divide N), and the LSE it keeps (from an
// integer max and the sum of the FP16 P^) within FP32 rounding of the oracle's, relative to the row's logits.
TEST_P(BackwardSweep, Fp16LowRankWithinDerivedTolerance) {
  const Case c = GetParam();
  const AttentionState s = state_for(c, 2000 + c.Nq * 5 + c.Nk);
  const OracleRun oracle = run_oracle(s);
  FlashParams p = test::tiles_of(c);
  p.variant = Variant::kFp32;
  const test::Tolerances tol = test::derive_tolerances(run_variant(s, p, oracle), oracle);
  p.variant = Variant::kGproj;
  p.projection = Projection::kFp16LowRank;
  const VariantRun r = run_variant(s, p, oracle);
  test::print_evidence("gproj / fp16-lowrank", r);
  EXPECT_LE(r.o.rel_fro, tol.o);
  EXPECT_LE(r.dq.rel_fro, tol.dq);
  EXPECT_LE(r.dk.rel_fro, tol.dk);
  EXPECT_LE(r.dv.rel_fro, tol.dv);
  // LSE: log l of FP16-rounded terms, each within 2^-11 relative, so within 2^-11 of the oracle's (plus FP32
  // rounding of m ln 2 and of the sum); -inf exactly where the oracle's is.
  for (size_t i = 0; i < r.fwd.lse.values.size(); ++i) {
    const double want = oracle.fwd.lse.values[i], got = r.fwd.lse.values[i];
    if (std::isinf(want)) {
      ASSERT_TRUE(std::isinf(got) && got < 0) << "row " << i;
      continue;
    }
    ASSERT_LE(std::fabs(got - want), 0x1.0p-11 + 1e-6 * (1 + std::fabs(want))) << "row " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Awkward, BackwardSweep, ::testing::ValuesIn(test::awkward_cases()), case_name);

TEST(Backward, RowResidualComesFromTheBf16Rounding) {
  // Stage: dS row sums. In the fp32 variant delta comes from the FP32 O and dS is never rounded, so
  // r_i = sum_j dS_ij is FP32 rounding alone; baseline adds the BF16 rounding of dS (2^-9 relative per entry
  // against FP32's 2^-24), so its residual must be larger by orders of magnitude: at least 100x here.
  Case c{300, 300, 2, 2, 64, true, 64, 64};
  const AttentionState s = state_for(c, 31);
  const OracleRun oracle = run_oracle(s);
  const VariantRun fp = run_variant(s, test::params_for(Variant::kFp32), oracle);
  const VariantRun bl = run_variant(s, test::params_for(Variant::kBaseline), oracle);
  std::printf("  max|r|: fp32 %.3e, baseline %.3e\n", fp.bwd.diag.rowsum_max_before, bl.bwd.diag.rowsum_max_before);
  EXPECT_GT(bl.bwd.diag.rowsum_max_before, 100 * fp.bwd.diag.rowsum_max_before);
  EXPECT_GT(fp.bwd.diag.rowsum_max_before, 0.0) << "an exactly zero FP32 residual would mean nothing was summed";
}

TEST(Backward, SingleKeyGivesZeroDqAndDk) {
  // With one visible key P = 1, so dS = dP - delta = 0 in exact arithmetic and dQ = dK = 0; the emulator's
  // only error is FP32 rounding of two length-D dot products, |dP - delta| <= 2 D 2^-24 |dO| |V|.
  Case c{1, 1, 1, 1, 64, false, 64, 64};
  const AttentionState s = state_for(c, 8);
  const OracleRun oracle = run_oracle(s);
  EXPECT_EQ(oracle.bwd.dq.values[0], 0.0);
  const VariantRun r = run_variant(s, test::params_for(Variant::kBaseline), oracle);
  double nq = 0, nk = 0, nv = 0, ndo = 0;
  for (int64_t e = 0; e < 64; ++e) {
    nq += std::pow(s.q.values[e].to_float(), 2);
    nk += std::pow(s.k.values[e].to_float(), 2);
    nv += std::pow(s.v.values[e].to_float(), 2);
    ndo += std::pow(s.dout.values[e].to_float(), 2);
  }
  const double ds_bound = 2 * 64 * 0x1.0p-24 * std::sqrt(ndo * nv);
  EXPECT_LE(r.dq.max_abs, ds_bound * std::sqrt(nk));
  EXPECT_LE(r.dk.max_abs, ds_bound * std::sqrt(nq));
  EXPECT_LE(r.dv.rel_fro, bf16_rounding_error(oracle.bwd.dv.view()) + 1e-7);
}

using test::expect_error;

TEST(Backward, BadInputsRaiseTypedErrors) {
  Case c{8, 8, 2, 2, 32, false, 64, 64};
  AttentionState s = state_for(c, 4);
  FlashParams p;
  p.variant = Variant::kBaseline;
  const ForwardResult f = flash_forward_cpu(s.q.view(), s.k.view(), s.v.view(), p);
  auto run = [&](const FlashParams& pp, const TensorView<const float>& lse, const TensorView<const float>& of) {
    flash_backward_cpu(s.q.view(), s.k.view(), s.v.view(), f.o.view(), of, lse, s.dout.view(), pp);
  };
  EXPECT_NO_THROW(run(p, f.lse.view(), {}));
  Tensor<float> lse_bad({2, 2, 7});
  expect_error(ErrorCode::kShape, "lse must be (B, H, Nq)", [&] { run(p, lse_bad.view(), {}); });
  FlashParams fp = p;
  fp.variant = Variant::kFp32;
  expect_error(ErrorCode::kInvalidArgument, "needs the forward's FP32 O", [&] { run(fp, f.lse.view(), {}); });
  FlashParams delta = p;
  delta.variant = Variant::kGproj;
  delta.projection = Projection::kDelta;
  expect_error(ErrorCode::kInvalidArgument, "projection delta", [&] { run(delta, f.lse.view(), {}); });
  s.dout.at(0, 1, 1, 2) = bf16::from_float(NAN);
  expect_error(ErrorCode::kNonFinite, "do holds NaN at (0, 1, 1, 2)", [&] { run(p, f.lse.view(), {}); });
  Tensor<bf16> do_short({2, 7, 2, 32});
  expect_error(ErrorCode::kShape, "do has shape", [&] {
    flash_backward_cpu(s.q.view(), s.k.view(), s.v.view(), f.o.view(), {}, f.lse.view(), do_short.view(), p);
  });
}

}  // namespace
}  // namespace gproj
