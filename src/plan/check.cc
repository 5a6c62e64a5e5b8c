// SPDX-License-Identifier: Apache-2.0
#include "kareus/plan/check.h"

#include <algorithm>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/workload/ops.h"
#include "kareus/workload/workload.h"

namespace kareus::plan {
namespace {

// An integer field of the record, or nullopt when absent (or not an integer: the record's own
// validation names that).
std::optional<int64_t> RecordInt(const Json& object, const char* key) {
  if (!object.is_object() || !object.contains(key) || !object[key].is_number_integer()) {
    return std::nullopt;
  }
  return object[key].get<int64_t>();
}

bool IsWorkloadRecord(const Json& record) {
  return record.is_object() && record.contains("model") && record.contains("parallelism") &&
         record.contains("gpu");
}

// What the record says of the pipeline, checked without any preset.
void CheckStageList(const Plan& plan) {
  const Json& parallelism = plan.workload["parallelism"];
  if (const auto pp = RecordInt(parallelism, "pp");
      pp && *pp != static_cast<int64_t>(plan.stages.size())) {
    ThrowInput("workload.parallelism.pp", std::to_string(*pp),
               fmt::format("the plan lists {} stages: a plan's stages are its workload's "
                           "pipeline stages",
                           plan.stages.size()));
  }
  const int64_t virtual_stages = RecordInt(parallelism, "virtual_stages").value_or(1);
  if (virtual_stages != plan.virtual_stages) {
    ThrowInput("workload.parallelism.virtual_stages", std::to_string(virtual_stages),
               fmt::format("the plan has virtual_stages = {}", plan.virtual_stages));
  }
  if (const auto m = RecordInt(plan.workload, "microbatches"); m && *m != plan.num_microbatches) {
    ThrowInput("workload.microbatches", std::to_string(*m),
               fmt::format("the plan has num_microbatches = {}", plan.num_microbatches));
  }
  const auto tp = RecordInt(parallelism, "tp"), cp = RecordInt(parallelism, "cp"),
             dp = RecordInt(parallelism, "dp");
  if (tp && cp && dp) {
    const int64_t gpus = *tp * *cp * *dp;
    for (std::size_t s = 0; s < plan.stages.size(); ++s) {
      if (plan.stages[s].gpus != gpus) {
        ThrowInput(fmt::format("stages[{}].gpus", s), std::to_string(plan.stages[s].gpus),
                   fmt::format("the workload runs each stage on TP x CP x DP = {} x {} x {} = "
                               "{} GPUs",
                               *tp, *cp, *dp, gpus));
      }
    }
  }
}

void CheckAgainstPresets(const Plan& plan, const workload::WorkloadModel& model) {
  const hw::GpuSpec& gpu = model.workload.gpu;
  const auto check_clock = [&](int freq_mhz, const std::string& field) {
    if (!gpu.clock.Contains(freq_mhz)) {
      ThrowInput(field, std::to_string(freq_mhz),
                 fmt::format("not a clock the {} supports ({}..{} MHz in steps of {})", gpu.name,
                             gpu.clock.min_mhz, gpu.clock.max_mhz, gpu.clock.step_mhz));
    }
  };
  const auto check_sync_sms = [&](int sms, const std::string& field) {
    if (sms < 1 || sms > gpu.sm_count) {
      ThrowInput(field, std::to_string(sms),
                 fmt::format("must be 1..{} (the SMs of the {})", gpu.sm_count, gpu.name));
    }
  };
  std::map<std::string, const workload::PartitionType*> types;
  for (const workload::PartitionType& type : model.partition_types) types[type.name] = &type;
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    const PlannedStage& stage = plan.stages[s];
    for (std::size_t i = 0; i < stage.instructions.size(); ++i) {
      const PlannedInstruction& inst = stage.instructions[i];
      const std::string at = fmt::format("stages[{}].instructions[{}]", s, i);
      check_clock(inst.freq_mhz, at + ".freq_mhz");
      if (inst.gradient_sync) check_sync_sms(inst.gradient_sync->sms, at + ".gradient_sync.sms");
      for (std::size_t k = 0; k < inst.partitions.size(); ++k) {
        const PartitionKnobs& knobs = inst.partitions[k];
        const std::string field = fmt::format("{}.partitions[{}]", at, k);
        // A backward under full recompute re-runs the forward partitions first.
        const auto runs_in = [&](const workload::PartitionType& type) {
          return type.direction == inst.kind ||
                 (inst.kind == schedule::Direction::kBackward &&
                  model.workload.recompute == workload::Recompute::kFull);
        };
        const auto it = types.find(knobs.type);
        if (it == types.end() || !runs_in(*it->second)) {
          std::vector<std::string> valid;
          for (const auto& type : model.partition_types) {
            if (runs_in(type)) valid.push_back(type.name);
          }
          ThrowInput(field + ".type", knobs.type,
                     fmt::format("not a {} partition type of this workload (valid: {})",
                                 schedule::ToString(inst.kind), JoinNames(valid)));
        }
        const workload::PartitionType& type = *it->second;
        if (type.SlotIndex(knobs.slot) < 0) {
          std::vector<std::string> slots;
          for (const auto& slot : type.slots) slots.push_back(slot.name);
          ThrowInput(field + ".slot", knobs.slot,
                     fmt::format("not a slot of {} (valid: {})", type.name, JoinNames(slots)));
        }
        // Any count a collective can run on (the planner searches type.sm_choices; a plan
        // edited to another count still runs, and the executor keeps a trailing type's
        // fixed count whatever the plan says).
        if (knobs.sms < 1 || knobs.sms > gpu.sm_count) {
          ThrowInput(field + ".sms", std::to_string(knobs.sms),
                     fmt::format("must be 1..{} (the SMs of the {}) for {}'s collective",
                                 gpu.sm_count, gpu.name, type.name));
        }
      }
    }
    if (stage.gradient_sync) {
      const std::string at = fmt::format("stages[{}].gradient_sync", s);
      check_clock(stage.gradient_sync->freq_mhz, at + ".freq_mhz");
      check_sync_sms(stage.gradient_sync->sms, at + ".sms");
    }
  }
}

// Whether this machine has Kareus's data folder (GPU and model presets).
bool PresetsAvailable() {
  try {
    std::error_code ec;
    return std::filesystem::is_directory(DataDir() / "gpus", ec) &&
           std::filesystem::is_directory(DataDir() / "models", ec);
  } catch (const EnvironmentError&) {
    return false;
  }
}

}  // namespace

void CheckPlan(const Plan& plan, const PlanCheckOptions& options) {
  if (!IsWorkloadRecord(plan.workload)) return;
  CheckStageList(plan);
  if (!options.require_presets && !PresetsAvailable()) return;  // the runtime checks NVML's clocks
  std::optional<workload::WorkloadModel> model;
  try {
    model = workload::BuildWorkloadModel(
        workload::WorkloadFromRecord(plan.workload, plan.virtual_stages, "the plan's workload"));
  } catch (const EnvironmentError&) {
    if (options.require_presets) throw;
    return;  // no data folder here: the runtime checks clocks against NVML
  } catch (const InputError& e) {
    throw InputError(std::string("workload: ") + e.what());
  }
  CheckAgainstPresets(plan, *model);
}

Plan ReadCheckedPlanFile(const std::filesystem::path& path, const PlanCheckOptions& options) {
  Plan plan = ReadPlanFile(path);
  try {
    CheckPlan(plan, options);
  } catch (const InputError& e) {
    throw InputError(path.string() + ": " + e.what());
  }
  return plan;
}

}  // namespace kareus::plan
