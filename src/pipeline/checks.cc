// SPDX-License-Identifier: Apache-2.0
// Input validation: the problem (FindInputError), its option lists (CheckOptions) and the options
// (Options::Validate).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pipeline/engine.h"

namespace kareus::pipeline {
namespace internal {

std::string CheckOptions(const std::vector<Alternative>& list, const std::string& where,
                         const std::string& kind, const Options& options) {
  const std::string what = where + " " + kind;
  if (list.empty()) return where + " has no " + kind + " options";
  double t_min = kInf;
  double t_max = 0.0;
  for (const Alternative& o : list) {
    if (!(o.time_s > 0.0) || !std::isfinite(o.time_s) || !std::isfinite(o.energy_j) ||
        o.energy_j < 0.0) {
      return what + " option with time_s = " + std::to_string(o.time_s) +
             ", energy_j = " + std::to_string(o.energy_j) +
             ": time must be > 0 and energy >= 0, finite";
    }
    t_min = std::min(t_min, o.time_s);
    t_max = std::max(t_max, o.time_s);
  }
  if ((t_max - t_min) / options.unit_time_s > 5e7) {
    return "unit_time_s is too small for the options' time range (over 5e7 quanta)";
  }
  return "";
}

std::string FindInputError(const Problem& problem, const Options& options) {
  if (const auto error = options.Validate()) return error->Message();
  const int stages = problem.num_stages;
  if (stages < 1) return "num_stages must be >= 1";
  if (problem.num_microbatches < 1) return "num_microbatches must be >= 1";
  try {
    schedule::ValidateShape(problem.schedule, stages, problem.num_microbatches, problem.num_chunks);
  } catch (const InputError& e) {
    return e.what();
  }
  const int units = stages * problem.num_chunks;
  if (static_cast<int>(problem.forward_options.size()) != units ||
      static_cast<int>(problem.backward_options.size()) != units) {
    return "forward_options and backward_options need one list per (stage, chunk)";
  }
  const bool overlapped = problem.gradient_sync == schedule::GradientSync::kOverlapped;
  const int syncs = ClassesOf(problem).SyncNodesPerStage();
  if (static_cast<int>(problem.last_backward_options.size()) != (overlapped ? stages : 0)) {
    return overlapped ? "an overlapped gradient sync needs last_backward_options per stage"
                      : "last_backward_options are for an overlapped gradient sync only";
  }
  if (static_cast<int>(problem.gradient_sync_options.size()) != stages * syncs) {
    return "gradient_sync_options need " + std::to_string(syncs) +
           " list(s) per stage for this "
           "gradient sync (" +
           std::to_string(stages * syncs) + " in all)";
  }
  if (!problem.gpus_per_stage.empty() &&
      static_cast<int>(problem.gpus_per_stage.size()) != stages) {
    return "gpus_per_stage needs one entry per stage (or none)";
  }
  for (int g : problem.gpus_per_stage) {
    if (g < 1) return "gpus_per_stage entries must be >= 1";
  }
  if (!(problem.p2p_time_s >= 0.0) || !std::isfinite(problem.p2p_time_s)) {
    return "p2p_time_s must be >= 0";
  }
  for (int u = 0; u < units; ++u) {
    const std::string where = problem.num_chunks == 1
                                  ? "stage " + std::to_string(u)
                                  : "stage " + std::to_string(u / problem.num_chunks) + " chunk " +
                                        std::to_string(u % problem.num_chunks);
    if (std::string error = CheckOptions(problem.forward_options[u], where, "forward", options);
        !error.empty())
      return error;
    if (std::string error = CheckOptions(problem.backward_options[u], where, "backward", options);
        !error.empty())
      return error;
  }
  for (int s = 0; s < static_cast<int>(problem.last_backward_options.size()); ++s) {
    if (std::string error = CheckOptions(problem.last_backward_options[s],
                                         "stage " + std::to_string(s), "last backward", options);
        !error.empty()) {
      return error;
    }
  }
  for (int i = 0; i < static_cast<int>(problem.gradient_sync_options.size()); ++i) {
    const std::string where =
        "stage " + std::to_string(i / std::max(syncs, 1)) +
        (i % std::max(syncs, 1) == 0 ? std::string() : " chunk " + std::to_string(i % syncs));
    if (std::string error =
            CheckOptions(problem.gradient_sync_options[i], where, "gradient sync", options);
        !error.empty()) {
      return error;
    }
  }
  // Every path is at most the sum of all slowest durations: the frontier's deadlines stay
  // countable. (Per node class: its slowest option times the nodes it has at most.)
  const auto slowest = [](const std::vector<Alternative>& list) {
    double t = 0.0;
    for (const Alternative& o : list) t = std::max(t, o.time_s);
    return t;
  };
  double slowest_sum = problem.p2p_time_s * 2 * units;
  for (int u = 0; u < units; ++u) {
    slowest_sum += (slowest(problem.forward_options[u]) + slowest(problem.backward_options[u])) *
                   problem.num_microbatches;
  }
  for (const auto* lists : {&problem.last_backward_options, &problem.gradient_sync_options}) {
    for (const auto& list : *lists) slowest_sum += slowest(list);
  }
  if (slowest_sum / options.unit_time_s > 1e7) {
    return "unit_time_s is too small for the options' times (over 1e7 deadlines)";
  }
  return "";
}

}  // namespace internal

std::optional<OptionError> Options::Validate() const {
  if (!(unit_time_s > 0.0) || !std::isfinite(unit_time_s)) {
    return OptionError{"unit_time_s", Describe(unit_time_s), "must be a finite number > 0"};
  }
  if (!(p_static_w >= 0.0) || !std::isfinite(p_static_w)) {
    return OptionError{"p_static_w", Describe(p_static_w), "must be a finite number >= 0"};
  }
  if (max_steps < 0)
    return OptionError{"max_steps", Describe(max_steps), "must be >= 0 (0: no limit)"};
  if (!(deadline_s >= 0.0) || !std::isfinite(deadline_s)) {
    return OptionError{"deadline_s", Describe(deadline_s),
                       "must be a finite number >= 0 (0: the whole frontier)"};
  }
  return std::nullopt;
}

}  // namespace kareus::pipeline
