// `gproj run` writes exactly the values a variant produced; `gproj stress --write` writes every case as a
// state file that loads back bit for bit. Part of cli_tests.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "cli/commands.h"
#include "gproj/attention.h"
#include "gproj/error.h"
#include "gproj/evaluate.h"
#include "gproj/safetensors.h"
#include "gproj/stress.h"

namespace gproj::cli {
namespace {

namespace fs = std::filesystem;

float f32_at(const StoredTensor& t, size_t i) {
  float x;
  std::memcpy(&x, &t.bytes[i * 4], 4);
  return x;
}

TEST(Run, WritesTheVariantsOutputsExactly) {
  const fs::path dir = fs::temp_directory_path() / ("gproj_run_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  RunOptions o;
  o.state = ::gproj::default_data_dir() + "/real_step1000_layer4.safetensors";
  o.variant = "baseline";
  o.out = (dir / "out.safetensors").string();
  std::FILE* sink = std::tmpfile();
  ASSERT_EQ(run_one(o, sink), 0);
  std::fclose(sink);
  const SafetensorsFile f = read_safetensors(o.out);
  for (const char* name : {"o", "lse", "dq", "dk", "dv"}) {
    ASSERT_TRUE(f.tensors.count(name)) << name;
    EXPECT_EQ(f.tensors.at(name).dtype, DType::kF32) << name;
  }
  EXPECT_EQ(f.tensors.at("lse").shape, (std::vector<int64_t>{1, 4, 1024}));
  EXPECT_EQ(f.metadata.at("variant"), "baseline");
  EXPECT_EQ(f.metadata.at("causal"), "true");
  // Same computation in-process: bit-identical values.
  const AttentionState s = load_state(o.state);
  FlashParams p;
  p.variant = Variant::kBaseline;
  p.causal = true;
  p.softmax_scale = state_scale(s);
  const ForwardResult fw = flash_forward_cpu(s.q.view(), s.k.view(), s.v.view(), p);
  const BackwardResult bw = flash_backward_cpu(s.q.view(), s.k.view(), s.v.view(), fw.o.view(), fw.o_fp32.view(),
                                               fw.lse.view(), s.dout.view(), p);
  for (size_t i = 0; i < bw.dq.values.size(); i += 97) {
    ASSERT_EQ(f32_at(f.tensors.at("dq"), i), bw.dq.values[i].to_float()) << i;
    ASSERT_EQ(f32_at(f.tensors.at("o"), i), fw.o.values[i].to_float()) << i;
  }
  fs::remove_all(dir);
}

TEST(Run, AnOutputThatCannotBeWrittenFailsBeforeTheWork) {
  RunOptions o;
  o.state = ::gproj::default_data_dir() + "/real_step1000_layer4.safetensors";
  o.variant = "fp32";
  o.out = "/nonexistent-dir-for-gproj/out.safetensors";
  try {
    run_one(o, stdout);
    ADD_FAILURE() << "expected an I/O error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIO);
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir-for-gproj/out.safetensors: cannot be written"),
              std::string::npos)
        << e.what();
  }
}

TEST(Stress, WriteRoundTripsEveryCase) {
  const fs::path dir = fs::temp_directory_path() / ("gproj_stress_test_" + std::to_string(::getpid()));
  std::FILE* sink = std::tmpfile();
  ASSERT_EQ(write_stress(dir.string(), ::gproj::default_data_dir(), sink), 0);
  ASSERT_EQ(list_stress(::gproj::default_data_dir(), sink), 0);
  std::fclose(sink);
  for (const StressCase& c : stress_suite(::gproj::default_data_dir())) {
    const AttentionState want = c.make();
    const AttentionState got = load_state((dir / (c.name + ".safetensors")).string());
    EXPECT_EQ(got.causal, want.causal) << c.name;
    EXPECT_EQ(got.provenance.at("case"), c.name);
    ASSERT_EQ(got.dout.values.size(), want.dout.values.size()) << c.name;
    for (size_t i = 0; i < want.dout.values.size(); ++i) ASSERT_EQ(got.dout.values[i].bits, want.dout.values[i].bits);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gproj::cli
