// SPDX-License-Identifier: Apache-2.0
// The measurement orchestration of the real-GPU backend, over the device layer (device.h): one
// host thread per rank, the communicator cache, the measurement protocol (clock, warm-up,
// calibration, cool-down, an energy window aligned to the counter's updates) and the per-GPU
// aggregation. GpuBackend is the measure::Backend MakeCudaBackend returns; tests build it on a
// fake DeviceSystem.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "kareus/common/json.h"
#include "kareus/measure/backend.h"
#include "kareus/measure/cuda_backend.h"
#include "measure/cuda/device.h"
#include "measure/cuda/program.h"

namespace kareus::measure::internal {

// --- The protocol's arithmetic (pure functions, tested directly) ------------------------------

// Runs that fill the energy window: max(window_s, min_periods x counter period) / run time,
// rounded up, in [1, max_repeats].
int64_t RepeatsForWindow(double run_time_s, double window_s, double counter_period_s,
                         int min_periods, int64_t max_repeats);

// A reading of the energy counter taken right after it changed.
struct CounterTick {
  double time_s = 0.0;
  double energy_j = 0.0;
};
// Energy of [start_s, end_s]: the counter's change between the last update before the start
// and the first after the end, less the idle power over the two gaps (the GPU is idle there).
// With gaps shorter than one update period the counter's quantization error is that of the
// idle power, not of the work.
double WindowEnergyJ(const CounterTick& before, double start_s, double end_s,
                     const CounterTick& after, double idle_power_w);

// What one rank read in one measurement.
struct RankReading {
  int ordinal = 0;
  double time_s = 0.0;               // per run (device events)
  double energy_j = 0.0;             // per run (energy counter over the window)
  double realized_freq_mhz = 0.0;    // mean of the SM clock samples taken during the window
  uint64_t clock_event_reasons = 0;  // union of the reasons sampled during the window
  int64_t repeats = 0;               // runs in the window
  double window_s = 0.0;             // device seconds of the window
  double seconds = 0.0;              // wall seconds the measurement occupied the GPU
};

// Per GPU, as published (§3.1): time = max over the ranks, energy = mean; realized clock = mean;
// reasons: union; seconds: max. `static_power_w` splits the energy.
Sample AggregateRanks(const std::vector<RankReading>& ranks, double static_power_w);

// One measurement's result with its per-rank readings.
struct Reading {
  std::string what;
  int freq_mhz = 0;  // the locked clock, or the level measured at (clock as found)
  Sample sample;
  uint64_t clock_event_reasons = 0;
  std::vector<RankReading> ranks;
  Json ToJson() const;
};

// A barrier whose waiters all throw once any thread aborts it (a failed rank must not leave
// the others waiting forever).
class AbortableBarrier {
 public:
  explicit AbortableBarrier(int parties) : parties_(parties) {}
  void Wait();  // throws Aborted after Abort()
  void Abort();
  bool aborted() const { return aborted_.load(); }
  const std::atomic<bool>* flag() const { return &aborted_; }
  struct Aborted {};

 private:
  const int parties_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int waiting_ = 0;
  int64_t generation_ = 0;
  std::atomic<bool> aborted_{false};
};

// One measurement request: the clock, the communicators its program needs (created on all ranks
// together before it is built) and how each rank builds its program.
struct MeasureSpec {
  std::string what;
  int freq_mhz = 0;
  std::vector<CommKey> comms;
  std::function<Program(const CommHandleOf&)> build;
  bool energy = true;     // false: time only (calibration runs), no energy window
  double window_s = 0.0;  // energy window; 0: the backend's
};

class GpuBackend final : public Backend {
 public:
  GpuBackend(const workload::WorkloadModel& model, const CudaBackendOptions& options,
             std::unique_ptr<DeviceSystem> system);
  ~GpuBackend() override;
  GpuBackend(const GpuBackend&) = delete;
  GpuBackend& operator=(const GpuBackend&) = delete;

  std::string Description() const override { return description_; }
  const hw::GpuSpec& Gpu() const override { return gpu_; }
  bool NoiseFree() const override { return false; }
  // What a waiting GPU draws: measured (the mean over the ranks characterized so far), the
  // preset's idle_w before any measurement.
  double IdlePowerW() const override;
  double BatchOverheadSeconds() const override;

  void MeasureBatch(const workload::PartitionType& partition,
                    const std::vector<PartitionKnobs>& batch,
                    const SampleCallback& on_sample) override;
  void MeasureInstructions(const workload::WorkloadModel& model,
                           const std::vector<InstructionRequest>& batch,
                           const SampleCallback& on_sample) override;
  void MeasureFixedWork(const workload::WorkloadModel& model,
                        const std::vector<FixedWorkRequest>& batch,
                        const SampleCallback& on_sample) override;
  void MeasureGradientSync(const workload::WorkloadModel& model,
                           const std::vector<GradientSyncRequest>& batch,
                           const SampleCallback& on_sample) override;

  // Runs `specs` on the ranks of `layout`, in order, each rank on its own thread; `on_reading` is
  // called (on rank 0's thread) as soon as a measurement exists. Clocks locked here are reset
  // before it returns or throws.
  void Run(const RankLayout& layout, const std::vector<MeasureSpec>& specs,
           const std::function<void(size_t, const Reading&)>& on_reading);

  // The clock measurements run at without clock control (the GPU's maximum SM clock on the
  // preset's grid), and whether clocks are locked.
  int ClockLevelMhz() const { return clock_level_mhz_; }
  bool ClockControl() const { return options_.allow_clock_control; }
  const DeviceInfo& RankInfo(int rank);
  DeviceSystem& System() { return *system_; }
  // The energy counter's update period and the idle power measured on `rank` (characterized
  // once, on first use).
  std::pair<double, double> CounterOf(int rank);
  const std::vector<Reading>& Records() const { return records_; }
  const workload::WorkloadModel& Model() const { return model_; }

 private:
  struct Rank {
    std::unique_ptr<DeviceRank> device;
    // Communicators by (group, CTAs) and the layout they were made in (tp, cp).
    std::map<std::tuple<CommKey, int, int>, int> comms;
    int locked_mhz = 0;
    double counter_period_s = 0.0;  // 0: not characterized yet
    double idle_power_w = 0.0;
  };
  struct Shared;

  Rank& OpenRank(int rank);
  int CheckRanks(const RankLayout& layout, const std::string& what);
  void RankMain(int r, const RankLayout& layout, const std::vector<MeasureSpec>& specs,
                Shared& shared, const std::function<void(size_t, const Reading&)>& on_reading);
  void MeasureOne(int r, const RankLayout& layout, const MeasureSpec& spec, size_t index,
                  Shared& shared, const std::function<void(size_t, const Reading&)>& on_reading);
  void EnsureComms(int r, const RankLayout& layout, const std::vector<CommKey>& keys,
                   Shared& shared);
  void Characterize(Rank& rank);
  CounterTick WaitForTick(Rank& rank, double timeout_s);
  void Record(const Reading& reading);
  int MeasureClock(int requested_mhz) const;
  void CheckClock(int freq_mhz) const;
  void CheckModel(const workload::WorkloadModel& model) const;
  void RunBatch(const RankLayout& layout, const std::vector<MeasureSpec>& specs,
                const SampleCallback& on_sample);
  void AccountBatch(double wall_s, int gpus, double measured_seconds);

  workload::WorkloadModel model_;
  workload::WorkloadModel validation_model_;  // model_ with gpu_ (the clock grid it measures on)
  CudaBackendOptions options_;
  std::unique_ptr<DeviceSystem> system_;
  std::vector<int> ordinals_;
  std::vector<Rank> ranks_;
  hw::GpuSpec gpu_;
  int clock_level_mhz_ = 0;
  std::string description_;
  std::vector<Reading> records_;
  std::map<uint64_t, bool> reasons_noted_;
  double batch_overhead_total_s_ = 0.0;
  int batches_ = 0;
  std::string broken_;  // set when a run failed midway: later calls refuse
};

}  // namespace kareus::measure::internal
