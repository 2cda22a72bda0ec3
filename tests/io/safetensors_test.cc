// Tests of the safetensors reader and writer: round trips, atomic replacement, and every malformed-file case.
// Run as part of io_tests (ctest); each malformed case checks the ErrorCode and a telling word of the message.
#include "gproj/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gproj/error.h"

namespace gproj {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("gproj_safetensors_test_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename().string());
    return names;
  }

  std::string write_bytes(const std::vector<uint8_t>& bytes, const std::string& name = "bad.safetensors") const {
    const std::string p = path(name);
    std::ofstream out(p, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return p;
  }

  // Writes the bytes, reads them back, and expects an Error of `code` naming the file and containing `word`.
  void expect_rejected(const std::vector<uint8_t>& bytes, ErrorCode code, const std::string& word) const {
    const std::string p = write_bytes(bytes);
    try {
      read_safetensors(p);
      ADD_FAILURE() << "accepted a file that should fail with \"" << word << "\"";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  }

  fs::path dir_;
};

std::vector<uint8_t> le_u64(uint64_t n) {
  std::vector<uint8_t> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  return out;
}

// A file image: the header length, the header text and the data section.
std::vector<uint8_t> image(const std::string& header, const std::vector<uint8_t>& data = {}) {
  std::vector<uint8_t> out = le_u64(header.size());
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(seed + 37 * i);
  return out;
}

StoredTensor tensor(DType dtype, std::vector<int64_t> shape, uint8_t seed) {
  size_t numel = 1;
  for (int64_t s : shape) numel *= static_cast<size_t>(s);
  return {dtype, std::move(shape), pattern(numel * dtype_size(dtype), seed)};
}

SafetensorsFile sample_file() {
  SafetensorsFile f;
  f.tensors["bf16"] = tensor(DType::kBF16, {2, 3, 1, 4}, 1);
  f.tensors["f16"] = tensor(DType::kF16, {5, 3}, 2);
  f.tensors["f32"] = tensor(DType::kF32, {7}, 3);
  f.tensors["f64"] = tensor(DType::kF64, {2, 2}, 4);
  f.tensors["scalar"] = tensor(DType::kF32, {}, 5);
  f.tensors["empty"] = tensor(DType::kF64, {0, 3}, 6);
  f.metadata["source"] = "unit test";
  f.metadata["step"] = "5000";
  return f;
}

std::vector<uint8_t> read_bytes(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(DType, NamesAndSizes) {
  EXPECT_STREQ(dtype_name(DType::kBF16), "BF16");
  EXPECT_STREQ(dtype_name(DType::kF16), "F16");
  EXPECT_STREQ(dtype_name(DType::kF32), "F32");
  EXPECT_STREQ(dtype_name(DType::kF64), "F64");
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kF64), 8u);
}

TEST_F(SafetensorsTest, RoundTripKeepsEveryDtypeBytesAndMetadata) {
  const SafetensorsFile f = sample_file();
  write_safetensors(path("a.safetensors"), f);
  const SafetensorsFile g = read_safetensors(path("a.safetensors"));
  ASSERT_EQ(g.tensors.size(), f.tensors.size());
  for (const auto& [name, t] : f.tensors) {
    SCOPED_TRACE(name);
    ASSERT_EQ(g.tensors.count(name), 1u);
    const StoredTensor& u = g.tensors.at(name);
    EXPECT_EQ(u.dtype, t.dtype);
    EXPECT_EQ(u.shape, t.shape);
    EXPECT_EQ(u.bytes, t.bytes);
  }
  EXPECT_EQ(g.metadata, f.metadata);
}

TEST_F(SafetensorsTest, OutputIsDeterministicSortedAndPadded) {
  write_safetensors(path("a.safetensors"), sample_file());
  write_safetensors(path("b.safetensors"), sample_file());
  const std::vector<uint8_t> bytes = read_bytes(path("a.safetensors"));
  EXPECT_EQ(bytes, read_bytes(path("b.safetensors")));

  ASSERT_GE(bytes.size(), 8u);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = header_size << 8 | bytes[i];
  EXPECT_EQ(header_size % 8, 0u);
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(header_size));
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));

  // Tensors lie in name order, back to back from offset 0, and fill the data section exactly.
  const nlohmann::json json = nlohmann::json::parse(header);
  uint64_t next = 0;
  for (const auto& [name, t] : sample_file().tensors) {
    SCOPED_TRACE(name);
    EXPECT_EQ(json[name]["data_offsets"][0].get<uint64_t>(), next);
    next += t.bytes.size();
    EXPECT_EQ(json[name]["data_offsets"][1].get<uint64_t>(), next);
    EXPECT_EQ(json[name]["dtype"].get<std::string>(), dtype_name(t.dtype));
  }
  EXPECT_EQ(bytes.size(), 8 + header_size + next);
  EXPECT_EQ(json["__metadata__"]["step"], "5000");
}

TEST_F(SafetensorsTest, EmptyFileRoundTrips) {
  write_safetensors(path("a.safetensors"), SafetensorsFile());
  const SafetensorsFile g = read_safetensors(path("a.safetensors"));
  EXPECT_TRUE(g.tensors.empty());
  EXPECT_TRUE(g.metadata.empty());
}

TEST_F(SafetensorsTest, AtomicWriteReplacesAndLeavesNoTemporary) {
  const std::string p = path("state.safetensors");
  write_safetensors(p, sample_file());
  SafetensorsFile second;
  second.tensors["x"] = tensor(DType::kF32, {3}, 9);
  write_safetensors(p, second);
  EXPECT_EQ(listing(), std::vector<std::string>{"state.safetensors"});
  const SafetensorsFile g = read_safetensors(p);
  ASSERT_EQ(g.tensors.size(), 1u);
  EXPECT_EQ(g.tensors.at("x").bytes, second.tensors.at("x").bytes);
}

TEST_F(SafetensorsTest, FailedRenameRemovesTheTemporary) {
  fs::create_directory(path("occupied"));
  try {
    write_safetensors(path("occupied"), sample_file());
    ADD_FAILURE() << "renamed a file over a directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIO) << e.what();
    EXPECT_NE(std::string(e.what()).find("rename"), std::string::npos) << e.what();
  }
  EXPECT_EQ(listing(), std::vector<std::string>{"occupied"});
}

TEST_F(SafetensorsTest, MissingDirectoryIsAnIOError) {
  try {
    write_safetensors(path("no/such/dir/a.safetensors"), sample_file());
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIO) << e.what();
  }
  EXPECT_TRUE(listing().empty());
}

TEST_F(SafetensorsTest, InvalidTensorIsRejectedBeforeTouchingTheFile) {
  const std::string p = path("a.safetensors");
  write_safetensors(p, sample_file());
  const std::vector<uint8_t> before = read_bytes(p);

  SafetensorsFile bad;
  bad.tensors["x"] = {DType::kF32, {2, 2}, std::vector<uint8_t>(12)};
  try {
    write_safetensors(p, bad);
    ADD_FAILURE() << "wrote 12 bytes as a 2x2 F32 tensor";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("\"x\""), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_bytes(p), before);
  EXPECT_EQ(listing(), std::vector<std::string>{"a.safetensors"});
}

TEST_F(SafetensorsTest, WriterRejectsReservedAndNonUtf8Names) {
  SafetensorsFile reserved;
  reserved.tensors["__metadata__"] = tensor(DType::kF32, {1}, 0);
  EXPECT_THROW(write_safetensors(path("a.safetensors"), reserved), Error);

  SafetensorsFile non_utf8;
  non_utf8.tensors["\xff\xfe"] = tensor(DType::kF32, {1}, 0);
  try {
    write_safetensors(path("a.safetensors"), non_utf8);
    ADD_FAILURE() << "wrote a name that is not UTF-8";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("UTF-8"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(listing().empty());
}

TEST_F(SafetensorsTest, MissingFileIsAnIOError) {
  try {
    read_safetensors(path("absent.safetensors"));
    ADD_FAILURE() << "read a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIO) << e.what();
    EXPECT_NE(std::string(e.what()).find("absent.safetensors"), std::string::npos) << e.what();
  }
}

TEST_F(SafetensorsTest, TrailingBytesAfterTheLastTensorAreAllowed) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::vector<uint8_t> data = pattern(8 + 5, 1);
  const SafetensorsFile f = read_safetensors(write_bytes(image(header, data)));
  EXPECT_EQ(f.tensors.at("a").bytes, std::vector<uint8_t>(data.begin(), data.begin() + 8));
}

TEST_F(SafetensorsTest, HeaderPaddingAndZeroSizedTensorsAreAccepted) {
  const std::string header = R"({"a":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]},)"
                             R"("z":{"dtype":"F64","shape":[3,0],"data_offsets":[2,2]},)"
                             R"("b":{"dtype":"F16","shape":[],"data_offsets":[2,4]}}   )";
  const SafetensorsFile f = read_safetensors(write_bytes(image(header, pattern(4, 7))));
  EXPECT_EQ(f.tensors.at("z").shape, (std::vector<int64_t>{3, 0}));
  EXPECT_TRUE(f.tensors.at("z").bytes.empty());
  EXPECT_TRUE(f.tensors.at("b").shape.empty());
}

TEST_F(SafetensorsTest, ParseNamesTheSourceInMessages) {
  const std::vector<uint8_t> bytes = image("[]");
  try {
    parse_safetensors(bytes.data(), bytes.size(), "in-memory capture");
    ADD_FAILURE() << "accepted an array header";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFormat);
    EXPECT_NE(std::string(e.what()).find("in-memory capture"), std::string::npos) << e.what();
  }
}

TEST_F(SafetensorsTest, RejectsTruncatedFiles) {
  expect_rejected({1, 2, 3, 4, 5}, ErrorCode::kFormat, "shorter");
  expect_rejected({}, ErrorCode::kFormat, "shorter");
  std::vector<uint8_t> beyond = le_u64(100);
  beyond.insert(beyond.end(), 10, ' ');
  expect_rejected(beyond, ErrorCode::kFormat, "beyond");
  std::vector<uint8_t> huge = le_u64(uint64_t{1} << 40);
  huge.insert(huge.end(), {'{', '}'});
  expect_rejected(huge, ErrorCode::kFormat, "absurdly large");
  expect_rejected(le_u64(~uint64_t{0}), ErrorCode::kFormat, "absurdly large");
}

TEST_F(SafetensorsTest, RejectsBadJson) {
  expect_rejected(image(R"({"a": )"), ErrorCode::kFormat, "invalid JSON");
  expect_rejected(image(""), ErrorCode::kFormat, "invalid JSON");
  expect_rejected(image("{\"\xff\": 1}"), ErrorCode::kFormat, "invalid JSON");
  expect_rejected(image("[1, 2]"), ErrorCode::kFormat, "not a JSON object");
  expect_rejected(image("\"text\""), ErrorCode::kFormat, "not a JSON object");
}

TEST_F(SafetensorsTest, RejectsDuplicateKeys) {
  const std::string entry = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  expect_rejected(image(R"({"a":)" + entry + R"(,"a":)" + entry + "}", pattern(4, 0)), ErrorCode::kFormat,
                  "duplicate key \"a\"");
  expect_rejected(image(R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", pattern(4, 0)),
                  ErrorCode::kFormat, "duplicate key \"dtype\"");
}

TEST_F(SafetensorsTest, RejectsEntriesWithMissingFields) {
  expect_rejected(image(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", pattern(4, 0)), ErrorCode::kFormat,
                  "missing field \"dtype\"");
  expect_rejected(image(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", pattern(4, 0)), ErrorCode::kFormat,
                  "missing field \"shape\"");
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[1]}})", pattern(4, 0)), ErrorCode::kFormat,
                  "missing field \"data_offsets\"");
}

TEST_F(SafetensorsTest, RejectsEntriesWithWrongJsonTypes) {
  expect_rejected(image(R"({"a":[1]})"), ErrorCode::kFormat, "not a JSON object");
  expect_rejected(image(R"({"a":{"dtype":32,"shape":[1],"data_offsets":[0,4]}})", pattern(4, 0)), ErrorCode::kFormat,
                  "\"dtype\" is not a string");
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", pattern(4, 0)), ErrorCode::kFormat,
                  "\"shape\" is not an array");
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", pattern(4, 0)),
                  ErrorCode::kFormat, "non-integer");
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[true],"data_offsets":[0,4]}})", pattern(4, 0)),
                  ErrorCode::kFormat, "non-integer");
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", pattern(4, 0)), ErrorCode::kFormat,
                  "data_offsets");
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":{"0":4}}})", pattern(4, 0)),
                  ErrorCode::kFormat, "data_offsets");
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4.0]}})", pattern(4, 0)),
                  ErrorCode::kFormat, "data_offsets");
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1}})", pattern(4, 0)),
                  ErrorCode::kFormat, "unexpected field \"extra\"");
}

TEST_F(SafetensorsTest, RejectsUnknownDtype) {
  expect_rejected(image(R"({"a":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})", pattern(4, 0)), ErrorCode::kDtype,
                  "unknown dtype \"I8\"");
  expect_rejected(image(R"({"a":{"dtype":"bf16","shape":[2],"data_offsets":[0,4]}})", pattern(4, 0)), ErrorCode::kDtype,
                  "unknown dtype");
}

TEST_F(SafetensorsTest, RejectsNegativeAndOverflowingExtents) {
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[-1,2],"data_offsets":[0,0]}})"), ErrorCode::kFormat,
                  "negative extent -1");
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,0]}})"),
                  ErrorCode::kFormat, "overflows");
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
                  ErrorCode::kFormat, "overflows");
  // 2^61 elements fit in int64, their 2^64 bytes do not fit in uint64.
  expect_rejected(image(R"({"a":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}})"),
                  ErrorCode::kFormat, "overflows");
}

TEST_F(SafetensorsTest, RejectsOffsetsThatDisagreeWithTheShape) {
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,12]}})", pattern(24, 0)),
                  ErrorCode::kFormat, "needs 24");
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", pattern(8, 0)), ErrorCode::kFormat,
                  "reversed");
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", pattern(8, 0)),
                  ErrorCode::kFormat, "data_offsets");
}

TEST_F(SafetensorsTest, RejectsOffsetsOutOfRange) {
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", pattern(4, 0)), ErrorCode::kFormat,
                  "out of range");
  expect_rejected(
      image(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[18446744073709551615,18446744073709551615]}})"),
      ErrorCode::kFormat, "out of range");
}

TEST_F(SafetensorsTest, RejectsOverlappingTensors) {
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                        pattern(12, 0)),
                  ErrorCode::kFormat, "overlap");
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]}})",
                        pattern(8, 0)),
                  ErrorCode::kFormat, "overlap");
}

TEST_F(SafetensorsTest, RejectsGapsBetweenTensors) {
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                        pattern(12, 0)),
                  ErrorCode::kFormat, "gap");
  expect_rejected(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", pattern(8, 0)), ErrorCode::kFormat,
                  "gap");
}

TEST_F(SafetensorsTest, RejectsBadMetadata) {
  expect_rejected(image(R"({"__metadata__":{"step":5000}})"), ErrorCode::kFormat, "not a string");
  expect_rejected(image(R"({"__metadata__":{"source":null}})"), ErrorCode::kFormat, "not a string");
  expect_rejected(image(R"({"__metadata__":["causal","true"]})"), ErrorCode::kFormat, "__metadata__");
}

}  // namespace
}  // namespace gproj
