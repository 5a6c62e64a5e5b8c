// SPDX-License-Identifier: Apache-2.0
// End-to-end: `kareus run` and `kareus evaluate` (JSON fields, files, exit codes).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <thread>

#include "integration/cli_util.h"
#include "kareus/common/io.h"
#include "kareus/common/json.h"

namespace kareus {
namespace {

using testing::RunKareus;
using testing::SourceDir;

const std::string kExample =
    (SourceDir() / "examples" / "paper" / "01-llama3.2-3b-tp8-mbs8-seq4096.yaml").string();

std::filesystem::path Fresh(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("kareus_cli_run_" + name);
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(CliRun, InvalidInputExitsTwoAndWritesNothing) {
  const auto out = Fresh("invalid");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--methods kareus,zeus", "zeus"},
      {"--budget-fraction -0.1", "--budget-fraction"},
      {"--budget-fraction 1.5", "--budget-fraction"},
      {"--surrogate forest", "forest"},
      {"--strategy greedy", "greedy"},
      {"--unit-time 0", "--unit-time"},
      {"--sweep-anchor-stride 0", "--sweep-anchor-stride = 0: must be an integer >= 1"},
      // CLI11 alone would wrap a negative seed to 2^64 - 1 and run.
      {"--seed -1", "--seed = -1: must be a whole number"},
  };
  for (const auto& [flags, field] : cases) {
    const auto r = RunKareus("run " + kExample + " --out " + out.string() + " " + flags);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.err;
    EXPECT_NE(r.err.find(field), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(out)) << flags;
  }
  const auto missing = RunKareus("run /nonexistent.yaml --out " + out.string());
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_EQ(RunKareus("run " + kExample).exit_code, 2);  // --out is required
  const auto profile = RunKareus("profile " + kExample + " --seed -7 --quiet");
  EXPECT_EQ(profile.exit_code, 2);
  EXPECT_NE(profile.err.find("--seed = -7"), std::string::npos) << profile.err;
}

// Entries beside `out` that a run leaves behind (staging or previous folders).
std::vector<std::string> Leftovers(const std::filesystem::path& out) {
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::directory_iterator(out.parent_path())) {
    const std::string name = e.path().filename().string();
    if (name.rfind("." + out.filename().string() + ".kareus-", 0) == 0) found.push_back(name);
  }
  return found;
}

TEST(CliRun, OutputFolderHoldsExactlyOneRunsOutputs) {
  const auto out = Fresh("one_run");
  const auto first = RunKareus("run " + kExample + " --out " + out.string() +
                               " --methods megatron,perseus --quiet");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_TRUE(std::filesystem::exists(out / "methods" / "perseus" / "plan.json"));
  const auto second =
      RunKareus("run " + kExample + " --out " + out.string() + " --methods megatron --quiet");
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_FALSE(std::filesystem::exists(out / "methods" / "perseus")) << "an old run's plans stayed";
  EXPECT_TRUE(std::filesystem::exists(out / "methods" / "megatron" / "plan.json"));
  EXPECT_TRUE(Leftovers(out).empty());
  std::filesystem::remove_all(out);
}

TEST(CliRun, EmptyOrForeignOutIsRefusedBeforeAnythingRuns) {
  const auto empty = RunKareus("run " + kExample + " --out ''");
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_NE(empty.err.find("out = \"\""), std::string::npos) << empty.err;
  const auto out = Fresh("foreign");
  WriteFileAtomic(out / "notes.txt", "mine");
  const auto foreign = RunKareus("run " + kExample + " --out " + out.string());
  EXPECT_EQ(foreign.exit_code, 2);
  EXPECT_NE(foreign.err.find("notes.txt"), std::string::npos) << foreign.err;
  EXPECT_EQ(ReadTextFile(out / "notes.txt"), "mine");
  EXPECT_FALSE(std::filesystem::exists(out / "measurements.sqlite"));
  std::filesystem::remove_all(out);
}

// An --out Kareus cannot create is refused naming --out's value and the rule (not the internal
// staging folder), before anything runs.
TEST(CliRun, UnwritableOutIsRefusedNamingIt) {
  const auto under_proc = RunKareus("run " + kExample + " --out /proc/kareus_out --quiet");
  EXPECT_EQ(under_proc.exit_code, 2);
  EXPECT_NE(under_proc.err.find("out = /proc/kareus_out: its parent folder /proc must be writable"),
            std::string::npos)
      << under_proc.err;
  EXPECT_EQ(under_proc.err.find("staging"), std::string::npos) << under_proc.err;
  const auto file = Fresh("file_parent");
  WriteFileAtomic(file, "not a folder");
  const auto under_file =
      RunKareus("run " + kExample + " --out " + (file / "out").string() + " --quiet");
  EXPECT_EQ(under_file.exit_code, 2);
  EXPECT_NE(under_file.err.find("out = " + (file / "out").string() + ": its parent folder"),
            std::string::npos)
      << under_file.err;
  EXPECT_EQ(ReadTextFile(file), "not a folder");
  std::filesystem::remove_all(file);
}

TEST(CliRun, AnInterruptedRunLeavesThePreviousOutputsAndNoTemporaries) {
  const auto out = Fresh("interrupted");
  const auto first =
      RunKareus("run " + kExample + " --out " + out.string() + " --methods megatron --quiet");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string plan = ReadTextFile(out / "plan.json");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int null_fd = ::open("/dev/null", O_WRONLY);
    dup2(null_fd, 1);
    dup2(null_fd, 2);
    execl(testing::KareusBinary().c_str(), "kareus", "run", kExample.c_str(), "--out", out.c_str(),
          "--methods", "kareus,perseus", "--quiet", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Interrupt once the run is under way (its staging folder exists).
  for (int i = 0; i < 3000 && Leftovers(out).empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(Leftovers(out).empty()) << "the run never started";
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  kill(child, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM)
      << "status " << status << " (the run finished before the signal?)";
  EXPECT_EQ(ReadTextFile(out / "plan.json"), plan) << "the previous outputs changed";
  EXPECT_FALSE(std::filesystem::exists(out / "methods" / "kareus"));
  EXPECT_TRUE(Leftovers(out).empty()) << "a staging folder stayed";
  for (const auto& e : std::filesystem::recursive_directory_iterator(out)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  }
  std::filesystem::remove_all(out);
}

TEST(CliEvaluate, WorkloadNamesAreDistinctFolderNames) {
  const auto dir = Fresh("evaluate_names");
  const std::string base = ReadTextFile(kExample);
  const auto with_name = [&](const std::string& file, const std::string& name) {
    std::string text = base;
    const std::string key = "name: 01-llama3.2-3b-tp8-mbs8-seq4096";
    text.replace(text.find(key), key.size(), "name: '" + name + "'");
    WriteFileAtomic(dir / file, text);
    return (dir / file).string();
  };
  const auto out = dir / "deep" / "out";
  const auto escape = RunKareus("evaluate " + with_name("a.yaml", "../../escaped") + " --out " +
                                out.string() + " --methods megatron --quiet");
  EXPECT_EQ(escape.exit_code, 2);
  EXPECT_NE(escape.err.find("name"), std::string::npos) << escape.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "escaped"));
  const auto twice =
      RunKareus("evaluate " + with_name("b.yaml", "same") + " " + with_name("c.yaml", "same") +
                " --out " + out.string() + " --methods megatron --quiet");
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_NE(twice.err.find("another workload of this evaluation"), std::string::npos) << twice.err;
  EXPECT_FALSE(std::filesystem::exists(out));
  std::filesystem::remove_all(dir);
}

TEST(CliEvaluate, CombinedTableOverWorkloads) {
  const auto out = Fresh("evaluate");
  const auto r = RunKareus(
      "evaluate " + kExample + " " +
      (SourceDir() / "examples" / "paper" / "05-qwen3-1.7b-tp8-mbs8-seq4096.yaml").string() +
      " --out " + out.string() + " --methods megatron,perseus,kareus --quiet --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["format"], "kareus.evaluation/1");
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][1]["workload"], "05-qwen3-1.7b-tp8-mbs8-seq4096");
  EXPECT_TRUE(std::filesystem::exists(out / "evaluation.txt"));
  EXPECT_TRUE(std::filesystem::exists(out / "01-llama3.2-3b-tp8-mbs8-seq4096" / "report.html"));
  // The profiler uses the model-informed prior by default and the summary says so (issue 18).
  const Json summary =
      Json::parse(ReadTextFile(out / "01-llama3.2-3b-tp8-mbs8-seq4096" / "summary.json"));
  const Json& profile = summary["settings"]["profile"];
  EXPECT_NE(profile["prior"].get<std::string>().find("emulator"), std::string::npos) << profile;
  EXPECT_FALSE(profile["prior_note"].get<std::string>().empty()) << profile;
  // On the emulator backend the default prior is the measuring model itself: the summary must
  // say that its results are flattering, and that the prior is calibrated per type.
  EXPECT_TRUE(profile["prior_is_measuring_model"].get<bool>()) << profile;
  EXPECT_NE(profile["prior_note"].get<std::string>().find("by construction"), std::string::npos)
      << profile;
  EXPECT_TRUE(profile["prior_calibrated"].get<bool>()) << profile;
  EXPECT_TRUE(profile["prior_front"].get<bool>()) << profile;
  EXPECT_EQ(profile["min_budget"].get<int64_t>(), 15) << profile;  // mobo::kMinBudget
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace kareus
