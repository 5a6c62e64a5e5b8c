// SPDX-License-Identifier: Apache-2.0
// What the profiler knows before it measures (issue 18): a model-informed prior — an analytic
// model's prediction of every configuration, the surrogate learning only the residual between
// the measurements and that prediction, and falling back to no prior where the residuals say
// the model is worse than nothing — and transfer from measurements of the same partition type
// in related workloads (same model and GPU, another sequence length, microbatch or TP).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kareus/common/error.h"
#include "kareus/hw/gpu_spec.h"
#include "kareus/measure/backend.h"
#include "kareus/measure/store.h"
#include "kareus/mobo/search_space.h"
#include "kareus/mobo/surrogate.h"
#include "kareus/workload/ops.h"

namespace kareus::mobo {

// A model of the partitions: a measure::Backend used as a model, its readings predictions
// (e.g. the emulator's noise-free simulation of the workload's GPU preset). What it costs is
// never counted and nothing it says is a measurement: it only shapes the surrogate's mean.

// A deliberate error of a prior's GPU model, to measure the prior when the model is wrong (the
// benchmark of issue 18: the truth is one GPU model, the prior another).
struct ModelPerturbation {
  double dynamic_power = 1.0;         // x power.dynamic_max_w
  int voltage_shift_mhz = 0;          // the voltage curve moved along the clock axis (+: the
                                      // floor and the knee at higher clocks)
  double collective_bandwidth = 1.0;  // x interconnect bus and per-channel bandwidth
  double compute_efficiency = 1.0;    // x GEMM and attention efficiency (at most 1)
  bool invert_clock_trend = false;    // the prediction of the mirrored clock (profile_min +
                                      // max - f): every clock trend inverted
  bool shuffle = false;               // harmful: each configuration answered with another's
                                      // prediction (a fixed pseudo-random permutation of the
                                      // type's configurations): no information, all roughness

  bool IsIdentity() const;
  // "none" or "dynamic_power=1.25,voltage_shift_mhz=100,..." (the fields that differ),
  // what ParsePerturbation reads back.
  std::string ToString() const;
  std::optional<OptionError> Validate() const;
};

struct PriorModel {
  std::string description;  // what the model is, for summaries ("emulator model of A100...")
  std::function<std::unique_ptr<measure::Backend>(const workload::WorkloadModel& model)> make;
  // The same model with its physical parameters moved by `calibration` (the physical fields of
  // a ModelPerturbation, applied on top of whatever the model already is); empty: the model has
  // no physical parameters to calibrate (the profiler then uses `make` as is).
  std::function<std::unique_ptr<measure::Backend>(const workload::WorkloadModel& model,
                                                  const ModelPerturbation& calibration)>
      make_calibrated;
  explicit operator bool() const { return static_cast<bool>(make); }
};

// The prior `--prior model` means: the emulator's noise-free prediction for the workload's GPU
// preset, with `perturbation` applied to the model (not to what is measured); calibratable
// (make_calibrated applies a calibration on top of the perturbation's physical fields, before
// its invert_clock_trend/shuffle distortions).
PriorModel EmulatorPrior(const ModelPerturbation& perturbation);

// Parses ToString()'s form ("none", or comma-separated field=value; invert_clock_trend=1,
// shuffle=1).
// InputError naming the field.
ModelPerturbation ParsePerturbation(const std::string& text);

// `gpu` with the perturbation's physical fields applied (invert_clock_trend and shuffle are
// not GPU properties: DistortModel applies them to a model).
hw::GpuSpec PerturbGpu(const hw::GpuSpec& gpu, const ModelPerturbation& perturbation);

// `model` with the perturbation's invert_clock_trend (answers clock f with the prediction at
// profile_min + max - f, clamped to the supported range) and shuffle (answers each partition
// configuration with the prediction of the next one in a hashed order of every supported
// clock x SM choice x launch slot) applied; `model` itself when neither is set.
std::unique_ptr<measure::Backend> DistortModel(std::unique_ptr<measure::Backend> model,
                                               const ModelPerturbation& perturbation);

// The prior mean of one partition type: the model's prediction at every configuration of its
// space, by space index.
struct PriorMean {
  std::vector<double> time_s;
  std::vector<double> dynamic_energy_j;
  bool empty() const { return time_s.empty(); }
};
PriorMean PredictSpace(measure::Backend& model, const workload::PartitionType& type,
                       const SearchSpace& space);
// The same at the given configurations, in their order.
PriorMean PredictAt(measure::Backend& model, const workload::PartitionType& type,
                    const std::vector<measure::PartitionKnobs>& knobs);

// "Fit physics, not points": the prior model's physical scales (dynamic power, the voltage
// curve's position, collective bandwidth, compute efficiency) fitted to one partition type's
// measurements by regularized nonlinear least squares on log time and log dynamic energy
// (Levenberg-Marquardt, forward differences, a log-normal prior on each scale centred at the
// model as given: sigma 0.3 on the log scales, 150 MHz on the shift), so that four to nine
// measurements, too few for a surrogate, already move the whole prior surface. The surrogate
// then learns what is left.
struct CalibrationResult {
  ModelPerturbation calibration;  // identity: nothing better than the model as given
  double log_rms_before = 0.0;    // RMS of log(measured / predicted) over times and energies
  double log_rms_after = 0.0;
  int model_evaluations = 0;  // simulations of the measured set
};
// At most `max_rows` of the measurements are used (evenly spaced in the given order).
// `start` warm-starts the search (e.g. the previous batch's calibration). Deterministic.
CalibrationResult CalibratePrior(const PriorModel& prior, const workload::WorkloadModel& model,
                                 const workload::PartitionType& type,
                                 const std::vector<measure::PartitionKnobs>& knobs,
                                 const std::vector<measure::Sample>& samples,
                                 const ModelPerturbation& start, std::size_t max_rows = 48);

// The prior's own design: `count` configurations at clocks of even quantiles of the space's
// grid (the extremes included). At the extreme clocks the configuration of the lowest predicted
// total energy (dynamic + static_power_w x time); at the interior ones a knob variation of it,
// in turn: the best predicted configuration in another launch slot (when there is one), one
// SM step more, one SM step fewer (a single slot: fewer first). So the first measurements lie
// where the model expects the frontier and also vary the comm knobs around its optimum: the
// calibration (CalibratePrior) tells collective bandwidth from compute efficiency only by that,
// and a model that puts the optimum one SM step or one slot off is corrected at once (measured
// on the cp2 types whose 5 % budget is 9 configurations, bench/profile_prior.py). Fewer when
// the space has fewer clocks. Deterministic.
std::vector<int64_t> PriorDesign(const SearchSpace& space, const PriorMean& prior,
                                 double static_power_w, int count);

// Transfer: a related workload (same model and GPU, another sequence length, microbatch, TP or
// CP) whose measurements sit in its own store, read once, read-only.
struct RelatedWorkload {
  std::filesystem::path store;
  std::string workload_signature;
  workload::WorkloadModel model;  // rebuilt from the signature: its partition types
  std::vector<measure::StoredMeasurement> measurements;
};

// Reads the store at `path` without writing anything (SQLite read-only) and checks that it
// holds a related workload of `target`: a measurement store (format, schema version), the same
// GPU, the same backend description (values from the same source), the same model, and
// another workload signature. EnvironmentError for a file that cannot be read as a store,
// InputError for an unrelated one; both name the path.
RelatedWorkload LoadRelatedWorkload(const std::filesystem::path& path,
                                    const workload::WorkloadModel& target,
                                    const std::string& backend_description);

// One related workload's rows of one partition type, in the target's space.
struct RelatedRows {
  std::string workload_signature;
  std::vector<int64_t> indices;                // in the target's SearchSpace
  std::vector<measure::Sample> samples;        // as measured in the related workload
  std::vector<double> prior_time_s;            // the prior at each row, in the related workload
  std::vector<double> prior_dynamic_energy_j;  // (empty without a prior)
  // Where the rows come from, to predict the prior again: the related workload's model and
  // partition type (owned by its RelatedWorkload, which outlives the rows) and each row's knobs.
  const workload::WorkloadModel* model = nullptr;
  const workload::PartitionType* type = nullptr;
  std::vector<measure::PartitionKnobs> knobs;
};

// Predicts the prior of every related row again with `prior`'s model calibrated by
// `calibration`: the target type's calibration fits the GPU's physical scales, which a related
// workload on the same GPU shares, so the related rows' residuals are taken against the same
// calibrated model as the target's (with the uncalibrated one they carried the model's error
// into the fit as if the workloads differed). Rows without a prior stay without one.
void CalibrateRelatedPrior(const PriorModel& prior, const ModelPerturbation& calibration,
                           std::vector<RelatedRows>* related);

// What the profiler knows about one partition type before it measures it.
struct TypeKnowledge {
  PriorMean prior;                   // by space index; empty: no prior
  std::vector<RelatedRows> related;  // transfer; empty: none

  // The rows of a surrogate fit: the target's measurements (space indices and samples) as
  // task 0, then each related workload's rows as tasks 1, 2, ...; prior values when there is
  // a prior.
  TrainingRows Rows(const SearchSpace& space, const std::vector<int64_t>& indices,
                    const std::vector<measure::Sample>& samples) const;
};

// The rows of partition type `type` (by name) in each related workload, restricted to the
// configurations of `space` and thinned to at most `max_rows` per workload (seeded), with the
// prior of each related workload from `prior` (when it has a model). Related workloads without
// the type contribute nothing.
std::vector<RelatedRows> RelatedRowsFor(const std::vector<RelatedWorkload>& related,
                                        const workload::PartitionType& type,
                                        const SearchSpace& space, const PriorModel& prior,
                                        std::size_t max_rows, uint64_t seed);

}  // namespace kareus::mobo
