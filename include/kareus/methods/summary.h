// SPDX-License-Identifier: Apache-2.0
// The summary of a `kareus run` as a typed value (what summary.json holds, the tables and the
// report are rendered from), converted to JSON in one place (ToJson below).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kareus/common/json.h"

namespace kareus::methods {

inline constexpr const char* kSummaryFormat = "kareus.summary/2";

// The methods the published comparison is made against (reference/kareus-official.md §6.2):
// the max-throughput table is relative to the baseline, the frontier tables to the reference.
inline constexpr const char* kBaselineMethod = "megatron";
inline constexpr const char* kFrontierReference = "perseus";

struct PointSummary {
  double time_s = 0.0;
  double energy_j = 0.0;
  double static_energy_j = 0.0;
  double dynamic_energy_j = 0.0;
};

struct FrontierPointSummary {
  PointSummary point;  // evaluated (or predicted when the run is not evaluated)
  int plan_index = 0;  // the solver's iteration index (0 = slowest)
  double predicted_time_s = 0.0;
  double predicted_energy_j = 0.0;
};

struct SolverSummary {
  std::string status;
  std::string message;
  int64_t steps = 0;
};

// The spread of 100 (composed / evaluated - 1) over a method's composed options.
struct Spread {
  double min = 0.0;
  double median = 0.0;
  double max = 0.0;
  double mean_abs = 0.0;
};

struct CompositionSampleSummary {
  int stage = 0;
  std::string instruction;  // "forward" | "backward"
  int freq_mhz = 0;
  double composed_time_s = 0.0;
  double evaluated_time_s = 0.0;
  double composed_energy_j = 0.0;
  double evaluated_energy_j = 0.0;
  double time_error_pct = 0.0;
  double energy_error_pct = 0.0;
};

// Composition error: what planning on composed partition measurements misses against the
// instruction evaluated end to end (methods with tuned comm knobs only).
struct CompositionError {
  std::size_t options = 0;
  Spread time_error_pct;
  Spread energy_error_pct;
  std::vector<CompositionSampleSummary> samples;
};

struct MethodSummary {
  std::string method;
  std::string label;
  std::map<std::string, std::string> traits;  // execution, clock, comm (method.h)
  PointSummary fastest;                       // lowest evaluated time
  PointSummary lowest_energy;
  std::vector<FrontierPointSummary> frontier;  // slowest evaluated time first
  std::vector<std::size_t> sampled_plans;
  // Solver frontier points the evaluation found dominated (MethodResult::dropped).
  struct DroppedPoint {
    std::size_t solver_index = 0;
    std::size_t dominated_by = 0;  // plan_index of the frontier point that dominates it
    PointSummary predicted, evaluated;
  };
  std::vector<DroppedPoint> dropped_after_evaluation;
  double profiling_gpu_hours = 0.0;  // seconds of measurement x GPUs of the group
  int64_t measurements = 0;
  // The profiling cost by kind of measurement (MethodResult::profiling_by_kind), GPU-hours.
  struct KindCost {
    double gpu_hours = 0.0;
    int64_t measurements = 0;
  };
  std::map<std::string, KindCost> profiling_by_kind;
  double evaluation_gpu_hours = 0.0;
  std::map<std::string, double> phase_wall_s;
  std::size_t forward_options = 0;  // options of stage 0's forward / backward
  std::size_t backward_options = 0;
  SolverSummary solver;
  std::string note;
  std::optional<CompositionError> composition_error;
};

struct MaxThroughputRow {
  std::string method;
  double time_s = 0.0;
  double energy_j = 0.0;
  std::optional<double> delta_time_pct;  // vs the baseline; nullopt without it
  std::optional<double> delta_energy_pct;
};

struct FrontierTableRow {
  std::string method;
  std::optional<double> iso_time_energy_reduction_pct;  // the published definition (sampled)
  std::optional<double> iso_energy_time_reduction_pct;
  std::optional<double> iso_time_energy_reduction_full_pct;  // the same on whole frontiers
  std::optional<double> iso_energy_time_reduction_full_pct;
};

// Energy saving at equal time at every deadline both frontiers can meet, from the later
// fastest plan to the later slowest one (methods/metrics.h CompareAtEqualTime); overlap false
// when the comparison is undefined, ranges_overlap false when the two frontiers' time ranges do
// not intersect.
struct InterpolatedRow {
  std::string method;
  std::string reference;
  bool overlap = false;
  bool ranges_overlap = false;
  double range_begin_s = 0.0;
  double range_end_s = 0.0;
  double mean_saving_pct = 0.0;
  double max_saving_pct = 0.0;
  double min_saving_pct = 0.0;
};

struct TimelineInstruction {
  std::string kind;  // "forward" | "backward" | "gradient_sync" (the stage's sync tail)
  int chunk = 0;
  int microbatch = 0;
  double start_s = 0.0;
  double end_s = 0.0;
  int freq_mhz = 0;
  std::string mode;
  int sync_sms = 0;              // SMs of the gradient reduction it runs (0: none)
  bool sync_overlapped = false;  // its buckets ran during it
};

struct Timeline {
  std::string method;
  std::string label;
  std::string schedule;  // schedule::ToString of the plan's schedule
  std::vector<std::vector<TimelineInstruction>> stages;  // [stage] in execution order
};

struct PartitionFrontierPoint {
  double time_s = 0.0;
  double energy_j = 0.0;
  int sms = 0;
  std::string slot;
};

struct PartitionFrontier {
  std::string type;
  std::vector<std::pair<int, std::vector<PartitionFrontierPoint>>> clocks;  // (MHz, points)
};

struct RunSettings {
  uint64_t seed = 0;
  std::vector<std::string> methods;
  double unit_time_s = 0.0;
  double static_power_w = 0.0;  // what the planner charges a blocked GPU
  double idle_power_w = 0.0;    // what the evaluation charges a waiting GPU
  std::vector<int> planning_clocks_mhz;
  int sweep_anchor_stride = 1;  // RunOptions::sweep_anchor_stride
  int confirm_readings = 0;     // RunOptions::confirm_readings
  int64_t budget = 0;
  double budget_fraction = 0.0;
  int64_t min_budget = 0;  // with budget_fraction: evaluations per tunable type at least
  std::string surrogate;
  std::string strategy;
  std::string store;
  std::string prior = "none";  // the profiler's prior mean (mobo::PriorModel), or "none"
  std::string prior_note;      // what the prior is worth here (mobo::ProfileResult::prior_note)
  // The prior's model is the measuring backend's own noise-free model (the emulator without
  // --prior-perturb): results with it are flattering (mobo::ProfileResult).
  bool prior_is_measuring_model = false;
  bool prior_calibrated = false;     // its physical scales fitted per type (mobo::CalibratePrior)
  bool prior_front = false;          // a trusted prior's frontier acquisition (ProfileOptions)
  std::vector<std::string> related;  // transfer: related workloads' signatures
  std::string evaluation;            // EvaluationMode asked for
};

// One plan file of the main method (plans/plan_NNNNN.json) as a user picks among them: its
// evaluated iteration cost, the average power of one GPU over the iteration, and its time and
// energy against Megatron-LM's fastest plan (+ = less; absent without the baseline).
struct PlanFileRow {
  std::string file;           // "plans/plan_00012.json"
  int plan_index = 0;         // the frontier point
  bool is_plan_json = false;  // the fastest plan, also written as plan.json
  double time_s = 0.0, energy_j = 0.0;
  double average_power_w = 0.0;  // energy / time / GPUs of the job
  std::optional<double> delta_time_pct, delta_energy_pct;
};

struct RunSummary {
  Json workload;
  std::string backend;    // measure::Backend::Description()
  std::string evaluator;  // Evaluator::Description()
  bool evaluated = true;  // false: every figure is the planner's prediction
  std::string gpu_hours_basis;
  std::string source_note;  // where the numbers come from, in words
  // What a reader must know before trusting the numbers, in words, first in the printed output
  // and the report; empty when there is nothing to say (a real GPU's measurements).
  std::string caveat;
  std::vector<PlanFileRow> plan_files;  // the main method's plans/, fastest last
  RunSettings settings;
  std::vector<MethodSummary> methods;
  std::vector<MaxThroughputRow> max_throughput;
  std::vector<FrontierTableRow> frontier_table;
  std::vector<InterpolatedRow> interpolated;
  std::map<std::string, std::optional<double>> checks;  // project acceptance checks
  Timeline timeline;                                    // the main method's fastest plan
  std::vector<PartitionFrontier> partition_frontiers;
  double peak_rss_mib = 0.0;  // the planning process's peak resident memory
};

// summary.json ({"format": kSummaryFormat, ...}).
Json ToJson(const RunSummary& summary);

}  // namespace kareus::methods
