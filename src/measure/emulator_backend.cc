// SPDX-License-Identifier: Apache-2.0
#include <sstream>

#include "kareus/common/context.h"
#include "kareus/measure/backend.h"

namespace kareus::measure {

std::vector<Sample> Backend::MeasureAll(const workload::PartitionType& partition,
                                        const std::vector<Knobs>& batch) {
  std::vector<Sample> samples(batch.size());
  MeasureBatch(partition, batch,
               [&samples](std::size_t index, const Sample& sample) { samples[index] = sample; });
  return samples;
}

uint64_t ConfigurationKey(const std::string& workload_signature, const std::string& partition,
                          const Knobs& knobs) {
  uint64_t key = HashString(workload_signature.c_str());
  key = DeriveSeed(key, HashString(partition.c_str()));
  key = DeriveSeed(key, static_cast<uint64_t>(knobs.freq_mhz));
  key = DeriveSeed(key, static_cast<uint64_t>(knobs.sms));
  key = DeriveSeed(key, HashString(knobs.slot.c_str()));
  return key;
}

namespace internal {
namespace {

class EmulatorBackend final : public Backend {
 public:
  EmulatorBackend(const hw::GpuSpec& gpu, const EmulatorBackendOptions& options)
      : gpu_(gpu), options_(options) {}

  std::string Description() const override {
    std::ostringstream out;
    if (options_.measurement.noise_free) {
      out << "emulator(noise_free)";
    } else {
      out << "emulator(time_noise=" << options_.measurement.time_noise
          << ",energy_noise=" << options_.measurement.energy_noise << ")";
    }
    return out.str();
  }
  const hw::GpuSpec& Gpu() const override { return gpu_; }
  bool NoiseFree() const override { return options_.measurement.noise_free; }

  void MeasureBatch(const workload::PartitionType& partition, const std::vector<Knobs>& batch,
                    const SampleCallback& on_sample) override {
    if (batch.empty()) return;
    Account(options_.batch_warmup_s, 0);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const emulator::SimResult truth = emulator::SimulatePartition(gpu_, partition, batch[i]);
      const uint64_t key =
          ConfigurationKey(options_.workload_signature, partition.name, batch[i]);
      const emulator::Measurement reading =
          emulator::Measure(truth, options_.measurement, options_.seed, key);
      Sample sample{
          .time_s = reading.value.time_s,
          .energy_j = reading.value.energy_j,
          .static_energy_j = reading.value.static_energy_j,
          .dynamic_energy_j = reading.value.dynamic_energy_j,
          .realized_freq_mhz = reading.value.effective_freq_mhz,
          .gpu_seconds = reading.gpu_seconds,
          .noise_free = reading.noise_free,
      };
      Account(sample.gpu_seconds, 1);
      on_sample(i, sample);
    }
  }

  std::unique_ptr<Backend> NoiseFreeTwin() const override {
    EmulatorBackendOptions twin = options_;
    twin.measurement.noise_free = true;
    return std::make_unique<EmulatorBackend>(gpu_, twin);
  }

 private:
  hw::GpuSpec gpu_;
  EmulatorBackendOptions options_;
};

}  // namespace
}  // namespace internal

std::unique_ptr<Backend> MakeEmulatorBackend(const hw::GpuSpec& gpu,
                                             const EmulatorBackendOptions& options) {
  return std::make_unique<internal::EmulatorBackend>(gpu, options);
}

}  // namespace kareus::measure
