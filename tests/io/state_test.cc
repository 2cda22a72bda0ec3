// Tests of attention state files: dtype conversion to bf16, shape and metadata validation, save/load round trip.
// Run as part of io_tests (ctest); the captured-state test skips when tests/data lacks the file.
#include "gproj/state.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "gproj/error.h"
#include "gproj/stress.h"

namespace gproj {
namespace {

namespace fs = std::filesystem;

void append_le(std::vector<uint8_t>& out, uint64_t bits, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(bits >> (8 * i)));
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// BF16 or F16 elements given as bit patterns.
StoredTensor bits16(DType dtype, std::vector<int64_t> shape, const std::vector<uint16_t>& values) {
  StoredTensor t{dtype, std::move(shape), {}};
  for (uint16_t v : values) append_le(t.bytes, v, 2);
  return t;
}

StoredTensor f32(std::vector<int64_t> shape, const std::vector<float>& values) {
  StoredTensor t{DType::kF32, std::move(shape), {}};
  for (float v : values) {
    uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    append_le(t.bytes, u, 4);
  }
  return t;
}

StoredTensor f64(std::vector<int64_t> shape, const std::vector<double>& values) {
  StoredTensor t{DType::kF64, std::move(shape), {}};
  for (double v : values) {
    uint64_t u;
    std::memcpy(&u, &v, sizeof u);
    append_le(t.bytes, u, 8);
  }
  return t;
}

// BF16 tensor with small distinct values (element i holds bf16(i / 8)).
StoredTensor ramp(std::vector<int64_t> shape) {
  std::vector<uint16_t> values;
  for (int64_t i = 0; i < numel(shape); ++i) values.push_back(bf16::from_float(static_cast<float>(i) / 8).bits);
  return bits16(DType::kBF16, std::move(shape), values);
}

// A valid state file: q, do (B, Nq, H, D) and k, v (B, Nk, Hkv, D), not causal, no scale.
SafetensorsFile state_file(std::vector<int64_t> q_shape, std::vector<int64_t> kv_shape) {
  SafetensorsFile f;
  f.tensors["q"] = ramp(q_shape);
  f.tensors["do"] = ramp(q_shape);
  f.tensors["k"] = ramp(kv_shape);
  f.tensors["v"] = ramp(kv_shape);
  f.metadata["causal"] = "false";
  return f;
}

// Loads `q` of shape (1, 1, 1, n) alongside zero k, v, do and returns the bf16 bits of q.
std::vector<uint16_t> converted_q(const StoredTensor& q, bool allow_nonfinite = false) {
  SafetensorsFile f = state_file(q.shape, q.shape);
  f.tensors["q"] = q;
  const AttentionState s = state_from_file(f, "test", allow_nonfinite);
  std::vector<uint16_t> bits;
  for (bf16 x : s.q.values) bits.push_back(x.bits);
  return bits;
}

std::vector<uint16_t> from_float_bits(const std::vector<float>& values) {
  std::vector<uint16_t> bits;
  for (float v : values) bits.push_back(bf16::from_float(v).bits);
  return bits;
}

// Expects state_from_file(f) to throw `code` with `word` in the message.
void expect_state_error(const SafetensorsFile& f, ErrorCode code, const std::string& word,
                        bool allow_nonfinite = false) {
  try {
    state_from_file(f, "capture.safetensors", allow_nonfinite);
    ADD_FAILURE() << "accepted a state that should fail with \"" << word << "\"";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find("capture.safetensors"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
  }
}

class StateFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("gproj_state_test_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

AttentionState random_state(uint64_t seed) {
  AttentionState s;
  s.q = Tensor<bf16>({2, 5, 4, 8});
  s.dout = Tensor<bf16>({2, 5, 4, 8});
  s.k = Tensor<bf16>({2, 3, 2, 8});
  s.v = Tensor<bf16>({2, 3, 2, 8});
  for (Tensor<bf16>* t : {&s.q, &s.k, &s.v, &s.dout}) {
    for (bf16& x : t->values) {
      seed = seed * 6364136223846793005u + 1442695040888963407u;
      x = bf16::from_bits(static_cast<uint16_t>(seed >> 48));
    }
  }
  return s;
}

TEST(StateConversion, Bf16IsABitCopy) {
  // Includes a signalling NaN (0x7f81) and a negative zero, which any trip through float could alter.
  const std::vector<uint16_t> bits = {0x3f80, 0x8000, 0x0001, 0x7f7f, 0x7f81, 0xffc1, 0xc2f7, 0x4049};
  EXPECT_EQ(converted_q(bits16(DType::kBF16, {1, 1, 1, 8}, bits), /*allow_nonfinite=*/true), bits);
}

TEST(StateConversion, F32RoundsToNearestEven) {
  const std::vector<float> values = {
      1.0f,
      1.0f + 0x1p-8f,            // tie between 0x3f80 and 0x3f81: to even, down
      1.0f + 0x3p-8f,            // tie between 0x3f81 and 0x3f82: to even, up
      1.0f + 0x1p-8f + 0x1p-9f,  // above the tie: up
      -2.5f,                     // exact
      1e-40f,                    // float subnormal
      3.14159265f,
  };
  const std::vector<uint16_t> expected = {0x3f80, 0x3f80, 0x3f82, 0x3f81, 0xc020, 0x0001, 0x4049};
  const std::vector<uint16_t> bits = converted_q(f32({1, 1, 1, 7}, values));
  EXPECT_EQ(bits, expected);
  EXPECT_EQ(bits, from_float_bits(values));
}

TEST(StateConversion, F16WidensExactlyThenRounds) {
  const std::vector<uint16_t> halves = {
      0x3c00,  // 1
      0x3c04,  // 1 + 2^-8: a bf16 tie, to even (down)
      0x3c0c,  // 1 + 3 * 2^-8: a bf16 tie, to even (up)
      0x3c05,  // 1 + 2^-8 + 2^-10: above the tie, up
      0x0001,  // 2^-24, the smallest half subnormal: a normal bf16
      0x7bff,  // 65504, the largest half: rounds to 65536
      0x8000,  // -0
      0xc500,  // -5
  };
  const std::vector<float> exact = {1.0f,     1.0f + 0x1p-8f, 1.0f + 0x3p-8f, 1.0f + 0x1p-8f + 0x1p-10f,
                                    0x1p-24f, 65504.0f,       -0.0f,          -5.0f};
  const std::vector<uint16_t> expected = {0x3f80, 0x3f80, 0x3f82, 0x3f81, 0x3380, 0x4780, 0x8000, 0xc0a0};
  const std::vector<uint16_t> bits = converted_q(bits16(DType::kF16, {1, 1, 1, 8}, halves));
  EXPECT_EQ(bits, expected);
  EXPECT_EQ(bits, from_float_bits(exact));
}

TEST(StateConversion, F64RoundsOnceNotTwice) {
  // Just above a bf16 tie, by less than half a float ulp: double -> float -> bf16 lands on the tie in float
  // and rounds to even (down); the correct single rounding goes up.
  const double above_tie = 1.0 + 0x1p-8 + 0x1p-30;
  ASSERT_EQ(bf16::from_float(static_cast<float>(above_tie)).bits, 0x3f80);
  // Just below the bf16 overflow threshold (2 - 2^-8) * 2^127: through float it would become Inf.
  const double below_overflow = (2.0 - 0x1p-8 - 0x1p-40) * 0x1p127;
  ASSERT_EQ(bf16::from_float(static_cast<float>(below_overflow)).bits, 0x7f80);

  const std::vector<double> values = {above_tie, -above_tie, below_overflow, 1.0 + 0x1p-8, 1.0 + 0x3p-8,
                                      0.1,       1e-300,     -1e-300,        -2.5};
  const std::vector<uint16_t> expected = {0x3f81, 0xbf81, 0x7f7f, 0x3f80, 0x3f82, 0x3dcd, 0x0000, 0x8000, 0xc020};
  EXPECT_EQ(converted_q(f64({1, 1, 1, 9}, values)), expected);
}

TEST(StateConversion, F64BeyondFloatRangeOverflowsToInf) {
  const std::vector<uint16_t> bits =
      converted_q(f64({1, 1, 1, 3}, {1e300, -1e39, (2.0 - 0x1p-8) * 0x1p127}), /*allow_nonfinite=*/true);
  EXPECT_EQ(bits, (std::vector<uint16_t>{0x7f80, 0xff80, 0x7f80}));
}

TEST(StateConversion, NanIsRejectedUnlessAllowed) {
  SafetensorsFile f = state_file({1, 3, 1, 4}, {1, 2, 1, 4});
  std::vector<float> k(8, 0.5f);
  k[6] = std::numeric_limits<float>::quiet_NaN();  // (b, n, h, d) = (0, 1, 0, 2)
  f.tensors["k"] = f32({1, 2, 1, 4}, k);
  expect_state_error(f, ErrorCode::kNonFinite, "tensor \"k\" has a non-finite value at (b, n, h, d) = (0, 1, 0, 2)");
  expect_state_error(f, ErrorCode::kNonFinite, "NaN");

  const AttentionState s = state_from_file(f, "capture.safetensors", /*allow_nonfinite=*/true);
  EXPECT_TRUE(std::isnan(s.k.values[6].to_float()));
  EXPECT_EQ(s.k.values[5].to_float(), 0.5f);
}

TEST(StateConversion, InfAndBf16OverflowAreRejected) {
  SafetensorsFile f = state_file({1, 1, 2, 2}, {1, 1, 2, 2});
  f.tensors["do"] = bits16(DType::kF16, {1, 1, 2, 2}, {0x3c00, 0x3c00, 0x3c00, 0xfc00});
  expect_state_error(f, ErrorCode::kNonFinite,
                     "tensor \"do\" has a non-finite value at (b, n, h, d) = (0, 0, 1, 1): -Inf");

  f = state_file({1, 1, 2, 2}, {1, 1, 2, 2});
  f.tensors["v"] = f32({1, 1, 2, 2}, {1.0f, 3.4e38f, 1.0f, 1.0f});
  expect_state_error(f, ErrorCode::kNonFinite, "(0, 0, 0, 1): F32 value");
  expect_state_error(f, ErrorCode::kNonFinite, "overflows bf16 to Inf");

  f = state_file({1, 1, 2, 2}, {1, 1, 2, 2});
  f.tensors["q"] = f64({1, 1, 2, 2}, {1.0, 1.0, -1e39, 1.0});
  expect_state_error(f, ErrorCode::kNonFinite, "overflows bf16 to -Inf");
}

TEST(StateValidation, AcceptsGroupedQueryAttention) {
  SafetensorsFile f = state_file({2, 5, 8, 16}, {2, 7, 2, 16});
  f.metadata["causal"] = "true";
  const AttentionState s = state_from_file(f, "capture.safetensors");
  EXPECT_EQ(s.q.rank, 4);
  EXPECT_EQ(s.q.shape, (Extents{2, 5, 8, 16}));
  EXPECT_EQ(s.dout.shape, (Extents{2, 5, 8, 16}));
  EXPECT_EQ(s.k.shape, (Extents{2, 7, 2, 16}));
  EXPECT_EQ(s.v.shape, (Extents{2, 7, 2, 16}));
  EXPECT_TRUE(s.causal);
  EXPECT_FALSE(s.softmax_scale.has_value());
  EXPECT_TRUE(s.provenance.empty());
  EXPECT_EQ(s.k.values[3].to_float(), 3.0f / 8);
}

TEST(StateValidation, MissingTensorsAreNamed) {
  for (const char* name : {"q", "k", "v", "do"}) {
    SafetensorsFile f = state_file({1, 2, 2, 8}, {1, 2, 2, 8});
    f.tensors.erase(name);
    expect_state_error(f, ErrorCode::kFormat, "missing tensor \"" + std::string(name) + "\"");
  }
}

TEST(StateValidation, ShapeInconsistenciesAreRejected) {
  SafetensorsFile f = state_file({1, 4, 2, 8}, {1, 4, 2, 8});
  f.tensors["q"] = ramp({4, 2, 8});
  expect_state_error(f, ErrorCode::kShape, "\"q\" has rank 3");

  f = state_file({1, 4, 2, 8}, {1, 4, 2, 8});
  f.tensors["do"] = ramp({1, 5, 2, 8});
  expect_state_error(f, ErrorCode::kShape, "differ in shape");

  f = state_file({1, 4, 2, 8}, {1, 4, 2, 8});
  f.tensors["v"] = ramp({1, 3, 2, 8});
  expect_state_error(f, ErrorCode::kShape, "\"k\" [1, 4, 2, 8] and \"v\" [1, 3, 2, 8]");

  expect_state_error(state_file({2, 4, 2, 8}, {1, 4, 2, 8}), ErrorCode::kShape, "batch size");
  expect_state_error(state_file({1, 4, 2, 8}, {1, 4, 2, 16}), ErrorCode::kShape, "head dim D differs");
  expect_state_error(state_file({1, 4, 6, 8}, {1, 4, 4, 8}), ErrorCode::kShape,
                     "H = 6 query heads is not a multiple of Hkv = 4");
  expect_state_error(state_file({1, 4, 2, 0}, {1, 4, 2, 0}), ErrorCode::kShape, "D = 0");
  expect_state_error(state_file({1, 4, 2, 8}, {1, 4, 0, 8}), ErrorCode::kShape, "Hkv = 0");
}

TEST(StateValidation, CausalIsRequiredAndExact) {
  SafetensorsFile f = state_file({1, 2, 2, 8}, {1, 2, 2, 8});
  f.metadata.erase("causal");
  expect_state_error(f, ErrorCode::kFormat, "\"causal\" is missing");
  for (const char* bad : {"True", "1", "", "false "}) {
    f.metadata["causal"] = bad;
    expect_state_error(f, ErrorCode::kFormat, "\"causal\" is");
  }
}

TEST(StateValidation, SoftmaxScaleMustParseFully) {
  SafetensorsFile f = state_file({1, 2, 2, 8}, {1, 2, 2, 8});
  for (const char* bad : {"abc", "0.5x", "", " 0.5", "0x1p-3", "1e-50", "1e50"}) {
    SCOPED_TRACE(bad);
    f.metadata["softmax_scale"] = bad;
    expect_state_error(f, ErrorCode::kFormat, "softmax_scale");
  }
  for (const char* bad : {"0", "-0", "-0.125", "inf", "nan"}) {
    SCOPED_TRACE(bad);
    f.metadata["softmax_scale"] = bad;
    expect_state_error(f, ErrorCode::kInvalidArgument, "finite number > 0");
  }
  f.metadata["softmax_scale"] = "0.125";
  EXPECT_EQ(state_from_file(f, "capture.safetensors").softmax_scale, 0.125f);
  f.metadata["softmax_scale"] = "8.838835e-2";
  EXPECT_EQ(state_from_file(f, "capture.safetensors").softmax_scale, 0.08838835f);
}

TEST(StateValidation, OtherMetadataIsProvenance) {
  SafetensorsFile f = state_file({1, 2, 2, 8}, {1, 2, 2, 8});
  f.metadata["softmax_scale"] = "0.125";
  f.metadata["source"] = "llama capture";
  f.metadata["step"] = "5000";
  f.metadata["layer"] = "3";
  const AttentionState s = state_from_file(f, "capture.safetensors");
  const std::map<std::string, std::string> expected = {{"layer", "3"}, {"source", "llama capture"}, {"step", "5000"}};
  EXPECT_EQ(s.provenance, expected);
}

TEST_F(StateFileTest, SaveLoadRoundTrip) {
  AttentionState s = random_state(42);
  s.causal = true;
  s.softmax_scale = 1.0f / std::sqrt(8.0f);
  s.provenance = {{"source", "unit test"}, {"step", "5000"}, {"layer", "3"}, {"head", "all"}};
  save_state(path("s.safetensors"), s);

  const AttentionState t = load_state(path("s.safetensors"), /*allow_nonfinite=*/true);
  for (const auto& [a, b] : {std::pair{&s.q, &t.q}, {&s.k, &t.k}, {&s.v, &t.v}, {&s.dout, &t.dout}}) {
    EXPECT_EQ(b->rank, 4);
    EXPECT_EQ(b->shape, a->shape);
    ASSERT_EQ(b->values.size(), a->values.size());
    for (size_t i = 0; i < a->values.size(); ++i) ASSERT_EQ(b->values[i].bits, a->values[i].bits) << i;
  }
  EXPECT_EQ(t.causal, true);
  EXPECT_EQ(t.softmax_scale, s.softmax_scale);
  EXPECT_EQ(t.provenance, s.provenance);

  const SafetensorsFile f = read_safetensors(path("s.safetensors"));
  for (const char* name : {"q", "k", "v", "do"}) EXPECT_EQ(f.tensors.at(name).dtype, DType::kBF16) << name;
  EXPECT_EQ(f.metadata.at("causal"), "true");
  EXPECT_EQ(f.tensors.size(), 4u);
}

TEST_F(StateFileTest, SoftmaxScaleRoundTripsExactly) {
  for (float scale : {0.1f, 1.0f / 3.0f, std::nextafter(1.0f, 2.0f), FLT_MAX, FLT_MIN, 0.08838835f}) {
    SCOPED_TRACE(scale);
    AttentionState s = random_state(7);
    s.softmax_scale = scale;
    save_state(path("s.safetensors"), s);
    EXPECT_EQ(load_state(path("s.safetensors"), /*allow_nonfinite=*/true).softmax_scale, scale);
  }
}

TEST_F(StateFileTest, NotCausalAndNoScaleRoundTrip) {
  AttentionState s = random_state(3);
  save_state(path("s.safetensors"), s);
  const SafetensorsFile f = read_safetensors(path("s.safetensors"));
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"causal", "false"}}));
  const AttentionState t = load_state(path("s.safetensors"), /*allow_nonfinite=*/true);
  EXPECT_FALSE(t.causal);
  EXPECT_FALSE(t.softmax_scale.has_value());
}

TEST_F(StateFileTest, LoadNamesTheFile) {
  SafetensorsFile f = state_file({1, 2, 2, 8}, {1, 2, 2, 8});
  f.metadata.erase("causal");
  write_safetensors(path("nocausal.safetensors"), f);
  try {
    load_state(path("nocausal.safetensors"));
    ADD_FAILURE() << "loaded a state without \"causal\"";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFormat);
    EXPECT_NE(std::string(e.what()).find("nocausal.safetensors"), std::string::npos) << e.what();
  }
}

TEST_F(StateFileTest, SaveRejectsWhatLoadWouldReject) {
  AttentionState s = random_state(1);
  s.v = Tensor<bf16>({2, 4, 2, 8});
  EXPECT_THROW(
      {
        try {
          save_state(path("s.safetensors"), s);
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::kShape) << e.what();
          throw;
        }
      },
      Error);

  s = random_state(1);
  s.provenance["causal"] = "true";
  EXPECT_THROW(save_state(path("s.safetensors"), s), Error);

  s = random_state(1);
  s.softmax_scale = -1.0f;
  EXPECT_THROW(save_state(path("s.safetensors"), s), Error);

  s = random_state(1);
  s.q.values.pop_back();
  EXPECT_THROW(save_state(path("s.safetensors"), s), Error);

  EXPECT_FALSE(fs::exists(path("s.safetensors")));
  EXPECT_TRUE(fs::is_empty(dir_));
}

// tests/data/README.md: batch 0, heads 0-3, all 1024 positions, D = 64, causal, of a step-5000 layer-3 capture.
TEST(RealState, LoadsCapturedLayer) {
  const std::string p = ::gproj::default_data_dir() + "/real_step5000_layer3.safetensors";
  if (!fs::exists(p)) GTEST_SKIP() << p << " is absent";
  const AttentionState s = load_state(p);
  for (const Tensor<bf16>* t : {&s.q, &s.k, &s.v, &s.dout}) {
    EXPECT_EQ(t->rank, 4);
    EXPECT_EQ(t->shape, (Extents{1, 1024, 4, 64}));
  }
  EXPECT_TRUE(s.causal);
  EXPECT_EQ(s.provenance.at("step"), "5000");
  EXPECT_EQ(s.provenance.at("layer"), "3");
}

}  // namespace
}  // namespace gproj
