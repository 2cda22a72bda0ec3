// Crash-safe writes: a finished write replaces the file whole, a failed one leaves it and no temporary behind.
// Part of io_tests (ctest).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gproj/error.h"
#include "io/file.h"

namespace gproj {
namespace {

namespace fs = std::filesystem;

TEST(AtomicFile, ReplacesWholeAndLeavesNoTemporary) {
  const fs::path dir = fs::temp_directory_path() / ("gproj_file_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "report.json").string();
  write_text_atomic(path, "first version, longer than the second");
  write_text_atomic(path, "second");
  const std::vector<uint8_t> back = read_file(path);
  EXPECT_EQ(std::string(back.begin(), back.end()), "second");
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().filename(), "report.json");
  fs::remove_all(dir);
}

TEST(AtomicFile, FailureNamesThePathAndKeepsNothing) {
  try {
    write_text_atomic("/nonexistent-dir-for-gproj/x.json", "data");
    ADD_FAILURE() << "expected an I/O error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIO);
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir-for-gproj/x.json.tmp."), std::string::npos) << e.what();
  }
  try {
    read_file("/nonexistent-dir-for-gproj/state.safetensors");
    ADD_FAILURE() << "expected an I/O error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIO);
    EXPECT_NE(std::string(e.what()).find("cannot open for reading"), std::string::npos) << e.what();
  }
}

TEST(AtomicFile, CheckWritableLeavesNothingAndNamesTheProblem) {
  const fs::path dir = fs::temp_directory_path() / ("gproj_file_check_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string fresh = (dir / "new.json").string(), kept = (dir / "kept.json").string();
  write_text_atomic(kept, "kept");
  check_writable(fresh);
  check_writable(kept);
  EXPECT_FALSE(fs::exists(fresh));
  const std::vector<uint8_t> back = read_file(kept);
  EXPECT_EQ(std::string(back.begin(), back.end()), "kept");
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().filename(), "kept.json");
  try {
    check_writable("/nonexistent-dir-for-gproj/x.json");
    ADD_FAILURE() << "expected an I/O error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIO);
    const std::string what = e.what();
    EXPECT_NE(what.find("/nonexistent-dir-for-gproj/x.json: cannot be written"), std::string::npos) << what;
    EXPECT_NE(what.find("No such file or directory"), std::string::npos) << what;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gproj
