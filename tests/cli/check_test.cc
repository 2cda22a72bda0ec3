// `gproj check` on the stress suite: the phenomenon and the fix on every case, the JSON report's schema and
// provenance, and the exit codes of the real binary (0 ok, 1 bounds exceeded, 2 error). Part of cli_tests.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/check.h"
#include "gproj/error.h"
#include "gproj/stress.h"

namespace gproj::cli {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir() {
  const fs::path d = fs::temp_directory_path() / ("gproj_cli_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

int exit_code(const std::string& args) {
  const std::string cmd = std::string(GPROJ_BINARY) + " " + args + " >/dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(Check, StressSuiteShowsTheBiasAndTheFix) {
  const fs::path dir = temp_dir();
  CheckOptions o;
  o.suite = "stress";
  o.variants = "baseline,gproj";
  o.data_dir = ::gproj::default_data_dir();
  o.json_path = (dir / "report.json").string();
  o.markdown_path = (dir / "report.md").string();
  o.fail_above = "gproj:dq=0.005,gproj:dk=0.005";
  o.quiet = true;
  std::FILE* sink = std::tmpfile();
  EXPECT_EQ(run_check(o, sink), 0);
  std::fclose(sink);
  const nlohmann::json j = read_json(o.json_path);
  std::map<std::string, std::map<std::string, nlohmann::json>> by;
  for (const nlohmann::json& row : j.at("cases")) by[row.at("case")][row.at("variant")] = row;
  ASSERT_EQ(by.size(), 14u) << "12 synthetic + 2 real cases";
  const double base = by["shared-keys"]["baseline"]["errors"]["dq"], fix = by["shared-keys"]["gproj"]["errors"]["dq"];
  std::printf("  shared-keys dQ: baseline %.3f%%, gproj %.3f%%\n", 100 * base, 100 * fix);
  EXPECT_GE(base, 10 * fix);
  for (auto& [name, rows] : by) {
    const double dq = rows["gproj"]["errors"]["dq"], dk = rows["gproj"]["errors"]["dk"];
    std::printf("  %-24s gproj dQ %.3f%% dK %.3f%%\n", name.c_str(), 100 * dq, 100 * dk);
    EXPECT_LE(dq, 0.005) << name;
    EXPECT_LE(dk, 0.005) << name;
  }
  EXPECT_EQ(j.at("passed"), true);
  EXPECT_TRUE(fs::exists(o.markdown_path));
  fs::remove_all(dir);
}

TEST(Check, JsonRecordsProvenance) {
  const fs::path dir = temp_dir();
  CheckOptions o;
  o.suite = "stress";
  o.cases = {"masked-rows"};
  o.data_dir = ::gproj::default_data_dir();
  o.json_path = (dir / "r.json").string();
  o.quiet = true;
  std::FILE* sink = std::tmpfile();
  ASSERT_EQ(run_check(o, sink), 0);
  std::fclose(sink);
  const nlohmann::json j = read_json(o.json_path);
  const nlohmann::json& env = j.at("env");
  for (const char* key : {"gproj_version", "git_commit", "build_type", "compiler", "cpu_model", "threads", "date_utc"}) {
    EXPECT_TRUE(env.contains(key)) << key;
  }
  EXPECT_EQ(env.at("cuda").at("available"), false);
  EXPECT_EQ(env.at("variants").at("gproj").at("projection"), "fp16-lowrank");
  EXPECT_EQ(env.at("variants").at("gproj").at("inv_l_on"), "p");
  EXPECT_FALSE(env.at("variants").at("gproj").contains("thresh_k")) << "thresh-lowrank's parameters only with it";
  EXPECT_EQ(env.at("variants").at("gproj").at("basis_key_stride"), 4);
  EXPECT_EQ(env.at("variants").at("fwdfix").at("fwdfix_beta"), 2.0);
  EXPECT_EQ(env.at("variants").at("baseline").at("block_q"), 64);
  ASSERT_EQ(j.at("cases").size(), 4u) << "one case, four variants";
  for (const nlohmann::json& row : j.at("cases")) {
    for (const char* key : {"case", "variant", "device", "errors", "rowsum_max", "dk_colsum_ratio", "seconds"}) {
      EXPECT_TRUE(row.contains(key)) << key;
    }
    for (const char* e : {"o", "dq", "dk", "dv"}) EXPECT_TRUE(row.at("errors").at(e).is_number()) << e;
    EXPECT_EQ(row.at("kernels"), "cpu emulator");  // on CUDA: the forward's and the backward's kernels
  }
  fs::remove_all(dir);
}

TEST(Check, ExitCodesOfTheBinary) {
  const fs::path dir = temp_dir();
  const std::string data = std::string(" --data-dir ") + ::gproj::default_data_dir();
  EXPECT_EQ(exit_code("check --suite stress --cases masked-rows --quiet" + data), 0);
  EXPECT_EQ(exit_code("check --suite stress --cases shared-keys --variants baseline --fail-above dq=0.01 --quiet" + data), 1);
  EXPECT_EQ(exit_code("check --suite stress --cases masked-rows --variants fast --quiet" + data), 2);
  EXPECT_EQ(exit_code("check --suite stress --cases shared-keys --variants gproj --projection thresh-lowrank "
                      "--fail-above dq=0.005 --quiet" + data), 0);
  EXPECT_EQ(exit_code("check --suite stress --cases masked-rows --variants gproj --projection nope --quiet" + data), 2);
  EXPECT_EQ(exit_code("check --suite stress --cases shared-keys --variants gproj --projection thresh-lowrank "
                      "--stats-from forward --fail-above dq=0.005 --quiet" + data), 0);
  EXPECT_EQ(exit_code("check --suite stress --cases masked-rows --variants gproj --stats-from forward --quiet" + data), 2)
      << "thresh-lowrank's option, refused with the default fp16-lowrank";
  EXPECT_EQ(exit_code("check --suite stress --cases masked-rows --variants gproj --basis-from forward --quiet" + data), 2)
      << "thresh-lowrank's option, refused with the default fp16-lowrank";
  EXPECT_EQ(exit_code("check --suite stress --cases masked-rows --variants gproj --stats-from middle --quiet" + data), 2);
  EXPECT_EQ(exit_code("check --suite stress --cases masked-rows --variants gproj --projection pweighted "
                      "--stats-from forward --quiet" + data), 2) << "thresh-lowrank's option, refused, not ignored";
  EXPECT_EQ(exit_code("check --suite stress --cases masked-rows --variants gproj --projection fp16-lowrank "
                      "--basis-from forward --quiet" + data), 2) << "thresh-lowrank's option, refused, not ignored";
  EXPECT_EQ(exit_code("check --suite stress --cases shared-keys --variants gproj --projection thresh-lowrank "
                      "--basis-from forward --fail-above dq=0.005 --quiet" + data), 0);
  EXPECT_EQ(exit_code("check --suite stress --cases masked-rows --variants gproj --basis-from nowhere --quiet" + data),
            2);
  EXPECT_EQ(exit_code("check --suite stress --cases shared-keys --variants baseline,gproj --projection fp16-lowrank "
                      "--fp16-dout-side --fail-above gproj:dq=0.005,gproj:dk=0.005 --quiet" + data), 0);
  EXPECT_EQ(exit_code("check --suite stress --cases masked-rows --variants gproj --projection thresh-lowrank "
                      "--fp16-dout-side --quiet" + data), 2) << "a form of fp16-lowrank only";
  EXPECT_EQ(exit_code("check --suite stress --cases no-such-case --quiet" + data), 2);
  EXPECT_EQ(exit_code("check --suite stress --cases masked-rows --device cuda --quiet" + data), 2);
  EXPECT_EQ(exit_code("check --state " + (dir / "missing.safetensors").string()), 2);
  EXPECT_EQ(exit_code("check --suite stress --cases masked-rows --json /nonexistent-dir-for-gproj/r.json --quiet" +
                      data),
            2) << "a report that cannot be written is refused before the cases run";
  EXPECT_EQ(exit_code("check"), 2) << "nothing to check";
  EXPECT_EQ(exit_code("check --suite stress --fail-above dq=oops"), 2);
  EXPECT_EQ(exit_code("frobnicate"), 2);
  EXPECT_EQ(exit_code("--help"), 0);
  // A truncated state file is an error with a message, not a crash.
  const fs::path bad = dir / "truncated.safetensors";
  std::ofstream(bad) << "\x10\x00\x00";
  EXPECT_EQ(exit_code("check --state " + bad.string()), 2);
  fs::remove_all(dir);
}

TEST(Check, ABadStateFileFailsBeforeAnyCaseRuns) {
  // The state files are read before the suite's cases run: a typo in a path costs no wait and loses no results.
  const fs::path dir = temp_dir();
  const fs::path err = dir / "stderr.txt";
  const std::string cmd = std::string(GPROJ_BINARY) + " check --suite stress --cases masked-rows --data-dir " +
                          ::gproj::default_data_dir() + " --state " + (dir / "missing.safetensors").string() +
                          " >/dev/null 2>" + err.string();
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  std::ifstream in(err);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("missing.safetensors"), std::string::npos) << text;
  EXPECT_EQ(text.find("float64 oracle"), std::string::npos) << "a case ran before the error:\n" << text;
  EXPECT_EQ(text.rfind("gproj: ", 0), 0u) << "the error starts its own line:\n" << text;
  fs::remove_all(dir);
}

TEST(Check, DeviceAllRunsTheCpuWhenCudaIsAbsent) {
  CheckOptions o;
  o.suite = "stress";
  o.cases = {"masked-rows"};
  o.variants = "gproj";
  o.device = "all";
  o.data_dir = ::gproj::default_data_dir();
  o.quiet = true;
  std::FILE* sink = std::tmpfile();
  EXPECT_EQ(run_check(o, sink), 0);
  std::fclose(sink);
  o.device = "tpu";
  EXPECT_THROW(run_check(o, stdout), Error);
}

}  // namespace
}  // namespace gproj::cli
