// SPDX-License-Identifier: Apache-2.0
// The methods' internal header (not installed): MethodRun, the one flow every method runs
// (methods/run.h), and the declarations its parts share, each part defined in its own file of
// src/methods/:
//   flow.cc                   the run itself (MethodRun::Run: measure, compose, solve,
//                             evaluate), the backend it measures through, its costs; RunWorkload
//   instruction_options.cc    per-instruction options: partition frontiers, clock sweeps,
//                             composed options and the screened fallbacks between anchors
//   gradient_sync_options.cc  the data-parallel gradient sync's options (last backwards, sync
//                             nodes)
//   plan_evaluation.cc        evaluation of the solver's plans, dropping the dominated ones,
//                             composition error
#pragma once

#include <cstdint>
#include <memory>
#include <tuple>
#include <vector>

#include "kareus/methods/run.h"
#include "methods/compose.h"

namespace kareus::methods::internal {

using schedule::Direction;
using schedule::ExecutionMode;

// The options of one unit's instructions in one direction (instruction_options.cc).
std::vector<plan::InstructionOption>& OptionsOf(plan::PlanProblem& problem, int unit, Direction d);

// Whole-instruction measurements of one unit in one backend batch (instruction_options.cc).
struct InstructionSweep;
// The options some frontier plan uses, per distinct unit or stage (plan_evaluation.cc).
struct UsedOptions;

// One method's run of the flow (RunWorkload runs one per method): its instruction options
// measured or composed, the plans solved on them, and the plans evaluated.
class MethodRun {
 public:
  MethodRun(const MethodSpec& method, const workload::WorkloadModel& model,
            const RunOptions& options, measure::Backend& backend, Evaluator& evaluator,
            const Context& context)
      : method_(method),
        model_(model),
        options_(options),
        backend_(backend),
        evaluator_(evaluator),
        context_(context) {}

  MethodResult Run();

  static std::vector<int> PlanningClocks(const workload::WorkloadModel& model,
                                         const RunOptions& options);

 private:
  // flow.cc: the run's steps, the backend it measures through, its costs
  measure::Backend& Prepare();
  void BuildOptions(measure::Backend& backend);
  void Solve();
  measure::Backend& MeasuringBackend();
  void Charge(CostKind kind, double gpu_seconds, int64_t measurements);

  bool UsesComposition() const { return method_.comm != CommSource::kLibraryDefault; }

  // instruction_options.cc
  std::vector<TypeSamples> MeasurePartitions(measure::Backend& backend);
  void SweptOptions(measure::Backend& backend);
  void ComposedOptions(measure::Backend& backend, const std::vector<TypeSamples>& samples);
  void ConfirmReadings(int u, measure::Backend& backend);
  SweepScreen Screen() const;
  std::vector<std::tuple<int, Direction, ExecutionMode>> FallbacksBetweenAnchors(
      int u, const InstructionSweep& measured, const SweepScreen& screen,
      const std::vector<TypeSamples>& samples, const FixedWork& fixed);
  void CopyToIdenticalUnits();

  // gradient_sync_options.cc
  void GradientSyncOptions(measure::Backend& backend);

  // plan_evaluation.cc
  void Evaluate();
  int EvaluationRepeat() const;
  UsedOptions UsedByFrontier() const;
  void EvaluateUnitOptions(const UsedOptions& used);
  void EvaluateStageOptions(const UsedOptions& used);
  void EvaluateStage(int s, const UsedOptions& used);
  pipeline::Problem EvaluatedProblem() const;
  void DropDominatedPoints();
  void EvaluateComposition();

  // What a backend charged between construction and ChargeTo.
  class Meter {
   public:
    explicit Meter(const measure::Backend& backend)
        : backend_(backend),
          gpu_seconds_(backend.GpuSeconds()),
          measurements_(backend.Measurements()) {}
    void ChargeTo(MethodRun& run, CostKind kind) const {
      run.Charge(kind, backend_.GpuSeconds() - gpu_seconds_,
                 backend_.Measurements() - measurements_);
    }

   private:
    const measure::Backend& backend_;
    double gpu_seconds_;
    int64_t measurements_;
  };

  const MethodSpec& method_;
  const workload::WorkloadModel& model_;
  const RunOptions& options_;
  measure::Backend& backend_;
  Evaluator& evaluator_;
  const Context& context_;
  std::unique_ptr<measure::Backend> twin_;
  bool nanobatched_ = false;
  std::vector<int> clocks_;
  std::vector<int> reps_;  // per unit: the unit measured for it (Representatives)
  MethodResult result_;
};

}  // namespace kareus::methods::internal
