// SPDX-License-Identifier: Apache-2.0
#include "kareus/plan/solve.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kareus/common/error.h"

namespace kareus::plan {
namespace {

std::vector<pipeline::Alternative> ToPipeline(const std::vector<InstructionOption>& options) {
  std::vector<pipeline::Alternative> out;
  out.reserve(options.size());
  for (const InstructionOption& o : options) out.push_back({o.time_s, o.energy_j});
  return out;
}

pipeline::Problem ToPipeline(const PlanProblem& problem) {
  pipeline::Problem out{.schedule = problem.schedule,
                        .num_stages = problem.NumStages(),
                        .num_microbatches = problem.num_microbatches,
                        .num_chunks = problem.num_chunks,
                        .p2p_time_s = problem.p2p_time_s};
  for (const StageOptions& unit : problem.stages) {
    out.forward_options.push_back(ToPipeline(unit.forward));
    out.backward_options.push_back(ToPipeline(unit.backward));
  }
  for (int s = 0; s < problem.NumStages(); ++s) out.gpus_per_stage.push_back(problem.StageGpus(s));
  out.gradient_sync = problem.gradient_sync;
  for (const auto& options : problem.last_backward)
    out.last_backward_options.push_back(ToPipeline(options));
  for (const auto& options : problem.sync_nodes)
    out.gradient_sync_options.push_back(ToPipeline(options));
  return out;
}

// "plans/plan_NNNNN.json", the convention of plan_file.h's FrontierPlanPath.
std::string PlanFileName(std::size_t index) {
  char name[40];
  std::snprintf(name, sizeof(name), "plans/plan_%05zu.json", index);
  return name;
}

}  // namespace

const InstructionOption& ChosenOption(const PlanProblem& problem, const schedule::Dag& dag,
                                      int node, int choice) {
  const schedule::NodeClasses classes = problem.Classes();
  const schedule::NodeClass c = classes.Get(classes.Of(dag, node));
  const std::size_t index = static_cast<std::size_t>(choice);
  switch (c.kind) {
    case schedule::NodeClassKind::kForward:
      return problem.stages[static_cast<std::size_t>(c.index)].forward[index];
    case schedule::NodeClassKind::kBackward:
      return problem.stages[static_cast<std::size_t>(c.index)].backward[index];
    case schedule::NodeClassKind::kLastBackward:
      return problem.last_backward[static_cast<std::size_t>(c.index)][index];
    case schedule::NodeClassKind::kGradientSync:
      break;
  }
  return problem.sync_nodes[static_cast<std::size_t>(c.index)][index];
}

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
  plan.virtual_stages = problem.num_chunks;
  plan.iteration = {.time_s = point.cost.time_s,
                    .energy_j = point.cost.energy_j,
                    .static_energy_j = point.cost.static_energy_j,
                    .dynamic_energy_j = point.cost.dynamic_energy_j};
  const schedule::Dag& dag = result.dag;
  const int num_stages = problem.NumStages();
  plan.stages.resize(static_cast<std::size_t>(num_stages));
  for (int s = 0; s < num_stages; ++s) {
    plan.stages[s].stage = s;
    plan.stages[s].gpus = problem.StageGpus(s);
  }
  // Node ids are stage-major in execution order, so appending keeps the schedule's order; the
  // gradient syncs come after every instruction: the tail is the stage's, a chunk's sync the
  // knobs of the chunk's last backward, which launches it.
  for (std::size_t v = 0; v < dag.nodes.size(); ++v) {
    const schedule::DagNode& inst = dag.nodes[v];
    const InstructionOption& o = ChosenOption(problem, dag, static_cast<int>(v), point.choice[v]);
    PlannedStage& stage = plan.stages[static_cast<std::size_t>(inst.stage)];
    if (inst.node == schedule::NodeKind::kGradientSync) {
      const int sms = o.gradient_sync ? o.gradient_sync->sms : 0;
      if (inst.chunk == 0) {
        stage.gradient_sync = StageGradientSync{
            .freq_mhz = o.freq_mhz, .sms = sms, .time_s = o.time_s, .energy_j = o.energy_j};
        continue;
      }
      for (PlannedInstruction& launching : stage.instructions) {
        if (launching.kind == Direction::kBackward && launching.chunk == inst.chunk &&
            launching.microbatch == problem.num_microbatches - 1) {
          launching.gradient_sync = InstructionGradientSync{.sms = sms, .overlapped = true};
        }
      }
      continue;
    }
    stage.instructions.push_back({.kind = inst.kind,
                                  .chunk = inst.chunk,
                                  .microbatch = inst.microbatch,
                                  .freq_mhz = o.freq_mhz,
                                  .mode = o.mode,
                                  .partitions = o.partitions,
                                  .time_s = o.time_s,
                                  .energy_j = o.energy_j,
                                  .gradient_sync = dag.LaunchesGradientSync(static_cast<int>(v))
                                                       ? o.gradient_sync
                                                       : std::nullopt});
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
    const bool kept =
        std::find(result.sampled.begin(), result.sampled.end(), i) != result.sampled.end();
    file.points.push_back({.time_s = points[i].cost.time_s,
                           .energy_j = points[i].cost.energy_j,
                           .static_energy_j = points[i].cost.static_energy_j,
                           .plan_index = kept ? static_cast<int>(i) : -1,
                           .plan_path = kept ? PlanFileName(i) : std::string()});
  }
  // Re-evaluated costs (e.g. plans run on the emulated cluster) need not keep the solver's
  // order exactly; the file lists points fastest first.
  std::stable_sort(
      file.points.begin(), file.points.end(),
      [](const FrontierPoint& a, const FrontierPoint& b) { return a.time_s < b.time_s; });
  return file;
}

WrittenFiles WriteSolveOutputs(const std::filesystem::path& dir, const PlanProblem& problem,
                               const PlanResult& result) {
  const auto& points = result.solve.points;
  if (points.empty()) {
    ThrowInput("frontier", "[]",
               "nothing to write: the solve produced no points (" +
                   std::string(pipeline::ToString(result.solve.summary.status)) + ": " +
                   result.solve.summary.message + ")");
  }
  // Build everything first so a failure leaves nothing half-written.
  KAREUS_CHECK(result.fastest < points.size())
      << "fastest point " << result.fastest << " out of range";
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
