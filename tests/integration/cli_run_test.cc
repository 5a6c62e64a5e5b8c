// SPDX-License-Identifier: Apache-2.0
// End-to-end: `kareus run` and `kareus evaluate` (JSON fields, files, exit codes).
#include <gtest/gtest.h>

#include <filesystem>

#include "integration/cli_util.h"
#include "kareus/common/io.h"
#include "kareus/common/json.h"

namespace kareus {
namespace {

using testing::RunKareus;
using testing::SourceDir;

const std::string kExample = (SourceDir() / "examples" / "paper" / "01-llama3.2-3b-tp8-mbs8-seq4096.yaml").string();

std::filesystem::path Fresh(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("kareus_cli_run_" + name);
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(CliRun, InvalidInputExitsTwoAndWritesNothing) {
  const auto out = Fresh("invalid");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--methods kareus,zeus", "zeus"},
      {"--budget-fraction 0", "--budget-fraction"},
      {"--budget-fraction 1.5", "--budget-fraction"},
      {"--surrogate forest", "forest"},
      {"--strategy greedy", "greedy"},
      {"--unit-time 0", "--unit-time"},
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
}

TEST(CliEvaluate, CombinedTableOverWorkloads) {
  const auto out = Fresh("evaluate");
  const auto r = RunKareus("evaluate " + kExample + " " +
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
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace kareus
