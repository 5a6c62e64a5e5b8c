// SPDX-License-Identifier: Apache-2.0
// `kareus run`: one flow from a workload to plans, the time-energy frontier of every method and
// the published comparison (DESIGN.md §1, §8). Methods are entries of a table of traits
// (methods/method.h); the flow is the same for all:
//
//   1. measure: through the workload's measure::Backend only (the emulator, a real GPU, a test
//      double) — partition profiling (mobo/), the exhaustive sweep (oracle), whole-instruction
//      clock sweeps, the fixed work outside the partitions;
//   2. compose per-instruction options (plan/compose.h) and solve the pipeline frontier;
//   3. evaluate every frontier plan (methods/evaluator.h): each instruction a plan uses is run
//      with the plan's knobs and the DAG gives the iteration time; energy over all GPUs;
//   4. summarize (methods/summary.h) and write the files.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kareus/common/context.h"
#include "kareus/common/error.h"
#include "kareus/measure/backend.h"
#include "kareus/methods/evaluator.h"
#include "kareus/methods/method.h"
#include "kareus/methods/summary.h"
#include "kareus/mobo/profiler.h"
#include "kareus/pipeline/solver.h"
#include "kareus/plan/solve.h"
#include "kareus/workload/ops.h"

namespace kareus::methods {

struct RunOptions {
  std::vector<MethodSpec> methods = DefaultMethods();  // in table order
  mobo::ProfileOptions profile;  // Kareus's partition profiler (budget, surrogate, store, ...)
  double unit_time_s = 1e-3;     // solver time quantum, s (Perseus's default 1 ms)
  double compose_epsilon = 0.0;  // epsilon-thinning of composed partial sums (0 = exact)
  EvaluationMode evaluation = EvaluationMode::kAuto;  // how finished plans are evaluated
  // Kareus's whole-instruction fallbacks and gradient-sync options are measured in full at
  // every `sweep_anchor_stride`-th planning clock (and the lowest); between two such anchors
  // only the choices near their clock's front at one of the anchors are measured, the others
  // are not offered there (methods/compose.h SweepScreen; nothing is derived). 1: every clock
  // in full. The oracle and the baselines always sweep every clock.
  int sweep_anchor_stride = 4;
  // Fresh readings of every whole-instruction option the filter keeps (a clock sweep's
  // reading, a sequential or library-default fallback: every method's); the option's time and
  // energy become their mean and the options are filtered again. Against the winner's curse:
  // the filter keeps the options whose one reading came out low, so that reading is biased low,
  // and so were the plans' predicted energies; the first reading now only selects
  // (docs/ARCHITECTURE.md, "Predicted vs evaluated"). The gradient sync's readings are not
  // confirmed (measured there: not worth their cost). 0: the first reading is the value.
  int confirm_readings = 2;
  bool quiet = false;  // no progress on the terminal
  // How the profiled methods profile partition types: mobo::ProfileWorkload when empty.
  // kareus/distributed/ sets its own to spread the types over MPI ranks (same result).
  std::function<mobo::ProfileResult(const workload::WorkloadModel&, const mobo::ProfileOptions&,
                                    measure::Backend&, const Context&)>
      profiler;

  // The first invalid field (nested: "profile.budget_fraction"), its value and the rule.
  std::optional<OptionError> Validate() const;
};

// A composed instruction option (Kareus: the sum of its partition types' measured fronts plus
// the fixed work, plan/compose.h) against the same instruction evaluated end to end (on the
// emulator: simulated as one continuous instruction, the ground truth plans are evaluated on).
struct CompositionSample {
  int stage = 0;
  bool forward = true;
  int freq_mhz = 0;
  double composed_time_s = 0.0, composed_energy_j = 0.0;
  double evaluated_time_s = 0.0, evaluated_energy_j = 0.0;
};

// The kinds of measurement a method's profiling cost is split by (MethodResult::
// profiling_by_kind); ToString gives the names the outputs use: "partitions_profiled" (the
// profiler's tunable types), "partitions_exhaustive" (types with fixed knobs, or every
// configuration for the oracle), "fixed_work", "instructions" (clock sweeps and
// whole-instruction fallbacks), "gradient_sync".
enum class CostKind {
  kPartitionsProfiled,
  kPartitionsExhaustive,
  kFixedWork,
  kInstructions,
  kGradientSync
};
inline constexpr std::array<CostKind, 5> kCostKinds = {
    CostKind::kPartitionsProfiled, CostKind::kPartitionsExhaustive, CostKind::kFixedWork,
    CostKind::kInstructions, CostKind::kGradientSync};
const char* ToString(CostKind kind);

// The phases of a method's run whose wall time is reported (MethodResult::phase_wall_s);
// ToString: "profile", "compose", "solve", "evaluate".
enum class Phase { kProfile, kCompose, kSolve, kEvaluate };
inline constexpr std::array<Phase, 4> kPhases = {Phase::kProfile, Phase::kCompose, Phase::kSolve,
                                                 Phase::kEvaluate};
const char* ToString(Phase phase);

struct MethodResult {
  MethodSpec method;
  plan::PlanProblem
      problem;              // every instruction's options (predicted costs) as the solver saw them
  plan::PlanResult solved;  // the solver's frontier, slowest first (predicted costs), and the
                            // published 10-plan sample (solved.sampled)
  // Per frontier point (same order): the plan as evaluated (or, when plans are not evaluated,
  // as predicted). Tables and files report these; predictions stay in solved.solve.points.
  // The points are the solver's frontier less `dropped`, slowest evaluated time first.
  std::vector<pipeline::Evaluation> evaluated;
  // Points of the solver's (predicted) frontier that the evaluation showed to be dominated:
  // another plan's evaluated time and energy are both no worse, one of them better. They are
  // dropped from the frontier, its files and its sample, and listed here.
  struct DroppedPoint {
    std::size_t solver_index = 0;  // the point's index in the solver's frontier (0 = slowest)
    std::size_t dominated_by = 0;  // the kept point (index into evaluated) that dominates it
    pipeline::Evaluation predicted, evaluated;
  };
  std::vector<DroppedPoint> dropped;
  // The evaluated duration and energy of every instruction option some frontier plan uses,
  // per (stage, chunk) unit: [unit][0 forward | 1 backward][option index]; with a gradient
  // sync, of the stages' last instructions [stage][option] and of the sync nodes
  // [stage * K + chunk][option] (plan::PlanProblem's lists).
  std::vector<std::array<std::map<int, measure::Sample>, 2>> option_evaluations;
  std::vector<std::map<int, measure::Sample>> last_backward_evaluations;
  std::vector<std::map<int, measure::Sample>> sync_evaluations;
  // The evaluations of node class `c`'s options (one of the three lists above); nullptr where
  // there are none (plans not evaluated).
  const std::map<int, measure::Sample>* EvaluationsOf(const schedule::NodeClass& c) const;
  double profiling_gpu_seconds = 0.0;  // cost of every measurement the plans rest on
  int64_t measurements = 0;            // configurations and instructions measured
  // The same cost by kind of measurement (sums to profiling_gpu_seconds and measurements);
  // only the kinds the method measured are present.
  struct Cost {
    double gpu_seconds = 0.0;
    int64_t measurements = 0;
  };
  std::map<CostKind, Cost> profiling_by_kind;
  double evaluation_gpu_seconds = 0.0;         // cost of evaluating the plans
  std::map<Phase, double> phase_wall_s;        // the phases the method ran
  std::optional<mobo::ProfileResult> profile;  // partition profiling (profiled methods)
  std::string note;  // e.g. why a method fell back to sequential execution
  std::vector<CompositionSample> composition;  // every composed option (tuned comm), evaluated

  // The plan with the lowest evaluated time (ties: lower energy).
  std::size_t Fastest() const;
  const std::vector<int>& Choice(std::size_t point) const {
    return solved.solve.points[point].choice;
  }
};

struct RunResult {
  workload::WorkloadModel model;
  RunOptions options;
  uint64_t seed = 0;
  std::string backend;          // measure::Backend::Description()
  std::string evaluator;        // Evaluator::Description()
  bool evaluated = true;        // false: tables carry predictions ("not evaluated")
  double static_power_w = 0.0;  // the backend's P_static (planning)
  double idle_power_w = 0.0;    // the backend's idle power (evaluation)
  std::vector<MethodResult> methods;
  double peak_rss_mib = 0.0;  // the process's peak resident memory after planning (getrusage)
  RunSummary summary;         // summary.json (ToJson(summary))
};

// Runs every requested method on `workload`, measuring with the backend `make_backend` makes
// for it (measure::EmulatorBackendFactory() for the built-in emulator). Options, budgets and
// names are checked before anything is measured (InputError).
RunResult RunWorkload(const workload::Workload& workload, const RunOptions& options,
                      const measure::BackendFactory& make_backend, const Context& context);

// The plan of frontier point `point` of `method` (instructions in schedule order with their
// knobs and predicted costs; the iteration cost as evaluated).
plan::Plan MakePlan(const MethodResult& method, std::size_t point);

// The frontier points whose plans `kareus run` writes to plans/ for `method`, ascending: the
// published sample, the fastest plan (plan.json), and the plans a power budget or a timetable
// can need (plan::BudgetPlanIndices, on the evaluated costs).
std::vector<std::size_t> WrittenPlanIndices(const MethodResult& method);

// The main method of a run: kareus when it ran, else the last method.
const MethodResult& MainMethod(const RunResult& run);

// Writes, atomically: summary.json, report.html, and for the main method plan.json (fastest
// plan), frontier.json (every point) and plans/ (the sampled plans plus the fastest); every
// method's files also under methods/<method>/.
void WriteRunOutputs(const RunResult& run, const std::filesystem::path& out);

// `kareus evaluate`: several workloads into out/<workload name>/ plus evaluation.json and the
// combined table (returned).
struct EvaluationResult {
  Json evaluation;    // {"format": "kareus.evaluation/1", "rows": [...]}
  std::string table;  // the combined text table
};
EvaluationResult EvaluateWorkloads(const std::vector<std::filesystem::path>& workloads,
                                   const RunOptions& options,
                                   const measure::BackendFactory& make_backend,
                                   const Context& context, const std::filesystem::path& out);

// The pieces of EvaluateWorkloads that distributed evaluation (distributed/) shares, so both
// follow one rule:
// - every workload file loaded and checked before anything runs; each writes OUT/<name>, so two
//   workloads of one evaluation with one name are an InputError naming both files;
std::vector<workload::Workload> LoadEvaluationWorkloads(
    const std::vector<std::filesystem::path>& workloads);
// - a workload's measurement store: --store for every workload, else OUT/<name>/
//   measurements.sqlite; empty (no store) when neither is given;
std::filesystem::path EvaluationStore(const RunOptions& options, const workload::Workload& w,
                                      const std::filesystem::path& out);
// - with profile.transfer (one process only; the workloads are profiled one after another) and
//   a store per workload: --related plus the stores of the earlier workloads (index below
//   `index`) of the same model and GPU and another signature, read-only;
std::vector<std::filesystem::path> EvaluationRelatedStores(
    const RunOptions& options, const std::vector<workload::Workload>& loaded, std::size_t index,
    const std::filesystem::path& out);
// - its row of evaluation.json;
Json EvaluationRow(const RunResult& run, const std::string& workload_name);
// - the document and the combined table from the rows (in workload order).
EvaluationResult MakeEvaluation(std::vector<Json> rows);

}  // namespace kareus::methods
