// SPDX-License-Identifier: Apache-2.0
// The files of `kareus run` and `kareus evaluate`.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>

#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/common/progress.h"
#include "kareus/methods/run.h"
#include "kareus/plan/timetable.h"
#include "kareus/report/report.h"
#include "kareus/workload/workload.h"

namespace kareus::methods {
namespace {

// The solve with every point's cost replaced by its evaluation, so that plans and frontier
// files carry evaluated iteration costs (instructions keep their predicted costs), plan.json is
// the plan with the lowest evaluated time, and the plans written are WrittenPlanIndices.
// summary.json's sampled plans stay the published sample (m.solved.sampled).
plan::PlanResult EvaluatedResult(const MethodResult& m) {
  plan::PlanResult out = m.solved;
  for (std::size_t i = 0; i < out.solve.points.size(); ++i)
    out.solve.points[i].cost = m.evaluated[i];
  out.fastest = m.Fastest();
  out.sampled = WrittenPlanIndices(m);
  return out;
}

}  // namespace

std::vector<std::size_t> WrittenPlanIndices(const MethodResult& m) {
  std::vector<double> time_s, energy_j, static_energy_j;
  for (const auto& e : m.evaluated) {
    time_s.push_back(e.time_s);
    energy_j.push_back(e.energy_j);
    static_energy_j.push_back(e.static_energy_j);
  }
  std::vector<std::size_t> indices = m.solved.sampled;
  indices.push_back(m.Fastest());
  for (std::size_t i : plan::BudgetPlanIndices(time_s, energy_j, static_energy_j))
    indices.push_back(i);
  std::sort(indices.begin(), indices.end());
  indices.erase(std::unique(indices.begin(), indices.end()), indices.end());
  return indices;
}

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

std::vector<workload::Workload> LoadEvaluationWorkloads(
    const std::vector<std::filesystem::path>& workloads) {
  std::vector<workload::Workload> loaded;
  for (const auto& path : workloads) {
    loaded.push_back(workload::LoadWorkloadFile(path));
    for (std::size_t i = 0; i + 1 < loaded.size(); ++i) {
      if (loaded[i].name == loaded.back().name) {
        ThrowInput(path.string() + ": name", loaded.back().name,
                   "another workload of this evaluation (" + workloads[i].string() +
                       ") has this name; each writes its own folder OUT/<name>");
      }
    }
  }
  return loaded;
}

std::filesystem::path EvaluationStore(const RunOptions& options, const workload::Workload& w,
                                      const std::filesystem::path& out) {
  if (!options.profile.store.empty()) return options.profile.store;
  if (!out.empty()) return out / w.name / "measurements.sqlite";
  return {};
}

std::vector<std::filesystem::path> EvaluationRelatedStores(
    const RunOptions& options, const std::vector<workload::Workload>& loaded, std::size_t index,
    const std::filesystem::path& out) {
  std::vector<std::filesystem::path> related = options.profile.related_stores;
  if (!options.profile.transfer || !options.profile.store.empty() || out.empty()) return related;
  const workload::Workload& w = loaded.at(index);
  for (std::size_t j = 0; j < index; ++j) {
    const workload::Workload& r = loaded[j];
    const std::filesystem::path store = EvaluationStore(options, r, out);
    if (r.model.name == w.model.name && r.gpu.name == w.gpu.name &&
        r.Signature() != w.Signature() && std::filesystem::exists(store)) {
      related.push_back(store);
    }
  }
  return related;
}

Json EvaluationRow(const RunResult& run, const std::string& workload_name) {
  const Json summary = ToJson(run.summary);
  return Json{{"workload", workload_name},
              {"max_throughput", summary["max_throughput"]},
              {"frontier_table", summary["frontier_table"]},
              {"interpolated", summary["interpolated"]},
              {"checks", summary["checks"]}};
}

EvaluationResult MakeEvaluation(std::vector<Json> rows) {
  EvaluationResult result;
  result.evaluation = Json{{"format", "kareus.evaluation/1"}, {"rows", Json::array()}};
  for (Json& row : rows) result.evaluation["rows"].push_back(std::move(row));
  result.table = report::RenderEvaluationTable(result.evaluation);
  return result;
}

EvaluationResult EvaluateWorkloads(const std::vector<std::filesystem::path>& workloads,
                                   const RunOptions& options,
                                   const measure::BackendFactory& make_backend,
                                   const Context& context, const std::filesystem::path& out) {
  ThrowIfInvalid(options.Validate());
  // Validate every file before running anything; each workload writes OUT/<name>.
  const std::vector<workload::Workload> loaded = LoadEvaluationWorkloads(workloads);
  std::optional<OutputFolder> folder;  // OUT is replaced as a whole at the end
  if (!out.empty()) {
    folder.emplace(out);
    for (const auto& w : loaded) folder->Keep(EvaluationStore(options, w, out));
  }
  std::vector<Json> rows;
  for (std::size_t i = 0; i < loaded.size(); ++i) {
    const workload::Workload& w = loaded[i];
    RunOptions per = options;
    per.profile.store = EvaluationStore(options, w, out);
    per.profile.related_stores = EvaluationRelatedStores(options, loaded, i, out);
    if (!options.quiet && kareus::Progress::StderrIsTerminal()) {
      std::fprintf(stderr, "kareus: workload %s\n", w.name.c_str());
    }
    const RunResult run = RunWorkload(w, per, make_backend, context);
    if (folder) WriteRunOutputs(run, folder->staging() / w.name);
    rows.push_back(EvaluationRow(run, w.name));
  }
  EvaluationResult result = MakeEvaluation(std::move(rows));
  if (folder) {
    WriteJsonFile(folder->staging() / "evaluation.json", result.evaluation);
    WriteFileAtomic(folder->staging() / "evaluation.txt", result.table);
    folder->Commit();
  }
  return result;
}

}  // namespace kareus::methods
