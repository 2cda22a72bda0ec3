// FlashParams' derived facts (src/cpu/params.cc): which projection a variant applies and where the CUDA backward
// has a deterministic form. Part of cpu_tests (ctest); the CUDA launch's use of the refusal is checked on the GPU
// (tests/cuda/flash_cuda_test.cc, Cuda.DeterministicModeRefusesTheProjectionsWithoutIt).
#include <gtest/gtest.h>

#include <string>

#include "gproj/attention.h"

namespace gproj {
namespace {

FlashParams params(Variant v, Projection proj) {
  FlashParams p;
  p.variant = v;
  p.projection = proj;
  return p;
}

TEST(Params, EffectiveProjectionIsNoneOutsideTheGprojVariant) {
  EXPECT_EQ(effective_projection(params(Variant::kGproj, Projection::kPWeighted)), Projection::kPWeighted);
  for (Variant v : {Variant::kFp32, Variant::kBaseline, Variant::kFwdfix})
    EXPECT_EQ(effective_projection(params(v, Projection::kThreshLowRank)), Projection::kNone) << variant_name(v);
}

TEST(Params, DeterministicModeIsRefusedExactlyWhereTheCudaBackwardAddsWithAtomics) {
  // Every variant without a projection, and gproj's exact projection, have the deterministic dQ pass.
  for (Variant v : {Variant::kFp32, Variant::kBaseline, Variant::kFwdfix})
    EXPECT_EQ(cuda_deterministic_refusal(params(v, Projection::kThreshLowRank)), "") << variant_name(v);
  EXPECT_EQ(cuda_deterministic_refusal(params(Variant::kGproj, Projection::kPWeighted)), "");
  // The cheap forms are refused with a sentence that names the way out.
  for (Projection proj : {Projection::kThreshLowRank, Projection::kFp16LowRank}) {
    const std::string why = cuda_deterministic_refusal(params(Variant::kGproj, proj));
    EXPECT_NE(why.find("choose projection pweighted"), std::string::npos) << projection_name(proj) << ": " << why;
    EXPECT_NE(why.find(projection_name(proj)), std::string::npos) << why;
  }
  // The default FlashParams (gproj with thresh-lowrank) is among them.
  EXPECT_NE(cuda_deterministic_refusal(FlashParams{}), "");
}

}  // namespace
}  // namespace gproj
