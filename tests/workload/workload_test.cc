// SPDX-License-Identifier: Apache-2.0
#include "kareus/workload/workload.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "kareus/common/error.h"

namespace kareus::workload {
namespace {

const char* kValid = R"(
name: t
model: llama3.2-3b
gpu: A100-SXM4-40GB
parallelism: {tp: 8, cp: 1, pp: 2, dp: 1, layers_per_stage: [15, 13]}
microbatch_size: 8
sequence_length: 4096
microbatches: 8
recompute: full
)";

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

// Expects an InputError whose message mentions every fragment (the field and the rule).
void ExpectInputError(const std::string& yaml, const std::vector<std::string>& fragments) {
  try {
    WorkloadFromYaml(yaml, "w.yaml");
    FAIL() << "accepted:\n" << yaml;
  } catch (const InputError& e) {
    for (const auto& f : fragments) {
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos)
          << "message '" << e.what() << "' lacks '" << f << "'";
    }
  }
}

TEST(Workload, LoadsTheValidExample) {
  const Workload w = WorkloadFromYaml(kValid, "w.yaml");
  EXPECT_EQ(w.model.hidden, 3072);
  EXPECT_EQ(w.gpu.sm_count, 108);
  EXPECT_EQ(w.parallelism.layers_per_stage, (std::vector<int>{15, 13}));
  EXPECT_EQ(w.GpusPerStage(), 8);
  EXPECT_EQ(w.TotalGpus(), 16);
  EXPECT_TRUE(w.CanNanobatch());
  EXPECT_EQ(w.recompute, Recompute::kFull);
}

TEST(Workload, EvenSplitWhenLayersPerStageIsOmitted) {
  const Workload w = WorkloadFromYaml(
      Replace(kValid, "pp: 2, dp: 1, layers_per_stage: [15, 13]", "pp: 3"), "w.yaml");
  EXPECT_EQ(w.parallelism.layers_per_stage, (std::vector<int>{10, 9, 9}));
}

TEST(Workload, InlineModel) {
  const Workload w = WorkloadFromYaml(
      Replace(Replace(kValid, "[15, 13]", "[3, 1]"), "model: llama3.2-3b",
              "model: {name: tiny, hidden: 1024, heads: 8, kv_groups: 8, head_dim: 128, "
              "ffn: 4096, layers: 4, vocab: 32000}\n"),
      "w.yaml");
  EXPECT_EQ(w.model.name, "tiny");
  EXPECT_EQ(w.parallelism.layers_per_stage.size(), 2u);
}

TEST(WorkloadValidation, UnknownPresets) {
  ExpectInputError(Replace(kValid, "llama3.2-3b", "llama9"), {"model", "llama9", "unknown"});
  ExpectInputError(Replace(kValid, "A100-SXM4-40GB", "B300"), {"gpu", "B300", "unknown"});
}

TEST(WorkloadValidation, Divisibility) {
  // Llama 3.2 3B has 24 heads, 8 KV groups, FFN 8192.
  ExpectInputError(Replace(kValid, "tp: 8", "tp: 16"), {"parallelism.tp", "model.heads", "divisible"});
  ExpectInputError(
      Replace(Replace(kValid, "tp: 8", "tp: 3"), "layers_per_stage: [15, 13]", "layers_per_stage: [14, 14]"),
      {"parallelism.tp", "divisible"});
  ExpectInputError(Replace(kValid, "sequence_length: 4096", "sequence_length: 4097"),
                   {"sequence_length", "4097", "2 x parallelism.cp"});
  ExpectInputError(Replace(Replace(kValid, "cp: 1", "cp: 3"), "tp: 8", "tp: 2"),
                   {"sequence_length", "4096", "divisible"});
}

TEST(WorkloadValidation, KvGroupsNotDivisibleByTp) {
  ExpectInputError(Replace(kValid, "model: llama3.2-3b",
                           "model: {name: g, hidden: 4096, heads: 32, kv_groups: 4, head_dim: 128, "
                           "ffn: 8192, layers: 28, vocab: 32000}"),
                   {"parallelism.tp", "model.kv_groups", "divisible"});
}

TEST(WorkloadValidation, PipelineAndLayers) {
  ExpectInputError(Replace(kValid, "pp: 2, dp: 1, layers_per_stage: [15, 13]", "pp: 29"),
                   {"parallelism.pp", "29", "layers"});
  ExpectInputError(Replace(kValid, "[15, 13]", "[15, 12]"),
                   {"parallelism.layers_per_stage", "sum 27", "28"});
  ExpectInputError(Replace(kValid, "[15, 13]", "[28]"), {"layers_per_stage", "one entry per"});
}

TEST(WorkloadValidation, NonPositiveNumbers) {
  ExpectInputError(Replace(kValid, "microbatch_size: 8", "microbatch_size: 0"),
                   {"microbatch_size", "positive"});
  ExpectInputError(Replace(kValid, "microbatches: 8", "microbatches: -1"), {"microbatches", "positive"});
  ExpectInputError(Replace(kValid, "sequence_length: 4096", "sequence_length: 0"),
                   {"sequence_length", "positive"});
  ExpectInputError(Replace(kValid, "tp: 8", "tp: 0"), {"parallelism.tp", "positive"});
  ExpectInputError(Replace(kValid, "[15, 13]", "[28, 0]"), {"layers_per_stage", "positive"});
}

TEST(WorkloadValidation, UnknownKeysAreNotIgnored) {
  ExpectInputError(Replace(kValid, "microbatches: 8", "microbatches: 8\nmicrobatchs: 4"),
                   {"microbatchs", "unknown key"});
  ExpectInputError(Replace(kValid, "dp: 1", "dp: 1, ep: 2"), {"parallelism.ep", "unknown key"});
}

TEST(WorkloadValidation, BadValues) {
  ExpectInputError(Replace(kValid, "recompute: full", "recompute: selective"),
                   {"recompute", "selective", "full or none"});
  ExpectInputError(Replace(kValid, "microbatch_size: 8", "microbatch_size: eight"),
                   {"microbatch_size", "integer"});
  ExpectInputError("model: [", {"w.yaml", "YAML"});
}

TEST(Workload, MicrobatchOfOneCannotNanobatch) {
  const Workload w = WorkloadFromYaml(Replace(kValid, "microbatch_size: 8", "microbatch_size: 1"), "w.yaml");
  EXPECT_FALSE(w.CanNanobatch());
}

TEST(Workload, SignatureSeparatesWhatChangesAMeasurement) {
  const Workload a = WorkloadFromYaml(kValid, "w.yaml");
  const Workload b = WorkloadFromYaml(Replace(kValid, "sequence_length: 4096", "sequence_length: 8192"), "w.yaml");
  const Workload c = WorkloadFromYaml(Replace(kValid, "microbatches: 8", "microbatches: 16"), "w.yaml");
  EXPECT_NE(a.Signature(), b.Signature());
  EXPECT_EQ(a.Signature(), c.Signature());  // partitions do not depend on the microbatch count
}

TEST(Workload, EveryShippedExampleLoads) {
  const auto root = std::filesystem::path(KAREUS_TEST_SOURCE_DIR) / "examples";
  int count = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    if (entry.path().extension() != ".yaml") continue;
    EXPECT_NO_THROW(LoadWorkloadFile(entry.path())) << entry.path();
    ++count;
  }
  EXPECT_GE(count, 12);
}

}  // namespace
}  // namespace kareus::workload
