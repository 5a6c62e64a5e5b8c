// SPDX-License-Identifier: Apache-2.0
// Where measurements come from: the Backend interface (the emulator today, a real GPU later)
// and the emulator backend. A backend measures a batch of configurations of one partition
// type and accounts the cost in GPU-seconds (DESIGN.md §6, reference/kareus-official.md §3.7).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kareus/emulator/emulator.h"
#include "kareus/hw/gpu_spec.h"
#include "kareus/workload/ops.h"

namespace kareus::measure {

// Knobs of one partition execution: locked clock, comm-kernel SMs, launch slot.
using Knobs = emulator::PartitionKnobs;

// One measured execution of a partition, per GPU (published: energy is the per-GPU average of
// the ranks, time the max; reference/kareus-official.md §3.1).
struct Sample {
  double time_s = 0.0;
  double energy_j = 0.0;            // total
  double static_energy_j = 0.0;     // P_static x time_s
  double dynamic_energy_j = 0.0;    // energy_j - static_energy_j ("effective" energy)
  double realized_freq_mhz = 0.0;   // time-weighted clock actually sustained
  double gpu_seconds = 0.0;         // cost of taking this measurement on one GPU
  bool noise_free = false;          // exact (oracle) value rather than a noisy reading
};

// Called once per configuration as soon as its measurement exists, so that a caller can
// commit it before the next one is taken (a killed run then loses at most one measurement).
using SampleCallback = std::function<void(std::size_t index, const Sample& sample)>;

class Backend {
 public:
  virtual ~Backend() = default;

  // A short description that identifies where values come from (and their noise), stored
  // with measurements so that a store is never mixed across backends.
  virtual std::string Description() const = 0;
  virtual const hw::GpuSpec& Gpu() const = 0;
  // Static power of the energy split (P_static): total = dynamic + P_static x time.
  virtual double StaticPowerW() const { return Gpu().power.static_w; }
  virtual bool NoiseFree() const = 0;

  // Measures `batch` of `partition`, in order, calling `on_sample` for each as it arrives.
  // Knobs are validated (InputError). Costs are added to GpuSeconds().
  virtual void MeasureBatch(const workload::PartitionType& partition,
                            const std::vector<Knobs>& batch, const SampleCallback& on_sample) = 0;

  // A noise-free twin for oracle baselines, or nullptr when the backend cannot provide one
  // (a real GPU has no noise-free reading).
  virtual std::unique_ptr<Backend> NoiseFreeTwin() const { return nullptr; }

  // Convenience: the whole batch as a vector.
  std::vector<Sample> MeasureAll(const workload::PartitionType& partition,
                                 const std::vector<Knobs>& batch);

  double GpuSeconds() const { return gpu_seconds_; }    // all measurements + warm-ups so far
  int64_t Measurements() const { return measurements_; }  // configurations measured so far

 protected:
  void Account(double gpu_seconds, int64_t measurements) {
    gpu_seconds_ += gpu_seconds;
    measurements_ += measurements;
  }

 private:
  double gpu_seconds_ = 0.0;
  int64_t measurements_ = 0;
};

struct EmulatorBackendOptions {
  emulator::MeasurementOptions measurement;  // noise and protocol (noise_free for the oracle)
  uint64_t seed = 1;           // noise stream; a configuration's reading depends on (seed, key)
  double batch_warmup_s = 10.0;  // per batch: process start, communicator, warm-up run
                                 // (published: one torch spawn per batch, §3.7); GPU-seconds
  std::string workload_signature;  // part of every measurement's noise key
};

// The embedded emulator as a measurement backend (DESIGN.md §5).
std::unique_ptr<Backend> MakeEmulatorBackend(const hw::GpuSpec& gpu,
                                             const EmulatorBackendOptions& options);

// A stable 64-bit key of (workload signature, partition, knobs): the emulator's noise key.
uint64_t ConfigurationKey(const std::string& workload_signature, const std::string& partition,
                          const Knobs& knobs);

}  // namespace kareus::measure
