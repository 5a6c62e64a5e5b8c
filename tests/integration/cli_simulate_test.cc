// SPDX-License-Identifier: Apache-2.0
// End-to-end: `kareus simulate` (JSON fields, sweeps to CSV, exit code 2 with the choices).
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>

#include "integration/cli_util.h"
#include "kareus/common/json.h"

namespace kareus {
namespace {

using testing::RunKareus;
using testing::SourceDir;

std::string Tp8() {
  return (SourceDir() / "examples/paper/01-llama3.2-3b-tp8-mbs8-seq4096.yaml").string();
}

void ExpectResultFields(const Json& j) {
  for (const char* field :
       {"time_s", "energy_j", "static_energy_j", "dynamic_energy_j", "avg_power_w",
        "effective_freq_mhz", "compute_busy_s", "comm_busy_s", "overlap_s"}) {
    ASSERT_TRUE(j.contains(field)) << field;
    EXPECT_TRUE(j[field].is_number()) << field;
  }
  EXPECT_GT(j["time_s"].get<double>(), 0.0);
  EXPECT_NEAR(j["energy_j"].get<double>(),
              j["static_energy_j"].get<double>() + j["dynamic_energy_j"].get<double>(),
              1e-9 * j["energy_j"].get<double>());
}

TEST(CliSimulate, PartitionAsJson) {
  const auto r = RunKareus("simulate " + Tp8() +
                           " --partition fwd_attn --freq 1410 --sms 12 --slot linear_0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  ExpectResultFields(j);
  EXPECT_EQ(j["partition"], "fwd_attn");
  EXPECT_EQ(j["sms"], 12);
  EXPECT_LE(j["effective_freq_mhz"].get<double>(), 1410.0);
  EXPECT_EQ(
      RunKareus("simulate " + Tp8() + " --partition fwd_attn --freq 1410 --sms 12 --slot linear_0")
          .exit_code,
      0);
  // Power-limit mode without --freq: the header must not claim a locked clock.
  const auto capped = RunKareus("simulate " + Tp8() +
                                " --partition fwd_attn --power-limit 250 --sms 12 --slot linear_0");
  ASSERT_EQ(capped.exit_code, 0) << capped.err;
  EXPECT_NE(capped.out.find("unlocked (up to 1410 MHz) (250 W limit)"), std::string::npos)
      << capped.out;
}

TEST(CliSimulate, InstructionAsJson) {
  for (const std::string mode : {"", " --sequential"}) {
    const auto r = RunKareus("simulate " + Tp8() +
                             " --stage 1 --instruction backward --freq 1200 --json" + mode);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const Json j = Json::parse(r.out);
    ExpectResultFields(j);
    EXPECT_EQ(j["mode"], mode.empty() ? "nanobatched" : "sequential");
  }
  const auto tuned =
      RunKareus("simulate " + Tp8() +
                " --stage 0 --instruction forward --freq 1410 --comm fwd_attn=9@linear_0 "
                "--comm fwd_mlp=12@linear_0 --json");
  ASSERT_EQ(tuned.exit_code, 0) << tuned.err;
}

TEST(CliSimulate, SweepWritesTheWholeGridAsCsv) {
  const auto csv = std::filesystem::temp_directory_path() /
                   ("kareus_sweep_" + std::to_string(::getpid()) + ".csv");
  const auto r =
      RunKareus("simulate " + Tp8() + " --partition fwd_mlp --sweep --csv " + csv.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream in(testing::Slurp(csv));
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line.rfind("freq_mhz,sms,slot,time_s,energy_j", 0), 0u) << line;
  int rows = 0;
  while (std::getline(in, line)) ++rows;
  EXPECT_EQ(rows, 18 * 10 * 3);  // kareus-official.md §2.2: fwd_mlp is 540 points on A100
  std::filesystem::remove(csv);
}

TEST(CliSimulate, BadInputExitsTwoWithTheChoices) {
  struct Case {
    std::string args;
    std::string expect;  // a valid choice the message must list
  };
  for (const Case& c : {
           Case{"--partition fwd_atn --freq 1410 --sms 12 --slot norm_0", "fwd_attn"},
           Case{"--partition fwd_attn --freq 1410 --sms 12 --slot nrm_0", "linear_0"},
           Case{"--partition fwd_attn --freq 1410 --sms 4 --slot norm_0", "3, 6, 9"},
           Case{"--partition fwd_attn --freq 1411 --sms 12 --slot norm_0", "1410"},
           Case{"--partition fwd_attn --freq 1410 --sms 12", "norm_0"},
           Case{"--stage 5 --instruction forward --freq 1410", "0..1"},
           Case{"--stage 0 --instruction sideways --freq 1410", "backward"},
       }) {
    const auto r = RunKareus("simulate " + Tp8() + " " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args << ": " << r.err;
  }
}

// --csv must name a file Kareus can write: a folder, or a place it cannot write, is refused with
// the path and the rule, and nothing is left behind.
TEST(CliSimulate, CsvThatCannotBeWrittenExitsTwoNamingThePath) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("kareus_sweep_dir_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto folder =
      RunKareus("simulate " + Tp8() + " --partition fwd_mlp --sweep --csv " + dir.string());
  EXPECT_EQ(folder.exit_code, 2);
  EXPECT_NE(folder.err.find(dir.string() + ": is a folder; a file path is required"),
            std::string::npos)
      << folder.err;
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "a temporary file stayed";
  const auto unwritable =
      RunKareus("simulate " + Tp8() + " --partition fwd_mlp --sweep --csv /proc/kareus_sweep.csv");
  EXPECT_EQ(unwritable.exit_code, 2);
  EXPECT_NE(unwritable.err.find("/proc/kareus_sweep.csv: cannot be written"), std::string::npos)
      << unwritable.err;
  EXPECT_EQ(unwritable.err.find(".tmp."), std::string::npos)
      << "names a temporary: " << unwritable.err;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kareus
