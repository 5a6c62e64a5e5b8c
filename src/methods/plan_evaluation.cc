// SPDX-License-Identifier: Apache-2.0
// The evaluation of a method run's plans (methods/flow_internal.h): every option the frontier
// uses evaluated once, each plan's iteration through the DAG, the dominated plans dropped, and
// the composition error.
#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "kareus/common/error.h"
#include "kareus/pareto/pareto.h"
#include "methods/flow_internal.h"

namespace kareus::methods::internal {
namespace {

measure::InstructionKnobs ToKnobs(const plan::InstructionOption& option) {
  measure::InstructionKnobs out{.freq_mhz = option.freq_mhz, .mode = option.mode, .partitions = {}};
  for (const auto& p : option.partitions) out.partitions[p.type] = {.sms = p.sms, .slot = p.slot};
  return out;
}

}  // namespace

// The reading index of the evaluation's runs (InstructionRequest::repeat): past every reading
// the plans were made on (the first and RunOptions::confirm_readings more), so that a measured
// evaluation is a run of its own, as on a GPU, not a replay of the reading that chose the
// option (the emulator keys its noise on the index; the noise-free twin has none).
int MethodRun::EvaluationRepeat() const { return options_.confirm_readings + 1; }

// The options some frontier plan uses, per distinct unit or stage: what Evaluate evaluates.
struct UsedOptions {
  std::vector<int> stage_rep;  // per stage: the stage evaluated for it (the same units)
  std::vector<std::array<std::set<int>, 2>> units;  // per unit: forward, backward options
  std::vector<std::set<int>> last;                  // per stage: last backward options
  std::vector<std::set<int>> sync;                  // per sync node list
};

// Every option some frontier plan uses is evaluated once (per distinct unit or stage, one
// batch per kind); the DAG then gives each plan's iteration time and energy. A last backward
// that reduces its buckets after it is the backward's run plus the buckets' run. Not
// evaluated: predictions.
void MethodRun::Evaluate() {
  const pipeline::Result& solved = result_.solved.solve;
  const plan::PlanProblem& problem = result_.problem;
  result_.option_evaluations.assign(model_.stages.size(), {});
  result_.last_backward_evaluations.assign(problem.last_backward.size(), {});
  result_.sync_evaluations.assign(problem.sync_nodes.size(), {});
  if (!evaluator_.Evaluates()) {
    for (const auto& point : solved.points) result_.evaluated.push_back(point.cost);
    return;
  }
  const UsedOptions used = UsedByFrontier();
  const double before = evaluator_.GpuSeconds();
  EvaluateUnitOptions(used);
  EvaluateStageOptions(used);
  const pipeline::Problem truth = EvaluatedProblem();
  for (const auto& point : solved.points) {
    // A GPU that waits (pipeline bubbles, P2P receives) draws the board's idle power.
    result_.evaluated.push_back(
        pipeline::Evaluate(truth, solved.dag, point.choice, backend_.IdlePowerW()));
  }
  EvaluateComposition();
  result_.evaluation_gpu_seconds = evaluator_.GpuSeconds() - before;
}

// The options the frontier's plans choose, each under the unit or stage evaluated for its own.
UsedOptions MethodRun::UsedByFrontier() const {
  const pipeline::Result& solved = result_.solved.solve;
  const plan::PlanProblem& problem = result_.problem;
  const int stages = model_.num_stages;
  const int per_stage = problem.SyncNodesPerStage();
  const schedule::Dag& dag = solved.dag;
  // Stages with the same units are evaluated once: stage_rep[s].
  std::vector<int> stage_rep(static_cast<std::size_t>(stages));
  {
    std::map<std::vector<int>, int> first;
    for (int s = 0; s < stages; ++s) {
      std::vector<int> key;
      for (int c = 0; c < model_.num_chunks; ++c) key.push_back(reps_[s * model_.num_chunks + c]);
      stage_rep[s] = first.try_emplace(key, s).first->second;
    }
  }
  std::vector<std::array<std::set<int>, 2>> used(model_.stages.size());
  std::vector<std::set<int>> used_last(problem.last_backward.size());
  std::vector<std::set<int>> used_sync(problem.sync_nodes.size());
  const schedule::NodeClasses classes = problem.Classes();
  for (const auto& point : solved.points) {
    for (std::size_t node = 0; node < point.choice.size(); ++node) {
      const schedule::NodeClass c = classes.Get(classes.Of(dag, static_cast<int>(node)));
      const int option = point.choice[node];
      switch (c.kind) {
        case schedule::NodeClassKind::kForward:
        case schedule::NodeClassKind::kBackward:
          used[reps_[c.index]][c.kind == schedule::NodeClassKind::kForward ? 0 : 1].insert(option);
          break;
        case schedule::NodeClassKind::kLastBackward:
          used_last[stage_rep[c.stage]].insert(option);
          break;
        case schedule::NodeClassKind::kGradientSync:
          used_sync[stage_rep[c.stage] * per_stage + c.chunk].insert(option);
          break;
      }
    }
  }
  return {.stage_rep = std::move(stage_rep),
          .units = std::move(used),
          .last = std::move(used_last),
          .sync = std::move(used_sync)};
}

// The used forward and backward options, one batch per distinct unit, copied to the units
// measured with it.
void MethodRun::EvaluateUnitOptions(const UsedOptions& used) {
  const plan::PlanProblem& problem = result_.problem;
  const std::size_t units = model_.stages.size();
  for (std::size_t u = 0; u < units; ++u) {
    if (reps_[u] != static_cast<int>(u)) continue;
    const auto& unit = model_.stages[u];
    std::vector<measure::InstructionRequest> batch;
    for (int kind = 0; kind < 2; ++kind) {
      const auto& list = kind == 0 ? problem.stages[u].forward : problem.stages[u].backward;
      for (int option : used.units[u][kind]) {
        batch.push_back({.stage = unit.stage,
                         .direction = kind == 0 ? Direction::kForward : Direction::kBackward,
                         .knobs = ToKnobs(list[static_cast<std::size_t>(option)]),
                         .chunk = unit.chunk,
                         .repeat = EvaluationRepeat()});
      }
    }
    const std::vector<measure::Sample> samples = evaluator_.EvaluateInstructions(model_, batch);
    std::size_t i = 0;
    for (int kind = 0; kind < 2; ++kind) {
      for (int option : used.units[u][kind])
        result_.option_evaluations[u][kind][option] = samples[i++];
    }
  }
  for (std::size_t u = 0; u < units; ++u)
    result_.option_evaluations[u] = result_.option_evaluations[reps_[u]];
}

// The used last backward and sync node options of every distinct stage, copied to the stages
// with the same units.
void MethodRun::EvaluateStageOptions(const UsedOptions& used) {
  const int stages = model_.num_stages;
  const int per_stage = result_.problem.SyncNodesPerStage();
  for (int s = 0; s < stages; ++s) {
    if (used.stage_rep[s] == s) EvaluateStage(s, used);
  }
  for (int s = 0; s < stages; ++s) {
    if (!result_.last_backward_evaluations.empty()) {
      result_.last_backward_evaluations[s] = result_.last_backward_evaluations[used.stage_rep[s]];
    }
    for (int c = 0; c < per_stage; ++c) {
      result_.sync_evaluations[s * per_stage + c] =
          result_.sync_evaluations[used.stage_rep[s] * per_stage + c];
    }
  }
}

// One distinct stage: its used last backwards (instructions, their buckets' reduction, or
// both) and sync nodes, one batch of instructions and one of gradient syncs.
void MethodRun::EvaluateStage(int s, const UsedOptions& used) {
  const plan::PlanProblem& problem = result_.problem;
  const int per_stage = problem.SyncNodesPerStage();
  std::vector<measure::InstructionRequest> instructions;
  std::vector<measure::GradientSyncRequest> syncs;
  // (last backward option, instruction index, sync index)
  std::vector<std::tuple<int, int, int>> lasts;
  for (int option : s < static_cast<int>(used.last.size()) ? used.last[s] : std::set<int>{}) {
    const plan::InstructionOption& o = problem.last_backward[s][static_cast<std::size_t>(option)];
    int instruction = -1, sync = -1;
    const bool overlap = o.gradient_sync && o.gradient_sync->overlapped;
    if (!overlap) {
      instruction = static_cast<int>(instructions.size());
      instructions.push_back({.stage = s,
                              .direction = Direction::kBackward,
                              .knobs = ToKnobs(o),
                              .chunk = 0,
                              .repeat = EvaluationRepeat()});
    }
    if (o.gradient_sync) {
      sync = static_cast<int>(syncs.size());
      syncs.push_back({.stage = s,
                       .work = overlap ? measure::GradientSyncWork::kOverlapped
                                       : measure::GradientSyncWork::kLastBuckets,
                       .freq_mhz = o.freq_mhz,
                       .sms = o.gradient_sync->sms,
                       .repeat = EvaluationRepeat()});
    }
    lasts.push_back({option, instruction, sync});
  }
  std::vector<std::pair<int, int>> nodes;  // (sync node list index, option)
  for (int c = 0; c < per_stage; ++c) {
    for (int option : used.sync[s * per_stage + c]) {
      const plan::InstructionOption& o =
          problem.sync_nodes[s * per_stage + c][static_cast<std::size_t>(option)];
      syncs.push_back({.stage = s,
                       .chunk = c,
                       .work = measure::GradientSyncWork::kSyncNode,
                       .freq_mhz = o.freq_mhz,
                       .sms = o.gradient_sync ? o.gradient_sync->sms : 1,
                       .repeat = EvaluationRepeat()});
      nodes.push_back({s * per_stage + c, option});
    }
  }
  const std::vector<measure::Sample> ran = evaluator_.EvaluateInstructions(model_, instructions);
  const std::vector<measure::Sample> synced = syncs.empty()
                                                  ? std::vector<measure::Sample>{}
                                                  : evaluator_.EvaluateGradientSync(model_, syncs);
  for (const auto& [option, instruction, sync] : lasts) {
    measure::Sample sample = instruction >= 0 ? ran[instruction] : synced[sync];
    if (instruction >= 0 && sync >= 0) {
      sample.time_s += synced[sync].time_s;
      sample.energy_j += synced[sync].energy_j;
      sample.static_energy_j += synced[sync].static_energy_j;
      sample.dynamic_energy_j += synced[sync].dynamic_energy_j;
    }
    result_.last_backward_evaluations[s][option] = sample;
  }
  const std::size_t first_node = syncs.size() - nodes.size();
  for (std::size_t k = 0; k < nodes.size(); ++k) {
    result_.sync_evaluations[nodes[k].first][nodes[k].second] = synced[first_node + k];
  }
}

// The solver's problem with every used option replaced by its evaluation.
pipeline::Problem MethodRun::EvaluatedProblem() const {
  const plan::PlanProblem& problem = result_.problem;
  const int stages = model_.num_stages;
  pipeline::Problem truth{.schedule = problem.schedule,
                          .num_stages = stages,
                          .num_microbatches = problem.num_microbatches,
                          .num_chunks = model_.num_chunks,
                          .gradient_sync = problem.gradient_sync,
                          .p2p_time_s = problem.p2p_time_s};
  auto fill = [](std::size_t size, const std::map<int, measure::Sample>& evaluated) {
    std::vector<pipeline::Alternative> list(size);
    for (const auto& [option, sample] : evaluated) {
      list[static_cast<std::size_t>(option)] = {.time_s = sample.time_s,
                                                .energy_j = sample.energy_j};
    }
    return list;
  };
  for (int st = 0; st < stages; ++st) truth.gpus_per_stage.push_back(problem.StageGpus(st));
  for (std::size_t u = 0; u < model_.stages.size(); ++u) {
    truth.forward_options.push_back(
        fill(problem.stages[u].forward.size(), result_.option_evaluations[u][0]));
    truth.backward_options.push_back(
        fill(problem.stages[u].backward.size(), result_.option_evaluations[u][1]));
  }
  for (std::size_t s = 0; s < problem.last_backward.size(); ++s) {
    truth.last_backward_options.push_back(
        fill(problem.last_backward[s].size(), result_.last_backward_evaluations[s]));
  }
  for (std::size_t i = 0; i < problem.sync_nodes.size(); ++i) {
    truth.gradient_sync_options.push_back(
        fill(problem.sync_nodes[i].size(), result_.sync_evaluations[i]));
  }
  return truth;
}

// The solver's frontier is Pareto-optimal on its predictions; evaluated, a plan can turn out
// slower and costlier than another (the prediction error differs between plans). Such plans
// are dropped (recorded in result_.dropped) and the rest ordered slowest evaluated time
// first; the published sample is then taken over what remains, so every sampled plan and
// every plan file is on the evaluated frontier.
void MethodRun::DropDominatedPoints() {
  std::vector<pipeline::IterationPoint>& points = result_.solved.solve.points;
  std::vector<pareto::Point> all;
  for (std::size_t i = 0; i < points.size(); ++i) {
    all.push_back({.time_s = result_.evaluated[i].time_s,
                   .energy_j = result_.evaluated[i].energy_j,
                   .payload = static_cast<int64_t>(i)});
  }
  const std::vector<pareto::Point> front = pareto::Filter(all);  // time ascending
  if (front.size() == points.size()) return;
  std::vector<bool> kept(points.size(), false);
  for (const auto& p : front) kept[static_cast<std::size_t>(p.payload)] = true;
  // Kept points slowest first: the new index of front[k] is front.size() - 1 - k.
  std::vector<pipeline::IterationPoint> kept_points;
  std::vector<pipeline::Evaluation> kept_evaluated;
  for (auto it = front.rbegin(); it != front.rend(); ++it) {
    kept_points.push_back(points[static_cast<std::size_t>(it->payload)]);
    kept_evaluated.push_back(result_.evaluated[static_cast<std::size_t>(it->payload)]);
  }
  for (std::size_t i = 0; i < points.size(); ++i) {
    if (kept[i]) continue;
    // The fastest-ordered front's last point no slower than this one has the least energy of
    // all such points, so it dominates it.
    const auto after =
        std::upper_bound(front.begin(), front.end(), result_.evaluated[i].time_s,
                         [](double t, const pareto::Point& p) { return t < p.time_s; });
    KAREUS_CHECK(after != front.begin()) << "a dropped point with no point no slower";
    const std::size_t k = static_cast<std::size_t>(after - front.begin()) - 1;
    result_.dropped.push_back({.solver_index = i,
                               .dominated_by = front.size() - 1 - k,
                               .predicted = points[i].cost,
                               .evaluated = result_.evaluated[i]});
  }
  points = std::move(kept_points);
  result_.evaluated = std::move(kept_evaluated);
  result_.solved.sampled = plan::SamplePlanIndices(points.size());
  result_.solved.fastest = points.size() - 1;
}

// Composition error: every composed option the method planned on (nanobatched with tuned
// knobs; the fallbacks are measured instructions) against the same instruction evaluated end
// to end, one batch per distinct (stage, chunk) unit (units measured once share options).
void MethodRun::EvaluateComposition() {
  for (int u = 0; u < static_cast<int>(model_.stages.size()); ++u) {
    if (reps_[u] != u) continue;
    const int s = model_.stages[u].stage;
    std::vector<measure::InstructionRequest> batch;
    std::vector<const plan::InstructionOption*> options;
    for (Direction d : {Direction::kForward, Direction::kBackward}) {
      for (const auto& option : OptionsOf(result_.problem, u, d)) {
        if (option.mode != ExecutionMode::kNanobatched || option.partitions.empty()) continue;
        batch.push_back({.stage = s,
                         .direction = d,
                         .knobs = ToKnobs(option),
                         .chunk = model_.stages[u].chunk,
                         .repeat = EvaluationRepeat()});
        options.push_back(&option);
      }
    }
    if (batch.empty()) continue;
    const std::vector<measure::Sample> samples = evaluator_.EvaluateInstructions(model_, batch);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      result_.composition.push_back({.stage = s,
                                     .forward = batch[i].direction == Direction::kForward,
                                     .freq_mhz = options[i]->freq_mhz,
                                     .composed_time_s = options[i]->time_s,
                                     .composed_energy_j = options[i]->energy_j,
                                     .evaluated_time_s = samples[i].time_s,
                                     .evaluated_energy_j = samples[i].energy_j});
    }
  }
}

}  // namespace kareus::methods::internal
