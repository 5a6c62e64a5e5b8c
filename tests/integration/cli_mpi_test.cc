// SPDX-License-Identifier: Apache-2.0
// `mpirun -np N kareus profile|run|evaluate` on the emulator (Open MPI, oversubscribed): the
// same bytes as one process for every N, a rank killed with SIGKILL ends the job with the store
// committed and the rerun measures only what is missing, a rank that cannot make its backend
// is named, and bad input still exits 2 under mpirun.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "integration/cli_util.h"
#include "kareus/common/json.h"

namespace kareus {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;

constexpr const char* kBudget = "--budget-fraction 0.05";

class MpiCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kareus-mpi-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `kareus ARGS` in folder `cwd` (created), under mpirun with `ranks` ranks (0: no
  // mpirun). `env` is prefixed (and exported to the ranks with -x).
  CliResult Kareus(const std::string& cwd, int ranks, const std::string& args,
                   const std::string& env = "") {
    fs::create_directories(dir_ / cwd);
    std::string launcher;
    if (ranks > 0) {
      launcher = std::string(KAREUS_MPIEXEC) + " --oversubscribe --allow-run-as-root -np " +
                 std::to_string(ranks) + " ";
      if (!env.empty()) launcher += "-x " + env.substr(0, env.find('=')) + " ";
    }
    const std::string command = "cd " + (dir_ / cwd).string() + " && " + env + " timeout 300 " +
                                launcher + testing::KareusBinary().string() + " " + args +
                                " >stdout.txt 2>stderr.txt </dev/null";
    const int status = std::system(command.c_str());
    CliResult result;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    result.out = testing::Slurp(dir_ / cwd / "stdout.txt");
    result.err = testing::Slurp(dir_ / cwd / "stderr.txt");
    return result;
  }

  static std::string Paper(const char* name) {
    for (const auto& entry : fs::directory_iterator(testing::SourceDir() / "examples/paper")) {
      if (entry.path().filename().string().rfind(name, 0) == 0) return entry.path().string();
    }
    ADD_FAILURE() << "no paper workload " << name;
    return {};
  }

  void KillAndResume(int killed, int after, int resume_ranks);
  // Runs `kareus ARGS` without mpirun and with 1 to 4 ranks: each spread run exits 0, prints the
  // same (planning cost aside) and writes the same `out` folder; `also(ranks, folder)` checks
  // more of each spread run.
  void ExpectSameWithOneToFourRanks(
      const std::string& args, const std::function<void(int, const fs::path&)>& also = nullptr);

  fs::path dir_;
};

// Rows of a measurement store without their timestamps, sorted by configuration.
std::vector<std::string> StoreRows(const fs::path& path) {
  std::vector<std::string> rows;
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK) << path;
  sqlite3_stmt* stmt = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db,
                               "SELECT partition, freq_mhz, sms, slot, quote(time_s), "
                               "quote(energy_j), quote(dynamic_energy_j), quote(gpu_seconds) "
                               "FROM measurements ORDER BY partition, freq_mhz, sms, slot",
                               -1, &stmt, nullptr),
            SQLITE_OK);
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    std::string row;
    for (int c = 0; c < 8; ++c) {
      row += reinterpret_cast<const char*>(sqlite3_column_text(stmt, c));
      row += "|";
    }
    rows.push_back(row);
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return rows;
}

// A summary without what measures the process rather than the plans: wall-clock timings and
// peak memory (they differ between two runs of one process too).
Json WithoutTimings(Json j) {
  if (j.is_object()) {
    j.erase("phase_wall_s");
    j.erase("peak_rss_mib");
    for (auto& [key, value] : j.items()) value = WithoutTimings(value);
  } else if (j.is_array()) {
    for (auto& value : j) value = WithoutTimings(value);
  }
  return j;
}

// Text without what measures the planning process rather than the plans (the table of wall
// time per phase and the peak memory, in kareus run's output and report.html): it differs
// between two runs of one process too. Cut from the table's title to the peak memory line.
std::string WithoutPlanningCost(const std::string& text) {
  std::string out = text;
  for (const char* title : {"<h3>Planning cost</h3>", "Planning cost (wall time per phase"}) {
    const std::size_t begin = out.find(title);
    if (begin == std::string::npos) continue;
    const std::string last = "Peak memory of the planning process: ";
    const std::size_t at = out.find(last, begin);
    if (at == std::string::npos) continue;
    const std::size_t end = out.find("MiB", at);
    if (end == std::string::npos) continue;
    out.replace(begin, end + 3 - begin, "[planning cost masked]");
  }
  return out;
}

// Every file of `a` has the same bytes in `b` (and no file is missing): summaries compared
// without timings, stores by their rows.
void ExpectSameFolders(const fs::path& a, const fs::path& b) {
  std::set<std::string> files_a, files_b;
  for (const auto& e : fs::recursive_directory_iterator(a)) {
    if (e.is_regular_file()) files_a.insert(fs::relative(e.path(), a).string());
  }
  for (const auto& e : fs::recursive_directory_iterator(b)) {
    if (e.is_regular_file()) files_b.insert(fs::relative(e.path(), b).string());
  }
  std::erase_if(files_a,
                [](const std::string& f) { return f.find(".sqlite-") != std::string::npos; });
  std::erase_if(files_b,
                [](const std::string& f) { return f.find(".sqlite-") != std::string::npos; });
  EXPECT_EQ(files_a, files_b);
  ASSERT_FALSE(files_a.empty());
  for (const std::string& f : files_a) {
    if (!files_b.contains(f)) continue;
    if (f.ends_with(".sqlite")) {
      EXPECT_EQ(StoreRows(a / f), StoreRows(b / f)) << f;
    } else if (fs::path(f).filename() == "summary.json") {
      EXPECT_EQ(DumpJson(WithoutTimings(ReadJsonFile(a / f))),
                DumpJson(WithoutTimings(ReadJsonFile(b / f))))
          << f;
    } else {
      EXPECT_EQ(WithoutPlanningCost(testing::Slurp(a / f)),
                WithoutPlanningCost(testing::Slurp(b / f)))
          << f;
    }
  }
}

void MpiCliTest::ExpectSameWithOneToFourRanks(
    const std::string& args, const std::function<void(int, const fs::path&)>& also) {
  const CliResult single = Kareus("single", 0, args);
  ASSERT_EQ(single.exit_code, 0) << single.err;
  for (int n = 1; n <= 4; ++n) {
    const std::string cwd = "np" + std::to_string(n);
    const CliResult spread = Kareus(cwd, n, args);
    ASSERT_EQ(spread.exit_code, 0) << spread.err;
    EXPECT_EQ(WithoutPlanningCost(spread.out), WithoutPlanningCost(single.out)) << n << " ranks";
    SCOPED_TRACE(std::to_string(n) + " ranks");
    ExpectSameFolders(dir_ / "single/out", dir_ / cwd / "out");
    if (also) also(n, dir_ / cwd);
  }
}

TEST_F(MpiCliTest, ProfileIsByteIdenticalWithOneToFourRanks) {
  const std::string args = "profile " + Paper("02-") + " " + kBudget +
                           " --quiet --json --evaluations --rank-report ranks.json";
  const CliResult single = Kareus("single", 0, args);
  ASSERT_EQ(single.exit_code, 0) << single.err;
  const Json profile = Json::parse(single.out);
  int64_t batches = 0;
  for (const auto& p : profile["partitions"]) batches += p["batches"].get<int64_t>();
  for (int n = 1; n <= 4; ++n) {
    const std::string cwd = "np" + std::to_string(n);
    const CliResult spread = Kareus(cwd, n, args);
    ASSERT_EQ(spread.exit_code, 0) << spread.err;
    EXPECT_EQ(spread.out, single.out) << n << " ranks";
    const Json ranks = ReadJsonFile(dir_ / cwd / "ranks.json");
    ASSERT_EQ(ranks["per_rank"].size(), static_cast<std::size_t>(n));
    int64_t units = 0, measurements = 0;
    for (const auto& r : ranks["per_rank"]) {
      units += r["units"].get<int64_t>();
      measurements += r["measurements"].get<int64_t>();
      if (n > 1) {
        EXPECT_GT(r["units"].get<int64_t>(), 0) << "rank " << r["rank"] << " idle";
      }
    }
    EXPECT_EQ(units, batches);
    EXPECT_EQ(measurements, profile["measurements_taken"].get<int64_t>());
    if (n == 4) {
      EXPECT_LE(ranks["load_balance"].get<double>(), 1.3) << DumpJson(ranks);
    }
  }
  // Batches cut into units of 4 configurations: spread over the ranks, same result as one
  // process with the same unit size.
  const std::string units =
      "profile " + Paper("02-") + " " + kBudget + " --quiet --json --unit-size 4";
  const CliResult one = Kareus("units1", 0, units);
  const CliResult three = Kareus("units3", 3, units);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  ASSERT_EQ(three.exit_code, 0) << three.err;
  EXPECT_EQ(one.out, three.out);
}

TEST_F(MpiCliTest, RunWritesTheSameFilesWithOneToFourRanks) {
  const std::string args = "run " + Paper("01-") + " " + kBudget + " --out out --quiet";
  ExpectSameWithOneToFourRanks(args);
}

TEST_F(MpiCliTest, EvaluateWritesTheSameFilesAndTableWithOneToFourRanks) {
  const std::string args = "evaluate " + Paper("01-") + " " + Paper("08-") + " " + kBudget +
                           " --out out --quiet --rank-report ranks.json";
  ExpectSameWithOneToFourRanks(args, [](int n, const fs::path& folder) {
    const Json ranks = ReadJsonFile(folder / "ranks.json");
    ASSERT_EQ(ranks["per_rank"].size(), static_cast<std::size_t>(n));
    int64_t jobs = 0;
    for (const auto& r : ranks["per_rank"]) jobs += r["jobs"].get<int64_t>();
    EXPECT_EQ(jobs, 2) << "each workload finished once";
  });
}

// `kareus profile` on 3 ranks, rank `killed` SIGKILLs itself after its `after`-th measurement:
// the job ends naming that rank, the store keeps what reached rank 0, and a rerun on
// `resume_ranks` ranks reuses exactly those rows, measures the rest and ends with the
// uninterrupted frontiers and store.
void MpiCliTest::KillAndResume(int killed, int after, int resume_ranks) {
  const std::string args =
      "profile " + Paper("02-") + " " + kBudget + " --quiet --json --store store.sqlite";
  const CliResult clean = Kareus("clean", 0, args);
  ASSERT_EQ(clean.exit_code, 0) << clean.err;
  const Json expected = Json::parse(clean.out);
  const int64_t total = expected["measurements_taken"].get<int64_t>();

  const CliResult dead =
      Kareus("run", 3, args,
             "KAREUS_FAULT_KILL_RANK=" + std::to_string(killed) + ":" + std::to_string(after));
  EXPECT_NE(dead.exit_code, 0);
  EXPECT_NE(dead.err.find("process rank " + std::to_string(killed)), std::string::npos) << dead.err;
  EXPECT_NE(dead.err.find("signal 9"), std::string::npos) << dead.err;
  if (killed != 0) {  // rank 0 outlived it and says what to do
    EXPECT_NE(dead.err.find("committed to the store; rerun the same command to resume"),
              std::string::npos)
        << dead.err;
  }
  const std::vector<std::string> committed = StoreRows(dir_ / "run/store.sqlite");
  EXPECT_GE(static_cast<int64_t>(committed.size()), 1);
  EXPECT_LT(static_cast<int64_t>(committed.size()), total) << "the kill came too late";

  const CliResult resumed = Kareus("run", resume_ranks, args);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const Json again = Json::parse(resumed.out);
  EXPECT_EQ(again["measurements_reused"].get<int64_t>(), static_cast<int64_t>(committed.size()));
  EXPECT_EQ(again["measurements_taken"].get<int64_t>(),
            total - static_cast<int64_t>(committed.size()));
  ASSERT_EQ(again["partitions"].size(), expected["partitions"].size());
  for (std::size_t t = 0; t < expected["partitions"].size(); ++t) {
    const Json& x = expected["partitions"][t];
    const Json& y = again["partitions"][t];
    for (const char* field : {"frontier", "clock_frontiers", "hypervolume", "cost_gpu_seconds"}) {
      EXPECT_EQ(x[field], y[field]) << x["type"] << " " << field;
    }
  }
  EXPECT_EQ(StoreRows(dir_ / "run/store.sqlite"), StoreRows(dir_ / "clean/store.sqlite"));
}

TEST_F(MpiCliTest, AKilledRankEndsTheJobAndTheRerunMeasuresOnlyWhatIsMissing) {
  KillAndResume(/*killed=*/1, /*after=*/40, /*resume_ranks=*/2);
}

// Rank 0 is the store's only writer: killed while it commits (its own measuring thread raises
// the signal), the store still holds every committed row and the rerun resumes from them.
TEST_F(MpiCliTest, AKilledRankZeroLosesNothingCommitted) {
  KillAndResume(/*killed=*/0, /*after=*/30, /*resume_ranks=*/4);
}

TEST_F(MpiCliTest, ARankThatCannotMakeItsBackendIsNamed) {
  // Two programs in one job (MPMD): rank 1 asks for a backend this build does not have.
  const std::string workload = Paper("01-");
  const std::string command =
      std::string(KAREUS_MPIEXEC) + " --oversubscribe --allow-run-as-root -np 1 " +
      testing::KareusBinary().string() + " profile " + workload +
      " --quiet --store store.sqlite : -np 1 " + testing::KareusBinary().string() + " profile " +
      workload + " --quiet --store store.sqlite --backend gpu";
  const std::string full =
      "cd " + dir_.string() + " && timeout 300 " + command + " >stdout.txt 2>stderr.txt </dev/null";
  const int status = std::system(full.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  const std::string err = testing::Slurp(dir_ / "stderr.txt");
  EXPECT_NE(err.find("rank 1 (host "), std::string::npos) << err;
  EXPECT_NE(err.find("--backend = gpu"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(dir_ / "store.sqlite")) << "nothing is measured or written";
}

// Two ranks on this node, each needing 8 GPUs (workload 01 is TP 8), but --devices lists 4:
// refused naming the rank before any GPU is touched (this machine may have no GPU at all).
TEST_F(MpiCliTest, RanksOfANodeNeverShareTheirGpus) {
  if (Kareus("probe", 0, "profile --help").out.find("--devices") == std::string::npos) {
    GTEST_SKIP() << "this kareus has no --devices";
  }
  const CliResult shared =
      Kareus("shared", 2, "profile " + Paper("01-") + " --backend cuda --devices 0,1,2,3 --quiet");
  if (shared.err.find("without CUDA") != std::string::npos) {
    GTEST_SKIP() << "this kareus was built without the cuda backend";
  }
  EXPECT_EQ(shared.exit_code, 2) << shared.err;
  EXPECT_NE(shared.err.find("rank 0 (local rank 0 of 2 on its node): --devices lists 4 GPUs, but "
                            "2 ranks x 8 GPUs per measurement need 16"),
            std::string::npos)
      << shared.err;
  EXPECT_FALSE(fs::exists(dir_ / "shared/measurements.sqlite"));
}

TEST_F(MpiCliTest, BadInputUnderMpirunExitsTwoWithoutHanging) {
  const CliResult bad = Kareus("bad", 3, "profile " + Paper("01-") + " --budget 3 --quiet");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("initial design"), std::string::npos) << bad.err;
  const CliResult rule = Kareus("rule", 2, "profile " + Paper("01-") + " --assign fastest --quiet");
  EXPECT_EQ(rule.exit_code, 2) << rule.err;
  EXPECT_NE(rule.err.find("--assign = fastest"), std::string::npos) << rule.err;
}

}  // namespace
}  // namespace kareus
