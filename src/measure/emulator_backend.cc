// SPDX-License-Identifier: Apache-2.0
#include "kareus/measure/emulator_backend.h"

#include <cmath>
#include <sstream>

#include "kareus/common/context.h"
#include "kareus/emulator/gradient_sync.h"

namespace kareus::measure {

std::optional<OptionError> EmulatorBackendOptions::Validate() const {
  if (auto error = measurement.Validate()) return error->Nested("measurement");
  if (!(std::isfinite(batch_warmup_s) && batch_warmup_s >= 0.0)) {
    return OptionError{"batch_warmup_s", Describe(batch_warmup_s), "must be a finite number >= 0"};
  }
  return std::nullopt;
}

namespace internal {
namespace {

// Whole instructions and fixed work read their noise from a stream of their own, so that
// adding or removing partition measurements never changes them (and Perseus's sweep and
// Kareus's sequential fallback, which ask for the same configuration, read the same value).
constexpr uint64_t kInstructionStream = 0x1257;

Sample ToSample(const emulator::Measurement& reading, int gpus) {
  return Sample{
      .time_s = reading.value.time_s,
      .energy_j = reading.value.energy_j,
      .static_energy_j = reading.value.static_energy_j,
      .dynamic_energy_j = reading.value.dynamic_energy_j,
      .realized_freq_mhz = reading.value.effective_freq_mhz,
      .seconds = reading.gpu_seconds,
      .gpus = gpus,
      .noise_free = reading.noise_free,
  };
}

// A stage's model chunk in noise keys: "stage", or "stage.chunk" for a chunk other than 0 (so
// keys of single-chunk schedules stay as they were before chunks existed).
std::string UnitKey(int stage, int chunk) {
  return std::to_string(stage) + (chunk != 0 ? "." + std::to_string(chunk) : std::string());
}

// The noise key of an instruction: the library-default runs (no per-type knobs) keep the key
// they have always had; tuned knobs and a repeat (InstructionRequest::repeat) extend it.
uint64_t InstructionKey(const std::string& signature, const InstructionRequest& request) {
  std::string key = signature + "|instruction|" + UnitKey(request.stage, request.chunk) + "|" +
                    schedule::ToString(request.direction) + "|" +
                    schedule::ToString(request.knobs.mode) + "|" +
                    std::to_string(request.knobs.freq_mhz);
  for (const auto& [type, comm] : request.knobs.partitions) {
    key += "|" + type + "=" + std::to_string(comm.sms) + "@" + comm.slot;
  }
  if (request.repeat != 0) key += "|repeat=" + std::to_string(request.repeat);
  return HashString(key.c_str());
}

class EmulatorBackend final : public Backend {
 public:
  EmulatorBackend(const hw::GpuSpec& gpu, const EmulatorBackendOptions& options)
      : gpu_(gpu), options_(options) {
    ThrowIfInvalid(options_.Validate());
  }

  std::string Description() const override {
    std::ostringstream out;
    // A preset calibrated on its own measurements names that calibration (GpuSpec::calibration).
    const std::string calibration = gpu_.calibration.empty() ? "" : "," + gpu_.calibration;
    if (options_.measurement.noise_free) {
      out << "emulator(v" << emulator::kPhysicsVersion << calibration << ",noise_free)";
    } else {
      out << "emulator(v" << emulator::kPhysicsVersion << calibration
          << ",time_noise=" << options_.measurement.time_noise
          << ",energy_noise=" << options_.measurement.energy_noise << ")";
    }
    return out.str();
  }
  const hw::GpuSpec& Gpu() const override { return gpu_; }
  bool NoiseFree() const override { return options_.measurement.noise_free; }
  ReadingNoise DeclaredNoise() const override {
    if (options_.measurement.noise_free) return {};
    return {.time = options_.measurement.time_noise, .energy = options_.measurement.energy_noise};
  }
  double BatchOverheadSeconds() const override { return options_.batch_warmup_s; }

  void MeasureBatch(const workload::PartitionType& partition,
                    const std::vector<PartitionKnobs>& batch,
                    const SampleCallback& on_sample) override {
    MeasureEach(
        batch.size(), PartitionGpus(partition), options_.seed, on_sample, [&](std::size_t i) {
          return Run{emulator::SimulatePartition(gpu_, partition, batch[i]),
                     ConfigurationKey(options_.workload_signature, partition.name, batch[i])};
        });
  }

  void MeasureInstructions(const workload::WorkloadModel& model,
                           const std::vector<InstructionRequest>& batch,
                           const SampleCallback& on_sample) override {
    const std::string signature = model.workload.Signature();
    MeasureEach(batch.size(), InstructionGpus(model), DeriveSeed(options_.seed, kInstructionStream),
                on_sample, [&](std::size_t i) {
                  const InstructionRequest& request = batch[i];
                  return Run{emulator::SimulateInstruction(model, request.stage, request.chunk,
                                                           request.direction, request.knobs),
                             InstructionKey(signature, request)};
                });
  }

  void MeasureFixedWork(const workload::WorkloadModel& model,
                        const std::vector<FixedWorkRequest>& batch,
                        const SampleCallback& on_sample) override {
    const std::string signature = model.workload.Signature();
    MeasureEach(
        batch.size(), InstructionGpus(model), DeriveSeed(options_.seed, kInstructionStream),
        on_sample, [&](std::size_t i) {
          const FixedWorkRequest& request = batch[i];
          const std::vector<workload::Op> ops =
              workload::FixedWorkOps(model, request.stage, request.chunk, request.direction);
          KAREUS_CHECK(!ops.empty())
              << "stage " << request.stage << " chunk " << request.chunk << " "
              << schedule::ToString(request.direction) << " has no fixed work";
          const std::string key = signature + "|fixed|" + UnitKey(request.stage, request.chunk) +
                                  "|" + schedule::ToString(request.direction) + "|" +
                                  std::to_string(request.freq_mhz);
          return Run{
              emulator::SimulateSequential(model.workload.gpu, ops, request.freq_mhz,
                                           model.workload.gpu.interconnect.library_default_sms),
              HashString(key.c_str())};
        });
  }

  void MeasureGradientSync(const workload::WorkloadModel& model,
                           const std::vector<GradientSyncRequest>& batch,
                           const SampleCallback& on_sample) override {
    if (batch.empty()) return;
    KAREUS_CHECK(model.gradient_sync.enabled) << "gradient sync requested without DP x CP > 1";
    const std::string signature =
        model.workload.Signature() + ";dp=" + std::to_string(model.workload.parallelism.dp);
    MeasureEach(batch.size(), GradientSyncGpus(model),
                DeriveSeed(options_.seed, kInstructionStream), on_sample, [&](std::size_t i) {
                  const GradientSyncRequest& r = batch[i];
                  const emulator::GradientSyncKnobs knobs{.freq_mhz = r.freq_mhz, .sms = r.sms};
                  emulator::SimResult truth;
                  switch (r.work) {
                    case GradientSyncWork::kOverlapped:
                      truth = emulator::SimulateBackwardWithGradientSync(
                          model, r.stage, 0, workload::LastBackwardBuckets(model, r.stage), knobs);
                      break;
                    case GradientSyncWork::kLastBuckets:
                      truth = emulator::SimulateGradientBuckets(
                          model, workload::LastBackwardBuckets(model, r.stage), knobs);
                      break;
                    case GradientSyncWork::kSyncNode:
                      truth = emulator::SimulateGradientBuckets(
                          model, workload::GradientSyncBuckets(model, r.stage, r.chunk), knobs);
                      break;
                  }
                  const std::string key =
                      signature + "|gradient_sync|" + ToString(r.work) + "|" +
                      std::to_string(r.stage) + "." + std::to_string(r.chunk) + "|" +
                      std::to_string(r.freq_mhz) + "|" + std::to_string(r.sms) +
                      (r.repeat != 0 ? "|repeat=" + std::to_string(r.repeat) : std::string());
                  return Run{truth, HashString(key.c_str())};
                });
  }

  std::unique_ptr<Backend> NoiseFreeTwin() const override {
    EmulatorBackendOptions twin = options_;
    twin.measurement.noise_free = true;
    return std::make_unique<EmulatorBackend>(gpu_, twin);
  }

 private:
  // One request's noise-free run and the key its measurement noise is drawn with.
  struct Run {
    emulator::SimResult truth;
    uint64_t noise_key = 0;
  };

  // Every batch kind is measured alike: one warm-up for the batch on its `gpus` GPUs, then each
  // request's run `simulate(i)` with measurement noise, charged and handed over as it exists.
  template <class Simulate>
  void MeasureEach(std::size_t count, int gpus, uint64_t seed, const SampleCallback& on_sample,
                   Simulate simulate) {
    if (count == 0) return;
    Account(options_.batch_warmup_s * gpus, 0);
    for (std::size_t i = 0; i < count; ++i) {
      const Run run = simulate(i);
      const Sample sample =
          ToSample(emulator::Measure(run.truth, options_.measurement, seed, run.noise_key), gpus);
      Account(sample.GpuSeconds(), 1);
      on_sample(i, sample);
    }
  }

  hw::GpuSpec gpu_;
  EmulatorBackendOptions options_;
};

}  // namespace
}  // namespace internal

std::unique_ptr<Backend> MakeEmulatorBackend(const hw::GpuSpec& gpu,
                                             const EmulatorBackendOptions& options) {
  return std::make_unique<internal::EmulatorBackend>(gpu, options);
}

BackendFactory EmulatorBackendFactory(const EmulatorBackendOptions& options) {
  ThrowIfInvalid(options.Validate());
  return [options](const workload::WorkloadModel& model, uint64_t seed) {
    EmulatorBackendOptions per = options;
    per.seed = seed;
    per.workload_signature = model.workload.Signature();
    return MakeEmulatorBackend(model.workload.gpu, per);
  };
}

}  // namespace kareus::measure
