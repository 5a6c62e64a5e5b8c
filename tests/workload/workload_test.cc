// SPDX-License-Identifier: Apache-2.0
#include "kareus/workload/workload.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kareus/common/error.h"
#include "workload/expect_input_error.h"

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

using testing::ExpectInputError;

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
  ExpectInputError(Replace(kValid, "tp: 8", "tp: 16"),
                   {"parallelism.tp", "model.heads", "divisible"});
  ExpectInputError(Replace(Replace(kValid, "tp: 8", "tp: 3"), "layers_per_stage: [15, 13]",
                           "layers_per_stage: [14, 14]"),
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
  ExpectInputError(Replace(kValid, "microbatches: 8", "microbatches: -1"),
                   {"microbatches", "positive"});
  ExpectInputError(Replace(kValid, "sequence_length: 4096", "sequence_length: 0"),
                   {"sequence_length", "positive"});
  ExpectInputError(Replace(kValid, "tp: 8", "tp: 0"), {"parallelism.tp", "positive"});
  ExpectInputError(Replace(kValid, "[15, 13]", "[28, 0]"), {"layers_per_stage", "positive"});
}

TEST(WorkloadValidation, UnknownKeysAreNotIgnored) {
  ExpectInputError(Replace(kValid, "microbatches: 8", "microbatches: 8\nmicrobatchs: 4"),
                   {"microbatchs", "unknown key"});
  ExpectInputError(Replace(kValid, "dp: 1", "dp: 1, ep: 2"), {"parallelism.ep", "unknown key"});
  // A misspelt required key is reported as the unknown key it is, before the missing field.
  ExpectInputError(Replace(kValid, "microbatch_size: 8", "microbatch_sise: 8"),
                   {"microbatch_sise: unknown key; did you mean microbatch_size?",
                    "microbatch_size is required"});
  ExpectInputError(Replace(kValid, "recompute: full", "recompte: full"),
                   {"recompte: unknown key; did you mean recompute?"});
  // A missing key is still a missing key when nothing in the file is a typo of it.
  ExpectInputError(Replace(kValid, "microbatch_size: 8\n", ""),
                   {"microbatch_size: required field is missing"});
}

TEST(ClosestChoice, NamesALikelyTypoAndNothingElse) {
  EXPECT_EQ(EditDistance("microbatch_sise", "microbatch_size"), 1u);
  EXPECT_EQ(EditDistance("", "abc"), 3u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(ClosestChoice("--method", {"--out", "--methods", "--seed"}), "--methods");
  EXPECT_EQ(ClosestChoice("--zzzz", {"--out", "--methods", "--seed"}), std::nullopt);
  EXPECT_EQ(ClosestChoice("--sed", {"--seed", "--sed2"}), "--seed");  // ties: the first
}

TEST(WorkloadValidation, BadValues) {
  ExpectInputError(Replace(kValid, "recompute: full", "recompute: selective"),
                   {"recompute", "selective", "full or none"});
  ExpectInputError(Replace(kValid, "microbatch_size: 8", "microbatch_size: eight"),
                   {"microbatch_size", "integer"});
  ExpectInputError("model: [", {"w.yaml", "YAML"});
}

// Issue 16: values that wrapped, crashed or were silently reinterpreted.
TEST(WorkloadValidation, RangesAreCheckedBeforeNarrowing) {
  // 2^31 became INT_MIN, 2 x cp became 0 and sequence % 0 crashed (SIGFPE).
  ExpectInputError(Replace(kValid, "cp: 1", "cp: 2147483648"), {"parallelism.cp", "at most 1024"});
  // 2^32 + 8 became 8.
  ExpectInputError(Replace(kValid, "tp: 8", "tp: 4294967304"), {"parallelism.tp", "4294967304"});
  ExpectInputError(Replace(kValid, "microbatches: 8", "microbatches: 2147483648"),
                   {"microbatches", "at most 4096"});
  ExpectInputError(Replace(Replace(kValid, "microbatches: 8", "microbatches: 4096"),
                           "pp: 2, dp: 1, layers_per_stage: [15, 13]", "pp: 28, dp: 1"),
                   {"microbatches", "pipeline instructions"});
  ExpectInputError(Replace(kValid, "dp: 1", "dp: 1048576"), {"parallelism.dp", "GPUs"});
  ExpectInputError(Replace(kValid, "sequence_length: 4096", "sequence_length: 1099511627776"),
                   {"sequence_length", "at most"});
  ExpectInputError(Replace(kValid, "[15, 13]", "[4294967311, -4294967283]"),
                   {"layers_per_stage", "at most model.layers"});
  const std::string inline_model =
      Replace(kValid, "model: llama3.2-3b",
              "model: {name: big, hidden: 3072, heads: 24, kv_groups: 8, head_dim: 128, ffn: 8192, "
              "layers: 1099511627776, vocab: 128256}");
  ExpectInputError(inline_model, {"model.layers", "1099511627776", "at most 1024"});
  ExpectInputError(Replace(kValid, "microbatch_size: 8", "microbatch_size: '010'"),
                   {"microbatch_size", "010", "decimal integer"});
  ExpectInputError(Replace(kValid, "tp: 8", "tp: 0x8"), {"parallelism.tp", "decimal integer"});
}

TEST(WorkloadValidation, OneDocumentWithEachKeyOnce) {
  ExpectInputError(Replace(kValid, "microbatches: 8", "microbatches: 8\nmicrobatches: 16"),
                   {"key 'microbatches' appears twice"});
  ExpectInputError(Replace(kValid, "tp: 8,", "tp: 8, tp: 4,"),
                   {"parallelism", "'tp' appears twice"});
  ExpectInputError(std::string(kValid) + "---\nname: second\n", {"more than one YAML document"});
  ExpectInputError(Replace(kValid, "recompute: full", "recompute: full\n[a, b]: 1"),
                   {"keys must be plain names"});
  ExpectInputError("", {"w.yaml", "empty"});
}

TEST(WorkloadValidation, NameIsOneFolderName) {
  for (const std::string& name : {std::string("../../x"), std::string("/etc/cron.d/x"),
                                  std::string("a/b"), std::string(".."), std::string("")}) {
    ExpectInputError(Replace(kValid, "name: t", "name: '" + name + "'"), {"w.yaml: name"});
  }
  ExpectInputError(Replace(kValid, "name: t", "name: \"t\\x01\""), {"name", "control"});
  ExpectInputError(Replace(kValid, "name: t", "name: caf\xE9"), {"name", "UTF-8"});
  // Without a name the file's stem is used, so it must qualify too.
  try {
    WorkloadFromYaml(Replace(kValid, "name: t\n", ""), "/tmp/.hidden.yaml");
    FAIL() << "a hidden stem was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("taken from the file name"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(
      WorkloadFromYaml(Replace(kValid, "name: t", "name: 'qwen3 1.7b, run 2'"), "w.yaml").name,
      "qwen3 1.7b, run 2");
}

TEST(WorkloadValidation, HugeValuesAreShownCut) {
  try {
    WorkloadFromYaml(Replace(kValid, "recompute: full", "recompute: " + std::string(100000, 'r')),
                     "w.yaml");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_LT(std::string(e.what()).size(), 400u) << e.what();
    EXPECT_NE(std::string(e.what()).find("(100000 bytes)"), std::string::npos) << e.what();
  }
}

TEST(Workload, MicrobatchOfOneCannotNanobatch) {
  const Workload w =
      WorkloadFromYaml(Replace(kValid, "microbatch_size: 8", "microbatch_size: 1"), "w.yaml");
  EXPECT_FALSE(w.CanNanobatch());
}

TEST(Workload, SignatureSeparatesWhatChangesAMeasurement) {
  const Workload a = WorkloadFromYaml(kValid, "w.yaml");
  const Workload b =
      WorkloadFromYaml(Replace(kValid, "sequence_length: 4096", "sequence_length: 8192"), "w.yaml");
  const Workload c =
      WorkloadFromYaml(Replace(kValid, "microbatches: 8", "microbatches: 16"), "w.yaml");
  EXPECT_NE(a.Signature(), b.Signature());
  EXPECT_EQ(a.Signature(), c.Signature());  // partitions do not depend on the microbatch count
}

// An overlay of refitted constants (kareus calibrate), inline or as a file beside the workload:
// the GPU runs with its constants, the signature and the calibration name it (stores of the
// preset are refused), and the record rebuilds the same GPU.
TEST(Workload, GpuOverlayChangesTheGpuAndIsRecorded) {
  const Workload plain = WorkloadFromYaml(kValid, "w.yaml");
  const std::string inline_overlay =
      "gpu: {preset: A100-SXM4-40GB, overlay: {preset: A100-SXM4-40GB, constants: "
      "{dynamic_max_w: 700, hbm_efficiency: 0.8}}}";
  const Workload a =
      WorkloadFromYaml(Replace(kValid, "gpu: A100-SXM4-40GB", inline_overlay), "w.yaml");
  ASSERT_TRUE(a.gpu_overlay.has_value());
  EXPECT_DOUBLE_EQ(a.gpu.power.dynamic_max_w, 700.0);
  EXPECT_DOUBLE_EQ(a.gpu.hbm_efficiency, 0.8);
  EXPECT_EQ(a.gpu.name, plain.gpu.name);
  EXPECT_NE(a.Signature(), plain.Signature());
  EXPECT_NE(a.gpu.calibration, plain.gpu.calibration);
  EXPECT_FALSE(plain.ToJson().contains("gpu_overlay"));
  const Workload back = WorkloadFromRecord(a.ToJson(), 1, "plan.json");
  EXPECT_EQ(back.Signature(), a.Signature());
  EXPECT_DOUBLE_EQ(back.gpu.power.dynamic_max_w, 700.0);

  // A file, relative to the workload file's folder.
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "kareus_overlay_wl";
  std::filesystem::create_directories(dir / "sub");
  std::ofstream(dir / "sub" / "o.yaml")
      << "format: kareus.gpu_overlay/1\npreset: A100-SXM4-40GB\nconstants: {dynamic_max_w: 700, "
         "hbm_efficiency: 0.8}\n";
  std::ofstream(dir / "w.yaml") << Replace(kValid, "gpu: A100-SXM4-40GB",
                                           "gpu: {name: A100-SXM4-40GB, overlay: sub/o.yaml}");
  const Workload f = LoadWorkloadFile(dir / "w.yaml");
  EXPECT_EQ(f.Signature(), a.Signature());

  // --gpu-overlay's path: replace it, or take it away.
  Workload g = plain;
  SetGpuOverlay(g, a.gpu_overlay, "--gpu-overlay");
  EXPECT_EQ(g.Signature(), a.Signature());
  SetGpuOverlay(g, std::nullopt, "--gpu-overlay");
  EXPECT_EQ(g.Signature(), plain.Signature());
  EXPECT_DOUBLE_EQ(g.gpu.power.dynamic_max_w, plain.gpu.power.dynamic_max_w);
  std::filesystem::remove_all(dir);

  // For another GPU, a missing file, both spellings of the preset: named errors.
  ExpectInputError(Replace(kValid, "gpu: A100-SXM4-40GB",
                           "gpu: {name: A100-SXM4-40GB, overlay: {preset: A40, constants: "
                           "{idle_w: 60}}}"),
                   {"overlay", "another GPU"});
  ExpectInputError(Replace(kValid, "gpu: A100-SXM4-40GB",
                           "gpu: {name: A100-SXM4-40GB, overlay: no-such-overlay.yaml}"),
                   {"no-such-overlay.yaml"});
  ExpectInputError(
      Replace(kValid, "gpu: A100-SXM4-40GB", "gpu: {name: A100-SXM4-40GB, preset: A40}"),
      {"preset", "not both"});
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
