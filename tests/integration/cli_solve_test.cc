// SPDX-License-Identifier: Apache-2.0
// `kareus solve` and `kareus export` end to end: JSON fields, written files, exit code 2 on a
// bad profile with nothing written.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "integration/cli_util.h"
#include "kareus/common/json.h"

namespace kareus {
namespace {

namespace fs = std::filesystem;
using testing::RunKareus;

fs::path Scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("kareus_cli_solve_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void WriteProfile(const fs::path& path, const std::string& extra = "") {
  std::ofstream out(path);
  out << "stage,instruction,frequency,time,energy\n";
  for (int s = 0; s < 2; ++s) {
    for (int f = 1410; f >= 900; f -= 30) {
      const double r = f / 1410.0;
      const double tf = (0.15 + 0.01 * s) / std::pow(r, 0.9);
      out << s << ",forward," << f << "," << tf << "," << (85 + 260 * std::pow(r, 2.5)) * tf
          << "\n";
      out << s << ",backward," << f << "," << 2.2 * tf << ","
          << (85 + 280 * std::pow(r, 2.5)) * 2.2 * tf << "\n";
    }
  }
  out << extra;
}

TEST(CliSolve, SolvesAndExports) {
  const fs::path dir = Scratch("ok");
  WriteProfile(dir / "profile.csv");
  const auto solve = RunKareus("solve " + (dir / "profile.csv").string() +
                               " --stages 2 --microbatches 8 --static-power 85 "
                               "--gpus-per-stage 8 --out " + (dir / "out").string() + " --json");
  ASSERT_EQ(solve.exit_code, 0) << solve.err;
  const Json json = Json::parse(solve.out);
  EXPECT_EQ(json["status"], "reached_minimum_time");
  EXPECT_GT(json["points"].get<int>(), 10);
  EXPECT_LT(json["fastest"]["time_s"].get<double>(), json["lowest_energy"]["time_s"].get<double>());
  EXPECT_GT(json["fastest"]["energy_j"].get<double>(),
            json["lowest_energy"]["energy_j"].get<double>());
  EXPECT_EQ(json["plans"].size(), 10u);
  EXPECT_TRUE(fs::exists(dir / "out" / "plan.json"));
  const Json frontier = ReadJsonFile(dir / "out" / "frontier.json");
  EXPECT_EQ(frontier["points"].size(), json["points"].get<std::size_t>());

  const auto zeus = RunKareus("export " + (dir / "out" / "plans").string() +
                              " --format zeus --out " + (dir / "zeus").string() + " --json");
  ASSERT_EQ(zeus.exit_code, 0) << zeus.err;
  EXPECT_EQ(Json::parse(zeus.out)["files"].size(), 10u);
  const auto scheds = RunKareus("export " + (dir / "out" / "plan.json").string() +
                                " --format kareus-scheds --out " + (dir / "scheds").string());
  ASSERT_EQ(scheds.exit_code, 0) << scheds.err;
  EXPECT_TRUE(fs::exists(dir / "scheds" / "scheds_pipeline_00000.py"));
}

TEST(CliSolve, BadProfileExitsTwoNamingTheLineAndWritesNothing) {
  const fs::path dir = Scratch("bad");
  WriteProfile(dir / "profile.csv", "1,backward,1410,-0.2,30\n");
  const auto solve = RunKareus("solve " + (dir / "profile.csv").string() +
                               " --stages 2 --microbatches 8 --static-power 85 --out " +
                               (dir / "out").string());
  EXPECT_EQ(solve.exit_code, 2);
  EXPECT_THAT(solve.err, ::testing::HasSubstr("profile.csv:74 time"));
  EXPECT_FALSE(fs::exists(dir / "out"));
  const auto bad_format = RunKareus("export " + (dir / "profile.csv").string() +
                                    " --format perseus --out " + (dir / "x").string());
  EXPECT_EQ(bad_format.exit_code, 2);
  EXPECT_FALSE(fs::exists(dir / "x"));
}

}  // namespace
}  // namespace kareus
