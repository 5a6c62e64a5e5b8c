// SPDX-License-Identifier: Apache-2.0
// The partition profiler: multi-objective Bayesian optimization of every partition type of a
// workload (DESIGN.md §6), with a resumable measurement store and, on request, the exhaustive
// (oracle) and random baselines that measure it. The entry point of `kareus profile` and of
// the profiling step of `kareus run`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kareus/common/context.h"
#include "kareus/common/error.h"
#include "kareus/common/json.h"
#include "kareus/measure/backend.h"
#include "kareus/mobo/acquisition.h"
#include "kareus/mobo/prior.h"
#include "kareus/mobo/surrogate.h"
#include "kareus/pareto/pareto.h"
#include "kareus/workload/ops.h"

namespace kareus::mobo {

// The automatic budget (ProfileOptions::budget_fraction 0): 15 % of each tunable type's space
// without a prior; 5 % with one, where bench/profile_prior.py measured a *mismatched* prior
// at 5 % better than no prior at 15 % (median HV ratio 0.9997 vs 0.9975), and `kareus
// evaluate` over the ten paper configurations found Kareus's max-throughput, iso-time and
// mean-saving figures at 5 % within noise of 10 % once every type measures its fastest
// configuration at the top clock (docs/ARCHITECTURE.md §5, "Prior and transfer").
inline constexpr double kBudgetFraction = 0.15;
inline constexpr double kBudgetFractionWithPrior = 0.05;
inline constexpr int64_t kMinBudget = 15;

struct ProfileOptions {
  int64_t budget = 0;  // evaluations per tunable partition type; 0: budget_fraction
  // Of each type's space, rounded up, when budget == 0; 0: automatic, BudgetFraction().
  double budget_fraction = 0.0;
  // With budget_fraction: at least this many evaluations per tunable type and, unless it is
  // 0 (no floor), at least one per profiled clock (at most its whole space). A share of a small
  // space is too few to place a frontier of a dozen clocks (9 of 180 configurations at 5 %:
  // even the 9 best points of the true front reach HV ratio 0.989, 7 of them 0.969), and
  // composition offers an instruction at a clock only where each of its types has a
  // measurement; the summary reports the share actually measured per type.
  int64_t min_budget = kMinBudget;
  int initial_design = 0;         // configurations of the initial design; 0: auto
                                  // (max(6, initial_fraction x budget))
  double initial_fraction = 0.2;  // auto initial design as a share of the budget
  int batch_size = 0;             // configurations per acquisition batch; 0: auto (~8 batches)
  int unit_size = 0;              // configurations per measurement unit (one backend batch,
                                  // its own warm-up): a batch is cut into units that can be
                                  // measured in parallel (kareus/distributed/); 0: whole batch
  SurrogateKind surrogate = SurrogateKind::kGaussianProcess;  // measured better than xgb
  Strategy strategy = Strategy::kPerClock;                    // measured better than published
  bool full_grid = false;               // every supported clock instead of the profiling sub-grid
  bool oracle = false;                  // also run the exhaustive (noise-free) and random baselines
  bool denoise = true;                  // frontiers on the surrogate's posterior means at the
                                        // measured configurations instead of the raw readings
  std::vector<std::string> partitions;  // types to profile (names); empty: all
  std::filesystem::path store;          // SQLite measurement store; empty: measurements not kept
  // A stored row that fails its checks (checksum, values) is set aside and measured again;
  // false: the run stops (EnvironmentError naming the rows) and the store is left as it was.
  // A store that cannot be written is read: everything the profile needs must be in it.
  bool remeasure_damaged = true;
  // Model-informed prior (kareus/mobo/prior.h): the surrogates learn the residual between the
  // measurements and this model's predictions. Empty: no prior (the library default; the CLI
  // sets the emulator's model of the workload's GPU preset).
  PriorModel prior;
  // Calibrate the prior model's physical scales to each type's measurements before every
  // surrogate fit (mobo::CalibratePrior; needs PriorModel::make_calibrated).
  bool prior_calibrate = true;
  // With a prior that fits the measurements (after calibration, log RMS <= 0.03 over at least
  // four, and the surrogate keeping it), acquire along its predicted frontier
  // (AcquisitionInput::trusted_prior) instead of `strategy`.
  bool prior_front = true;
  bool prior_check = true;  // learn the prior's weight per target (dropping a prior that
                            // explains the measurements worse than none); false: weight 1
                            // (tests of what the check prevents)
  // Transfer (kareus/mobo/prior.h): measurement stores of related workloads (same model and
  // GPU, measured by the same backend), read-only; their rows of each partition type join
  // the surrogate fits with a learned similarity, never the frontier.
  std::vector<std::filesystem::path> related_stores;
  std::size_t related_max_rows = 64;  // per related workload and type (seeded subset)
  bool transfer = false;  // `kareus evaluate`: each workload also reads the stores of the
                          // earlier workloads of the run with the same model and GPU

  // budget_fraction, or when it is 0: kBudgetFractionWithPrior with a prior, else
  // kBudgetFraction.
  double BudgetFraction() const;

  // The first invalid field (its name here), its value and the rule; nullopt when valid.
  // Checks the values on their own; budgets against each type's space are checked by
  // ProfileWorkload before anything is measured.
  std::optional<OptionError> Validate() const;
};

// One configuration the profiler evaluated.
struct Evaluation {
  int64_t index = 0;  // in the partition's SearchSpace
  measure::PartitionKnobs knobs;
  measure::Sample sample;    // as measured
  measure::Sample estimate;  // denoised: the final surrogate's mean at this configuration
                             // (== sample when denoising is off or the type is not tunable)
  int batch = 0;             // 0: initial design, then 1, 2, ...
  std::string reason;  // "initial", "total_hvi", "clock_hvi", ... ("exhaustive" if not tunable)
  bool from_store = false;  // read from the store instead of measured in this run
};

// A frontier point: the estimate (denoised) the frontier was selected on, and the reading.
struct FrontierPoint {
  measure::PartitionKnobs knobs;
  double time_s = 0.0;
  double energy_j = 0.0;          // total
  double dynamic_energy_j = 0.0;  // energy_j - P_static x time_s
  double measured_time_s = 0.0;
  double measured_energy_j = 0.0;
};

// The (time, total energy) frontier of the configurations measured at one clock: what
// composition (DESIGN.md §7) uses, since the clock is chosen per instruction.
struct ClockFrontier {
  int freq_mhz = 0;
  std::vector<FrontierPoint> points;  // by time ascending
};

// The optimizer against the exhaustive oracle and random search at the same budget. Measured
// frontiers are re-evaluated noise-free; all hypervolumes of one type share one reference
// point. Two references are reported: the oracle frontier's nadir pushed out by 10 % of its
// range (strict: the frontier's own span is the whole box), and 1.1 x the worst time and
// energy of the whole space (the published HVContext convention, §3.4, applied to the
// exhaustive set).
struct OracleComparison {
  double oracle_hypervolume = 0.0;  // exhaustive noise-free frontier, strict reference
  double hypervolume = 0.0;         // the optimizer's frontier configurations, noise-free
  double hv_ratio = 0.0;            // hypervolume / oracle_hypervolume (strict reference)
  double random_hv_ratio = 0.0;     // random search, same budget, same noise and extraction
  double space_ref_hv_ratio = 0.0;  // the same ratios with the published-convention reference
  double random_space_ref_hv_ratio = 0.0;
  double clock_hv_ratio = 0.0;  // mean over clocks of the per-clock strict ratio
  double random_clock_hv_ratio = 0.0;
  pareto::Point reference;        // strict
  pareto::Point space_reference;  // 1.1 x worst of the space
};

// The outcome of a prior's staged design (PartitionResult::prior_design).
enum class PriorDesignOutcome {
  kNone,      // no prior (or no staged design)
  kPrior,     // the first two measurements agreed with the prior, its design followed
  kFallback,  // they did not: Latin-hypercube points completed the no-prior design
  kRefuted,   // they did, the re-check after the prior's design did not
};
// "", "prior", "fallback", "refuted" (the `prior_design` of the JSON and the summaries).
const char* ToString(PriorDesignOutcome outcome);

struct PartitionResult {
  std::string type;
  bool tunable = true;
  int64_t space_size = 0;
  int64_t budget = 0;      // evaluations planned
  int initial_design = 0;  // as measured (a prior's design: both of its stages)
  // A prior's staged design (TypeState::SecondStage): kPrior when the first two measurements
  // agreed with the (calibrated) prior and the rest of its design followed, kFallback when
  // they did not and Latin-hypercube points completed the no-prior design, kRefuted when they
  // did but the re-check after the prior's design did not (the no-prior design then completed
  // too); kNone: no prior.
  PriorDesignOutcome prior_design = PriorDesignOutcome::kNone;
  // The design check's measure: PriorLogRms over the first stage's measurements (NaN: no
  // check), and over both stages' at the re-check ("refuted" above kTrustedPriorLogRms).
  double prior_design_log_rms = std::numeric_limits<double>::quiet_NaN();
  double prior_recheck_log_rms = std::numeric_limits<double>::quiet_NaN();
  int batch_size = 0;
  std::vector<Evaluation> evaluations;  // in evaluation order
  int64_t measured = 0;                 // taken in this run
  int64_t reused = 0;                   // found in the store
  int batches = 0;                      // measurement batches (the initial design is batch 0)
  // GPU-seconds (seconds of measurement x GPUs of the collective's group, the backend's
  // declared overhead per unit included): of the measurements taken in this run, and of every
  // measurement the result rests on, store reuse included (what the profile costs, resumed or
  // not). Both are summed from the samples' own costs in evaluation order, so they do not depend
  // on which backend (or MPI rank) measured.
  double gpu_seconds = 0.0;
  double cost_gpu_seconds = 0.0;
  double hypervolume = 0.0;               // of the measured frontier, reference 1.1 x measured max
  std::vector<double> hypervolume_trace;  // same, after the initial design and each batch
  std::vector<FrontierPoint> frontier;    // (time, total energy), by time ascending
  std::vector<ClockFrontier> clock_frontiers;  // one per clock of the space, descending clock
  std::optional<OracleComparison> oracle;
  // Prior and transfer: whether the type had a prior, and per surrogate fit (each batch, then
  // the final denoising fit) the prior's learned weights and the related workloads' learned
  // similarity (fits are recorded when there is a prior or related rows).
  bool has_prior = false;
  std::vector<PriorUse> prior_uses;
};

// How every GPU-hour figure of Kareus is counted (profile, run, evaluate).
inline constexpr const char* kGpuHoursBasis =
    "seconds of measurement (settle + window + cool-down, and each batch's warm-up) x GPUs of "
    "the measured group (a partition: its collective's group; an instruction: TP x CP)";

struct ProfileResult {
  std::string gpu;
  std::string workload_signature;
  std::string backend;  // Backend::Description()
  std::string surrogate;
  std::string strategy;
  std::string prior = "none";        // PriorModel::description, or "none"
  std::vector<std::string> related;  // signatures of the related workloads used (transfer)
  // True when the prior's model reads what the measuring backend's noise-free twin reads (same
  // description and GPU figures): the prior is then the truth up to noise and small budgets
  // succeed largely by construction. prior_note says so in words (summaries print it).
  bool prior_is_measuring_model = false;
  std::string prior_note;
  uint64_t seed = 0;
  std::vector<PartitionResult> partitions;
  double gpu_seconds = 0.0;       // all measurements taken in this run (warm-ups included)
  double cost_gpu_seconds = 0.0;  // every measurement the frontiers rest on (store included)
  int64_t measurements_taken = 0;
  int64_t measurements_reused = 0;  // read from the store

  // The `kareus profile --json` document (format "kareus-profile", version 1).
  Json ToJson(bool with_evaluations = false) const;
};

// One batch of one partition type that needs measuring: the configurations the store does not
// have, in pick order, cut into measurement units (ProfileOptions::unit_size). Each unit is one
// Backend::MeasureBatch call (one warm-up); units of a batch may be measured anywhere, in any
// order, concurrently.
struct MeasurementBatch {
  int type = 0;    // index into WorkloadProfiler::Types()
  int number = 0;  // 0: the initial design (a fixed type: every clock), then 1, 2, ...
  std::vector<measure::PartitionKnobs> knobs;
  std::vector<std::pair<std::size_t, std::size_t>> units;  // [begin, end) ranges of knobs
};

// A workload's profiling as explicit steps, so that partition types can advance concurrently
// (kareus/distributed/ spreads them over MPI ranks) while ProfileWorkload drives them one after
// another. Per type: NextBatch() picks the next batch (surrogate fit + acquisition; store hits
// are read here), Record() takes each of its samples as it arrives (committed to the store at
// once), and when every sample of the batch is recorded the type may ask for its next batch.
// A type's decisions depend only on its own seed and its own samples, and the summary is
// assembled in type order, so any interleaving of types, any split of their units over
// backends and any arrival order within a batch give the same ProfileResult.
// Not thread-safe: one thread calls it (the coordinator).
class WorkloadProfiler {
 public:
  // Validates options, partition names, budgets and the store exactly as ProfileWorkload does
  // (InputError / EnvironmentError, nothing measured). `model` and `backend` must outlive it.
  // `backend` gives the GPU, the static power, the description and batch overhead, the noise-free
  // twin (oracle); the random baseline of `oracle` is measured through it in Finish().
  WorkloadProfiler(const workload::WorkloadModel& model, const ProfileOptions& options,
                   measure::Backend& backend, const Context& context);
  ~WorkloadProfiler();
  WorkloadProfiler(const WorkloadProfiler&) = delete;
  WorkloadProfiler& operator=(const WorkloadProfiler&) = delete;

  // The types profiled, in order.
  const std::vector<const workload::PartitionType*>& Types() const;
  // The next batch of `type` that needs measuring, or nullopt once the type is complete (its
  // final surrogate and frontiers are then built). Checks that no batch of it is in flight.
  std::optional<MeasurementBatch> NextBatch(int type);
  // Sample `index` (into the batch's knobs) of `type`'s batch in flight.
  void Record(int type, std::size_t index, const measure::Sample& sample);
  bool Complete(int type) const;
  // The summary, in type order, with the oracle baselines when asked; every type complete.
  ProfileResult Finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Profiles every (selected) partition type of `model` with `backend` (the emulator, a real
// GPU, a test double), seeded by context.seed. Options and budgets are validated before
// anything is measured (InputError); a store that cannot be used throws EnvironmentError and
// is left unchanged. Costs are GPU-seconds: seconds of measurement x GPUs of the group.
ProfileResult ProfileWorkload(const workload::WorkloadModel& model, const ProfileOptions& options,
                              measure::Backend& backend, const Context& context);

}  // namespace kareus::mobo
