// SPDX-License-Identifier: Apache-2.0
// `kareus pick OUT --deadline S | --power W`: the plan of a finished run to use for an
// iteration deadline or an average power per GPU (the runtime's own rules: straggler mode's
// ChooseFrontierPoint and the power budget's ChooseFrontierPointForPower).
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "kareus/common/error.h"
#include "kareus/common/json.h"
#include "kareus/common/table.h"
#include "kareus/plan/plan_file.h"
#include "kareus/runtime/plan_executor.h"
#include "kareus/runtime/timetable_follower.h"

namespace kareus::cli {
namespace {

struct PickArgs {
  std::string run;
  double deadline_s = 0.0;
  double power_w = 0.0;
  bool json = false;
};

void Run(const PickArgs& a) {
  if ((a.deadline_s > 0) == (a.power_w > 0)) {
    ThrowInput("--deadline, --power", a.deadline_s > 0 ? "both" : "neither",
               "give exactly one, > 0");
  }
  const runtime::PickedPlan picked = runtime::PickPlan(a.run, a.deadline_s, a.power_w);
  const int index = picked.point_index;
  const plan::FrontierPoint& p = picked.point;
  Json out = {{"plan", picked.plan_path.string()}, {"meets", picked.meets}};
  if (a.deadline_s > 0) out["deadline_s"] = a.deadline_s;
  if (a.power_w > 0) {
    out["power_w_per_gpu_budget"] = a.power_w;
    out["gpus"] = picked.gpus;
  }
  out["point_index"] = index;
  out["time_s"] = p.time_s;
  out["energy_j"] = p.energy_j;
  out["power_w"] = p.energy_j / p.time_s;
  if (a.json) {
    std::fputs(DumpJson(out).c_str(), stdout);
    return;
  }
  std::printf("%s\n", out["plan"].get<std::string>().c_str());
  std::printf("frontier point %d: %s s, %s kJ, %s kW%s\n", index, FormatFixed(p.time_s, 4).c_str(),
              FormatFixed(p.energy_j / 1e3, 3).c_str(),
              FormatFixed(p.energy_j / p.time_s / 1e3, 3).c_str(),
              out["meets"].get<bool>() ? ""
              : a.deadline_s > 0       ? " (no plan meets the deadline: the fastest)"
                                       : " (no plan fits the power: the lowest-power one)");
}

}  // namespace

void AddPickCommand(CLI::App& app) {
  auto args = std::make_shared<PickArgs>();
  auto* cmd = app.add_subcommand(
      "pick", "The plan of a finished run for an iteration deadline or an average power per GPU");
  cmd->add_option("OUT", args->run, "A kareus run output folder (frontier.json, plans/)")
      ->required();
  cmd->add_option(
      "--deadline", args->deadline_s,
      "Iteration time in seconds: the lowest-energy plan within it (none: the fastest)");
  cmd->add_option("--power", args->power_w,
                  "Average watts per GPU: the fastest plan within it (none: the lowest-power one)");
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->callback([args]() { Run(*args); });
}

}  // namespace kareus::cli
