// SPDX-License-Identifier: Apache-2.0
// Where measurements come from: the Backend interface, the only source of measurements of a
// planner (DESIGN.md §6, reference/kareus-official.md §3.7). A backend measures what planning
// needs — batches of partition configurations (profiling), whole instructions (clock sweeps,
// library-default runs, the evaluation of plans) and the fixed work outside the partitions —
// and accounts its cost in GPU-seconds. The emulator is one backend
// (kareus/measure/emulator_backend.h); a real GPU is another; tests bring their own.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kareus/hw/gpu_spec.h"
#include "kareus/measure/types.h"
#include "kareus/schedule/schedule.h"
#include "kareus/workload/ops.h"

namespace kareus::measure {

// Called once per request as soon as its measurement exists, so that a caller can commit it
// before the next one is taken (a killed run then loses at most one measurement).
using SampleCallback = std::function<void(std::size_t index, const Sample& sample)>;

// One whole forward or backward instruction of a stage's model chunk, run with `knobs`.
struct InstructionRequest {
  int stage = 0;
  schedule::Direction direction = schedule::Direction::kForward;
  InstructionKnobs knobs;
  int chunk = 0;  // model chunk (interleaved 1F1B); 0 otherwise
  // Which reading of this configuration it is: 0 the first, 1, 2, ... further ones that must
  // not repeat an earlier reading's noise (a real GPU's runs never do; the emulator draws each
  // repeat's noise with a key of its own, 0 keeping the key of before repeats existed).
  int repeat = 0;
};

// The fixed work of one instruction at one clock (workload::FixedWorkOps): the kernels outside
// the transformer block plus the partitions that carry no collective, run back to back, as the
// published non-partition profiles measure them (reference/kareus-official.md §1.8).
struct FixedWorkRequest {
  int stage = 0;
  schedule::Direction direction = schedule::Direction::kForward;
  int freq_mhz = 0;
  int chunk = 0;  // model chunk (interleaved 1F1B); 0 otherwise
};

// What of the data-parallel gradient reduction to measure (the buckets of
// workload::LastBackwardBuckets / GradientSyncBuckets; Megatron-Core DDP):
enum class GradientSyncWork {
  kOverlapped,   // the stage's last instruction (the last backward of chunk 0, sequential
                 // execution) with LastBackwardBuckets(stage) reduced as it completes them:
                 // until both end
  kLastBuckets,  // LastBackwardBuckets(stage) alone (reduced right after that backward)
  kSyncNode,     // GradientSyncBuckets(stage, chunk) alone: the DAG's sync node of (stage, chunk)
};
const char* ToString(GradientSyncWork work);  // "overlapped" | "last_buckets" | "sync_node"

// One gradient-sync measurement at a locked clock, the reduction kernel on `sms` SMs.
struct GradientSyncRequest {
  int stage = 0;
  int chunk = 0;  // kSyncNode only
  GradientSyncWork work = GradientSyncWork::kSyncNode;
  int freq_mhz = 0;
  int sms = 0;
  int repeat = 0;  // as InstructionRequest::repeat
};

// Relative standard deviations of one reading's time and total energy (0: unknown or none).
struct ReadingNoise {
  double time = 0.0;
  double energy = 0.0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // A short description that identifies where values come from (and their noise), stored
  // with measurements so that a store is never mixed across backends.
  virtual std::string Description() const = 0;
  virtual const hw::GpuSpec& Gpu() const = 0;
  // Static power of the energy split (P_static): total = dynamic + P_static x time; what the
  // planner charges a blocked GPU (Perseus's and Kareus's accounting).
  virtual double StaticPowerW() const { return Gpu().power.static_w; }
  // Power a GPU draws while it waits (pipeline bubbles, P2P receives): what the evaluation of
  // a plan charges for the time a GPU runs no instruction.
  virtual double IdlePowerW() const { return Gpu().power.idle_w; }
  virtual bool NoiseFree() const = 0;
  // The repeatability of one reading as relative standard deviations, where the backend
  // knows it (the emulator: the noise it adds); zero where it does not (a real GPU, a
  // noise-free backend). The profiler's surrogate never explains readings more closely.
  virtual ReadingNoise DeclaredNoise() const { return {}; }
  // Seconds charged once per batch (process start, communicators, a warm-up run), per GPU of
  // the batch's group; part of GpuSeconds().
  virtual double BatchOverheadSeconds() const { return 0.0; }

  // Measures `batch` of `partition`, in order, calling `on_sample` for each as it arrives.
  // Knobs are validated (InputError). A sample occupies the GPUs of the partition's collective.
  virtual void MeasureBatch(const workload::PartitionType& partition,
                            const std::vector<PartitionKnobs>& batch,
                            const SampleCallback& on_sample) = 0;

  // Measures whole instructions of `model` (one stage replica: TP x CP GPUs).
  virtual void MeasureInstructions(const workload::WorkloadModel& model,
                                   const std::vector<InstructionRequest>& batch,
                                   const SampleCallback& on_sample) = 0;

  // Measures the fixed work of instructions of `model` (one stage replica). A request whose
  // fixed work has no kernel is a caller error (check workload::FixedWorkOps first).
  virtual void MeasureFixedWork(const workload::WorkloadModel& model,
                                const std::vector<FixedWorkRequest>& batch,
                                const SampleCallback& on_sample) = 0;

  // Measures data-parallel gradient syncs of `model` (one stage replica; the reduction spans
  // its DP x CP replicas). Only called for workloads with a gradient sync (DP x CP > 1).
  virtual void MeasureGradientSync(const workload::WorkloadModel& model,
                                   const std::vector<GradientSyncRequest>& batch,
                                   const SampleCallback& on_sample) = 0;

  // A noise-free twin for the oracle and the evaluation of plans, or nullptr when the backend
  // cannot provide one (a real GPU has no noise-free reading).
  virtual std::unique_ptr<Backend> NoiseFreeTwin() const { return nullptr; }

  // Convenience: a whole batch as a vector.
  std::vector<Sample> MeasureAll(const workload::PartitionType& partition,
                                 const std::vector<PartitionKnobs>& batch);
  std::vector<Sample> MeasureAll(const workload::WorkloadModel& model,
                                 const std::vector<InstructionRequest>& batch);
  std::vector<Sample> MeasureAll(const workload::WorkloadModel& model,
                                 const std::vector<FixedWorkRequest>& batch);
  std::vector<Sample> MeasureAll(const workload::WorkloadModel& model,
                                 const std::vector<GradientSyncRequest>& batch);

  double GpuSeconds() const { return gpu_seconds_; }      // measurements + batch overheads
  int64_t Measurements() const { return measurements_; }  // requests measured so far

 protected:
  void Account(double gpu_seconds, int64_t measurements) {
    gpu_seconds_ += gpu_seconds;
    measurements_ += measurements;
  }

 private:
  double gpu_seconds_ = 0.0;
  int64_t measurements_ = 0;
};

// Makes the backend of one workload: what the CLI's --backend chooses, what `kareus run` and
// `kareus evaluate` call once per workload. `seed` is the run's root seed (noise streams).
using BackendFactory =
    std::function<std::unique_ptr<Backend>(const workload::WorkloadModel& model, uint64_t seed)>;

// GPUs one measurement of each kind occupies: a partition's collective group, an
// instruction's stage replica (TP x CP).
int PartitionGpus(const workload::PartitionType& partition);
int InstructionGpus(const workload::WorkloadModel& model);
// A gradient-sync measurement occupies the stage's replicas: TP x CP x DP GPUs.
int GradientSyncGpus(const workload::WorkloadModel& model);

// A stable 64-bit key of (workload signature, partition, knobs): the emulator's noise key.
uint64_t ConfigurationKey(const std::string& workload_signature, const std::string& partition,
                          const PartitionKnobs& knobs);

}  // namespace kareus::measure
