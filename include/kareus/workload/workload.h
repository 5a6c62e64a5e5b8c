// SPDX-License-Identifier: Apache-2.0
// A training job as Kareus sees it: model x parallelism x GPU x batch, loaded from a YAML
// workload file and validated at the boundary.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kareus/common/json.h"
#include "kareus/hw/gpu_spec.h"

namespace kareus::workload {

// Megatron-Core GPT layer: pre-norm RMSNorm, RoPE, grouped-query attention, SwiGLU MLP, no bias.
struct ModelConfig {
  std::string name;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_groups = 0;  // query groups (GQA); == heads for multi-head attention
  int64_t head_dim = 0;
  int64_t ffn = 0;        // SwiGLU intermediate size
  int64_t layers = 0;
  int64_t vocab = 0;
  bool qk_norm = false;   // Qwen3 applies RMSNorm to q and k
  bool tied_embeddings = false;

  // Parameters of the transformer layers only (the matmul weights and the norms).
  int64_t LayerParameters() const;
};

enum class Recompute { kNone, kFull };
const char* ToString(Recompute recompute);

struct Parallelism {
  int tp = 1;
  int cp = 1;
  int pp = 1;
  int dp = 1;
  std::vector<int> layers_per_stage;  // size pp, sums to the model's layers
};

struct Workload {
  std::string name;  // from the file, or the file's stem
  ModelConfig model;
  hw::GpuSpec gpu;
  Parallelism parallelism;
  int microbatch_size = 1;    // sequences per microbatch
  int64_t sequence_length = 0;
  int microbatches = 1;       // per iteration (per data-parallel replica)
  Recompute recompute = Recompute::kFull;
  // The workload's `gpu.power_limit_w` (already applied to gpu.power.cap_w); 0 when the file
  // keeps the preset's default limit.
  double power_limit_w = 0.0;

  int GpusPerStage() const { return parallelism.tp * parallelism.cp * parallelism.dp; }
  int TotalGpus() const { return GpusPerStage() * parallelism.pp; }
  // Two nanobatches need at least two sequences per microbatch; otherwise only sequential
  // execution is possible and every later stage plans with it.
  bool CanNanobatch() const { return microbatch_size >= 2; }
  // A stable text key of everything that changes a measurement (model shapes, parallelism,
  // batch, sequence, recompute, GPU): measurement stores are keyed by it.
  std::string Signature() const;
  Json ToJson() const;
};

// Loads and validates a workload file. Throws InputError whose message names the file, the
// field, the value and the rule (unknown preset, divisibility by TP/CP, PP > layers, layer split,
// non-positive numbers, unknown keys).
Workload LoadWorkloadFile(const std::filesystem::path& path);
Workload WorkloadFromYaml(const std::string& yaml_text, const std::string& source_name);

// Model presets shipped in DataDir()/models ("llama3.2-3b", "qwen3-1.7b", ...).
ModelConfig ModelPreset(const std::string& name);
std::vector<std::string> ModelPresetNames();
Json ToJson(const ModelConfig& model);

}  // namespace kareus::workload
