// SPDX-License-Identifier: Apache-2.0
// The benchmark's frozen reference solver (pipeline_reference_solver.cc) and its own frozen
// copies of the solver's types, as they were when the reference was frozen: a change to
// kareus/pipeline/solver.h does not change the baseline. pipeline_benchmark converts its
// problems into these. The DAG builder (schedule::BuildDag) and the Pareto filter are shared:
// they define the problem and the frontier, not the solver being timed.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kareus/common/error.h"
#include "kareus/schedule/schedule.h"

namespace kareus::pipeline_reference {

struct Option {
  double time_s = 0.0;
  double energy_j = 0.0;
};

struct Problem {
  schedule::ScheduleKind schedule = schedule::ScheduleKind::k1F1B;
  int num_stages = 0;
  int num_microbatches = 0;
  int num_chunks = 1;
  std::vector<std::vector<Option>> forward_options = {};
  std::vector<std::vector<Option>> backward_options = {};
  schedule::GradientSync gradient_sync = schedule::GradientSync::kNone;
  std::vector<std::vector<Option>> last_backward_options = {};
  std::vector<std::vector<Option>> gradient_sync_options = {};
  std::vector<int> gpus_per_stage = {};
  double p2p_time_s = 0.0;
};

struct SolveProgress {
  int64_t step = 0;
  double time_now_s = 0.0;
  double time_fastest_s = 0.0;
  double time_slowest_s = 0.0;
};

struct Options {
  double unit_time_s = 1e-3;
  double p_static_w = 0.0;
  bool reclaim_slack = true;
  int64_t max_steps = 0;
  bool keep_dominated = false;
  double deadline_s = 0.0;
  std::function<void(const SolveProgress&)> progress = nullptr;

  std::optional<OptionError> Validate() const;
};

struct Evaluation {
  double time_s = 0.0;
  double energy_j = 0.0;
  double static_energy_j = 0.0;
  double dynamic_energy_j = 0.0;
};

struct IterationPoint {
  Evaluation cost;
  int64_t step = 0;
  int64_t quanta = 0;
  double deadline_s = 0.0;
  double model_energy_j = 0.0;
  bool exact = false;
  std::vector<int> choice;
};

enum class Status {
  kReachedMinimumTime,
  kStepLimit,
  kStalled,
  kInvalidInput,
  kDeadlineInfeasible,
};

struct Summary {
  Status status = Status::kInvalidInput;
  std::string message;
  int64_t steps = 0;
  int64_t augmentations = 0;
  double min_time_s = 0.0;
  double max_time_s = 0.0;
  int64_t deadlines = 0;
  int64_t points_dominated = 0;
  int64_t critical_edges_max = 0;
};

struct Result {
  std::vector<IterationPoint> points;
  Summary summary;
  schedule::Dag dag;
};

Result Solve(const Problem& problem, const Options& options);

}  // namespace kareus::pipeline_reference
