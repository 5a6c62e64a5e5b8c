// SPDX-License-Identifier: Apache-2.0
// The profiler's internal header (not installed): one partition type's plan (PlanType) and its
// profiling as explicit steps (TypeState), driven by WorkloadProfiler (profiler.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kareus/common/context.h"
#include "kareus/common/progress.h"
#include "kareus/hw/gpu_spec.h"
#include "kareus/measure/backend.h"
#include "kareus/measure/store.h"
#include "kareus/mobo/acquisition.h"
#include "kareus/mobo/prior.h"
#include "kareus/mobo/profiler.h"
#include "kareus/mobo/search_space.h"
#include "kareus/mobo/surrogate.h"
#include "kareus/workload/ops.h"

namespace kareus::mobo::internal {

struct Plan {
  const workload::PartitionType* type = nullptr;
  SearchSpace space;
  int64_t budget = 0;
  int initial = 0;
  int batch = 0;
  // What the design and batches are without a prior (a prior's design falls back to them).
  int no_prior_initial = 0;
  int no_prior_batch = 0;
};

// Validates the budget of one type before anything is measured.
Plan PlanType(const workload::PartitionType& type, const hw::GpuSpec& gpu,
              const ProfileOptions& options);

// The phases of one type's profiling (TypeState::NextBatch), each the step the next call
// takes: the initial design (a fixed type: every clock, then kAcquire, which completes it at
// once); with a prior's staged design (TypeState::Initial) its second stage (SecondStage) and,
// when that followed the prior and picked points, the re-check of the design (Recheck); then
// surrogate fits and acquisition batches until nothing is picked (budget spent, space
// exhausted, or not tunable), when the final surrogate and the frontiers are built. A design
// stage that picks nothing goes on to the next phase within the same call.
//   kStart       -> kSecondStage (staged design) | kAcquire
//   kSecondStage -> kRecheck (PriorDesignOutcome::kPrior, points picked) | kAcquire
//   kRecheck     -> kAcquire
//   kAcquire     -> kAcquire (a batch picked) | kComplete
//   kComplete    terminal: NextBatch returns nullopt
enum class TypePhase { kStart, kSecondStage, kRecheck, kAcquire, kComplete };
// "start", "second_stage", "recheck", "acquire", "complete".
const char* ToString(TypePhase phase);

// One partition type's profiling as explicit steps (WorkloadProfiler): the initial design,
// then per batch a surrogate fit and a pick, each batch's missing configurations measured by
// whoever the caller chooses, then the denoised frontiers. Every decision depends only on the
// type's own seed and its own measurements, so types may advance in any interleaving.
class TypeState {
 public:
  TypeState(const Plan& plan, const ProfileOptions& options, const measure::Backend& backend,
            measure::MeasurementStore* store, uint64_t seed, TypeKnowledge knowledge,
            const workload::WorkloadModel& model);

  const TypeKnowledge& knowledge() const { return knowledge_; }

  // The step the next NextBatch call takes (kComplete once the type is profiled).
  TypePhase phase() const { return phase_; }
  bool complete() const { return phase_ == TypePhase::kComplete; }
  bool in_flight() const { return !missing_.empty() && pending_ > 0; }
  const PartitionResult& result() const { return result_; }
  PartitionResult& result() { return result_; }

  // The next batch that needs measuring (store hits are read here), or nullopt when done.
  std::optional<MeasurementBatch> NextBatch(int type_index);

  // A sample of the batch in flight (`index` into its knobs), committed to the store at once.
  void Record(std::size_t index, const measure::Sample& sample, Progress& progress,
              const std::string& label, double per_eval_s);

  void ShowProgress(Progress& progress, const std::string& label, double per_eval_s) const;

 private:
  // A step's configurations (space indices) and why each was picked.
  struct Picks {
    std::vector<int64_t> indices;
    std::vector<std::string> reasons;
  };

  // One step of NextBatch: the phase's function, which sets the next phase. nullopt when the
  // phase picked nothing (a design stage with nothing left, or kAcquire completing the type).
  std::optional<Picks> Step();
  // kStart: the initial design (Initial), or every configuration of a fixed type; the surrogate.
  std::optional<Picks> StartStep();
  // kSecondStage: SecondStage's points; the re-check follows when they are the prior's design.
  std::optional<Picks> SecondStageStep();
  // kRecheck: Recheck's points (the rest of the no-prior design when the prior is refuted).
  std::optional<Picks> RecheckStep();
  // kAcquire: PickBatch's batch, or when nothing is picked Finalize and kComplete.
  std::optional<Picks> AcquireStep();
  // A design stage's points as the next batch ("initial"), nullopt when there are none.
  std::optional<Picks> DesignStage(std::vector<int64_t> indices);
  // The batch in flight's configurations to measure (missing_), cut into units.
  MeasurementBatch IssueBatch(int type_index);

  // Whether the tunable type's initial design is a prior's staged one: a prior, no --initial,
  // and a no-prior design larger than the first stage (kCheckDesign points).
  bool StagedDesign() const;

  // The tunable type's initial design: with a prior and no --initial the first stage of a
  // prior's design (the first kCheckDesign points of the Latin hypercube the no-prior design
  // measures; SecondStage follows), else Latin-hypercube points (topped up when the space has
  // fewer clocks than points).
  std::vector<int64_t> Initial(Rng& rng);

  // The second stage of a prior's design: the prior calibrated to the first stage's
  // measurements; when it agrees with them (PriorLogRms within kTrustedPriorLogRms) the
  // interior points of its design (PriorDesign: knob variations around its optimum at the
  // interior clock quantiles), else the rest of the no-prior design and its batch size: with
  // the prior's weight dropped by the surrogate fit, the profile is then the no-prior one.
  std::vector<int64_t> SecondStage();

  // The design check again once the prior's design is measured: 2 points cannot refute a
  // model that 4 calibrated scales can bend to fit them (a shuffled one), the 4 or more
  // measured now can. When the calibrated prior no longer agrees with them (PriorLogRms above
  // kTrustedPriorLogRms) the design is "refuted": the rest of the no-prior design and its
  // batch size follow, as after a failed first check, so that the profile continues as the
  // no-prior one with the prior's design points on top. Empty when the prior still agrees.
  std::vector<int64_t> Recheck();

  // The no-prior design's points after the first stage's that are not measured yet; the batch
  // size becomes the no-prior one.
  std::vector<int64_t> RestOfNoPriorDesign();

  // A design stage's points cut to the budget left, counted in the initial design.
  std::vector<int64_t> WithinBudget(std::vector<int64_t> next);

  // Fits the surrogate on every measurement and picks the next batch; false when the type is
  // done (budget spent, space exhausted, or not tunable).
  bool PickBatch(std::vector<int64_t>* indices, std::vector<std::string>* reasons);

  // Thompson sampling: joint draws at the candidates that could be on the frontier (optimistic
  // point, mean - 2 std, improves the measured front), at most kMaxSampled of them by that
  // improvement; one draw per pick.
  void DrawSamples(const Surrogate& surrogate, const std::vector<std::vector<double>>& x,
                   const std::vector<double>& prior_t, const std::vector<double>& prior_e, int k,
                   int batch, AcquisitionInput* input) const;

  // Fits the prior model's physical scales to every measurement so far and, when they moved,
  // predicts the space again with them (the surrogate then learns what is left).
  void Calibrate();

  // A trusted prior's knob-neighbour picks in the next batch: kTrustedExplorationShare of
  // the configurations acquired after the initial design, this batch's included, less those
  // already explored (the untrusted strategies explore a quarter of every batch, at least one:
  // with 9-15 measurements of a 180-configuration space that alone costs a third of the budget).
  int TrustedExploration() const;

  // Whether the (calibrated) prior is trusted: at least kTrustedPriorRows measurements, the
  // surrogate keeping the prior (both weights at least a half), PriorLogRms within
  // kTrustedPriorLogRms.
  bool TrustsPrior(const PriorUse& use) const;

  // The RMS of log(measured / prior) at the measured configurations over time and dynamic
  // energy, each target centred (a constant offset is the surrogate's); infinite without a
  // prior or measurements.
  double PriorLogRms() const;

  PriorUse WithCalibration(PriorUse use) const;

  bool Knows() const { return !knowledge_.prior.empty() || !knowledge_.related.empty(); }

  // The prior mean at space index `i`, appended (nothing without a prior).
  void AddPrior(int64_t i, std::vector<double>* time_s, std::vector<double>* energy_j) const;

  // Appends the batch's evaluations, reading what the store has. Evaluation order is the pick
  // order either way, so a resumed run is indistinguishable from an uninterrupted one. True
  // when something is left to measure.
  bool Evaluate(const std::vector<int64_t>& indices, const std::vector<std::string>& reasons);

  void BatchComplete();

  double MeasuredHypervolume() const;

  // Costs, the final (denoising) surrogate and the frontiers.
  void Finalize();

  void BuildFrontiers();

  const Plan& plan_;
  const ProfileOptions& options_;
  const measure::Backend& backend_;
  measure::MeasurementStore* store_;
  uint64_t seed_;
  int gpus_;
  TypeKnowledge knowledge_;  // the prior mean (calibrated) and related workloads' rows
  const workload::WorkloadModel& model_;
  CalibrationResult calibration_;  // the prior's latest calibration to this type
  bool calibrated_ = false;
  PartitionResult result_;
  std::unique_ptr<Surrogate> surrogate_;
  std::vector<bool> measured_;            // picked (space index), measured or in flight
  std::vector<std::size_t> missing_;      // evaluations of the batch in flight to be measured
  std::vector<bool> recorded_;            // per missing_ entry
  std::size_t pending_ = 0;               // samples of the batch in flight not yet recorded
  int batch_ = 0;                         // number of the current batch (0: initial design)
  int64_t units_issued_ = 0;              // backend batches handed out in this run
  TypePhase phase_ = TypePhase::kStart;   // the step the next NextBatch call takes
  std::vector<int64_t> no_prior_design_;  // with a prior's design: the no-prior one
  int batch_size_ = 0;                    // the plan's, or the no-prior one after a fallback
};

}  // namespace kareus::mobo::internal
