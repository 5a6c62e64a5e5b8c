// SPDX-License-Identifier: Apache-2.0
// The runtime side of energy budgets (issue 28): which plan a job runs under a power budget, and
// which plan (or a pause) a timetable of `kareus schedule` asks for at a given wall-clock time.
//
// A timetable decision is a pure function of (time, iterations done): every stage of a job
// that decides from the same time and count moves to the same plan at the same step boundary.
// In one process the stages' executors share a clock; across processes, rank 0's time is
// broadcast (examples/pytorch/train.py) and each rank decides from it.
#pragma once

#include <filesystem>
#include <map>
#include <mutex>
#include <string>

#include "kareus/plan/plan_file.h"
#include "kareus/plan/timetable.h"

namespace kareus::runtime {

// The frontier point chosen for a power budget.
struct PowerChoice {
  int point_index = -1;             // index into FrontierFile::points
  plan::FrontierPoint point;        // its evaluated time and energy
  std::filesystem::path plan_path;  // the plan file, joined with the frontier folder
  double power_w_per_gpu = 0.0;     // energy_j / time_s / gpus
  bool fits = true;                 // false: no point fits; the lowest-power one was chosen
};

// Among the points with a plan file: the fastest whose average power per GPU
// (energy_j / time_s / gpus) is <= budget_w_per_gpu (ties: the lower energy); when none fits,
// the lowest-power point with fits = false. InputError when no point has a plan file or the
// budget is not > 0.
PowerChoice ChooseFrontierPointForPower(const plan::FrontierFile& frontier, double budget_w_per_gpu,
                                        int gpus, const std::filesystem::path& frontier_folder);

// The plan of a finished run (frontier.json and its plans in `folder`) for an iteration
// deadline (ChooseFrontierPoint: the lowest energy within it, else the fastest) or an average
// power per GPU (ChooseFrontierPointForPower over the job's GPUs, read from the plans): what
// `kareus pick` prints and `kareus.Frontier.pick` returns. Exactly one of the two is > 0
// (InputError otherwise, naming both).
struct PickedPlan {
  int point_index = -1;
  plan::FrontierPoint point;
  std::filesystem::path plan_path;
  bool meets = true;  // false: no plan meets the deadline / fits the power
  int gpus = 0;       // the job's GPUs (power picks; 0 for deadline picks)
};
PickedPlan PickPlan(const std::filesystem::path& folder, double deadline_s, double power_w_per_gpu);

// What the timetable asks of the step that begins now.
struct TimetableStep {
  int interval = -1;                // index into the timetable's intervals (-1: past its last one)
  std::filesystem::path plan;       // the plan to run (absolute); empty when pausing
  double pause_until = 0.0;         // > 0: wait until this unix time, then decide again
  double planned_iterations = 0.0;  // what the timetable had done by now
  bool behind = false;  // fewer iterations than planned: the fastest plan the cap allows
  bool late = false;    // the remaining iterations cannot finish by the deadline any more
  bool done = false;    // all the iterations are done (the plan is the last one run)
  std::string message;  // why it is off the timetable ("" when on it)
};

class TimetableFollower {
 public:
  // Reads timetable.json (InputError on anything that is not one); the plans are found beside
  // it (plans/ of `kareus schedule --out DIR`).
  explicit TimetableFollower(const std::filesystem::path& timetable_path);

  // The step that begins at unix time `now` after `iterations_done` iterations of the run.
  // Behind the timetable by more than one iteration, the job runs the fastest plan the current
  // interval's cap allows until it has caught up (and says `late` when even that cannot finish
  // by the deadline); otherwise it runs the interval's entries in order and then pauses until
  // the interval's end.
  TimetableStep Decide(double now, double iterations_done) const;

  // The plan file, read once (thread-safe).
  const plan::Plan& PlanAt(const std::filesystem::path& plan_path) const;

  const plan::ScheduleProblem& problem() const { return problem_; }
  const plan::Timetable& timetable() const { return timetable_; }
  const std::filesystem::path& folder() const { return folder_; }

 private:
  // The fastest plan the interval's cap allows; -1 when none fits.
  int FastestFitting(const plan::ScheduleInterval& interval) const;

  std::filesystem::path folder_;
  plan::ScheduleProblem problem_;
  plan::Timetable timetable_;
  std::vector<double> planned_before_;  // iterations planned before each interval
  mutable std::mutex plans_mutex_;
  mutable std::map<std::filesystem::path, plan::Plan> plans_;
};

}  // namespace kareus::runtime
