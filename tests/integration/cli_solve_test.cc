// SPDX-License-Identifier: Apache-2.0
// `kareus solve` and `kareus export` end to end: JSON fields, written files, exit code 2 on a
// bad profile with nothing written.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "integration/cli_util.h"
#include "kareus/common/io.h"
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
                               "--gpus-per-stage 8 --out " +
                               (dir / "out").string() + " --json");
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

// Issue 17: `frontier.json` says its points stand for a 1 ms deadline grid, and `--deadline T`
// writes one plan meeting T within 0.1 % of the frontier's plan for T (realized at T itself
// rather than on the grid: measured -0.09 % .. +0.014 % on this profile, so not always the
// lower); a deadline below the minimum iteration time is exit code 2 naming the field, with
// nothing written.
TEST(CliSolve, DeadlineWritesTheLeastEnergyPlanForOneDeadline) {
  const fs::path dir = Scratch("deadline");
  WriteProfile(dir / "profile.csv");
  const std::string common = "solve " + (dir / "profile.csv").string() +
                             " --stages 2 --microbatches 8 --static-power 85 --gpus-per-stage 8";
  const auto full = RunKareus(common + " --out " + (dir / "full").string() + " --json");
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const Json frontier = ReadJsonFile(dir / "full" / "frontier.json");
  EXPECT_EQ(frontier["representation"], "deadline-grid");
  const double t_min = Json::parse(full.out)["fastest"]["time_s"].get<double>();
  const double t_max = Json::parse(full.out)["lowest_energy"]["time_s"].get<double>();
  const double deadline = t_min + 0.4 * (t_max - t_min);
  double frontier_energy = 1e300;
  for (const Json& point : frontier["points"]) {
    if (point["time_s"].get<double>() <= deadline) {
      frontier_energy = std::min(frontier_energy, point["energy_j"].get<double>());
    }
  }
  const auto one = RunKareus(common + " --deadline " + std::to_string(deadline) + " --out " +
                             (dir / "one").string() + " --json");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const Json json = Json::parse(one.out);
  EXPECT_LE(json["iteration"]["time_s"].get<double>(), deadline * (1 + 1e-9));
  EXPECT_LE(json["iteration"]["energy_j"].get<double>(), frontier_energy * (1 + 1e-3));
  EXPECT_TRUE(fs::exists(dir / "one" / "plan.json"));

  const auto infeasible = RunKareus(common + " --deadline " + std::to_string(0.5 * t_min) +
                                    " --out " + (dir / "infeasible").string());
  EXPECT_EQ(infeasible.exit_code, 2);
  EXPECT_THAT(infeasible.err, ::testing::HasSubstr("deadline"));
  EXPECT_FALSE(fs::exists(dir / "infeasible"));
}

// A GPipe solve writes GPipe plans, and kareus export writes them in their order: per stage
// every forward, then every backward.
TEST(CliSolve, GPipePlansAreSolvedWrittenAndExported) {
  const fs::path dir = Scratch("gpipe");
  WriteProfile(dir / "profile.csv");
  const auto solve = RunKareus("solve " + (dir / "profile.csv").string() +
                               " --stages 2 --microbatches 4 --static-power 85 --schedule gpipe"
                               " --out " +
                               (dir / "out").string() + " --json");
  ASSERT_EQ(solve.exit_code, 0) << solve.err;
  const Json plan = ReadJsonFile(dir / "out" / "plan.json");
  EXPECT_EQ(plan["schedule"], "gpipe");
  for (const Json& stage : plan["stages"]) {
    ASSERT_EQ(stage["instructions"].size(), 8u);
    for (std::size_t i = 0; i < 8; ++i) {
      EXPECT_EQ(stage["instructions"][i]["kind"], i < 4 ? "forward" : "backward");
      EXPECT_EQ(stage["instructions"][i]["microbatch"], static_cast<int>(i % 4));
    }
  }
  const auto zeus = RunKareus("export " + (dir / "out" / "plan.json").string() +
                              " --format zeus --out " + (dir / "zeus").string());
  ASSERT_EQ(zeus.exit_code, 0) << zeus.err;
  std::ifstream in(dir / "zeus" / "freqs_pipeline_00000.py");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Stage 0's list: four forwards, then four backwards.
  const std::size_t first_backward = text.find("'backward'");
  ASSERT_NE(first_backward, std::string::npos) << text;
  std::size_t forwards = 0;
  for (std::size_t at = text.find("'forward'"); at != std::string::npos && at < first_backward;
       at = text.find("'forward'", at + 1)) {
    ++forwards;
  }
  EXPECT_EQ(forwards, 4u) << text;
  const auto bad =
      RunKareus("solve " + (dir / "profile.csv").string() +
                " --stages 2 --microbatches 4 --static-power 85 --schedule interleaved-1f1b"
                " --out " +
                (dir / "bad").string());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, ::testing::HasSubstr("--schedule"));
  EXPECT_FALSE(fs::exists(dir / "bad"));
}

TEST(CliSolve, BadProfileExitsTwoNamingTheLineAndWritesNothing) {
  const fs::path dir = Scratch("bad");
  WriteProfile(dir / "profile.csv", "1,backward,1410,-0.2,30\n");
  const auto solve =
      RunKareus("solve " + (dir / "profile.csv").string() +
                " --stages 2 --microbatches 8 --static-power 85 --out " + (dir / "out").string());
  EXPECT_EQ(solve.exit_code, 2);
  EXPECT_THAT(solve.err, ::testing::HasSubstr("profile.csv:74 time"));
  EXPECT_FALSE(fs::exists(dir / "out"));
  const auto bad_format = RunKareus("export " + (dir / "profile.csv").string() +
                                    " --format perseus --out " + (dir / "x").string());
  EXPECT_EQ(bad_format.exit_code, 2);
  EXPECT_FALSE(fs::exists(dir / "x"));
}

// Issue 16: inputs that crashed (SIGSEGV on an empty frontier) exit 2 naming the field.
TEST(CliSolve, HugeValuesExitTwoNamingTheField) {
  const fs::path dir = Scratch("huge");
  WriteProfile(dir / "huge.csv", "1,backward,1410,0.3,1e308\n");
  const auto energy =
      RunKareus("solve " + (dir / "huge.csv").string() +
                " --stages 2 --microbatches 8 --static-power 85 --out " + (dir / "out").string());
  EXPECT_EQ(energy.exit_code, 2) << energy.err;
  EXPECT_THAT(energy.err, ::testing::HasSubstr("huge.csv:74 energy"));
  WriteProfile(dir / "profile.csv");
  const auto power = RunKareus("solve " + (dir / "profile.csv").string() +
                               " --stages 2 --microbatches 8 --static-power 1e308 --out " +
                               (dir / "out").string());
  EXPECT_EQ(power.exit_code, 2) << power.err;
  EXPECT_THAT(power.err, ::testing::HasSubstr("static-power"));
  const auto many = RunKareus("solve " + (dir / "profile.csv").string() +
                              " --stages 2 --microbatches 100000 --static-power 85 --out " +
                              (dir / "out").string());
  EXPECT_EQ(many.exit_code, 2) << many.err;
  EXPECT_THAT(many.err, ::testing::HasSubstr("microbatches"));
  WriteProfile(dir / "long.csv", "1,backward,1410,0.3," + std::string(100000, '7') + "x\n");
  const auto long_value =
      RunKareus("solve " + (dir / "long.csv").string() +
                " --stages 2 --microbatches 8 --static-power 85 --out " + (dir / "out").string());
  EXPECT_EQ(long_value.exit_code, 2);
  EXPECT_LT(long_value.err.size(), 1000u) << "a 100 KB value echoed";
  EXPECT_FALSE(fs::exists(dir / "out"));
}

// A plan whose strings carry Python code: the exported file is data, whatever the strings.
TEST(CliExport, PlanStringsAreWrittenAsPythonData) {
  const fs::path dir = Scratch("export_escape");
  const std::string evil = "x')\nopen(__import__('os').environ['MARK'], 'w')\n#\\";
  Json plan = Json::parse(R"({"format": "kareus.plan/1", "method": "m", "num_microbatches": 1,
    "stages": [{"stage": 0, "instructions": [
      {"kind": "forward", "microbatch": 0, "freq_mhz": 1410, "mode": "nanobatched",
       "partitions": [{"type": "fwd_attn", "sms": 6, "slot": "s"}]},
      {"kind": "backward", "microbatch": 0, "freq_mhz": 1200}]}]})");
  plan["method"] = evil;
  plan["stages"][0]["instructions"][0]["partitions"][0]["slot"] = evil;
  WriteFileAtomic(dir / "plan.json", plan.dump());
  for (const char* format : {"kareus-scheds", "zeus"}) {
    const fs::path out = dir / format;
    // The plan is nanobatched: its Zeus clocks are exported only when asked for as such.
    const std::string clocks_only = std::string(format) == "zeus" ? " --clocks-only" : "";
    const auto r = RunKareus("export " + (dir / "plan.json").string() + " --format " + format +
                             " --out " + out.string() + clocks_only);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    fs::path file;
    for (const auto& e : fs::directory_iterator(out)) {
      if (e.path().extension() == ".py") file = e.path();
    }
    ASSERT_FALSE(file.empty());
    // Python loads it as a literal and running it creates nothing.
    const fs::path mark = dir / (std::string("mark-") + format);
    const std::string python =
        "MARK=" + mark.string() +
        " /usr/bin/python3 -c \"import ast, sys; "
        "v = ast.literal_eval(open(sys.argv[1]).read()); exec(open(sys.argv[1]).read()); "
        "print(repr(v))\" " +
        file.string() + " > " + (dir / "value.txt").string();
    if (!fs::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
    EXPECT_EQ(std::system(python.c_str()), 0) << format;
    EXPECT_FALSE(fs::exists(mark)) << format << ": loading the file ran code";
    if (std::string(format) == "kareus-scheds") {
      EXPECT_THAT(ReadTextFile(dir / "value.txt"), ::testing::HasSubstr("-none-6-1024"));
    }
  }
}

// Zeus clocks of a plan planned for Kareus's execution would run sequentially and miss the
// plan's times: refused (exit 2, nothing written) unless --clocks-only, which the file then says.
TEST(CliExport, ZeusExportOfANanobatchedPlanIsRefusedUnlessClocksOnly) {
  const fs::path dir = Scratch("export_nanobatched");
  Json plan = Json::parse(R"({"format": "kareus.plan/2", "method": "kareus", "schedule": "1f1b",
    "num_microbatches": 1, "iteration": {"time_s": 3.75, "energy_j": 10, "static_energy_j": 1,
    "dynamic_energy_j": 9},
    "stages": [{"stage": 0, "gpus": 8, "instructions": [
      {"kind": "forward", "microbatch": 0, "freq_mhz": 1410, "mode": "nanobatched",
       "partitions": [{"type": "fwd_attn", "sms": 6, "slot": "norm_0"}]},
      {"kind": "backward", "microbatch": 0, "freq_mhz": 1200, "mode": "sequential"}]}]})");
  WriteFileAtomic(dir / "plan.json", plan.dump());
  const std::string export_zeus =
      "export " + (dir / "plan.json").string() + " --format zeus --out " + (dir / "zeus").string();
  const auto refused = RunKareus(export_zeus);
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_THAT(refused.err,
              ::testing::HasSubstr("1 of the 2 instructions of this kareus plan run nanobatched"));
  EXPECT_THAT(refused.err, ::testing::HasSubstr("methods/perseus/plan.json"));
  EXPECT_THAT(refused.err, ::testing::HasSubstr("kareus.torch"));
  EXPECT_THAT(refused.err, ::testing::HasSubstr("--clocks-only"));
  EXPECT_FALSE(fs::exists(dir / "zeus"));
  // --clocks-only: the clocks, with the note.
  const auto clocks = RunKareus(export_zeus + " --clocks-only");
  ASSERT_EQ(clocks.exit_code, 0) << clocks.err;
  const std::string text = ReadTextFile(dir / "zeus" / "freqs_pipeline_00000.py");
  EXPECT_THAT(text, ::testing::HasSubstr("[('forward', 1410), ('backward', 1200)]"));
  EXPECT_THAT(text, ::testing::HasSubstr("# Clocks only: 1 instructions were planned nanobatched"));
  // Kareus's own schedule files carry the knobs: no refusal; --clocks-only is for Zeus files.
  EXPECT_EQ(RunKareus("export " + (dir / "plan.json").string() + " --format kareus-scheds --out " +
                      (dir / "scheds").string())
                .exit_code,
            0);
  const auto misuse =
      RunKareus("export " + (dir / "plan.json").string() +
                " --format kareus-scheds --clocks-only --out " + (dir / "scheds2").string());
  EXPECT_EQ(misuse.exit_code, 2);
  EXPECT_THAT(misuse.err, ::testing::HasSubstr("zeus"));
}

TEST(CliExport, BadPlansExitTwoAndEachExportReplacesTheFolder) {
  const fs::path dir = Scratch("export_bad");
  WriteProfile(dir / "profile.csv");
  ASSERT_EQ(
      RunKareus("solve " + (dir / "profile.csv").string() +
                " --stages 2 --microbatches 8 --static-power 85 --out " + (dir / "out").string())
          .exit_code,
      0);
  const std::string plan = ReadTextFile(dir / "out" / "plan.json");
  // The index in the file name overflowed std::stol (exit 1).
  fs::create_directories(dir / "overflow");
  WriteFileAtomic(dir / "overflow" / "plan_99999999999999999999.json", plan);
  const auto overflow = RunKareus("export " + (dir / "overflow").string() +
                                  " --format zeus --out " + (dir / "x").string());
  EXPECT_EQ(overflow.exit_code, 2) << overflow.err;
  EXPECT_THAT(overflow.err, ::testing::HasSubstr("plan_99999999999999999999.json"));
  // A number beyond a double (an internal error before).
  std::string huge = plan;
  huge.replace(huge.find("\"time_s\": "), 10, "\"time_s\": 1e400, \"x\": ");
  WriteFileAtomic(dir / "huge.json", huge);
  const auto number = RunKareus("export " + (dir / "huge.json").string() + " --format zeus --out " +
                                (dir / "x").string());
  EXPECT_EQ(number.exit_code, 2) << number.err;
  EXPECT_THAT(number.err, ::testing::HasSubstr("huge.json: not valid JSON"));
  // A 100 KB kind is named, not echoed.
  std::string kind = plan;
  kind.replace(kind.find("\"forward\""), 9, "\"" + std::string(100000, 'k') + "\"");
  WriteFileAtomic(dir / "kind.json", kind);
  const auto long_kind = RunKareus("export " + (dir / "kind.json").string() +
                                   " --format zeus --out " + (dir / "x").string());
  EXPECT_EQ(long_kind.exit_code, 2);
  EXPECT_LT(long_kind.err.size(), 1000u);
  EXPECT_FALSE(fs::exists(dir / "x"));
  // Ten plans, then one: the folder holds the one.
  ASSERT_EQ(RunKareus("export " + (dir / "out" / "plans").string() + " --format zeus --out " +
                      (dir / "zeus").string())
                .exit_code,
            0);
  ASSERT_EQ(RunKareus("export " + (dir / "out" / "plan.json").string() + " --format zeus --out " +
                      (dir / "zeus").string())
                .exit_code,
            0);
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir / "zeus")) {
    files.push_back(e.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{".kareus-output", "freqs_pipeline_00000.py"}));
}

}  // namespace
}  // namespace kareus
