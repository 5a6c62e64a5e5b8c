// SPDX-License-Identifier: Apache-2.0
// Measurement emulation: what the published protocol reads on a real GPU (Zeus `measure`:
// lock the clock, 2 s settle, run the partition back to back for a 5 s window, read time and
// the NVML energy counter, 5 s cool-down; kareus-official.md §3.7, §7.1).
#include <algorithm>
#include <cmath>
#include <random>

#include "kareus/common/context.h"
#include "kareus/common/error.h"
#include "kareus/emulator/emulator.h"

namespace kareus::emulator {

std::optional<OptionError> MeasurementOptions::Validate() const {
  auto finite_non_negative = [](double v) { return std::isfinite(v) && v >= 0.0; };
  if (!finite_non_negative(time_noise)) {
    return OptionError{"time_noise", Describe(time_noise), "must be a finite number >= 0"};
  }
  if (!finite_non_negative(energy_noise)) {
    return OptionError{"energy_noise", Describe(energy_noise), "must be a finite number >= 0"};
  }
  if (!finite_non_negative(counter_period_s)) {
    return OptionError{"counter_period_s", Describe(counter_period_s),
                       "must be a finite number >= 0"};
  }
  if (!finite_non_negative(settle_s)) {
    return OptionError{"settle_s", Describe(settle_s), "must be a finite number >= 0"};
  }
  if (!(std::isfinite(window_s) && window_s > 0.0)) {
    return OptionError{"window_s", Describe(window_s), "must be a finite number > 0"};
  }
  if (!finite_non_negative(cooldown_s)) {
    return OptionError{"cooldown_s", Describe(cooldown_s), "must be a finite number >= 0"};
  }
  return std::nullopt;
}

Measurement Measure(const SimResult& truth, const MeasurementOptions& options, uint64_t seed,
                    uint64_t key) {
  KAREUS_CHECK(!options.Validate()) << "bad MeasurementOptions: " << options.Validate()->Message();
  Measurement m;
  m.noise_free = options.noise_free;
  // The window holds whole iterations; one longer than the window is measured once.
  const double window_s = std::max(options.window_s, truth.time_s);
  m.gpu_seconds = options.settle_s + window_s + options.cooldown_s;
  if (options.noise_free || truth.time_s <= 0.0) {
    m.value = truth;
    return m;
  }
  // One stream per (seed, key): a configuration reads the same whatever was measured before.
  Rng rng(DeriveSeed(seed, key));
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> phase(0.0, options.counter_period_s);
  const double time_factor = std::max(0.5, 1.0 + options.time_noise * normal(rng));
  const double energy_factor = std::max(0.5, 1.0 + options.energy_noise * normal(rng));
  // The NVML energy counter advances only every `counter_period_s` (~100 ms on A100/H100,
  // ml-energy/blog thermally-stable-profiling; arXiv 2312.02741): a window read at its two ends
  // covers the energy between the last updates before each end, i.e. a window shorter or
  // longer by (phase_start - phase_end), each phase uniform in [0, period).
  const double quantized_window_s = window_s + phase(rng) - phase(rng);
  const double counter_factor = quantized_window_s / window_s;

  SimResult v = truth;
  v.time_s = truth.time_s * time_factor;
  v.energy_j = truth.energy_j * energy_factor * counter_factor;
  const double static_w = truth.static_energy_j / truth.time_s;
  v.static_energy_j = static_w * v.time_s;
  v.dynamic_energy_j = v.energy_j - v.static_energy_j;
  v.avg_power_w = v.energy_j / v.time_s;
  v.compute_busy_s = truth.compute_busy_s * time_factor;
  v.comm_busy_s = truth.comm_busy_s * time_factor;
  v.overlap_s = truth.overlap_s * time_factor;
  m.value = v;
  return m;
}

}  // namespace kareus::emulator
