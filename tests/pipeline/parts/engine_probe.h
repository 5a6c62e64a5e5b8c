// SPDX-License-Identifier: Apache-2.0
// The solver parts' tests (tests/pipeline/parts/*_test.cc): small deterministic problems, an
// engine built on one, and EngineProbe, the tests' window on the engine's private state.
#pragma once

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "kareus/pipeline/solver.h"
#include "kareus/schedule/schedule.h"
#include "pipeline/engine.h"

namespace kareus::pipeline::internal {

struct EngineProbe {
  static int Nodes(const Engine& e) { return e.n_; }
  static const Dag& DagOf(const Engine& e) { return e.dag_; }
  static const Adjacency& Preds(const Engine& e) { return e.preds_; }
  static const Adjacency& Succs(const Engine& e) { return e.succs_; }
  static int NumArcs(const Engine& e) { return static_cast<int>(e.arc_from_.size()); }
  static const std::vector<int>& ArcAct(const Engine& e) { return e.arc_act_; }
  static const std::vector<int>& SourceArc(const Engine& e) { return e.source_arc_; }
  static const std::vector<int>& SinkArc(const Engine& e) { return e.sink_arc_; }
  static const std::vector<int>& SinkNodes(const Engine& e) { return e.sink_nodes_; }
  static const std::vector<double>& Up(const Engine& e) { return e.up_; }
  static const std::vector<double>& Durations(const Engine& e) { return e.dur_; }
  static const std::vector<char>& Critical(const Engine& e) { return e.critical_; }
  static const std::vector<std::vector<int>>& Chains(const Engine& e) { return e.chains_; }
  static double FlowValue(const Engine& e) { return e.flow_value_; }
  static double StaticPower(const Engine& e) { return e.pg_; }
  static double TimeTolerance(const Engine& e) { return e.time_tol_; }
  static const std::vector<int>& Shortened(const Engine& e) { return e.shorten_; }
  static const std::vector<IterationPoint>& Points(const Engine& e) { return e.raw_; }
  static int64_t Steps(const Engine& e) { return e.steps_; }
};

}  // namespace kareus::pipeline::internal

namespace kareus::pipeline::parts_test {

using internal::Engine;
using internal::EngineProbe;

// Options t_k = base * (1 + 0.25 k), energy falling with time (a convex trade-off): k = 0 is
// the fastest.
inline std::vector<Alternative> Ladder(double base, int count) {
  std::vector<Alternative> options;
  for (int k = 0; k < count; ++k) {
    const double t = base * (1.0 + 0.25 * k);
    options.push_back({.time_s = t, .energy_j = 300.0 * base * base / t + 80.0 * t});
  }
  return options;
}

inline Problem LadderProblem(int stages, int microbatches, int count = 3) {
  Problem problem;
  problem.num_stages = stages;
  problem.num_microbatches = microbatches;
  for (int s = 0; s < stages; ++s) {
    problem.forward_options.push_back(Ladder(0.010 + 0.002 * s, count));
    problem.backward_options.push_back(Ladder(0.020 + 0.003 * s, count));
  }
  return problem;
}

inline Options StaticPower(double p_static_w) {
  Options options;
  options.p_static_w = p_static_w;
  return options;
}

// An engine on `problem` (kept here: the engine holds references to the problem and options).
class Harness {
 public:
  explicit Harness(Problem problem, Options options = StaticPower(80.0))
      : problem_(std::move(problem)), options_(options) {
    engine_.emplace(
        problem_, options_,
        schedule::BuildDag(problem_.schedule, problem_.num_stages, problem_.num_microbatches,
                           problem_.num_chunks, problem_.gradient_sync));
  }
  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;

  Engine& engine() { return *engine_; }
  const Problem& problem() const { return problem_; }
  const Options& options() const { return options_; }
  // BuildModel and BuildChains, as Engine::Run starts.
  Engine& Built() {
    engine_->BuildModel();
    engine_->BuildChains();
    return *engine_;
  }

 private:
  Problem problem_;
  Options options_;
  std::optional<Engine> engine_;
};

}  // namespace kareus::pipeline::parts_test
