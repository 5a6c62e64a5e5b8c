// SPDX-License-Identifier: Apache-2.0
// `kareus schedule` (kareus/methods/schedule.h).
#include "kareus/methods/schedule.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "kareus/common/io.h"
#include "kareus/plan/plan_file.h"
#include "kareus/plan/timetable.h"
#include "kareus/report/report.h"

namespace kareus::methods {

std::optional<OptionError> ScheduleOptions::Validate() const {
  if (run.empty()) return OptionError{"RUN", "''", "name a kareus run output folder"};
  if (!(iterations >= 1) || !std::isfinite(iterations)) {
    return OptionError{"--iterations", fmt::format("{}", iterations), "must be >= 1"};
  }
  if (deadline.empty())
    return OptionError{"--deadline", "''", "an ISO-8601 UTC time or a duration such as 36h"};
  if (signal.empty()) return OptionError{"--signal", "''", "name a signal CSV"};
  if (out.empty()) return OptionError{"--out", "''", "name an output folder"};
  return std::nullopt;
}

Json ScheduleFromRun(const ScheduleOptions& options) {
  ThrowIfInvalid(options.Validate());
  OutputFolder folder(options.out);  // checked before any work
  const std::filesystem::path frontier_path = options.run / "frontier.json";
  if (!std::filesystem::is_regular_file(frontier_path)) {
    ThrowInput("RUN", options.run.string(), "has no frontier.json (a kareus run output folder)");
  }
  const plan::FrontierFile frontier = plan::ReadFrontierFile(frontier_path);

  // The plans: the frontier points the run kept a plan file for.
  plan::ScheduleProblem problem;
  std::vector<std::filesystem::path> sources;
  double static_power = 0.0;
  for (const plan::FrontierPoint& point : frontier.points) {
    const std::string file = plan::FrontierPlanPath(point);
    if (file.empty()) continue;
    const std::filesystem::path source = options.run / file;
    if (!std::filesystem::is_regular_file(source)) {
      ThrowInput("RUN", options.run.string(), "frontier.json names " + file + ", which is missing");
    }
    problem.plans.push_back({.name = "plans/" + source.filename().string(),
                             .time_s = point.time_s,
                             .energy_j = point.energy_j});
    sources.push_back(source);
    static_power += point.static_energy_j / point.time_s;
  }
  if (problem.plans.empty()) {
    ThrowInput("RUN", options.run.string(), "its frontier.json has no point with a plan file");
  }
  problem.idle_power_w = static_power / static_cast<double>(problem.plans.size());
  // The GPUs of the job: the stages' GPUs in its plan (tp x cp x dp each).
  problem.gpus = plan::JobGpus(plan::ReadPlanFile(sources.front()));
  problem.iterations = options.iterations;
  problem.allow_pause = options.allow_pause;

  const plan::Signal signal =
      plan::ReadSignalCsv(options.signal, "--signal", options.signal_column, true);
  std::optional<plan::Signal> caps;
  if (options.power_cap) {
    caps = plan::ReadSignalCsv(*options.power_cap, "--power-cap", "", true,
                               /*one_row_holds_on=*/true);
    for (std::size_t i = 0; i < caps->value.size(); ++i) {
      if (!(caps->value[i] > 0)) {
        ThrowInput("--power-cap",
                   fmt::format("{} at {}", caps->value[i], plan::FormatUtcTime(caps->time[i])),
                   "a cap must be > 0 W per GPU");
      }
    }
    caps->end = std::numeric_limits<double>::infinity();  // the last cap holds on
  }
  const double start = signal.time.front();
  double deadline = 0.0;
  if (const auto at = plan::ParseUtcTime(options.deadline)) {
    deadline = *at;
  } else if (const auto duration = plan::ParseDuration(options.deadline)) {
    deadline = start + *duration;
  } else {
    ThrowInput("--deadline", options.deadline,
               "must be an ISO-8601 UTC time (2025-03-02T12:00:00Z) or a duration (36h, 90m, 2d)");
  }
  if (!(deadline > start)) {
    ThrowInput("--deadline", options.deadline,
               "must be after the signal's first timestamp " + plan::FormatUtcTime(start) +
                   " (the job holds its GPUs from there)");
  }
  problem.intervals =
      plan::MakeIntervals(signal, caps, start, deadline, "--signal", options.signal.string());
  const plan::Timetable timetable = plan::SolveSchedule(problem);

  Json extra = {
      {"run", std::filesystem::absolute(options.run).lexically_normal().string()},
      {"signal_file", options.signal.string()},
      {"signal_column", signal.column},
      {"signal_unit", options.signal_unit.empty()
                          ? (signal.column.empty() ? std::string("signal") : signal.column)
                          : options.signal_unit}};
  extra["power_cap_file"] = options.power_cap ? Json(options.power_cap->string()) : Json(nullptr);
  const Json json = plan::TimetableToJson(problem, timetable, extra);

  std::filesystem::create_directories(folder.staging() / "plans");
  for (std::size_t p = 0; p < sources.size(); ++p) {
    WriteFileAtomic(folder.staging() / problem.plans[p].name, ReadTextFile(sources[p]));
  }
  WriteJsonFile(folder.staging() / "timetable.json", json);
  WriteFileAtomic(folder.staging() / "report.html", report::RenderTimetableHtml(json));
  folder.Commit();
  return json;
}

}  // namespace kareus::methods
