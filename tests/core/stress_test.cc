// The built-in stress suite: unique names, deterministic states, the real group found in tests/data, and
// clear errors for unknown names. Part of core_tests (ctest).
#include <gtest/gtest.h>

#include <set>

#include "gproj/error.h"
#include "gproj/stress.h"

namespace gproj {
namespace {

TEST(StressSuite, NamesAreUniqueAndCasesDeterministic) {
  const std::vector<StressCase> all = stress_suite(::gproj::default_data_dir());
  std::set<std::string> names;
  for (const StressCase& c : all) {
    EXPECT_TRUE(names.insert(c.name).second) << c.name;
    EXPECT_FALSE(c.mechanism.empty()) << c.name;
  }
  EXPECT_GE(names.size(), 12u);
  for (const StressCase& c : synthetic_stress_cases()) {
    const AttentionState a = c.make(), b = c.make();
    ASSERT_EQ(a.q.values.size(), b.q.values.size()) << c.name;
    for (size_t i = 0; i < a.q.values.size(); ++i) ASSERT_EQ(a.q.values[i].bits, b.q.values[i].bits) << c.name;
    for (size_t i = 0; i < a.k.values.size(); ++i) ASSERT_EQ(a.k.values[i].bits, b.k.values[i].bits) << c.name;
  }
}

TEST(StressSuite, RealGroupComesFromTestData) {
  const std::vector<StressCase> real = stress_suite(::gproj::default_data_dir(), {"real"});
  ASSERT_EQ(real.size(), 2u);
  EXPECT_EQ(real[0].group, "real");
  EXPECT_TRUE(real[0].make().causal);
  EXPECT_TRUE(real_stress_cases("/nonexistent-gproj-data").empty());
}

TEST(StressSuite, TiesAreExactInTheTieCases) {
  // The tie cases rely on bit-identical keys 0..3 in every kv head.
  for (const char* name : {"sink-ties-positive", "sink-ties-large", "ties-negative"}) {
    const AttentionState s = stress_suite(::gproj::default_data_dir(), {name}).at(0).make();
    for (int64_t h = 0; h < s.k.shape[2]; ++h)
      for (int64_t j = 1; j < 4; ++j)
        for (int64_t e = 0; e < s.k.shape[3]; ++e) ASSERT_EQ(s.k.at(0, j, h, e).bits, s.k.at(0, 0, h, e).bits) << name;
  }
}

TEST(StressSuite, UnknownNameIsAnError) {
  try {
    stress_suite(::gproj::default_data_dir(), {"shared-keyz"});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'shared-keyz'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gproj
