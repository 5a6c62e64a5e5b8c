// SPDX-License-Identifier: Apache-2.0
// A training job as Kareus sees it: model x parallelism x GPU x batch, loaded from a YAML
// workload file and validated at the boundary.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kareus/common/json.h"
#include "kareus/hw/gpu_overlay.h"
#include "kareus/hw/gpu_spec.h"
#include "kareus/schedule/schedule.h"

namespace kareus::workload {

// Megatron-Core GPT layer: pre-norm RMSNorm, RoPE, grouped-query attention, SwiGLU MLP, no bias.
struct ModelConfig {
  std::string name;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_groups = 0;  // query groups (GQA); == heads for multi-head attention
  int64_t head_dim = 0;
  int64_t ffn = 0;  // SwiGLU intermediate size
  int64_t layers = 0;
  int64_t vocab = 0;
  bool qk_norm = false;  // Qwen3 applies RMSNorm to q and k
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
  // Model chunks per pipeline stage (Megatron-LM's virtual pipeline size): > 1 runs the
  // interleaved 1F1B schedule; each stage's layers split evenly over its chunks.
  int virtual_stages = 1;
  std::vector<int> layers_per_stage;  // size pp, sums to the model's layers
};

// The data-parallel gradient reduction at the end of every iteration (Megatron-Core's
// DistributedDataParallel): the gradients of each stage are reduced over its DP x CP replicas,
// in buckets launched as the backward completes them (overlap_grad_reduce).
struct GradientSyncConfig {
  bool distributed_optimizer = false;  // reduce-scatter (ZeRO-1 optimizer) instead of all-reduce
  bool overlap = true;                 // --overlap-grad-reduce: buckets during the last backward
  int64_t bucket_parameters = 0;       // parameters per bucket; 0 = Megatron-Core's default
                                       // max(40M, 1M x DP); without overlap one bucket
  int reduce_bytes = 4;                // bytes per gradient element: fp32 (Megatron reduces a
                                       // bf16 model's gradients in fp32 by default), 2 = bf16
};

struct Workload {
  std::string name;  // from the file, or the file's stem
  ModelConfig model;
  hw::GpuSpec gpu;
  Parallelism parallelism;
  int microbatch_size = 1;  // sequences per microbatch
  int64_t sequence_length = 0;
  int microbatches = 1;  // per iteration (per data-parallel replica)
  Recompute recompute = Recompute::kFull;
  GradientSyncConfig gradient_sync;
  // The workload's `gpu.power_limit_w` (already applied to gpu.power.cap_w); 0 when the file
  // keeps the preset's default limit.
  double power_limit_w = 0.0;
  // The workload's `gpu.overlay` (issue 32; already applied to gpu, whose calibration then ends
  // in the overlay's tag): a preset's constants refitted by `kareus calibrate`.
  std::optional<hw::GpuOverlay> gpu_overlay;

  // Interleaved 1F1B when the stages hold several model chunks, else 1F1B.
  schedule::ScheduleKind Schedule() const {
    return parallelism.virtual_stages > 1 ? schedule::ScheduleKind::kInterleaved1F1B
                                          : schedule::ScheduleKind::k1F1B;
  }
  // Data-parallel gradients to reduce at the end of the iteration (DP x CP > 1).
  bool HasGradientSync() const { return parallelism.dp * parallelism.cp > 1; }
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
// non-positive numbers, unknown keys; with virtual_stages > 1 Megatron-LM's rules: pp >= 2,
// microbatches a multiple of pp, each stage's layers a multiple of virtual_stages).
Workload LoadWorkloadFile(const std::filesystem::path& path);
Workload WorkloadFromYaml(const std::string& yaml_text, const std::string& source_name);
// `w` with its GPU the preset's again, its power limit kept, and `overlay` applied (nullopt:
// none): what --gpu-overlay does to a workload whatever overlay its file names. InputError when
// the overlay is for another preset or breaks a preset's rule, naming `where`.
void SetGpuOverlay(Workload& w, const std::optional<hw::GpuOverlay>& overlay,
                   const std::string& where);
// The workload a plan or frontier file records (their `workload`, written by
// Workload::ToJson), loaded back through the same validation; `virtual_stages` is the plan's.
// InputError when the record is missing (plans from `kareus solve`) or invalid.
Workload WorkloadFromRecord(const Json& record, int virtual_stages, const std::string& source_name);

// Model presets shipped in DataDir()/models ("llama3.2-3b", "qwen3-1.7b", ...).
ModelConfig ModelPreset(const std::string& name);
std::vector<std::string> ModelPresetNames();
Json ToJson(const ModelConfig& model);

}  // namespace kareus::workload
