// SPDX-License-Identifier: Apache-2.0
// `kareus run`: one flow from a workload to plans, the time-energy frontier of every method and
// the published comparison (DESIGN.md §1, §8). Methods are strategies over the same flow; they
// differ only in which knobs they may choose:
//
//   method                execution                   clock               comm SMs / launch
//   megatron              sequential                  default             library default
//   nanobatching          2 nanobatches               default             library default, at start
//   perseus               sequential                  per instruction     library default
//   nanobatching+perseus  2 nanobatches               per instruction     library default, at start
//   kareus                nanobatched or sequential   per instruction     per partition type, profiled
//   kareus-oracle         as kareus, from exhaustive noise-free partition frontiers (diagnostic)
//
// Every method's plans are finally "run" on the emulated cluster: each instruction the plan
// chose is simulated end to end (noise-free), the pipeline DAG gives the iteration time, and
// energy is summed over all GPUs. Those are the numbers every table reports; the planner's own
// predictions are kept beside them only as diagnostics.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kareus/common/context.h"
#include "kareus/common/json.h"
#include "kareus/emulator/emulator.h"
#include "kareus/mobo/profiler.h"
#include "kareus/pipeline/solver.h"
#include "kareus/plan/plan_file.h"
#include "kareus/plan/solve.h"
#include "kareus/workload/ops.h"

namespace kareus::methods {

enum class Method { kMegatron, kNanobatching, kPerseus, kNanobatchingPerseus, kKareus, kKareusOracle };
const char* ToString(Method method);  // "megatron", ..., "nanobatching+perseus", "kareus-oracle"
const char* Label(Method method);     // "Megatron-LM", ..., "Kareus (oracle)"
Method MethodFromString(const std::string& text);  // InputError listing the names
std::vector<Method> DefaultMethods();              // the five; not the oracle

struct RunOptions {
  std::vector<Method> methods = DefaultMethods();
  mobo::ProfileOptions profile;  // Kareus's partition profiler (budget, surrogate, store, ...)
  emulator::MeasurementOptions measurement;  // instruction clock sweeps (Perseus-style profiling)
  double unit_time_s = 1e-3;     // solver time quantum
  double compose_epsilon = 0.0;  // epsilon-thinning of composed partial sums (0 = exact)
  bool quiet = false;            // no progress on the terminal
};

// A composed instruction option (Kareus: the sum of its partition types' measured fronts plus
// the fixed work, plan/compose.h) against the instruction simulated end to end
// (emulator::SimulateInstruction, the ground truth every plan is evaluated on).
struct CompositionSample {
  int stage = 0;
  bool forward = true;
  int freq_mhz = 0;
  double composed_time_s = 0.0, composed_energy_j = 0.0;
  double simulated_time_s = 0.0, simulated_energy_j = 0.0;
};

struct MethodResult {
  Method method = Method::kKareus;
  plan::PlanProblem problem;  // every instruction's options (predicted costs) as the solver saw them
  plan::PlanResult solved;    // the solver's frontier, slowest first (predicted costs), and the
                              // published 10-plan sample (solved.sampled)
  // Per frontier point (same order): the plan run on the emulated cluster. Tables and files
  // report these; the solver's predictions stay in solved.solve.points[i].cost.
  std::vector<pipeline::Evaluation> measured;
  double profiling_gpu_seconds = 0.0;   // measurement cost of the method's profiling
  int64_t measurements = 0;
  std::map<std::string, double> phase_wall_s;  // "profile", "compose", "solve", "evaluate"
  std::optional<mobo::ProfileSummary> profile;  // partition profiling (kareus)
  std::string note;                     // e.g. why a method fell back to sequential execution
  std::vector<CompositionSample> composition;  // every composed option (kareus, kareus-oracle)

  std::size_t Fastest() const { return measured.size() - 1; }
  const std::vector<int>& Choice(std::size_t point) const { return solved.solve.points[point].choice; }
};

struct RunResult {
  workload::WorkloadModel model;
  RunOptions options;
  uint64_t seed = 0;
  std::vector<MethodResult> methods;
  Json summary;  // summary.json (format "kareus.summary/1")
};

// Runs every requested method on `workload`. Input errors (budgets, names) throw InputError
// before anything is measured.
RunResult RunWorkload(const workload::Workload& workload, const RunOptions& options,
                      const Context& context);

// The plan of frontier point `point` of `method` (instructions in 1F1B order with their knobs
// and predicted costs; the iteration cost as measured on the emulated cluster).
plan::Plan MakePlan(const MethodResult& method, std::size_t point);

// Writes, atomically: summary.json, report.html, and for the main method (kareus if run, else
// the last one) plan.json (fastest plan), frontier.json (every point) and plans/ (the sampled
// plans plus the fastest); every method's files also under methods/<method>/.
void WriteRunOutputs(const RunResult& run, const std::filesystem::path& out);

// `kareus evaluate`: several workloads into out/<workload name>/ plus evaluation.json and the
// combined table (returned).
struct EvaluationResult {
  Json evaluation;   // {"format": "kareus.evaluation/1", "rows": [...]}
  std::string table; // the combined text table
};
EvaluationResult EvaluateWorkloads(const std::vector<std::filesystem::path>& workloads,
                                   const RunOptions& options, const Context& context,
                                   const std::filesystem::path& out);

}  // namespace kareus::methods
