// SPDX-License-Identifier: Apache-2.0
// The iteration time-energy frontier of a synchronous pipeline: Phillips-Dessouky time-cost
// tradeoff as in Perseus/lowtime (reference/perseus-lowtime-zeus.md §A2), with three changes:
//   * the cost of an instruction is the lower convex hull of its discrete options' effective
//     energy (E - P_static * t, summed over the stage's GPUs), piecewise linear in integer time
//     quanta, instead of lowtime's exponential fit;
//   * every reported point is realized with real options (the cheapest option whose quantized
//     time fits the solver's duration), slack is reclaimed, and time and energy are re-evaluated
//     from the realized options (never model values);
//   * true infinities, exact integer critical-path tests, a Boost.Graph max-flow, and statuses
//     instead of crashes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kareus/common/error.h"
#include "kareus/schedule/schedule.h"

namespace kareus::pipeline {

// One execution option of an instruction: its duration and its energy on ONE GPU of the stage.
struct Option {
  double time_s = 0.0;
  double energy_j = 0.0;
};

// The options of every DAG node come from one list per node class (OptionsOf): per (stage,
// chunk) unit u = stage * num_chunks + chunk, the forwards and the backwards; with a gradient
// sync (schedule::GradientSync), per stage the last backward when it launches the sync
// (kOverlapped), and per sync node its options.
struct Problem {
  schedule::ScheduleKind schedule = schedule::ScheduleKind::k1F1B;
  int num_stages = 0;
  int num_microbatches = 0;
  int num_chunks = 1;  // model chunks per stage (interleaved 1F1B: >= 2)
  std::vector<std::vector<Option>> forward_options = {};   // [u] options of every forward
  std::vector<std::vector<Option>> backward_options = {};  // [u] options of every backward
  schedule::GradientSync gradient_sync = schedule::GradientSync::kNone;
  // kOverlapped: [stage] the stage's last instruction (the last backward of chunk 0), which
  // reduces the buckets it completes during or right after it.
  std::vector<std::vector<Option>> last_backward_options = {};
  // [stage * K + c] for the K = Dag::SyncNodesPerStage() sync nodes of each stage (c = 0: the
  // tail after the stage's last instruction; c > 0: chunk c's buckets, kOverlapped).
  std::vector<std::vector<Option>> gradient_sync_options = {};
  std::vector<int> gpus_per_stage = {};  // GPUs running each stage (TP x CP x DP); empty = 1 each
  double p2p_time_s = 0.0;          // transfer time on every cross-stage edge
};

// The option list of DAG node `node` (the node classes above).
const std::vector<Option>& OptionsOf(const Problem& problem, const schedule::Dag& dag, int node);

struct Options {
  double unit_time_s = 1e-3;  // time quantum of one solver step (Perseus default 1 ms)
  double p_static_w = 0.0;    // static (blocking) power of one GPU, W; enters effective energy
  bool reclaim_slack = true;  // after realization, slow non-critical instructions while the
                              // iteration time does not grow
  int64_t max_steps = 0;      // stop after this many steps; 0 = run to the fastest schedule
  bool keep_dominated = false;  // keep realized points another point dominates

  // The first invalid field, its value and the rule; nullopt when valid.
  std::optional<OptionError> Validate() const;
};

// The energy of one iteration, summed over all GPUs:
//   E = sum_s gpus_s * [ sum_{i in s} (E_i - P_static * t_i) + P_static * T ]
// i.e. a GPU draws static power for the whole iteration, blocked or not.
struct Evaluation {
  double time_s = 0.0;           // longest path with realized durations (and P2P times)
  double energy_j = 0.0;
  double static_energy_j = 0.0;  // P_static * T * total GPUs
  double dynamic_energy_j = 0.0; // energy_j - static_energy_j
};

struct IterationPoint {
  Evaluation cost;
  int64_t step = 0;         // solver step that produced it (-1: the direct fastest schedule)
  int64_t quanta = 0;       // the solver's (quantized) iteration time at that step
  double model_energy_j = 0.0;  // the convex model's energy at that step (for diagnostics)
  std::vector<int> choice;  // per DAG node: index into its stage's forward/backward options
};

enum class Status {
  kReachedMinimumTime,  // traced down to the fastest schedule
  kStepLimit,           // stopped at Options::max_steps
  kInfeasibleFlow,      // the lower-bounded flow had no feasible solution (numerical trouble)
  kStalled,             // a step did not shorten the iteration (numerical trouble)
  kInvalidInput,        // see Summary::message; no points
};
const char* ToString(Status status);

struct Summary {
  Status status = Status::kInvalidInput;
  std::string message;
  int64_t steps = 0;             // solver steps taken
  int64_t quanta_slowest = 0;    // iteration time of the slowest assignment, in quanta
  int64_t quanta_fastest = 0;    // iteration time of the fastest assignment, in quanta
  double min_time_s = 0.0;       // real longest path with every instruction at its fastest
  int64_t points_dominated = 0;  // realized points dropped because another dominated them
  int64_t critical_edges_max = 0;  // largest critical sub-DAG seen (edges)
};

struct Result {
  Summary summary;
  schedule::Dag dag;
  // Pareto-optimal realized points in iteration order: slowest (cheapest) first, fastest last.
  std::vector<IterationPoint> points;
};

Result Solve(const Problem& problem, const Options& options);

// Time and energy of `choice` (per DAG node option index) on `dag`.
Evaluation Evaluate(const Problem& problem, const schedule::Dag& dag, const std::vector<int>& choice,
                    double p_static_w);

}  // namespace kareus::pipeline
