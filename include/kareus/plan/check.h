// SPDX-License-Identifier: Apache-2.0
// The one plan check every reader of a plan applies before using it (`kareus export`, the
// runtime's PlanExecutor, the executor's kareus.load_plan): beyond the shape PlanFromJson
// checks, a plan must fit what it was made for.
#pragma once

#include <filesystem>
#include <string>

#include "kareus/plan/plan_file.h"

namespace kareus::plan {

struct PlanCheckOptions {
  // False (the runtime on a machine without Kareus's data folder): when the GPU and model
  // presets cannot be found, the checks that need them (clocks against the preset, partition
  // types, slots and SM counts) are skipped; the runtime checks clocks against what NVML
  // reports. True: that is an EnvironmentError.
  bool require_presets = true;
};

// Throws InputError naming the field ("stages[1].instructions[4].freq_mhz"), the value and the
// rule when the plan does not fit the workload it records (Workload::ToJson, as `kareus run`
// writes it):
// - the stage list: as many stages as parallelism.pp, the record's virtual_stages and
//   microbatches, each stage's GPUs = TP x CP x DP;
// - every clock (instructions and gradient syncs) in the GPU preset's supported set;
// - every partition a known partition type of the workload of the instruction's direction, its
//   slot one of that type's slots, its SM count and every gradient sync's within the GPU's SMs.
// A plan without a workload record (`kareus solve` on a Perseus profile) has nothing to be
// checked against and passes.
void CheckPlan(const Plan& plan, const PlanCheckOptions& options = {});

// ReadPlanFile, then CheckPlan; errors name the file.
Plan ReadCheckedPlanFile(const std::filesystem::path& path, const PlanCheckOptions& options = {});

}  // namespace kareus::plan
