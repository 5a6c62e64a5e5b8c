// SPDX-License-Identifier: Apache-2.0
// The iteration time-energy frontier of a synchronous pipeline: for every deadline on a grid
// (T_min + k * unit_time_s), the least-energy plan the solver finds with iteration time <= the
// deadline. Perseus/lowtime's Phillips-Dessouky time-cost tradeoff (reference/perseus-lowtime-
// zeus.md §A2) with these changes:
//   * the cost of an instruction is the lower convex hull of its discrete options' effective
//     energy (E - P_static * t, summed over the stage's GPUs) over their REAL times, instead of
//     lowtime's exponential fit on quantized times: the convex model is the continuous
//     relaxation, and its least cost at a deadline is a lower bound of every real plan's;
//   * the descent moves along one minimum cut as far as the cut stays optimal (until an
//     instruction reaches a hull vertex or another path becomes critical), so the relaxation's
//     optimum is known exactly at every time; the max-flow is warm-started from the previous
//     cut's flow (flat arrays, augmenting paths);
//   * each grid deadline is realized with real options (the cheapest option within the convex
//     duration), refined in real time (slack filled) and re-evaluated from the realized options
//     (never model values); the fastest point is optimized further at T_min (pinned critical
//     instructions, exact search of the independent rest within a budget, local search);
//   * statuses instead of crashes.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kareus/common/error.h"
#include "kareus/schedule/schedule.h"

namespace kareus::pipeline {

// One way to execute an instruction (an alternative among its options; not an Options struct):
// its duration and its energy on ONE GPU of the stage.
struct Alternative {
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
  std::vector<std::vector<Alternative>> forward_options = {};   // [u] options of every forward
  std::vector<std::vector<Alternative>> backward_options = {};  // [u] options of every backward
  schedule::GradientSync gradient_sync = schedule::GradientSync::kNone;
  // kOverlapped: [stage] the stage's last instruction (the last backward of chunk 0), which
  // reduces the buckets it completes during or right after it.
  std::vector<std::vector<Alternative>> last_backward_options = {};
  // [stage * K + c] for the K = Dag::SyncNodesPerStage() sync nodes of each stage (c = 0: the
  // tail after the stage's last instruction; c > 0: chunk c's buckets, kOverlapped).
  std::vector<std::vector<Alternative>> gradient_sync_options = {};
  std::vector<int> gpus_per_stage = {};  // GPUs running each stage (TP x CP x DP); empty = 1 each
  double p2p_time_s = 0.0;               // transfer time on every cross-stage edge
};

// The option list of DAG node `node` (the node classes above).
const std::vector<Alternative>& OptionsOf(const Problem& problem, const schedule::Dag& dag,
                                          int node);

// Where a running solve is: called after every step (a long solve can show progress).
struct SolveProgress {
  int64_t step = 0;
  double time_now_s = 0.0;      // iteration time of the current schedule
  double time_fastest_s = 0.0;  // where the solve ends
  double time_slowest_s = 0.0;  // where it started
};

struct Options {
  double unit_time_s = 1e-3;    // spacing of the frontier's deadlines (Perseus default 1 ms)
  double p_static_w = 0.0;      // static (blocking) power of one GPU, W; enters effective energy
  bool reclaim_slack = true;    // after realization, slow instructions while the iteration time
                                // stays within the point's deadline
  int64_t max_steps = 0;        // stop after this many cuts (moves); 0 = run to the fastest
  bool keep_dominated = false;  // keep realized points another point dominates
  double deadline_s = 0.0;      // > 0: only the least-energy plan with iteration time <= this
                                // deadline (one point; below the minimum time: no point and
                                // status kDeadlineInfeasible)
  std::function<void(const SolveProgress&)> progress = nullptr;  // after every step; optional
  // Tests only (slower): after every incremental BFS of the max-flow (the source side kept
  // from the previous cut), run a fresh BFS from the source too, count the cuts whose source
  // sides differ (Summary::incremental_cut_mismatches) and continue from the fresh one. The
  // incremental source side must always equal the fresh one; the count says when it did not.
  // Likewise every move that skipped the longest-path passes (its float budget sufficed) runs
  // them anyway and counts where they would have changed the move or the critical sub-DAG
  // (Summary::skipped_pass_mismatches), continuing from what they found.
  bool check_incremental_cuts = false;

  // The first invalid field, its value and the rule; nullopt when valid.
  std::optional<OptionError> Validate() const;
};

// The energy of one iteration, summed over all GPUs:
//   E = sum_s gpus_s * [ sum_{i in s} (E_i - P_static * t_i) + P_static * T ]
// i.e. a GPU draws static power for the whole iteration, blocked or not.
struct Evaluation {
  double time_s = 0.0;  // longest path with realized durations (and P2P times)
  double energy_j = 0.0;
  double static_energy_j = 0.0;   // P_static * T * total GPUs
  double dynamic_energy_j = 0.0;  // energy_j - static_energy_j
};

struct IterationPoint {
  Evaluation cost;
  int64_t step = 0;             // cuts computed before this point's deadline was reached
  int64_t quanta = 0;           // k of the deadline T_min + k * unit_time_s (-1: deadline_s mode)
  double deadline_s = 0.0;      // the deadline this plan was made for (cost.time_s <= deadline_s)
  double model_energy_j = 0.0;  // the convex relaxation's least energy at deadline_s (its
                                // effective cost + static energy at deadline_s): a LOWER BOUND
                                // of every plan with iteration time <= deadline_s (deadlines
                                // are <= T*, below which the relaxation's energy falls with time)
  bool exact = false;           // proven the least energy at deadline_s (the exact search finished;
                                // model_energy_j is then this point's energy)
  std::vector<int> choice;      // per DAG node: index into its class's options (OptionsOf)
};

enum class Status {
  kReachedMinimumTime,  // traced down to the fastest schedule
  kStepLimit,           // stopped at Options::max_steps
  kStalled,             // a step did not shorten the iteration (numerical trouble)
  kInvalidInput,        // see Summary::message; no points
  kDeadlineInfeasible,  // Options::deadline_s is below the minimum iteration time; no points
};
const char* ToString(Status status);

struct Summary {
  Status status = Status::kInvalidInput;
  std::string message;
  int64_t steps = 0;               // minimum cuts moved along
  int64_t augmentations = 0;       // augmenting paths of the warm-started max-flow, all cuts
  double min_time_s = 0.0;         // real longest path with every instruction at its fastest
  double max_time_s = 0.0;         // real longest path with every instruction at its cheapest
  int64_t deadlines = 0;           // deadlines realized (points before the dominance filter)
  int64_t points_dominated = 0;    // realized points dropped because another dominated them
  int64_t critical_edges_max = 0;  // largest critical sub-DAG seen (arcs)
  // With Options::check_incremental_cuts: incremental BFSs whose source side differed from a
  // fresh BFS's (0 when the incremental max-flow is right); 0 otherwise.
  int64_t incremental_cut_mismatches = 0;
  int64_t incremental_cuts_checked = 0;  // incremental BFSs compared with a fresh one
  // State comparisons the exact searches (and their beams) spent, every deadline together (at
  // most 5 M per search at the fastest point or a deadline; the whole-frontier search of small
  // problems also counts the candidates it examined, ~100 M at most: it stops at the first
  // layer past that).
  int64_t exact_search_work = 0;
  // Small problems (at most 160 node-options): every deadline's least-energy plan found by one
  // exact search over the whole frontier (then every point is exact); false when there was none
  // or it ran out of budget (then each deadline was searched on its own, as before).
  bool exact_frontier = false;
  // Moves that needed the longest-path passes (a critical arc crossed the cut backwards without
  // being lengthened, or the move did not fit in the float budget, so a path might overtake);
  // the others moved along the cut without them (see solver.cc, part 1).
  int64_t full_passes = 0;
  // With Options::check_incremental_cuts: skipped passes that would have shortened the move or
  // changed an arc's criticality (0 when the float budget is right); 0 otherwise.
  int64_t skipped_pass_mismatches = 0;
  // Where the time went (wall clock, for benchmarks; never compared in tests): the convex
  // descent (cuts, moves, passes), realizing every deadline's plan (fastest point included),
  // and of that the fastest point's extra searches.
  double descent_wall_s = 0.0;
  double realize_wall_s = 0.0;
  double fastest_point_wall_s = 0.0;
};

struct Result {
  Summary summary;
  schedule::Dag dag;
  // Pareto-optimal realized points in iteration order: slowest (cheapest) first, fastest last.
  // The plan for a deadline T on the grid is the cheapest point with cost.time_s <= T.
  std::vector<IterationPoint> points;
};

Result Solve(const Problem& problem, const Options& options);

// Time and energy of `choice` (per DAG node option index) on `dag`.
Evaluation Evaluate(const Problem& problem, const schedule::Dag& dag,
                    const std::vector<int>& choice, double p_static_w);

}  // namespace kareus::pipeline
