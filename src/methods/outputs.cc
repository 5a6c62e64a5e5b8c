// SPDX-License-Identifier: Apache-2.0
// The files of `kareus run` and `kareus evaluate`.
#include <algorithm>
#include <cstdio>
#include <set>

#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/common/progress.h"
#include "kareus/methods/run.h"
#include "kareus/report/report.h"
#include "kareus/workload/workload.h"

namespace kareus::methods {
namespace {

// The solve with every point's cost replaced by its evaluation, so that plans and frontier
// files carry evaluated iteration costs (instructions keep their predicted costs), plan.json is
// the plan with the lowest evaluated time, and that plan is among the written ones.
plan::PlanResult EvaluatedResult(const MethodResult& m) {
  plan::PlanResult out = m.solved;
  for (std::size_t i = 0; i < out.solve.points.size(); ++i) out.solve.points[i].cost = m.evaluated[i];
  out.fastest = m.Fastest();
  if (std::find(out.sampled.begin(), out.sampled.end(), out.fastest) == out.sampled.end()) {
    out.sampled.push_back(out.fastest);
    std::sort(out.sampled.begin(), out.sampled.end());
  }
  return out;
}

}  // namespace

const MethodResult& MainMethod(const RunResult& run) {
  KAREUS_CHECK(!run.methods.empty()) << "a run without methods";
  for (const auto& m : run.methods) {
    if (m.method.name == "kareus") return m;
  }
  return run.methods.back();
}

plan::Plan MakePlan(const MethodResult& m, std::size_t point) {
  return plan::BuildPlan(m.problem, EvaluatedResult(m).solve, point);
}

void WriteRunOutputs(const RunResult& run, const std::filesystem::path& out) {
  const MethodResult& main = MainMethod(run);
  for (const auto& m : run.methods) {
    plan::WriteSolveOutputs(out / "methods" / m.method.name, m.problem, EvaluatedResult(m));
  }
  plan::WriteSolveOutputs(out, main.problem, EvaluatedResult(main));
  const Json summary = ToJson(run.summary);
  WriteJsonFile(out / "summary.json", summary);
  WriteFileAtomic(out / "report.html", report::RenderHtml(summary));
}

EvaluationResult EvaluateWorkloads(const std::vector<std::filesystem::path>& workloads,
                                   const RunOptions& options,
                                   const measure::BackendFactory& make_backend,
                                   const Context& context, const std::filesystem::path& out) {
  ThrowIfInvalid(options.Validate());
  // Validate every file before running anything.
  std::vector<workload::Workload> loaded;
  for (const auto& path : workloads) loaded.push_back(workload::LoadWorkloadFile(path));
  EvaluationResult result;
  result.evaluation = Json{{"format", "kareus.evaluation/1"}, {"rows", Json::array()}};
  for (const auto& w : loaded) {
    RunOptions per = options;
    if (!options.profile.store.empty()) {
      per.profile.store = options.profile.store;
    } else if (!out.empty()) {
      per.profile.store = out / w.name / "measurements.sqlite";
    }
    if (!options.quiet && kareus::Progress::StderrIsTerminal()) {
      std::fprintf(stderr, "kareus: workload %s\n", w.name.c_str());
    }
    const RunResult run = RunWorkload(w, per, make_backend, context);
    if (!out.empty()) WriteRunOutputs(run, out / w.name);
    const Json summary = ToJson(run.summary);
    result.evaluation["rows"].push_back({{"workload", w.name},
                                         {"max_throughput", summary["max_throughput"]},
                                         {"frontier_table", summary["frontier_table"]},
                                         {"interpolated", summary["interpolated"]},
                                         {"checks", summary["checks"]}});
  }
  result.table = report::RenderEvaluationTable(result.evaluation);
  if (!out.empty()) {
    WriteJsonFile(out / "evaluation.json", result.evaluation);
    WriteFileAtomic(out / "evaluation.txt", result.table);
  }
  return result;
}

}  // namespace kareus::methods
