// SPDX-License-Identifier: Apache-2.0
// `kareus solve PROFILE.csv`: the Perseus-compatible frontier solve (plan/perseus.h).
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "flags.h"
#include "kareus/common/json.h"
#include "kareus/common/table.h"
#include "kareus/plan/perseus.h"

namespace kareus::cli {
namespace {

struct SolveArgs {
  std::string profile;
  int stages = 0;
  int microbatches = 0;
  double static_power_w = 0.0;
  double unit_time_ms = plan::SolveProfileOptions{}.unit_time_s * 1e3;
  int gpus_per_stage = plan::SolveProfileOptions{}.gpus_per_stage;
  std::string schedule = kareus::schedule::ToString(plan::SolveProfileOptions{}.schedule);
  std::string out;
  double deadline_s = 0.0;
  bool json = false;
};

Json CostJson(const pipeline::Evaluation& e) {
  return {{"time_s", e.time_s}, {"energy_j", e.energy_j}, {"static_energy_j", e.static_energy_j}};
}

schedule::ScheduleKind ScheduleFlag(const std::string& text) {
  try {
    return schedule::ScheduleKindFromString(text);
  } catch (const InputError&) {
    ThrowInput("--schedule", text, "must be 1f1b or gpipe");
  }
}

void Run(const SolveArgs& a) {
  const plan::SolveProfileOptions options{.profile = a.profile,
                                          .num_stages = a.stages,
                                          .num_microbatches = a.microbatches,
                                          .p_static_w = a.static_power_w,
                                          .unit_time_s = a.unit_time_ms * 1e-3,
                                          .gpus_per_stage = a.gpus_per_stage,
                                          .out = a.out,
                                          .deadline_s = a.deadline_s,
                                          .schedule = ScheduleFlag(a.schedule)};
  ThrowAsFlag(options.Validate(), {{"num_stages", "--stages"},
                                   {"num_microbatches", "--microbatches"},
                                   {"p_static_w", "--static-power"},
                                   {"unit_time_s", "--unit-time", 1e3},
                                   {"gpus_per_stage", "--gpus-per-stage"},
                                   {"out", "--out"},
                                   {"deadline_s", "--deadline"},
                                   {"schedule", "--schedule"}});
  const plan::SolveProfileSummary s = plan::SolveProfile(options);
  if (a.deadline_s > 0) {
    if (a.json) {
      const Json out = {{"status", pipeline::ToString(s.solver.status)},
                        {"deadline_s", a.deadline_s},
                        {"plan", s.files.plan.string()},
                        {"iteration", CostJson(s.fastest)}};
      std::fputs(DumpJson(out).c_str(), stdout);
      return;
    }
    std::printf(
        "plan for deadline %.6f s: iteration time %.6f s, energy %.1f J (static %.1f J); "
        "wrote %s\n",
        a.deadline_s, s.fastest.time_s, s.fastest.energy_j, s.fastest.static_energy_j,
        s.files.plan.string().c_str());
    return;
  }
  if (a.json) {
    Json plans = Json::array();
    for (const auto& path : s.files.plans) plans.push_back(path.string());
    const Json out = {{"status", pipeline::ToString(s.solver.status)},
                      {"message", s.solver.message},
                      {"steps", s.solver.steps},
                      {"points", s.points},
                      {"fastest", CostJson(s.fastest)},
                      {"lowest_energy", CostJson(s.cheapest)},
                      {"plan", s.files.plan.string()},
                      {"frontier", s.files.frontier.string()},
                      {"plans", plans}};
    std::fputs(DumpJson(out).c_str(), stdout);
    return;
  }
  Table table({"point", "time_s", "energy_j", "static_j"});
  table.AddRow({"fastest", FormatFixed(s.fastest.time_s, 4), FormatFixed(s.fastest.energy_j, 1),
                FormatFixed(s.fastest.static_energy_j, 1)});
  table.AddRow({"lowest energy", FormatFixed(s.cheapest.time_s, 4),
                FormatFixed(s.cheapest.energy_j, 1), FormatFixed(s.cheapest.static_energy_j, 1)});
  std::printf("%s", table.ToString().c_str());
  std::printf("%zu frontier points in %lld steps (%s); wrote %s, %s and %zu plans\n", s.points,
              static_cast<long long>(s.solver.steps), pipeline::ToString(s.solver.status),
              s.files.plan.string().c_str(), s.files.frontier.string().c_str(),
              s.files.plans.size());
}

}  // namespace

void AddSolveCommand(CLI::App& app) {
  auto args = std::make_shared<SolveArgs>();
  auto* cmd = app.add_subcommand(
      "solve",
      "Solve a Perseus profile CSV (stage,instruction,frequency,time,energy) for the "
      "iteration time-energy frontier; writes plan.json, frontier.json and plans/");
  cmd->add_option("PROFILE", args->profile, "Perseus profile CSV (energy per GPU)")->required();
  cmd->add_option("--stages", args->stages, "Pipeline stages")->required();
  cmd->add_option("--microbatches", args->microbatches, "Microbatches per iteration")->required();
  cmd->add_option("--static-power", args->static_power_w, "Static (blocking) power of one GPU, W")
      ->required();
  cmd->add_option("--unit-time", args->unit_time_ms, "Solver time quantum, ms")
      ->capture_default_str();
  cmd->add_option("--gpus-per-stage", args->gpus_per_stage, "GPUs per stage")
      ->capture_default_str();
  cmd->add_option("--schedule", args->schedule, "Pipeline schedule: 1f1b | gpipe")
      ->capture_default_str();
  cmd->add_option("--out", args->out, "Output folder")->required();
  cmd->add_option("--deadline", args->deadline_s,
                  "Only the least-energy plan with iteration time <= this many seconds "
                  "(writes plan.json alone)");
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->callback([args]() { Run(*args); });
}

}  // namespace kareus::cli
