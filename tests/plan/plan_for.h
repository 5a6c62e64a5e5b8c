// SPDX-License-Identifier: Apache-2.0
// A plan for one of examples/paper's workloads, as `kareus run` writes one (its workload
// record, 1F1B, every instruction nanobatched at the GPU's fastest clock with each partition
// type's first SM count and launch slot): what the plan-check tests edit.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include "kareus/plan/plan_file.h"
#include "kareus/workload/ops.h"
#include "kareus/workload/workload.h"

namespace kareus::plan::testing {

inline Plan PlanFor(const std::string& file) {
  const char* source = std::getenv("KAREUS_SOURCE_DIR");
  const workload::Workload w = workload::LoadWorkloadFile(
      std::filesystem::path(source ? source : ".") / "examples/paper" / file);
  const workload::WorkloadModel model = workload::BuildWorkloadModel(w);
  Plan plan{.method = "kareus",
            .workload = w.ToJson(),
            .schedule = ScheduleKind::k1F1B,
            .num_microbatches = w.microbatches,
            .virtual_stages = 1,
            .iteration = {},
            .stages = {}};
  for (int s = 0; s < w.parallelism.pp; ++s) {
    PlannedStage stage{.stage = s,
                       .gpus = w.parallelism.tp * w.parallelism.cp * w.parallelism.dp,
                       .instructions = {},
                       .gradient_sync = std::nullopt};
    for (const schedule::Instruction& i :
         schedule::StageOrder(ScheduleKind::k1F1B, w.parallelism.pp, s, w.microbatches)) {
      PlannedInstruction inst{.kind = i.kind,
                              .chunk = i.chunk,
                              .microbatch = i.microbatch,
                              .freq_mhz = w.gpu.clock.max_mhz,
                              .mode = ExecutionMode::kNanobatched,
                              .partitions = {}};
      for (const workload::PartitionType& type : model.partition_types) {
        if (type.direction != i.kind) continue;
        inst.partitions.push_back(
            {.type = type.name,
             .sms = type.tunable ? type.sm_choices.front() : type.fixed_sms,
             .slot = type.tunable ? type.launch_slots.front() : type.fixed_slot});
      }
      stage.instructions.push_back(std::move(inst));
    }
    plan.stages.push_back(std::move(stage));
  }
  return plan;
}

}  // namespace kareus::plan::testing
