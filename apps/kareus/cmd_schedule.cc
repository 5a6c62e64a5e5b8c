// SPDX-License-Identifier: Apache-2.0
// `kareus schedule RUN`: a price- or carbon-aware timetable over a run's frontier
// (methods/schedule.h).
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "kareus/common/json.h"
#include "kareus/common/table.h"
#include "kareus/methods/schedule.h"

namespace kareus::cli {
namespace {

struct ScheduleArgs {
  methods::ScheduleOptions options;
  std::string power_cap;
  bool no_pause = false;
  bool json = false;
};

void Run(ScheduleArgs& a) {
  if (!a.power_cap.empty()) a.options.power_cap = a.power_cap;
  a.options.allow_pause = !a.no_pause;
  const Json t = methods::ScheduleFromRun(a.options);
  if (a.json) {
    std::fputs(DumpJson(t).c_str(), stdout);
    return;
  }
  int plans_used = 0, paused = 0;
  for (const Json& in : t["intervals"]) {
    plans_used += static_cast<int>(in["entries"].size());
    paused += in["pause_s"].get<double>() > 0 ? 1 : 0;
  }
  std::printf(
      "%s iterations from %s, finished %s (deadline %s): %zu intervals, %d plan runs, "
      "%d with a pause\n",
      FormatFixed(t["total_iterations"].get<double>(), 0).c_str(),
      t["start"].get<std::string>().c_str(), t["finish"].get<std::string>().c_str(),
      t["deadline"].get<std::string>().c_str(), t["intervals"].size(), plans_used, paused);
  std::printf("cost %s (%s x kWh), energy %s kWh\n",
              FormatFixed(t["total_cost"].get<double>(), 3).c_str(),
              t["signal_unit"].get<std::string>().c_str(),
              FormatFixed(t["total_energy_j"].get<double>() / 3.6e6, 2).c_str());
  if (t["best_constant_plan"].is_null()) {
    std::printf("no single plan run from the start finishes in time within the caps\n");
  } else {
    const Json& c = t["best_constant_plan"];
    std::printf("best constant plan %s: cost %s, finished %s; the timetable saves %s %%\n",
                c["plan"].get<std::string>().c_str(),
                FormatFixed(c["cost"].get<double>(), 3).c_str(),
                c["finish"].get<std::string>().c_str(),
                FormatFixed(100.0 * t["saving_vs_best_constant"].get<double>(), 1).c_str());
  }
  std::printf("Wrote %s/{timetable.json, report.html, plans/}\n", a.options.out.string().c_str());
}

}  // namespace

void AddScheduleCommand(CLI::App& app) {
  auto args = std::make_shared<ScheduleArgs>();
  auto* cmd = app.add_subcommand(
      "schedule",
      "A price- or carbon-aware timetable over a kareus run's frontier: which plan "
      "to run when, and when to pause, to finish N iterations by a deadline at the "
      "least cost");
  methods::ScheduleOptions& o = args->options;
  cmd->add_option("RUN", o.run, "A kareus run output folder (frontier.json, plans/)")->required();
  cmd->add_option("--iterations", o.iterations, "Iterations to finish")->required();
  cmd->add_option("--deadline", o.deadline,
                  "ISO-8601 UTC time, or a duration (36h, 90m, 2d) from the signal's first "
                  "timestamp")
      ->required();
  cmd->add_option("--signal", o.signal,
                  "CSV of price ($/kWh) or carbon intensity (gCO2/kWh): time,value or a "
                  "grid-data export (e.g. 'Datetime (UTC)' and a carbon-intensity column)")
      ->required();
  cmd->add_option("--signal-column", o.signal_column,
                  "The signal's column (default: found from the header)");
  cmd->add_option("--signal-unit", o.signal_unit,
                  "How the report labels the signal (default: its column)");
  cmd->add_option("--power-cap", args->power_cap,
                  "CSV of time,cap: average watts per GPU the job may draw from that time on");
  cmd->add_flag("--no-pause", args->no_pause,
                "Never pause: run some plan until the iterations are done");
  cmd->add_option("--out", o.out, "Output folder")->required();
  cmd->add_flag("--json", args->json, "Print timetable.json");
  cmd->callback([args]() { Run(*args); });
}

}  // namespace kareus::cli
