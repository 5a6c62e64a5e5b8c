// SPDX-License-Identifier: Apache-2.0
// `kareus profile` end to end on a paper workload: exit code 2 with the reason for invalid
// input, JSON fields, and a store that is reused, or refused and kept, across runs.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "kareus/common/io.h"
#include "kareus/common/json.h"

namespace kareus {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int exit_code = -1;
  std::string out;  // stdout + stderr
};

class ProfileCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* binary_dir = std::getenv("KAREUS_BINARY_DIR");
    const char* source_dir = std::getenv("KAREUS_SOURCE_DIR");
    if (binary_dir == nullptr || source_dir == nullptr) GTEST_SKIP() << "run through CTest";
    kareus_ = fs::path(binary_dir) / "apps/kareus/kareus";
    if (!fs::exists(kareus_)) GTEST_SKIP() << "build the kareus target first";
    examples_ = fs::path(source_dir) / "examples/paper";
    dir_ = fs::temp_directory_path() /
           ("kareus-profile-cli-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  CliRun Kareus(const std::string& args, bool merge_stderr = true) {
    const std::string command =
        kareus_.string() + " " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null");
    CliRun run;
    FILE* pipe = popen(command.c_str(), "r");
    EXPECT_NE(pipe, nullptr);
    std::array<char, 4096> buffer;
    std::size_t n;
    while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) run.out.append(buffer.data(), n);
    const int status = pclose(pipe);
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return run;
  }

  std::string Workload(const char* name) const { return (examples_ / name).string(); }

  fs::path kareus_, examples_, dir_;
};

// Rows in a store being written by another process (0 while it has no table yet).
int64_t StoreRows(const fs::path& path) {
  if (!fs::exists(path)) return 0;
  sqlite3* db = nullptr;
  int64_t rows = 0;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 1000);
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM measurements", -1, &stmt, nullptr) ==
            SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW) {
      rows = sqlite3_column_int64(stmt, 0);
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return rows;
}

constexpr const char* kTp8 = "01-llama3.2-3b-tp8-mbs8-seq4096.yaml";
constexpr const char* kOther = "05-qwen3-1.7b-tp8-mbs8-seq4096.yaml";
constexpr const char* kOtherSeq8192 = "06-qwen3-1.7b-tp8-mbs8-seq8192.yaml";

TEST_F(ProfileCliTest, InvalidInputExitsTwoWithTheReason) {
  const std::string wl = Workload(kTp8) + " --partition fwd_mlp --quiet";
  CliRun r = Kareus("profile " + wl + " --budget 3");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("initial design"), std::string::npos) << r.out;
  r = Kareus("profile " + wl + " --budget 100000");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("exceeds the search space"), std::string::npos) << r.out;
  r = Kareus("profile " + wl + " --budget-fraction -0.1");  // 0 is automatic
  EXPECT_EQ(r.exit_code, 2) << r.out;
  r = Kareus("profile " + wl + " --min-budget -1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--min-budget"), std::string::npos) << r.out;
  r = Kareus("profile " + wl + " --surrogate forest");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("surrogate"), std::string::npos) << r.out;
  r = Kareus("profile " + wl + " --strategy greedy");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("strategy"), std::string::npos) << r.out;
  r = Kareus("profile " + Workload(kTp8) + " --partition fwd_nothing --quiet");
  EXPECT_EQ(r.exit_code, 2) << r.out;
}

TEST_F(ProfileCliTest, JsonStoreReuseAndForeignWorkload) {
  const fs::path store = dir_ / "profile.db";
  const std::string args = "profile " + Workload(kTp8) +
                           " --partition fwd_mlp --budget 16 --oracle --json --quiet --store " +
                           store.string();
  CliRun first = Kareus(args, false);
  ASSERT_EQ(first.exit_code, 0) << first.out;
  const Json a = Json::parse(first.out);
  ASSERT_EQ(a["partitions"].size(), 1u);
  const Json& t = a["partitions"][0];
  EXPECT_EQ(t["type"], "fwd_mlp");
  EXPECT_EQ(t["evaluations"], 16);
  EXPECT_GT(t["space_size"].get<int>(), 16);
  EXPECT_GT(t["gpu_seconds"].get<double>(), 0.0);
  EXPECT_GT(t["hypervolume"].get<double>(), 0.0);
  EXPECT_FALSE(t["frontier"].empty());
  for (const char* key : {"oracle_hypervolume", "hv_ratio", "random_hv_ratio"}) {
    EXPECT_TRUE(t.contains(key)) << key;
  }
  EXPECT_EQ(a["measurements_taken"], 16);

  CliRun again = Kareus(args, false);
  ASSERT_EQ(again.exit_code, 0) << again.out;
  const Json b = Json::parse(again.out);
  EXPECT_EQ(b["measurements_taken"], 0);
  EXPECT_EQ(b["measurements_reused"], 16);
  EXPECT_EQ(b["partitions"][0]["frontier"], t["frontier"]);

  const std::string before = ReadTextFile(store);
  CliRun foreign = Kareus("profile " + Workload(kOther) +
                          " --partition fwd_mlp --budget 16 --quiet --store " + store.string());
  EXPECT_EQ(foreign.exit_code, 2) << foreign.out;
  EXPECT_NE(foreign.out.find("belongs to another"), std::string::npos) << foreign.out;
  EXPECT_EQ(ReadTextFile(store), before);

  // A file that is not a store at all.
  const fs::path garbage = dir_ / "notes.txt";
  {
    std::FILE* f = std::fopen(garbage.c_str(), "w");
    std::fputs("not a database\n", f);
    std::fclose(f);
  }
  CliRun bad = Kareus("profile " + Workload(kTp8) +
                      " --partition fwd_mlp --budget 16 --quiet --store " + garbage.string());
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_EQ(ReadTextFile(garbage), "not a database\n");
}

// The real process killed with SIGKILL mid-run: the rerun measures only what is missing and
// ends with the frontiers of an uninterrupted run.
TEST_F(ProfileCliTest, SigkilledRunResumesWithTheSameFrontiers) {
  const std::string workload = Workload("02-llama3.2-3b-cp2-tp4-mbs8-seq4096.yaml");
  const std::string types =
      " --partition fwd_qkv_ag --partition bwd_qkv_rs --partition bwd_mlp --budget-fraction 0.15";
  const fs::path store = dir_ / "killed.db";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (std::freopen("/dev/null", "w", stdout) == nullptr) _exit(126);
    execl(kareus_.c_str(), "kareus", "profile", workload.c_str(), "--partition", "fwd_qkv_ag",
          "--partition", "bwd_qkv_rs", "--partition", "bwd_mlp", "--budget-fraction", "0.15",
          "--quiet", "--store", store.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  bool finished = false;
  for (int i = 0; i < 20000 && StoreRows(store) < 100; ++i) {
    int status = 0;
    if (waitpid(child, &status, WNOHANG) == child) {
      finished = true;
      break;
    }
    usleep(1000);
  }
  if (finished) GTEST_SKIP() << "the run finished before it could be killed";
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  if (!WIFSIGNALED(status)) GTEST_SKIP() << "the run finished before it could be killed";
  const int64_t committed = StoreRows(store);
  ASSERT_GE(committed, 100);
  const int64_t total = 162 + 108 + 81;  // 15 % of 1,080, 720 and 540
  ASSERT_LT(committed, total);

  CliRun resumed =
      Kareus("profile " + workload + types + " --quiet --json --store " + store.string(), false);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out;
  const Json a = Json::parse(resumed.out);
  EXPECT_EQ(a["measurements_reused"].get<int64_t>(), committed);
  EXPECT_EQ(a["measurements_taken"].get<int64_t>(), total - committed);  // none twice
  EXPECT_EQ(StoreRows(store), total);

  CliRun clean = Kareus(
      "profile " + workload + types + " --quiet --json --store " + (dir_ / "clean.db").string(),
      false);
  ASSERT_EQ(clean.exit_code, 0) << clean.out;
  const Json b = Json::parse(clean.out);
  ASSERT_EQ(a["partitions"].size(), b["partitions"].size());
  for (std::size_t i = 0; i < a["partitions"].size(); ++i) {
    EXPECT_EQ(a["partitions"][i]["frontier"], b["partitions"][i]["frontier"]);
    EXPECT_EQ(a["partitions"][i]["clock_frontiers"], b["partitions"][i]["clock_frontiers"]);
  }
}

// Issue 18: the prior is on by default and said so; transfer reads a related workload's store
// (same model and GPU, another sequence length) read-only, its rows inform the surrogate with a
// learned similarity and never reach the frontier; an unrelated store or a bad --prior is exit 2.
TEST_F(ProfileCliTest, PriorByDefaultAndTransferFromARelatedStore) {
  const fs::path related = dir_ / "seq4096.db";
  const std::string part = " --partition fwd_mlp --budget 16 --json --quiet";
  CliRun base =
      Kareus("profile " + Workload(kOther) + part + " --store " + related.string(), false);
  ASSERT_EQ(base.exit_code, 0) << base.out;
  const Json b = Json::parse(base.out);
  EXPECT_NE(b["prior"].get<std::string>().find("emulator"), std::string::npos) << b["prior"];
  EXPECT_TRUE(b["partitions"][0].contains("prior"));
  EXPECT_TRUE(b["related_workloads"].empty());

  const std::string before = ReadTextFile(related);
  CliRun run = Kareus(
      "profile " + Workload(kOtherSeq8192) + part + " --evaluations --related " + related.string(),
      false);
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_EQ(ReadTextFile(related), before) << "the related store was modified";
  const Json a = Json::parse(run.out);
  ASSERT_EQ(a["related_workloads"].size(), 1u);
  EXPECT_EQ(a["measurements_taken"], 16);
  const Json& t = a["partitions"][0];
  EXPECT_EQ(t["evaluations"], 16);
  ASSERT_TRUE(t["prior"].contains("fits"));
  for (const Json& fit : t["prior"]["fits"]) {
    ASSERT_EQ(fit["related_similarity"].size(), 1u);
    EXPECT_GE(fit["related_similarity"][0].get<double>(), 0.0);
    EXPECT_LE(fit["related_similarity"][0].get<double>(), 1.0);
  }
  // Every frontier point is one of this workload's own measurements.
  for (const Json& p : t["frontier"]) {
    bool measured = false;
    for (const Json& e : t["evaluated"]) measured |= e["knobs"] == p["knobs"] && !e["from_store"];
    EXPECT_TRUE(measured) << p.dump();
  }

  CliRun foreign = Kareus("profile " + Workload(kTp8) + part + " --related " + related.string());
  EXPECT_EQ(foreign.exit_code, 2) << foreign.out;
  EXPECT_NE(foreign.out.find("--related"), std::string::npos) << foreign.out;
  EXPECT_EQ(ReadTextFile(related), before);
  CliRun bad = Kareus("profile " + Workload(kTp8) + part + " --prior oracle");
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--prior"), std::string::npos) << bad.out;
  bad = Kareus("profile " + Workload(kTp8) + part + " --prior-perturb dynamic_power=-1");
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_NE(bad.out.find("dynamic_power"), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace kareus
