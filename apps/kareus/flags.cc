// SPDX-License-Identifier: Apache-2.0
#include "flags.h"

#include <cstdlib>

#include <fmt/format.h>

#include "kareus/common/json.h"
#include "kareus/hw/gpu_overlay.h"
#include "kareus/measure/cuda_backend.h"
#include "kareus/measure/emulator_backend.h"
#include "kareus/measure/torch_backend.h"
#include "kareus/mobo/prior.h"

namespace kareus::cli {

namespace {

void Throw(const OptionError& error, const FlagName* name) {
  if (name == nullptr) throw InputError(error.Message());
  std::string value = error.value;
  if (name->scale != 1.0) {
    char* end = nullptr;
    const double number = std::strtod(error.value.c_str(), &end);
    if (end != error.value.c_str() && *end == '\0') value = fmt::format("{}", number * name->scale);
  }
  ThrowInput(name->flag, value, error.rule);
}

}  // namespace

void ThrowAsFlag(const std::optional<OptionError>& error, const std::vector<FlagName>& names) {
  if (!error) return;
  for (const FlagName& name : names) {
    if (error->field == name.field) Throw(*error, &name);
  }
  Throw(*error, nullptr);
}

std::vector<FlagName> ProfilerFlagNames(const std::string& prefix) {
  return {
      {prefix + "budget", "--budget"},         {prefix + "budget_fraction", "--budget-fraction"},
      {prefix + "min_budget", "--min-budget"}, {prefix + "initial_design", "--initial"},
      {prefix + "batch_size", "--batch"},      {prefix + "unit_size", "--unit-size"}};
}

void AddProfilerFlags(CLI::App* cmd, ProfilerFlags& flags, const std::string& store_help) {
  auto* budget = cmd->add_option("--budget", flags.budget,
                                 "Evaluations per tunable partition type; 0: use --budget-fraction")
                     ->capture_default_str();
  cmd->add_option("--budget-fraction", flags.budget_fraction,
                  "Share of each partition type's search space the profiler measures; 0: "
                  "automatic, 0.05 with --prior model, 0.15 with --prior none")
      ->capture_default_str()
      ->excludes(budget);
  cmd->add_option("--min-budget", flags.min_budget,
                  "With --budget-fraction: at least this many evaluations per tunable partition "
                  "type and at least one per profiled clock (at most its space; 0: no floor; the "
                  "share actually measured is reported per type)")
      ->capture_default_str();
  cmd->add_option("--surrogate", flags.surrogate, "Profiler surrogate: gp | xgb")
      ->capture_default_str();
  cmd->add_option("--strategy", flags.strategy,
                  "Profiler batch acquisition: per-clock | published | believer | thompson")
      ->capture_default_str();
  cmd->add_option("--initial", flags.initial, "Initial design size per type; 0: automatic")
      ->capture_default_str();
  cmd->add_option("--batch", flags.batch, "Acquisition batch size; 0: automatic")
      ->capture_default_str();
  cmd->add_option("--unit-size", flags.unit_size,
                  "Configurations per measurement unit (one backend batch with its own warm-up); "
                  "under mpirun the units of a batch are measured on several ranks at once; the "
                  "same value gives the same result with any number of ranks; 0: whole batch")
      ->capture_default_str();
  cmd->add_flag("--full-grid", flags.full_grid,
                "Search and plan over every supported clock instead of the profiling sub-grid");
  cmd->add_flag("--raw-frontier", flags.raw_frontier,
                "Select partition frontiers on the raw readings instead of the surrogate's "
                "denoised means");
  cmd->add_option("--store", flags.store, store_help);
  cmd->add_option("--damaged-rows", flags.damaged_rows,
                  "A stored measurement that fails its checksum or value checks: remeasure (set "
                  "it aside in the store's set_aside table, warn, measure it again) | fail (stop "
                  "with exit 2 naming the rows; the store is left as it was)")
      ->capture_default_str();
  cmd->add_option("--prior", flags.prior,
                  "Profiler prior mean: model (the emulator's noise-free prediction for the "
                  "workload's GPU preset; the surrogates learn the residual and drop the prior "
                  "where held-out errors say it hurts) | none")
      ->capture_default_str();
  cmd->add_option("--prior-perturb", flags.prior_perturb,
                  "Deliberate error of the prior's GPU model, for benchmarks: none or "
                  "dynamic_power=F,voltage_shift_mhz=M,collective_bandwidth=F,"
                  "compute_efficiency=F,invert_clock_trend=1,shuffle=1")
      ->capture_default_str();
  cmd->add_flag("--no-prior-front", flags.no_prior_front,
                "With a prior: keep --strategy when the calibrated prior fits the measurements, "
                "instead of acquiring along its predicted frontier");
  cmd->add_option("--related", flags.related,
                  "Transfer: the measurement store of a related workload (same model and GPU, "
                  "another sequence length, microbatch, TP or CP), read-only; its measurements "
                  "of each partition type inform the surrogates with a learned similarity, never "
                  "the frontier (repeatable)");
}

mobo::ProfileOptions ToProfileOptions(const ProfilerFlags& flags) {
  mobo::ProfileOptions options;
  options.budget = flags.budget;
  options.budget_fraction = flags.budget_fraction;
  options.min_budget = flags.min_budget;
  options.prior_front = !flags.no_prior_front;
  options.surrogate = mobo::SurrogateKindFromString(flags.surrogate);
  options.strategy = mobo::StrategyFromString(flags.strategy);
  options.initial_design = flags.initial;
  options.batch_size = flags.batch;
  options.unit_size = flags.unit_size;
  options.full_grid = flags.full_grid;
  options.denoise = !flags.raw_frontier;
  options.store = flags.store;
  if (flags.damaged_rows != "remeasure" && flags.damaged_rows != "fail") {
    ThrowInput("--damaged-rows", flags.damaged_rows, "must be remeasure or fail");
  }
  options.remeasure_damaged = flags.damaged_rows == "remeasure";
  if (flags.prior == "model") {
    options.prior = mobo::EmulatorPrior(mobo::ParsePerturbation(flags.prior_perturb));
  } else if (flags.prior != "none") {
    ThrowInput("--prior", flags.prior, "must be one of: model, none");
  }
  options.related_stores.assign(flags.related.begin(), flags.related.end());
  ThrowAsFlag(options.Validate(), ProfilerFlagNames(""));
  return options;
}

CLI::Option* AddSeedOption(CLI::App* cmd, uint64_t& seed, const std::string& help) {
  const CLI::Validator non_negative(
      [](std::string& value) {
        if (value.find('-') != std::string::npos) {
          ThrowInput("--seed", value, "must be a whole number from 0 to 18446744073709551615");
        }
        return std::string();
      },
      "", "NON_NEGATIVE_SEED");
  return cmd->add_option("--seed", seed, help)->capture_default_str()->check(non_negative);
}

std::vector<std::string> BackendNames() {
  std::vector<std::string> names = {"emulator"};
  if (measure::CudaBackendBuilt()) names.push_back("cuda");
  names.push_back("torch");
  return names;
}

void AddGpuOverlayOption(CLI::App* cmd, std::string& path) {
  cmd->add_option("--gpu-overlay", path,
                  "Overlay of refitted GPU constants (kareus calibrate) for the workload's GPU, in "
                  "place of any overlay the workload names; the backend description and every "
                  "output record it");
}

workload::Workload LoadWorkload(const std::string& path, const std::string& gpu_overlay) {
  workload::Workload w = workload::LoadWorkloadFile(path);
  if (!gpu_overlay.empty()) {
    workload::SetGpuOverlay(w, hw::LoadGpuOverlayFile(gpu_overlay), "--gpu-overlay " + gpu_overlay);
  }
  return w;
}

void AddBackendFlags(CLI::App* cmd, BackendFlags& flags) {
  std::string names;
  for (const std::string& name : BackendNames()) names += (names.empty() ? "" : " | ") + name;
  cmd->add_option("--backend", flags.backend,
                  "Where measurements come from: " + names + " (" +
                      (measure::CudaBackendBuilt() ? "cuda: this node's GPUs; " : "") +
                      "torch: kareus.torch's own partitions in PyTorch, on this node's GPUs or "
                      "its CPU)")
      ->capture_default_str();
  cmd->add_flag("--allow-clock-control", flags.allow_clock_control,
                "cuda, torch: lock the SM clock of every measurement (needs root; reset "
                "afterwards). Without it the clock as found is measured and only that clock "
                "level profiled");
  cmd->add_option("--window", flags.window_s,
                  "cuda, torch: seconds of timed work (the energy window) per measurement; 0: the "
                  "backend's default (cuda " +
                      fmt::format("{}", measure::CudaBackendOptions{}.window_s) + ", torch " +
                      fmt::format("{}", measure::TorchBackendOptions{}.window_s) + ")")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--devices", flags.devices,
                  "cuda: CUDA device ordinals of ranks 0, 1, ... (default 0, 1, ...); under "
                  "mpirun the node's GPUs, each MPI rank taking a group of its own")
      ->delimiter(',');
  cmd->add_option("--measurement-log", flags.measurement_log,
                  "cuda: append one JSON line per measurement (ranks, clocks, clock event reasons, "
                  "GPU name, driver, power limit)");
}

measure::BackendFactory MakeBackendFactory(const BackendFlags& flags) {
  if (flags.backend == "torch") {
    if (!flags.devices.empty())
      ThrowInput("--devices", Describe(flags.devices.front()), "applies to --backend cuda only");
    if (!flags.measurement_log.empty()) {
      ThrowInput("--measurement-log", flags.measurement_log, "applies to --backend cuda only");
    }
    measure::TorchBackendOptions options;
    options.allow_clock_control = flags.allow_clock_control;
    if (flags.window_s > 0.0) options.window_s = flags.window_s;
    measure::CheckTorchBackendAvailable(options);  // EnvironmentError (exit 2) before anything runs
    return measure::TorchBackendFactory(options);
  }
  if (flags.backend == "emulator") {
    if (flags.allow_clock_control)
      ThrowInput("--allow-clock-control", "true", "applies to --backend cuda and torch only");
    if (flags.window_s > 0.0)
      ThrowInput("--window", Describe(flags.window_s), "applies to --backend cuda and torch only");
    if (!flags.devices.empty())
      ThrowInput("--devices", Describe(flags.devices.front()), "applies to --backend cuda only");
    if (!flags.measurement_log.empty()) {
      ThrowInput("--measurement-log", flags.measurement_log, "applies to --backend cuda only");
    }
    return measure::EmulatorBackendFactory();
  }
  if (flags.backend == "cuda" && measure::CudaBackendBuilt()) {
    measure::CudaBackendOptions options;
    options.allow_clock_control = flags.allow_clock_control;
    options.devices = flags.devices;
    options.log_path = flags.measurement_log;
    if (flags.window_s > 0.0) options.window_s = flags.window_s;
    ThrowAsFlag(options.Validate(), {{"devices", "--devices"}});
    measure::CheckCudaBackendAvailable(options);  // EnvironmentError (exit 2) on a machine without
    return measure::CudaBackendFactory(options);  // a usable GPU, before anything is written
  }
  std::string names;
  for (const std::string& name : BackendNames()) names += (names.empty() ? "" : ", ") + name;
  ThrowInput(
      "--backend", flags.backend,
      "unknown backend (valid in this build: " + names + ")" +
          (flags.backend == "cuda" ? "; this kareus was built without CUDA (KAREUS_WITH_CUDA)"
                                   : ""));
}

}  // namespace kareus::cli
