// SPDX-License-Identifier: Apache-2.0
#include "kareus/workload/workload.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <sstream>

#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/common/json.h"
#include "kareus/common/yaml.h"

namespace kareus::workload {
namespace {

// Upper bounds of every size, checked before any narrowing or arithmetic. Each is far above any
// model or cluster trained today (Llama 3.1 405B: hidden 16384, 128 heads, ffn 53248, 126 layers,
// vocab 128256) and low enough that every product the workload model forms (tokens x hidden x
// ffn, FLOPs, bytes) stays exact in int64/double and the pipeline DAG fits in memory.
constexpr int64_t kMaxHidden = 131072;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxHeadDim = 1024;
constexpr int64_t kMaxFfn = 1048576;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxVocab = 16777216;
constexpr int64_t kMaxTensorOrContextParallel = 1024;
constexpr int64_t kMaxDataParallel = 1048576;
constexpr int64_t kMaxMicrobatchSize = 4096;
constexpr int64_t kMaxSequenceLength = 1048576;
constexpr int64_t kMaxMicrobatches = 4096;
constexpr int64_t kMaxPipelineInstructions = 131072;  // 2 x pp x microbatches: DAG nodes
constexpr int64_t kMaxGpus = 1048576;                 // tp x cp x dp x pp (int arithmetic)

// An integer in [1, max_value], checked on the 64-bit value as written.
int64_t PositiveInt(const YamlMap& map, const std::string& key, int64_t max_value) {
  const int64_t value = map.Int(key);
  if (value <= 0 || value > max_value) {
    map.Fail(key, Describe(value), "must be a positive integer, at most " + Describe(max_value));
  }
  return value;
}

ModelConfig ParseModel(const YamlMap& map) {
  ModelConfig model;
  model.name = map.String("name");
  model.hidden = PositiveInt(map, "hidden", kMaxHidden);
  model.heads = PositiveInt(map, "heads", kMaxHeads);
  model.kv_groups = PositiveInt(map, "kv_groups", kMaxHeads);
  model.head_dim = PositiveInt(map, "head_dim", kMaxHeadDim);
  model.ffn = PositiveInt(map, "ffn", kMaxFfn);
  model.layers = PositiveInt(map, "layers", kMaxLayers);
  model.vocab = PositiveInt(map, "vocab", kMaxVocab);
  model.qk_norm = map.Has("qk_norm") ? map.Bool("qk_norm") : false;
  model.tied_embeddings = map.Has("tied_embeddings") ? map.Bool("tied_embeddings") : false;
  map.RejectUnknownKeys();
  if (model.heads % model.kv_groups != 0) {
    map.Fail("kv_groups", Describe(model.kv_groups),
             "must divide heads (" + Describe(model.heads) + ")");
  }
  return model;
}

// A preset parsed once per process and data folder (kareus evaluate loads ten workloads of two
// presets; a preset file is parsed in milliseconds, a workload in microseconds). Only presets
// that loaded are kept, so an unknown name is reported every time.
template <typename T>
T CachedPreset(const std::string& name, T (*load)(const std::string&)) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, std::string>, T> cache;
  const std::pair<std::string, std::string> key{DataDir().string(), name};
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (const auto it = cache.find(key); it != cache.end()) return it->second;
  }
  T preset = load(name);
  std::lock_guard<std::mutex> lock(mutex);
  cache.emplace(key, preset);
  return preset;
}

void RequireDivisible(const YamlMap& where, const std::string& field, int64_t value,
                      const std::string& what, int64_t divisor, const std::string& divisor_name) {
  if (value % divisor != 0) {
    where.Fail(field, Describe(divisor),
               what + " (" + Describe(value) + ") must be divisible by " + divisor_name);
  }
}

}  // namespace

int64_t ModelConfig::LayerParameters() const {
  const int64_t q = heads * head_dim;
  const int64_t kv = 2 * kv_groups * head_dim;
  const int64_t attention = hidden * (q + kv) + q * hidden;
  const int64_t mlp = 3 * hidden * ffn;  // SwiGLU: gate and up (fc1), down (fc2)
  const int64_t norms = 2 * hidden + (qk_norm ? 2 * head_dim : 0);
  return layers * (attention + mlp + norms);
}

const char* ToString(Recompute recompute) {
  return recompute == Recompute::kFull ? "full" : "none";
}

Json ToJson(const ModelConfig& model) {
  return Json{{"name", model.name},         {"hidden", model.hidden},
              {"heads", model.heads},       {"kv_groups", model.kv_groups},
              {"head_dim", model.head_dim}, {"ffn", model.ffn},
              {"layers", model.layers},     {"vocab", model.vocab},
              {"qk_norm", model.qk_norm},   {"tied_embeddings", model.tied_embeddings}};
}

std::vector<std::string> ModelPresetNames() { return PresetNames("models"); }

ModelConfig ModelPreset(const std::string& name) {
  const auto names = ModelPresetNames();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    throw InputError("model = " + ShownValue(name) + ": unknown model preset (valid: " +
                     JoinNames(names) + "; or write the model inline as a mapping)");
  }
  const auto path = DataDir() / "models" / (name + ".yaml");
  return ParseModel(YamlMap::Parse(ReadTextFile(path), path.string()));
}

std::string Workload::Signature() const {
  std::ostringstream out;
  out << "model=" << model.name << ":" << model.hidden << "/" << model.heads << "/"
      << model.kv_groups << "/" << model.head_dim << "/" << model.ffn << "/" << model.vocab << "/"
      << (model.qk_norm ? "qk" : "-") << ";gpu=" << gpu.name;
  // An overlay's constants change every measurement too.
  if (gpu_overlay) out << "+" << gpu_overlay->Tag();
  // A power limit set by the workload changes every measurement.
  if (power_limit_w > 0.0) out << "@" << power_limit_w << "W";
  out << ";tp=" << parallelism.tp << ";cp=" << parallelism.cp << ";mbs=" << microbatch_size
      << ";seq=" << sequence_length << ";recompute=" << ToString(recompute);
  return out.str();
}

Json Workload::ToJson() const {
  Json j{{"name", name},
         {"model", workload::ToJson(model)},
         {"gpu", gpu.name},
         {"power_limit_w", gpu.power.cap_w},
         {"parallelism",
          {{"tp", parallelism.tp},
           {"cp", parallelism.cp},
           {"pp", parallelism.pp},
           {"dp", parallelism.dp},
           {"layers_per_stage", parallelism.layers_per_stage}}},
         {"microbatch_size", microbatch_size},
         {"sequence_length", sequence_length},
         {"microbatches", microbatches},
         {"recompute", ToString(recompute)},
         {"gradient_sync",
          {{"distributed_optimizer", gradient_sync.distributed_optimizer},
           {"overlap", gradient_sync.overlap},
           {"bucket_parameters", gradient_sync.bucket_parameters},
           {"reduce_dtype", gradient_sync.reduce_bytes == 2 ? "bf16" : "fp32"}}},
         {"nanobatching_possible", CanNanobatch()}};
  // Interleaved 1F1B's model chunks (plans also carry them at their top level); absent for one
  // chunk, so the record of every other workload reads as before.
  if (parallelism.virtual_stages > 1)
    j["parallelism"]["virtual_stages"] = parallelism.virtual_stages;
  // The overlay's constants in full (absent without one), so the record rebuilds the GPU.
  if (gpu_overlay) j["gpu_overlay"] = hw::ToJson(*gpu_overlay);
  return j;
}

Workload WorkloadFromYaml(const std::string& yaml_text, const std::string& source_name) {
  const YamlMap root = YamlMap::Parse(yaml_text, source_name);
  Workload w;
  // The name names the output folder of `kareus evaluate` (OUT/<name>), so it must be one
  // plain folder name.
  if (root.Has("name")) {
    w.name = root.String("name");
    ValidatePathComponent(root.FieldName("name"), w.name);
  } else {
    w.name = std::filesystem::path(source_name).stem().string();
    ValidatePathComponent(source_name +
                              ": name (taken from the file name; set name: to choose "
                              "another)",
                          w.name);
  }
  if (root.IsMap("model")) {
    w.model = ParseModel(root.Map("model"));
  } else {
    const std::string name = root.String("model");
    try {
      w.model = CachedPreset<ModelConfig>(name, ModelPreset);
    } catch (const InputError& e) {
      throw InputError(source_name + ": " + e.what());
    }
  }
  // `gpu: NAME`, or a mapping `{name: NAME, power_limit_w: W, overlay: FILE}` that sets the
  // board's power limit (bounded by the board's range; A100 SXM4 80GB exists as 400 W and 500 W
  // boards) and names an overlay of refitted constants (a file, relative to the workload
  // file's folder, or the overlay's mapping inline).
  const bool gpu_section = root.IsMap("gpu");
  const std::optional<YamlMap> gpu_map =
      gpu_section ? std::optional<YamlMap>(root.Map("gpu")) : std::nullopt;
  // `preset` is another spelling of `name` in the mapping (the preset an overlay adjusts).
  if (gpu_section && gpu_map->Has("preset") && gpu_map->Has("name")) {
    gpu_map->Fail("preset", gpu_map->String("preset"), "give name or preset, not both");
  }
  const std::string gpu_name = !gpu_section
                                   ? root.String("gpu")
                                   : gpu_map->String(gpu_map->Has("preset") ? "preset" : "name");
  try {
    w.gpu = CachedPreset<hw::GpuSpec>(gpu_name, hw::GpuPreset);
  } catch (const InputError& e) {
    throw InputError(source_name + ": " + e.what());
  }
  if (gpu_section) {
    if (gpu_map->Has("power_limit_w")) {
      w.power_limit_w = gpu_map->Double("power_limit_w");
      hw::SetPowerLimit(w.gpu, w.power_limit_w, gpu_map->FieldName("power_limit_w"));
    }
    if (gpu_map->IsMap("overlay")) {
      w.gpu_overlay = hw::ParseGpuOverlay(gpu_map->Map("overlay"));
    } else if (gpu_map->Has("overlay")) {
      const std::filesystem::path file = gpu_map->String("overlay");
      w.gpu_overlay = hw::LoadGpuOverlayFile(
          file.is_absolute() ? file : std::filesystem::path(source_name).parent_path() / file);
    }
    if (w.gpu_overlay) {
      hw::ApplyGpuOverlay(w.gpu, *w.gpu_overlay, gpu_map->FieldName("overlay"));
    }
    gpu_map->RejectUnknownKeys();
  }

  const YamlMap par = root.Map("parallelism");
  w.parallelism.tp = static_cast<int>(PositiveInt(par, "tp", kMaxTensorOrContextParallel));
  w.parallelism.cp =
      par.Has("cp") ? static_cast<int>(PositiveInt(par, "cp", kMaxTensorOrContextParallel)) : 1;
  w.parallelism.pp = par.Has("pp") ? static_cast<int>(PositiveInt(par, "pp", kMaxLayers)) : 1;
  w.parallelism.dp = par.Has("dp") ? static_cast<int>(PositiveInt(par, "dp", kMaxDataParallel)) : 1;
  // Interleaved 1F1B: model chunks per stage; each must hold at least one layer.
  w.parallelism.virtual_stages =
      par.Has("virtual_stages") ? static_cast<int>(PositiveInt(par, "virtual_stages", kMaxLayers))
                                : 1;
  const ModelConfig& m = w.model;
  const int tp = w.parallelism.tp, cp = w.parallelism.cp, pp = w.parallelism.pp;
  const int64_t gpus = int64_t{tp} * cp * w.parallelism.dp * pp;  // <= 2^50: exact
  if (gpus > kMaxGpus) {
    par.Fail("dp", Describe(w.parallelism.dp),
             "tp x cp x dp x pp = " + Describe(gpus) + " GPUs; at most " + Describe(kMaxGpus));
  }
  RequireDivisible(par, "tp", m.heads, "model.heads", tp, "tp");
  RequireDivisible(par, "tp", m.kv_groups, "model.kv_groups", tp, "tp");
  RequireDivisible(par, "tp", m.ffn, "model.ffn", tp, "tp");
  if (pp > m.layers) {
    par.Fail("pp", Describe(pp), "must not exceed the model's layers (" + Describe(m.layers) + ")");
  }
  if (par.Has("layers_per_stage")) {
    const auto list = par.IntList("layers_per_stage");
    if (static_cast<int>(list.size()) != pp) {
      par.Fail("layers_per_stage", Describe(list.size()) + " entries",
               "must have one entry per pipeline stage (pp = " + Describe(pp) + ")");
    }
    for (int64_t layers : list) {
      if (layers <= 0 || layers > m.layers) {
        par.Fail(
            "layers_per_stage", Describe(layers),
            "every entry must be positive and at most model.layers (" + Describe(m.layers) + ")");
      }
      w.parallelism.layers_per_stage.push_back(static_cast<int>(layers));
    }
    const int64_t sum = std::accumulate(list.begin(), list.end(), int64_t{0});
    if (sum != m.layers) {
      par.Fail("layers_per_stage", "sum " + Describe(sum),
               "must sum to the model's layers (" + Describe(m.layers) + ")");
    }
  } else {
    // Even split; the first stages take the remainder.
    for (int s = 0; s < pp; ++s) {
      w.parallelism.layers_per_stage.push_back(
          static_cast<int>(m.layers / pp + (s < m.layers % pp)));
    }
  }
  par.RejectUnknownKeys();
  const int virtual_stages = w.parallelism.virtual_stages;
  if (virtual_stages > 1) {
    // Megatron-LM's interleaved schedule: more than one stage, and every virtual stage of a
    // rank holds the same number of layers (arguments.py).
    if (pp < 2) {
      par.Fail("virtual_stages", Describe(virtual_stages),
               "needs pp >= 2 (interleaved 1F1B splits a pipeline of several stages; pp = " +
                   Describe(pp) + ")");
    }
    for (int s = 0; s < pp; ++s) {
      const int layers = w.parallelism.layers_per_stage[s];
      if (layers % virtual_stages != 0) {
        par.Fail("virtual_stages", Describe(virtual_stages),
                 "must divide every stage's layers (stage " + Describe(s) + " has " +
                     Describe(layers) +
                     "): Megatron-LM gives each model chunk of a stage the "
                     "same number of layers");
      }
    }
  }

  w.microbatch_size = static_cast<int>(PositiveInt(root, "microbatch_size", kMaxMicrobatchSize));
  w.sequence_length = PositiveInt(root, "sequence_length", kMaxSequenceLength);
  w.microbatches = static_cast<int>(PositiveInt(root, "microbatches", kMaxMicrobatches));
  if (2 * int64_t{pp} * virtual_stages * w.microbatches > kMaxPipelineInstructions) {
    root.Fail("microbatches", Describe(w.microbatches),
              "2 x parallelism.pp (" + Describe(pp) + ") x parallelism.virtual_stages (" +
                  Describe(virtual_stages) + ") x microbatches must be at most " +
                  Describe(kMaxPipelineInstructions) +
                  " pipeline instructions (the solver keeps one choice per instruction per "
                  "frontier point)");
  }
  if (virtual_stages > 1 && w.microbatches % pp != 0) {
    root.Fail("microbatches", Describe(w.microbatches),
              "must be a multiple of parallelism.pp (" + Describe(pp) +
                  ") with parallelism.virtual_stages = " + Describe(virtual_stages) +
                  " (Megatron-LM's interleaved schedule runs microbatches in groups of one "
                  "pipeline size per model chunk)");
  }
  if (root.Has("gradient_sync")) {
    const YamlMap sync = root.Map("gradient_sync");
    GradientSyncConfig& g = w.gradient_sync;
    if (sync.Has("distributed_optimizer"))
      g.distributed_optimizer = sync.Bool("distributed_optimizer");
    if (sync.Has("overlap")) g.overlap = sync.Bool("overlap");
    if (sync.Has("bucket_parameters")) {
      g.bucket_parameters = PositiveInt(sync, "bucket_parameters", int64_t{1} << 40);
    }
    if (sync.Has("reduce_dtype")) {
      const std::string dtype = sync.String("reduce_dtype");
      if (dtype == "fp32") {
        g.reduce_bytes = 4;
      } else if (dtype == "bf16") {
        g.reduce_bytes = 2;
      } else {
        sync.Fail("reduce_dtype", dtype, "must be fp32 or bf16");
      }
    }
    sync.RejectUnknownKeys();
  }
  // Context parallelism splits the sequence into 2*CP chunks for causal load balance
  // (Megatron-Core), so the sequence must divide by 2*CP.
  if (w.sequence_length % (2 * cp) != 0) {
    root.Fail("sequence_length", Describe(w.sequence_length),
              "must be divisible by 2 x parallelism.cp (" + Describe(2 * cp) + ")");
  }
  const std::string recompute = root.Has("recompute") ? root.String("recompute") : "full";
  if (recompute == "full") {
    w.recompute = Recompute::kFull;
  } else if (recompute == "none") {
    w.recompute = Recompute::kNone;
  } else {
    root.Fail("recompute", recompute, "must be full or none");
  }
  root.RejectUnknownKeys();
  return w;
}

Workload WorkloadFromRecord(const Json& record, int virtual_stages,
                            const std::string& source_name) {
  if (!record.is_object() || record.empty()) {
    throw InputError(source_name +
                     ": the workload is missing (a plan made from a Perseus "
                     "profile by `kareus solve` records none; give the workload file instead)");
  }
  // The record is Workload::ToJson: the workload file's fields plus what was derived from
  // them. Take it back to the file's shape and through the file's validation.
  Json file = record;
  file.erase("nanobatching_possible");
  file.erase("power_limit_w");
  file.erase("gpu_overlay");
  if (record.contains("power_limit_w") && record["power_limit_w"].is_number() &&
      record.contains("gpu") && record["gpu"].is_string()) {
    const double limit = record["power_limit_w"].get<double>();
    const hw::GpuSpec preset =
        CachedPreset<hw::GpuSpec>(record["gpu"].get<std::string>(), hw::GpuPreset);
    if (limit != preset.power.cap_w) {
      file["gpu"] = Json{{"name", record["gpu"]}, {"power_limit_w", limit}};
    }
  }
  if (record.contains("gpu_overlay") && record["gpu_overlay"].is_object() &&
      record.contains("gpu") && (record["gpu"].is_string() || record["gpu"].is_object())) {
    if (file["gpu"].is_string()) file["gpu"] = Json{{"name", file["gpu"]}};
    file["gpu"]["overlay"] = record["gpu_overlay"];
  }
  if (virtual_stages > 1 && file.contains("parallelism") && file["parallelism"].is_object()) {
    file["parallelism"]["virtual_stages"] = virtual_stages;
  }
  if (file.contains("gradient_sync") && file["gradient_sync"].is_object()) {
    Json& sync = file["gradient_sync"];
    if (sync.contains("bucket_parameters") && sync["bucket_parameters"] == 0) {
      sync.erase("bucket_parameters");  // 0: Megatron-Core's default
    }
  }
  return WorkloadFromYaml(DumpJson(file), source_name);
}

void SetGpuOverlay(Workload& w, const std::optional<hw::GpuOverlay>& overlay,
                   const std::string& where) {
  hw::GpuSpec gpu = CachedPreset<hw::GpuSpec>(w.gpu.name, hw::GpuPreset);
  if (w.power_limit_w > 0.0) hw::SetPowerLimit(gpu, w.power_limit_w);
  if (overlay) hw::ApplyGpuOverlay(gpu, *overlay, where);
  w.gpu = std::move(gpu);
  w.gpu_overlay = overlay;
}

Workload LoadWorkloadFile(const std::filesystem::path& path) {
  return WorkloadFromYaml(ReadTextFile(path), path.string());
}

}  // namespace kareus::workload
