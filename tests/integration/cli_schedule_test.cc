// SPDX-License-Identifier: Apache-2.0
// End-to-end: `kareus schedule` on a small run folder (three plans of a 2-GPU job): the files it
// writes, the timetable's promises, and exit 2 naming the flag, the value and the bound for
// every infeasible or malformed request, with nothing written.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "integration/cli_util.h"
#include "kareus/common/io.h"
#include "kareus/common/json.h"

namespace kareus {
namespace {

namespace fs = std::filesystem;
using testing::RunKareus;
using testing::SourceDir;

class CliSchedule : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kareus_cli_schedule_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "run" / "plans");
    // 2 GPUs; 300, 225 and 170 W per GPU; the GPUs' static power 100 W each.
    const char* names[] = {"plan_00000.json", "plan_00001.json", "plan_00002.json"};
    const double times[] = {1.0, 1.2, 1.5}, energies[] = {600, 540, 510};
    Json points = Json::array();
    for (int i = 0; i < 3; ++i) {
      fs::copy_file(SourceDir() / "tests/runtime/data/plan_2x8.json",
                    dir_ / "run/plans" / names[i]);
      points.push_back({{"time_s", times[i]},
                        {"energy_j", energies[i]},
                        {"static_energy_j", 200.0 * times[i]},
                        {"plan_index", i},
                        {"plan_path", std::string("plans/") + names[i]}});
    }
    points.insert(points.begin() + 1, Json{{"time_s", 1.1},
                                           {"energy_j", 580},
                                           {"static_energy_j", 220},
                                           {"plan_index", -1},
                                           {"plan_path", ""}});  // not kept: not used
    WriteJsonFile(dir_ / "run/frontier.json", {{"format", "kareus.frontier/1"},
                                               {"method", "kareus"},
                                               {"workload", Json::object()},
                                               {"points", points}});
    // Hourly prices: cheap, expensive, cheap, cheap.
    WriteFileAtomic(
        dir_ / "price.csv",
        "# test prices\ntime,price\n2026-03-02T00:00:00Z,0.1\n2026-03-02T01:00:00Z,1.0\n"
        "2026-03-02T02:00:00Z,0.1\n2026-03-02T03:00:00Z,0.1\n");
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Args(const std::string& extra) const {
    return (dir_ / "run").string() + " --signal " + (dir_ / "price.csv").string() + " --out " +
           (dir_ / "out").string() + " " + extra;
  }

  fs::path dir_;
};

TEST_F(CliSchedule, WritesATimetableThatKeepsItsPromises) {
  const auto r = RunKareus("schedule " + Args("--iterations 7000 --deadline 4h"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::HasSubstr("the timetable saves"));
  for (const char* file : {"timetable.json", "report.html", "plans/plan_00000.json",
                           "plans/plan_00001.json", "plans/plan_00002.json"}) {
    EXPECT_TRUE(fs::exists(dir_ / "out" / file)) << file;
  }
  const Json t = ReadJsonFile(dir_ / "out/timetable.json");
  EXPECT_EQ(t["format"], "kareus-timetable");
  EXPECT_EQ(t["gpus"], 2);
  EXPECT_DOUBLE_EQ(t["idle_power_w"].get<double>(), 200.0);
  EXPECT_EQ(t["plans"].size(), 3u);  // the point without a plan file is not among them
  EXPECT_NEAR(t["total_iterations"].get<double>(), 7000.0, 1e-6);
  EXPECT_LE(t["total_cost"].get<double>(), t["best_constant_plan"]["cost"].get<double>());
  // The expensive hour is paused through: 7000 iterations fit in the three cheap hours.
  EXPECT_GT(t["intervals"][1]["pause_s"].get<double>(), 3000.0);
  EXPECT_LE(t["finish"].get<std::string>(), t["deadline"].get<std::string>());
  const std::string html = testing::Slurp(dir_ / "out/report.html");
  EXPECT_THAT(html, ::testing::HasSubstr("<svg"));
  EXPECT_THAT(html, ::testing::HasSubstr("Power and signal over time"));
  // --json prints the same document; a rerun replaces the folder.
  const auto json = RunKareus("schedule " + Args("--iterations 7000 --deadline 4h --json"));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(ParseJson(json.out, "stdout")["total_cost"], t["total_cost"]);
}

TEST_F(CliSchedule, BadAndInfeasibleRequestsExitTwoNamingTheBound) {
  WriteFileAtomic(dir_ / "backwards.csv",
                  "time,price\n2026-03-02T01:00:00Z,0.1\n2026-03-02T00:00:00Z,0.2\n");
  WriteFileAtomic(dir_ / "low-cap.csv", "time,cap\n2026-03-02T00:00:00Z,150\n");
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"--iterations 20000 --deadline 4h",
       {"--deadline = 2026-03-02T04:00:00Z", "finish at the earliest at 2026-03-02T05:33:20Z"}},
      {"--iterations 100 --deadline 5h", {"--signal", "covers up to 2026-03-02T04:00:00Z"}},
      {"--iterations 100 --deadline tomorrow", {"--deadline = tomorrow", "ISO-8601"}},
      {"--iterations 100 --deadline 2026-03-01T00:00:00Z", {"--deadline", "after the signal's"}},
      {"--iterations 0 --deadline 4h", {"--iterations = 0"}},
      {"--iterations 100 --deadline 4h --power-cap " + (dir_ / "low-cap.csv").string() +
           " --no-pause",
       {"--power-cap", "the lowest is 170.0 W per GPU", "--no-pause"}},
      {"--iterations 100 --deadline 4h --signal-column nope", {"--signal-column = nope"}},
  };
  for (const auto& [extra, needles] : cases) {
    const auto r = RunKareus("schedule " + Args(extra));
    EXPECT_EQ(r.exit_code, 2) << extra << "\n" << r.err;
    for (const std::string& needle : needles) {
      EXPECT_THAT(r.err, ::testing::HasSubstr(needle)) << extra;
    }
    EXPECT_FALSE(fs::exists(dir_ / "out")) << extra << ": something was written";
  }
  const auto backwards = RunKareus("schedule " + (dir_ / "run").string() + " --signal " +
                                   (dir_ / "backwards.csv").string() + " --out " +
                                   (dir_ / "out").string() + " --iterations 10 --deadline 1h");
  EXPECT_EQ(backwards.exit_code, 2);
  EXPECT_THAT(backwards.err, ::testing::HasSubstr("backwards.csv line 3"));
  EXPECT_THAT(backwards.err, ::testing::HasSubstr("times must increase"));
  const auto no_run =
      RunKareus("schedule " + dir_.string() + " --signal " + (dir_ / "price.csv").string() +
                " --out " + (dir_ / "out").string() + " --iterations 10 --deadline 1h");
  EXPECT_EQ(no_run.exit_code, 2);
  EXPECT_THAT(no_run.err, ::testing::HasSubstr("has no frontier.json"));
}

}  // namespace
}  // namespace kareus
