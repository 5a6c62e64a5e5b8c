// SPDX-License-Identifier: Apache-2.0
#include "kareus/plan/solve.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kareus/common/error.h"

namespace kareus::plan {
namespace {

pipeline::Problem ToPipeline(const PlanProblem& problem) {
  pipeline::Problem out{.schedule = problem.schedule,
                        .num_stages = static_cast<int>(problem.stages.size()),
                        .num_microbatches = problem.num_microbatches,
                        .p2p_time_s = problem.p2p_time_s};
  for (const StageOptions& stage : problem.stages) {
    std::vector<pipeline::Option> forward;
    std::vector<pipeline::Option> backward;
    for (const InstructionOption& o : stage.forward) forward.push_back({o.time_s, o.energy_j});
    for (const InstructionOption& o : stage.backward) backward.push_back({o.time_s, o.energy_j});
    out.forward_options.push_back(std::move(forward));
    out.backward_options.push_back(std::move(backward));
    out.gpus_per_stage.push_back(stage.gpus);
  }
  return out;
}

// "plans/plan_NNNNN.json", the convention of plan_file.h's FrontierPlanPath.
std::string PlanFileName(std::size_t index) {
  char name[40];
  std::snprintf(name, sizeof(name), "plans/plan_%05zu.json", index);
  return name;
}

}  // namespace

PlanResult SolvePlans(const PlanProblem& problem, const pipeline::Options& options) {
  PlanResult result;
  result.solve = pipeline::Solve(ToPipeline(problem), options);
  result.unit_time_s = options.unit_time_s;
  result.sampled = SamplePlanIndices(result.solve.points.size());
  result.fastest = result.solve.points.empty() ? 0 : result.solve.points.size() - 1;
  return result;
}

std::vector<std::size_t> SamplePlanIndices(std::size_t n) {
  std::vector<std::size_t> samples;
  if (n <= 10) {  // a short frontier: every plan
    for (std::size_t i = 0; i < n; ++i) samples.push_back(i);
    return samples;
  }
  const std::size_t stride = (n + 14) / 15;
  for (std::size_t k = 0; k < 15 && k * stride <= n - 1; ++k) samples.push_back(n - 1 - k * stride);
  if (samples.size() < 15) {
    // The published stride needs n large enough for 15 samples; below that, 15 evenly spaced
    // plans (distinct for n >= 15), or every plan for n < 15.
    samples.clear();
    const std::size_t count = std::min<std::size_t>(n, 15);
    for (std::size_t k = 0; k < count; ++k) {
      samples.push_back(static_cast<std::size_t>(
          std::llround(double(n - 1) - double(k) * double(n - 1) / double(count - 1))));
    }
  }
  std::sort(samples.begin(), samples.end());
  // Drop positions 0, 2, 4, 6, 8 (the slow end) until ten remain; the fastest is always kept.
  std::vector<std::size_t> kept;
  std::size_t to_drop = samples.size() - 10;
  for (std::size_t pos = 0; pos < samples.size(); ++pos) {
    if (to_drop > 0 && pos % 2 == 0) {
      --to_drop;
      continue;
    }
    kept.push_back(samples[pos]);
  }
  return kept;
}

Plan BuildPlan(const PlanProblem& problem, const pipeline::Result& result, std::size_t index) {
  KAREUS_CHECK(index < result.points.size()) << "plan index " << index << " out of range";
  const pipeline::IterationPoint& point = result.points[index];
  Plan plan;
  plan.method = problem.method;
  plan.workload = problem.workload;
  plan.schedule = problem.schedule;
  plan.num_microbatches = problem.num_microbatches;
  plan.iteration = {.time_s = point.cost.time_s,
                    .energy_j = point.cost.energy_j,
                    .static_energy_j = point.cost.static_energy_j,
                    .dynamic_energy_j = point.cost.dynamic_energy_j};
  const schedule::Dag& dag = result.dag;
  plan.stages.resize(problem.stages.size());
  for (std::size_t s = 0; s < problem.stages.size(); ++s) {
    plan.stages[s].stage = static_cast<int>(s);
    plan.stages[s].gpus = problem.stages[s].gpus;
  }
  // Node ids are stage-major in execution order, so appending keeps the schedule's order.
  for (std::size_t v = 0; v < dag.nodes.size(); ++v) {
    const schedule::Instruction& inst = dag.nodes[v];
    const bool forward = inst.kind == Direction::kForward;
    const StageOptions& stage = problem.stages[inst.stage];
    const InstructionOption& o = (forward ? stage.forward : stage.backward)[point.choice[v]];
    plan.stages[inst.stage].instructions.push_back(
        {.kind = inst.kind,
         .chunk = inst.chunk,
         .microbatch = inst.microbatch,
         .freq_mhz = o.freq_mhz,
         .mode = o.mode,
         .partitions = o.partitions,
         .time_s = o.time_s,
         .energy_j = o.energy_j});
  }
  return plan;
}

FrontierFile BuildFrontierFile(const PlanProblem& problem, const PlanResult& result) {
  FrontierFile file;
  file.method = problem.method;
  file.workload = problem.workload;
  file.representation = "deadline-grid";
  file.unit_time_s = result.unit_time_s;
  const auto& points = result.solve.points;
  for (std::size_t i = points.size(); i-- > 0;) {  // fastest first
    const bool kept = std::find(result.sampled.begin(), result.sampled.end(), i) !=
                      result.sampled.end();
    file.points.push_back({.time_s = points[i].cost.time_s,
                           .energy_j = points[i].cost.energy_j,
                           .static_energy_j = points[i].cost.static_energy_j,
                           .plan_index = kept ? static_cast<int>(i) : -1,
                           .plan_path = kept ? PlanFileName(i) : std::string()});
  }
  // Re-evaluated costs (e.g. plans run on the emulated cluster) need not keep the solver's
  // order exactly; the file lists points fastest first.
  std::stable_sort(file.points.begin(), file.points.end(),
                   [](const FrontierPoint& a, const FrontierPoint& b) { return a.time_s < b.time_s; });
  return file;
}

WrittenFiles WriteSolveOutputs(const std::filesystem::path& dir, const PlanProblem& problem,
                               const PlanResult& result) {
  const auto& points = result.solve.points;
  if (points.empty()) {
    ThrowInput("frontier", "[]", "nothing to write: the solve produced no points (" +
                                     std::string(pipeline::ToString(result.solve.summary.status)) +
                                     ": " + result.solve.summary.message + ")");
  }
  // Build everything first so a failure leaves nothing half-written.
  KAREUS_CHECK(result.fastest < points.size()) << "fastest point " << result.fastest << " out of range";
  const Plan fastest = BuildPlan(problem, result.solve, result.fastest);
  const FrontierFile frontier = BuildFrontierFile(problem, result);
  std::vector<std::pair<std::filesystem::path, Plan>> sampled;
  for (std::size_t index : result.sampled) {
    sampled.emplace_back(dir / PlanFileName(index), BuildPlan(problem, result.solve, index));
  }
  // Validate every plan the way a reader will (e.g. only 1F1B plans are files) before writing.
  PlanFromJson(ToJson(fastest));
  for (const auto& entry : sampled) PlanFromJson(ToJson(entry.second));
  WrittenFiles files{.plan = dir / "plan.json", .frontier = dir / "frontier.json"};
  for (const auto& [path, plan] : sampled) {
    WritePlanFile(path, plan);
    files.plans.push_back(path);
  }
  WriteFrontierFile(files.frontier, frontier);
  WritePlanFile(files.plan, fastest);
  return files;
}

}  // namespace kareus::plan
