// SPDX-License-Identifier: Apache-2.0
// A small analytic stand-in for the emulator in tests: wave-quantized compute on the SMs the
// collective leaves, a collective that saturates near 12 SMs, a launch slot that delays it, a
// V^2 f-like dynamic power. Seeded multiplicative noise per (seed, configuration), like the
// emulator's Measure, so a configuration reads the same whenever it is measured.
#pragma once

#include <algorithm>
#include <cmath>
#include <csignal>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kareus/common/context.h"
#include "kareus/hw/gpu_spec.h"
#include "kareus/measure/backend.h"
#include "kareus/workload/ops.h"

namespace kareus::testing {

inline hw::GpuSpec SyntheticGpu() {
  hw::GpuSpec gpu;
  gpu.name = "SYNTH-GPU";
  gpu.sm_count = 108;
  gpu.clock = {.min_mhz = 900,
               .max_mhz = 1410,
               .step_mhz = 15,
               .default_mhz = 1410,
               .profile_min_mhz = 900,
               .profile_step_mhz = 30};
  gpu.power.static_w = 85.0;
  gpu.power.cap_w = 400.0;
  return gpu;
}

inline workload::PartitionType SyntheticPartition(const std::string& name, int slots,
                                                  bool tunable = true) {
  workload::PartitionType type;
  type.name = name;
  static const char* kSlots[] = {"norm_0", "linear_0", "rope_0", "attn_0"};
  for (int i = 0; i < slots; ++i) type.launch_slots.push_back(kSlots[i]);
  for (int sms = 3; sms <= 30; sms += 3) type.sm_choices.push_back(sms);
  type.tunable = tunable;
  type.fixed_sms = 20;
  type.fixed_slot = "norm_0";
  return type;
}

// A workload on the synthetic GPU (4096 tokens) made of the given partition types.
inline workload::WorkloadModel SyntheticModel(std::vector<workload::PartitionType> types) {
  workload::WorkloadModel model;
  model.workload.name = "synthetic";
  model.workload.gpu = SyntheticGpu();
  model.workload.sequence_length = 4096;
  model.partition_types = std::move(types);
  return model;
}

class SyntheticBackend : public measure::Backend {
 public:
  SyntheticBackend(uint64_t seed, bool noise_free = false, bool has_twin = true)
      : seed_(seed), noise_free_(noise_free), has_twin_(has_twin) {}

  std::string Description() const override {
    return noise_free_ ? "synthetic(noise_free)" : "synthetic(noise)";
  }
  const hw::GpuSpec& Gpu() const override { return gpu_; }
  bool NoiseFree() const override { return noise_free_; }
  double BatchOverheadSeconds() const override { return 10.0; }
  std::unique_ptr<measure::Backend> NoiseFreeTwin() const override {
    if (!has_twin_) return nullptr;
    return std::make_unique<SyntheticBackend>(seed_, true);
  }

  // A whole instruction: compute at a V^2 f-like rate, collectives on a fixed bus; nanobatched
  // overlap hides most of the shorter of the two, better with comm knobs near 12 SMs.
  static measure::Sample InstructionTruth(const workload::WorkloadModel& model,
                                          const measure::InstructionRequest& r) {
    const workload::InstructionModel& ins = model.Instruction(r.stage, r.chunk, r.direction);
    const double f = r.knobs.freq_mhz / 1410.0;
    double comm_bytes = 0.0;
    for (const workload::Op& op : ins.sequential_ops) {
      if (op.kind == workload::OpKind::kCollective) comm_bytes += op.bytes;
    }
    const double compute_s = ins.flops / (180e12 * f) + 2e-4;
    const double comm_s = comm_bytes / 150e9;
    double time_s = compute_s + comm_s;
    if (r.knobs.mode == schedule::ExecutionMode::kNanobatched) {
      double penalty = 0.25;  // library default
      if (!r.knobs.partitions.empty()) {
        penalty = 0.0;
        for (const auto& [type, comm] : r.knobs.partitions)
          penalty += std::abs(comm.sms - 12) / 60.0;
        penalty = 0.05 + penalty / static_cast<double>(r.knobs.partitions.size());
      }
      time_s = std::max(compute_s, comm_s) * 1.04 + penalty * std::min(compute_s, comm_s);
    }
    measure::Sample s;
    s.time_s = time_s;
    s.static_energy_j = 85.0 * time_s;
    s.dynamic_energy_j = (260.0 * std::pow(f, 2.6) + 40.0) * compute_s + 60.0 * comm_s;
    s.energy_j = s.static_energy_j + s.dynamic_energy_j;
    s.realized_freq_mhz = r.knobs.freq_mhz;
    s.gpus = measure::InstructionGpus(model);
    s.noise_free = true;
    return s;
  }

  void MeasureInstructions(const workload::WorkloadModel& model,
                           const std::vector<measure::InstructionRequest>& batch,
                           const measure::SampleCallback& on_sample) override {
    if (batch.empty()) return;
    Account(10.0 * measure::InstructionGpus(model), 0);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const auto& r = batch[i];
      std::string key = std::to_string(r.stage) + schedule::ToString(r.direction) +
                        schedule::ToString(r.knobs.mode) + std::to_string(r.knobs.freq_mhz);
      for (const auto& [type, comm] : r.knobs.partitions)
        key += type + std::to_string(comm.sms) + comm.slot;
      if (r.repeat != 0) key += "repeat" + std::to_string(r.repeat);  // a reading of its own
      measure::Sample s = Noisy(InstructionTruth(model, r), key);
      s.seconds = 12.0;
      Account(s.GpuSeconds(), 1);
      on_sample(i, s);
    }
  }

  void MeasureFixedWork(const workload::WorkloadModel& model,
                        const std::vector<measure::FixedWorkRequest>& batch,
                        const measure::SampleCallback& on_sample) override {
    if (batch.empty()) return;
    Account(10.0 * measure::InstructionGpus(model), 0);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const auto& r = batch[i];
      double flops = 0.0;
      for (const workload::Op& op : workload::FixedWorkOps(model, r.stage, r.chunk, r.direction))
        flops += op.flops;
      const double f = r.freq_mhz / 1410.0;
      measure::Sample s;
      s.time_s = flops / (180e12 * f) + 1e-4;
      s.static_energy_j = 85.0 * s.time_s;
      s.dynamic_energy_j = (260.0 * std::pow(f, 2.6) + 40.0) * s.time_s;
      s.energy_j = s.static_energy_j + s.dynamic_energy_j;
      s.realized_freq_mhz = r.freq_mhz;
      s.gpus = measure::InstructionGpus(model);
      s.noise_free = true;
      s = Noisy(s, "fixed" + std::to_string(r.stage) + schedule::ToString(r.direction) +
                       std::to_string(r.freq_mhz));
      s.seconds = 12.0;
      Account(s.GpuSeconds(), 1);
      on_sample(i, s);
    }
  }

  // Gradient buckets on a network of 20 GB/s per SM up to 50 GB/s; overlapped with the
  // backward's compute (which loses 1 % per reduction SM while they overlap).
  void MeasureGradientSync(const workload::WorkloadModel& model,
                           const std::vector<measure::GradientSyncRequest>& batch,
                           const measure::SampleCallback& on_sample) override {
    if (batch.empty()) return;
    Account(10.0 * measure::GradientSyncGpus(model), 0);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const auto& r = batch[i];
      const auto buckets = r.work == measure::GradientSyncWork::kSyncNode
                               ? workload::GradientSyncBuckets(model, r.stage, r.chunk)
                               : workload::LastBackwardBuckets(model, r.stage);
      double bytes = 0.0;
      for (const auto& b : buckets) bytes += b.collective.bytes;
      const double f = r.freq_mhz / 1410.0;
      const double comm_s = bytes / std::min(50e9, 20e9 * r.sms) + 1e-4;
      double compute_s = 0.0;
      if (r.work == measure::GradientSyncWork::kOverlapped) {
        compute_s = model.Instruction(r.stage, 0, schedule::Direction::kBackward).flops /
                    (180e12 * f) * (1.0 + 0.01 * r.sms);
      }
      measure::Sample s;
      s.time_s = std::max(compute_s, comm_s);
      s.static_energy_j = 85.0 * s.time_s;
      s.dynamic_energy_j = (260.0 * std::pow(f, 2.6) + 40.0) * compute_s + (5.0 + r.sms) * comm_s;
      s.energy_j = s.static_energy_j + s.dynamic_energy_j;
      s.realized_freq_mhz = r.freq_mhz;
      s.gpus = measure::GradientSyncGpus(model);
      s.noise_free = true;
      s = Noisy(s, std::string("sync") + measure::ToString(r.work) + std::to_string(r.stage) +
                       std::to_string(r.chunk) + std::to_string(r.freq_mhz) +
                       std::to_string(r.sms) +
                       (r.repeat != 0 ? "repeat" + std::to_string(r.repeat) : std::string()));
      s.seconds = 12.0;
      Account(s.GpuSeconds(), 1);
      on_sample(i, s);
    }
  }

  // Called before each measurement with the count taken so far by this backend (tests kill
  // the process from here).
  std::function<void(int64_t)> before_measure;

  static measure::Sample Truth(const workload::PartitionType& type,
                               const measure::PartitionKnobs& k) {
    const double f = k.freq_mhz / 1410.0;
    const int slot =
        static_cast<int>(std::find(type.launch_slots.begin(), type.launch_slots.end(), k.slot) -
                         type.launch_slots.begin());
    const double salt = static_cast<double>(type.name.size() % 3);
    const double waves = std::ceil((380.0 + 40 * salt) / (108.0 - k.sms));
    const double compute_s = waves * 2.2e-4 / f + 4e-4 * (1.0 + 0.1 * slot);
    const double comm_s = 1.6e-3 * 12.0 / std::min(k.sms, 12 + static_cast<int>(salt)) + 5e-5;
    const double start_s = compute_s * (0.15 + 0.2 * slot);
    const double time_s = std::max(compute_s * (1.0 + 0.004 * k.sms), start_s + comm_s);
    const double dyn_w = 260.0 * std::pow(f, 2.6) * (0.85 + 0.002 * k.sms) + 40.0;
    const double busy = compute_s / time_s;
    measure::Sample s;
    s.time_s = time_s;
    s.static_energy_j = 85.0 * time_s;
    s.dynamic_energy_j = dyn_w * time_s * (0.4 + 0.6 * busy);
    s.energy_j = s.static_energy_j + s.dynamic_energy_j;
    s.realized_freq_mhz = k.freq_mhz;
    s.noise_free = true;
    return s;
  }

  measure::Sample Noisy(measure::Sample s, const std::string& key) const {
    if (noise_free_) return s;
    Rng rng(DeriveSeed(seed_, HashString(key.c_str())));
    std::normal_distribution<double> normal(0.0, 1.0);
    s.time_s *= 1.0 + 0.003 * normal(rng);
    s.energy_j *= 1.0 + 0.01 * normal(rng);
    s.static_energy_j = 85.0 * s.time_s;
    s.dynamic_energy_j = s.energy_j - s.static_energy_j;
    s.noise_free = false;
    return s;
  }

  void MeasureBatch(const workload::PartitionType& type,
                    const std::vector<measure::PartitionKnobs>& batch,
                    const measure::SampleCallback& on_sample) override {
    if (batch.empty()) return;
    Account(10.0, 0);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (before_measure) before_measure(Measurements());
      measure::Sample s = Truth(type, batch[i]);
      if (!noise_free_) {
        Rng rng(DeriveSeed(seed_, measure::ConfigurationKey("synthetic", type.name, batch[i])));
        std::normal_distribution<double> normal(0.0, 1.0);
        const double time_factor = 1.0 + 0.003 * normal(rng);
        const double energy_factor = 1.0 + 0.01 * normal(rng);
        s.time_s *= time_factor;
        s.energy_j *= energy_factor;
        s.static_energy_j = 85.0 * s.time_s;
        s.dynamic_energy_j = s.energy_j - s.static_energy_j;
        s.noise_free = false;
      }
      s.seconds = 12.0;
      Account(s.GpuSeconds(), 1);
      on_sample(i, s);
    }
  }

 private:
  hw::GpuSpec gpu_ = SyntheticGpu();
  uint64_t seed_;
  bool noise_free_;
  bool has_twin_;
};

}  // namespace kareus::testing
