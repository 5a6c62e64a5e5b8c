// SPDX-License-Identifier: Apache-2.0
// Flags several commands share, declared once: the profiler's (profile, run, evaluate) and the
// measurement backend's. Every default they print is read from the library's Options structs,
// and an invalid value is reported under the flag's name (the structs' Validate() names their
// own fields; FlagName maps one to the other).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "kareus/common/error.h"
#include "kareus/measure/backend.h"
#include "kareus/mobo/profiler.h"
#include "kareus/workload/workload.h"

namespace kareus::cli {

// A struct field and the flag that sets it; `scale` converts the struct's unit to the flag's
// (e.g. 1e3 for a field in seconds set by a flag in milliseconds).
struct FlagName {
  std::string field;
  std::string flag;
  double scale = 1.0;
};

// Throws the InputError of `error` (if any), named after its flag when `names` has it.
void ThrowAsFlag(const std::optional<OptionError>& error, const std::vector<FlagName>& names);

struct ProfilerFlags {
  int64_t budget = mobo::ProfileOptions{}.budget;
  double budget_fraction = mobo::ProfileOptions{}.budget_fraction;
  int64_t min_budget = mobo::ProfileOptions{}.min_budget;
  std::string surrogate = mobo::ToString(mobo::ProfileOptions{}.surrogate);
  std::string strategy = mobo::ToString(mobo::ProfileOptions{}.strategy);
  int initial = mobo::ProfileOptions{}.initial_design;
  int batch = mobo::ProfileOptions{}.batch_size;
  int unit_size = mobo::ProfileOptions{}.unit_size;
  bool full_grid = mobo::ProfileOptions{}.full_grid;
  bool raw_frontier = !mobo::ProfileOptions{}.denoise;
  std::string store;
  std::string damaged_rows = "remeasure";
  std::string prior = "model";
  std::string prior_perturb = "none";
  bool no_prior_front = !mobo::ProfileOptions{}.prior_front;
  std::vector<std::string> related;
};

// --budget, --budget-fraction, --min-budget, --surrogate, --strategy, --initial, --batch,
// --unit-size, --full-grid,
// --raw-frontier, --store (`store_help` says what the default store is for the command),
// --damaged-rows,
// --prior, --prior-perturb, --no-prior-front, --related.
void AddProfilerFlags(CLI::App* cmd, ProfilerFlags& flags, const std::string& store_help);

// The profiler's options from the flags, validated (InputError naming the flag). `--prior
// model` (the default) is the emulator's noise-free model of the workload's GPU preset,
// perturbed by --prior-perturb.
mobo::ProfileOptions ToProfileOptions(const ProfilerFlags& flags);
// The flags of mobo::ProfileOptions's fields; `prefix` is "" for the struct itself and
// "profile." for the one inside methods::RunOptions.
std::vector<FlagName> ProfilerFlagNames(const std::string& prefix);

// --seed: a root seed from 0 to 2^64 - 1. A negative number is refused (InputError naming the
// flag) where CLI11 would wrap it silently ("-1" -> 18446744073709551615).
CLI::Option* AddSeedOption(CLI::App* cmd, uint64_t& seed, const std::string& help);

// --gpu-overlay FILE: the emulator's GPU with the constants of an overlay file (kareus
// calibrate), in place of any overlay the workload file names.
void AddGpuOverlayOption(CLI::App* cmd, std::string& path);
// The workload file, with the --gpu-overlay file's overlay when `gpu_overlay` is not empty.
// InputError naming --gpu-overlay when the overlay is for another GPU or breaks a preset's rule.
workload::Workload LoadWorkload(const std::string& path, const std::string& gpu_overlay);

struct BackendFlags {
  std::string backend = "emulator";
  bool allow_clock_control = false;  // cuda: lock the SM clock per measurement
  std::vector<int> devices;          // cuda: CUDA ordinals of the group's ranks
  std::string measurement_log;       // cuda: one JSON line per measurement
  double window_s = 0.0;             // cuda, torch: the energy window per measurement, s; 0:
                                     // the backend's default
};

// --backend NAME: where measurements come from (the emulator; a real GPU when built with it;
// kareus.torch's partitions), the cuda and torch backends' --allow-clock-control and --window,
// the cuda backend's --devices and --measurement-log.
void AddBackendFlags(CLI::App* cmd, BackendFlags& flags);
// The factory --backend names; InputError for an unknown backend or cuda flags with another
// backend, EnvironmentError when the cuda backend cannot run on this machine (no driver, GPU,
// cuBLASLt, NCCL or NVML): checked here, before anything is measured or written.
measure::BackendFactory MakeBackendFactory(const BackendFlags& flags);
// The backends this build offers: "emulator", and "cuda" when built with CUDA.
std::vector<std::string> BackendNames();

}  // namespace kareus::cli
