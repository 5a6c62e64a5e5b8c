// SPDX-License-Identifier: Apache-2.0
#include "kareus/runtime/timetable_follower.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "kareus/runtime/plan_executor.h"

namespace kareus::runtime {
namespace {

// Behind by more than this many iterations counts as behind: a loop completes whole steps, the
// timetable plans continuous amounts.
constexpr double kTolerance = 1.0;

}  // namespace

PowerChoice ChooseFrontierPointForPower(const plan::FrontierFile& frontier, double budget_w_per_gpu,
                                        int gpus, const std::filesystem::path& frontier_folder) {
  if (!(budget_w_per_gpu > 0) || !std::isfinite(budget_w_per_gpu)) {
    ThrowInput("power_budget_w", fmt::format("{}", budget_w_per_gpu),
               "must be a finite number of watts per GPU > 0");
  }
  if (gpus < 1) ThrowInput("gpus", std::to_string(gpus), "must be >= 1");
  PowerChoice best;
  int lowest = -1;
  double lowest_power = 0.0;
  for (int i = 0; i < static_cast<int>(frontier.points.size()); ++i) {
    const plan::FrontierPoint& point = frontier.points[i];
    if (plan::FrontierPlanPath(point).empty() || !(point.time_s > 0)) continue;
    const double power = point.energy_j / point.time_s / gpus;
    if (lowest < 0 || power < lowest_power) {
      lowest = i;
      lowest_power = power;
    }
    if (power > budget_w_per_gpu) continue;
    const bool better = best.point_index < 0 || point.time_s < best.point.time_s ||
                        (point.time_s == best.point.time_s && point.energy_j < best.point.energy_j);
    if (better) {
      best.point_index = i;
      best.point = point;
      best.power_w_per_gpu = power;
    }
  }
  if (lowest < 0) {
    ThrowInput("frontier.points", fmt::format("{} points", frontier.points.size()),
               "no point has a plan file (plan_path or plan_index); nothing to swap to");
  }
  if (best.point_index < 0) {  // the budget is below every plan: draw as little as we can
    best.point_index = lowest;
    best.point = frontier.points[lowest];
    best.power_w_per_gpu = lowest_power;
    best.fits = false;
  }
  best.plan_path = frontier_folder / plan::FrontierPlanPath(best.point);
  return best;
}

PickedPlan PickPlan(const std::filesystem::path& folder, double deadline_s,
                    double power_w_per_gpu) {
  if ((deadline_s > 0) == (power_w_per_gpu > 0) || std::isnan(deadline_s) ||
      std::isnan(power_w_per_gpu)) {
    ThrowInput("deadline_s, power_w", fmt::format("{}, {}", deadline_s, power_w_per_gpu),
               "give exactly one, > 0");
  }
  if (!std::filesystem::is_regular_file(folder / "frontier.json")) {
    ThrowInput("folder", folder.string(), "has no frontier.json (a kareus run output folder)");
  }
  const plan::FrontierFile frontier = plan::ReadFrontierFile(folder / "frontier.json");
  PickedPlan picked;
  if (deadline_s > 0) {
    const FrontierChoice c = ChooseFrontierPoint(frontier, deadline_s, folder);
    picked = {c.point_index, c.point, c.plan_path, c.meets_target, 0};
    return picked;
  }
  // The job's GPUs from one of its plans (every plan of a run is for the same job); without
  // any, ChooseFrontierPointForPower refuses the frontier.
  int gpus = 1;
  for (const plan::FrontierPoint& point : frontier.points) {
    if (const std::string file = plan::FrontierPlanPath(point); !file.empty()) {
      gpus = plan::JobGpus(plan::ReadPlanFile(folder / file));
      break;
    }
  }
  const PowerChoice c = ChooseFrontierPointForPower(frontier, power_w_per_gpu, gpus, folder);
  picked = {c.point_index, c.point, c.plan_path, c.fits, gpus};
  return picked;
}

TimetableFollower::TimetableFollower(const std::filesystem::path& timetable_path)
    : folder_(std::filesystem::absolute(timetable_path).parent_path()) {
  plan::TimetableFromJson(ReadJsonFile(timetable_path), &problem_, &timetable_);
  double planned = 0.0;
  for (const plan::TimetableInterval& in : timetable_.intervals) {
    planned_before_.push_back(planned);
    for (const plan::TimetableEntry& e : in.entries) planned += e.iterations;
  }
  for (const plan::SchedulePlan& plan : problem_.plans) {
    if (!std::filesystem::is_regular_file(folder_ / plan.name)) {
      ThrowInput("plans", plan.name,
                 "missing beside " + timetable_path.string() + " (kareus schedule writes it)");
    }
  }
}

int TimetableFollower::FastestFitting(const plan::ScheduleInterval& interval) const {
  int fastest = -1;
  for (int p = 0; p < static_cast<int>(problem_.plans.size()); ++p) {
    const plan::SchedulePlan& plan = problem_.plans[p];
    if (plan.power_w() / problem_.gpus > interval.power_cap_w * (1 + 1e-12)) continue;
    if (fastest < 0 || plan.time_s < problem_.plans[fastest].time_s) fastest = p;
  }
  return fastest;
}

TimetableStep TimetableFollower::Decide(double now, double iterations_done) const {
  TimetableStep step;
  const auto& intervals = timetable_.intervals;
  const double t = std::max(now, intervals.front().interval.start);
  int k = 0;
  while (k < static_cast<int>(intervals.size()) && t >= intervals[k].interval.end) ++k;
  // What the timetable had done by t, and what it asks for at t.
  int entry_plan = -1;
  bool in_pause = false;
  if (k < static_cast<int>(intervals.size())) {
    step.interval = k;
    double elapsed = t - intervals[k].interval.start;
    step.planned_iterations = planned_before_[k];
    for (const plan::TimetableEntry& e : intervals[k].entries) {
      const double part = std::min(elapsed, e.seconds);
      step.planned_iterations += part / problem_.plans[e.plan].time_s;
      if (entry_plan < 0 && elapsed < e.seconds) entry_plan = e.plan;
      elapsed -= part;
    }
    in_pause = entry_plan < 0 && intervals[k].pause_s > 0;
    if (entry_plan < 0 && !in_pause && !intervals[k].entries.empty()) {
      entry_plan = intervals[k].entries.back().plan;  // the finish interval's end: keep on
    }
  } else {
    step.planned_iterations = problem_.iterations;
  }
  const double remaining = problem_.iterations - iterations_done;
  const auto path = [&](int p) { return folder_ / problem_.plans[p].name; };
  if (remaining <= 1e-9) {
    step.done = true;
    step.message = fmt::format("all {} iterations done", problem_.iterations);
    return step;
  }
  const plan::ScheduleInterval& current =
      step.interval >= 0 ? intervals[step.interval].interval : intervals.back().interval;
  int fastest_overall = 0;
  for (int p = 0; p < static_cast<int>(problem_.plans.size()); ++p) {
    if (problem_.plans[p].time_s < problem_.plans[fastest_overall].time_s) fastest_overall = p;
  }
  const double deadline = problem_.deadline();
  step.late = t + remaining * problem_.plans[fastest_overall].time_s > deadline;
  step.behind = iterations_done + kTolerance < step.planned_iterations;
  if (step.behind || step.interval < 0) {
    step.behind = true;
    const int fastest = FastestFitting(current);
    if (fastest < 0) {  // no plan fits the cap: wait for the interval to end
      step.pause_until = step.interval >= 0 ? current.end : t + 60.0;
      step.message = fmt::format(
          "behind by {:.1f} iterations, and no plan fits the cap of {:.1f} W "
          "per GPU: paused until {}",
          step.planned_iterations - iterations_done, current.power_cap_w,
          plan::FormatUtcTime(step.pause_until));
    } else {
      step.plan = path(fastest);
      step.message = fmt::format(
          "behind by {:.1f} iterations: {} (the fastest plan the cap "
          "allows) until caught up",
          step.planned_iterations - iterations_done, problem_.plans[fastest].name);
    }
    if (step.late) {
      step.message += fmt::format(
          "; {:.0f} iterations left cannot finish by the deadline {} "
          "(at least {:.0f} s at the fastest plan, {:.0f} s left)",
          remaining, plan::FormatUtcTime(deadline),
          remaining * problem_.plans[fastest_overall].time_s, std::max(0.0, deadline - t));
    }
    return step;
  }
  if (in_pause) {
    step.pause_until = current.end;
    return step;
  }
  step.plan = path(entry_plan);
  return step;
}

const plan::Plan& TimetableFollower::PlanAt(const std::filesystem::path& plan_path) const {
  std::lock_guard<std::mutex> lock(plans_mutex_);
  auto it = plans_.find(plan_path);
  if (it == plans_.end()) it = plans_.emplace(plan_path, plan::ReadPlanFile(plan_path)).first;
  return it->second;
}

}  // namespace kareus::runtime
