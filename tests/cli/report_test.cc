// --fail-above parsing and checking, and the report's JSON shape on a hand-made row. Part of cli_tests.
#include <gtest/gtest.h>

#include <cmath>

#include "cli/report.h"
#include "gproj/error.h"

namespace gproj::cli {
namespace {

TEST(Bounds, ParseAndApplyPerVariant) {
  const std::vector<Bound> b = parse_bounds("dq=0.005,gproj:dk=0.003");
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].variant, "");
  EXPECT_EQ(b[1].variant, "gproj");
  CheckRow row;
  row.variant = "baseline";
  row.dq.rel_fro = 0.004;
  row.dk.rel_fro = 0.01;
  EXPECT_TRUE(violations(row, b).empty()) << "dk bound is for gproj only";
  row.variant = "gproj";
  ASSERT_EQ(violations(row, b).size(), 1u);
  EXPECT_EQ(violations(row, b)[0].rfind("dk 0.01 > 0.003", 0), 0u);
  row.dq.rel_fro = NAN;
  EXPECT_EQ(violations(row, b).size(), 2u) << "NaN must exceed every bound";
  row.skipped = "cuda: unsupported head dim";
  EXPECT_TRUE(violations(row, b).empty()) << "a row the device could not run has no numbers to bound";
}

TEST(Bounds, BadItemsNameThemselves) {
  for (const char* bad : {"dq", "dz=0.1", "dq=abc", "dq=-1", "dq=inf"}) {
    try {
      parse_bounds(bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("--fail-above"), std::string::npos) << e.what();
    }
  }
}

TEST(Report, JsonHasTheDocumentedShape) {
  CheckReport r;
  r.env = {{"gproj_version", "x"}};
  CheckRow row;
  row.case_name = "c";
  row.variant = "gproj";
  row.device = "cpu";
  row.dq.rel_fro = 0.002;
  row.o.rel_fro = NAN;
  row.seconds = 1.5;
  r.rows.push_back(row);
  r.bounds = parse_bounds("dq=0.001");
  const nlohmann::json j = to_json(r);
  ASSERT_TRUE(j.contains("env"));
  const nlohmann::json& c = j.at("cases").at(0);
  EXPECT_EQ(c.at("case"), "c");
  EXPECT_EQ(c.at("variant"), "gproj");
  EXPECT_EQ(c.at("device"), "cpu");
  EXPECT_DOUBLE_EQ(c.at("errors").at("dq").get<double>(), 0.002);
  EXPECT_TRUE(c.at("errors").at("o").is_null()) << "NaN is written as null, never as invalid JSON";
  EXPECT_TRUE(c.at("rowsum_max").is_number());
  EXPECT_TRUE(c.at("dk_colsum_ratio").is_number());
  EXPECT_DOUBLE_EQ(c.at("seconds").get<double>(), 1.5);
  EXPECT_EQ(j.at("passed"), false);
  EXPECT_NE(to_markdown(r).find("| c | gproj | cpu |"), std::string::npos);
}

TEST(Report, MarkdownSaysWhichKernelsRanAndTheProjection) {
  CheckReport r;
  r.env = {{"gproj_version", "x"},
           {"variants", {{"gproj", {{"variant", "gproj"}, {"projection", "thresh-lowrank"}, {"thresh_k", 16},
                                    {"lowrank_rank", 6}}}}}};
  for (const char* dev : {"cpu", "cuda", "cuda"}) {  // the second CUDA row ran the same kernels: listed once
    CheckRow row;
    row.case_name = "c";
    row.variant = "gproj";
    row.device = dev;
    row.kernels = std::string(dev) == "cpu" ? "cpu emulator" : "forward v2.2 (wgmma, TMA); backward v3.2";
    r.rows.push_back(row);
  }
  const std::string md = to_markdown(r);
  EXPECT_NE(md.find("- gproj on cpu: cpu emulator\n"), std::string::npos) << md;
  const size_t first = md.find("- gproj on cuda: forward v2.2 (wgmma, TMA); backward v3.2\n");
  ASSERT_NE(first, std::string::npos) << md;
  EXPECT_EQ(md.find("- gproj on cuda:", first + 1), std::string::npos) << "listed once";
  EXPECT_NE(md.find("- gproj parameters: projection \"thresh-lowrank\", thresh_k 16, lowrank_rank 6"), std::string::npos)
      << md;
}

}  // namespace
}  // namespace gproj::cli
