// SPDX-License-Identifier: Apache-2.0
// The pipeline time-energy solver (docs/ARCHITECTURE.md §6 "The solver").
//
// 1. The convex relaxation, traced exactly (Phillips-Dessouky, reference/perseus-lowtime-zeus.md
//    §A2): every instruction's cost is the lower convex hull of its options' effective energy
//    (real times, no quantization), so the relaxation's least cost C(T) is a LOWER BOUND of every
//    plan's effective energy at iteration time <= T. Starting from every instruction at its
//    cheapest option, each step takes a minimum cut of the critical sub-DAG of the activity-on-
//    arc graph (an arc's upper capacity is the cost of shortening it per second, its lower bound
//    the saving of lengthening it; arcs crossing the cut backwards are lengthened) and moves
//    along that cut as far as it stays optimal: until a moved instruction reaches a hull vertex,
//    or another path becomes critical. The flow of one step stays feasible for the next (an
//    instruction only moves onto a wider capacity interval; arcs join the critical sub-DAG with
//    lower bound 0 and leave it with zero flow), so the max-flow is warm-started: each step
//    augments the previous flow (shortest augmenting paths on flat arrays) instead of solving
//    from scratch. The source side is kept between cuts too: a move changes only the cut's
//    arcs, so the BFS rescans just the events whose arcs changed (capacity, or joining the
//    critical sub-DAG) unless an augmentation or an arc leaving the critical sub-DAG inside the
//    source side forces a fresh BFS; the cut's arcs are the BFS's boundary (critical activity
//    arcs it stopped at), not a scan of the source side. The longest-path passes run over the
//    nodes (each node's start and end event), capacities are flat per-arc arrays. A move skips
//    them when it provably changes nothing they would find: when no critical arc crosses the
//    cut backwards without being lengthened, every critical path shortens by exactly the move,
//    and a path off the critical sub-DAG loses at most (1 + lengthened nodes) x the move of its
//    float; while the moves since the last passes fit in the least float they left (the float
//    budget), no path overtakes and no arc joins or leaves the critical sub-DAG. (16 x 128
//    benchmark: 39 k of 82 k moves ran the passes.)
// 2. Realization: at every deadline T_min + k * unit_time_s the descent passes, the convex
//    durations are rounded down to real options (the cheapest option that fits), then slack is
//    filled in real time (forward/backward passes, first within each instruction's convex
//    segment, then freely), and the result is re-evaluated from the real options.
// 3. The fastest point (T_min), and every deadline of small problems, is improved further:
//    chain search (each stage's compute chain, all its chunks, re-optimized with the other
//    stages' start times fixed: exact while its Pareto layers stay within their cap, which
//    shrinks on long chains of many options, kChainWork), one-exchange local search (within a work
//    budget), then, on DAGs of at most kExactMaxNodes nodes, an exact dynamic program over a
//    topological order (ExactAt: dominance, a per-stage knapsack completion bound, the incumbent);
//    within its budget it proves the point optimal, past it the same search runs as a beam (a
//    heuristic), then (small problems) the same exact search on neighbourhoods of the plan (every
//    pair of stages, windows of the topological order; the other nodes' options fixed).
//    Gradient-sync nodes are in no chain (they run beside the compute stream): the bound counts
//    each alone, at its cheapest option that fits.
// Options, specs and GPU counts are per DAG node class (schedule::NodeClasses: forward/backward per
// (stage, chunk), the last backward per stage, the gradient-sync nodes).
#include "kareus/pipeline/solver.h"

#include <string>
#include <utility>
#include <vector>

#include "kareus/common/error.h"
#include "pipeline/engine.h"

namespace kareus::pipeline {

const char* ToString(Status status) {
  switch (status) {
    case Status::kReachedMinimumTime:
      return "reached_minimum_time";
    case Status::kStepLimit:
      return "step_limit";
    case Status::kStalled:
      return "stalled";
    case Status::kInvalidInput:
      return "invalid_input";
    case Status::kDeadlineInfeasible:
      return "deadline_infeasible";
  }
  return "unknown";
}

const std::vector<Alternative>& OptionsOf(const Problem& problem, const schedule::Dag& dag,
                                          int node) {
  const schedule::NodeClasses classes = internal::ClassesOf(problem);
  return internal::ClassOptions(problem, classes, classes.Of(dag, node));
}

Evaluation Evaluate(const Problem& problem, const schedule::Dag& dag,
                    const std::vector<int>& choice, double p_static_w) {
  KAREUS_CHECK(choice.size() == dag.nodes.size()) << "one option per DAG node";
  return internal::EvaluateWith(problem, dag, choice, p_static_w);
}

Result Solve(const Problem& problem, const Options& options) {
  if (const std::string error = internal::FindInputError(problem, options); !error.empty()) {
    Result result;
    result.summary.status = Status::kInvalidInput;
    result.summary.message = error;
    return result;
  }
  schedule::Dag dag =
      schedule::BuildDag(problem.schedule, problem.num_stages, problem.num_microbatches,
                         problem.num_chunks, problem.gradient_sync);
  internal::Engine engine(problem, options, std::move(dag));
  return engine.Run();
}

}  // namespace kareus::pipeline
