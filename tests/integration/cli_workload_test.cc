// SPDX-License-Identifier: Apache-2.0
// End-to-end: `kareus gpus`, `kareus models`, `kareus partitions` (JSON fields, exit codes).
#include <gtest/gtest.h>

#include <filesystem>

#include "integration/cli_util.h"
#include "kareus/common/io.h"
#include "kareus/common/json.h"

namespace kareus {
namespace {

using testing::RunKareus;
using testing::SourceDir;

std::string Example(const std::string& name) {
  return (SourceDir() / "examples" / "paper" / name).string();
}

TEST(CliPresets, GpusAndModelsAsJson) {
  const auto gpus = RunKareus("gpus --json");
  ASSERT_EQ(gpus.exit_code, 0) << gpus.err;
  const Json g = Json::parse(gpus.out);
  ASSERT_EQ(g.size(), 5u);
  EXPECT_EQ(g[0]["name"], "A100-SXM4-40GB");
  EXPECT_EQ(g[0]["power"]["static_w"], 85);
  const auto models = RunKareus("models --json");
  ASSERT_EQ(models.exit_code, 0) << models.err;
  EXPECT_EQ(Json::parse(models.out).size(), 4u);
  EXPECT_EQ(RunKareus("gpus").exit_code, 0);
}

TEST(CliPartitions, JsonHasTheDocumentedShape) {
  const auto r = RunKareus("partitions --json " + Example("01-llama3.2-3b-tp8-mbs8-seq4096.yaml"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["workload"]["parallelism"]["tp"], 8);
  const Json& stage0 = j["stages"][0];
  EXPECT_EQ(stage0["stage"], 0);
  EXPECT_EQ(stage0["layers"], 15);
  EXPECT_EQ(stage0["gpus"], 8);
  const Json& fwd = stage0["instructions"][0];
  EXPECT_EQ(fwd["kind"], "forward");
  const Json& attn = fwd["partitions"][0];
  EXPECT_EQ(attn["type"], "fwd_attn");
  EXPECT_EQ(attn["count"], 30);
  EXPECT_EQ(attn["collective"]["type"], "all_reduce");
  EXPECT_EQ(attn["collective"]["bytes"], 100663296.0);
  EXPECT_EQ(attn["collective"]["group_size"], 8);
  EXPECT_EQ(attn["slots"][0], "norm_0");
  EXPECT_EQ(attn["sm_choices"][0], 3);
  EXPECT_TRUE(attn["compute_ops"][0].contains("flops"));
  EXPECT_TRUE(attn["compute_ops"][0].contains("bytes"));
  EXPECT_TRUE(fwd["non_partition_ops"].is_array());
  EXPECT_GT(fwd["flops"].get<double>(), 0.0);
}

TEST(CliPartitions, InvalidWorkloadsExitTwoNamingTheFieldAndPrintNothing) {
  const auto dir = std::filesystem::temp_directory_path() / "kareus_cli_invalid";
  std::filesystem::remove_all(dir);
  const std::string base = ReadTextFile(Example("01-llama3.2-3b-tp8-mbs8-seq4096.yaml"));
  struct Case {
    std::string from, to, field;
  };
  const std::vector<Case> cases = {
      {"model: llama3.2-3b", "model: llama-7", "model"},
      {"gpu: A100-SXM4-40GB", "gpu: TPUv5", "gpu"},
      {"tp: 8", "tp: 16", "parallelism.tp"},
      {"sequence_length: 4096", "sequence_length: 4095", "sequence_length"},
      {"pp: 2", "pp: 30", "parallelism.pp"},
      {"[15, 13]", "[15, 14]", "parallelism.layers_per_stage"},
      {"microbatches: 8", "microbatches: 0", "microbatches"},
      {"recompute: full", "recompute: full\nmicro_batch: 3", "micro_batch"},
  };
  for (const Case& c : cases) {
    std::string text = base;
    text.replace(text.find(c.from), c.from.size(), c.to);
    const auto path = dir / (c.field + ".yaml");
    WriteFileAtomic(path, text);
    const auto r = RunKareus("partitions --json " + path.string());
    EXPECT_EQ(r.exit_code, 2) << c.field;
    EXPECT_TRUE(r.out.empty()) << c.field << ": " << r.out;
    EXPECT_NE(r.err.find(c.field), std::string::npos) << r.err;
  }
  // Issue 16: inputs that crashed (SIGFPE) or were internal errors (exit 1) exit 2 naming the
  // field.
  const std::vector<Case> hostile = {
      {"cp: 1", "cp: 2147483648", "parallelism.cp"},
      {"tp: 8", "tp: 4294967304", "parallelism.tp"},
      {"recompute: full", "recompute: full\n[a, b]: 1", "keys must be plain names"},
      {"name: ", "name: \xFF\xFE", "UTF-8"},
      {"microbatches: 8", "microbatches: 2147483648", "microbatches"},
  };
  for (const Case& c : hostile) {
    std::string text = base;
    const auto at = text.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from;
    text.replace(at, c.from.size(), c.to);
    const auto path = dir / "hostile.yaml";
    WriteFileAtomic(path, text);
    const auto r = RunKareus("partitions --json " + path.string());
    EXPECT_EQ(r.exit_code, 2) << c.field << ": " << r.err;
    EXPECT_NE(r.err.find(c.field), std::string::npos) << r.err;
  }
  EXPECT_EQ(RunKareus("partitions /nonexistent.yaml").exit_code, 2);
  EXPECT_EQ(RunKareus("partitions").exit_code, 2);
  EXPECT_EQ(RunKareus("no-such-command").exit_code, 2);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kareus
