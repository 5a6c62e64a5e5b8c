// SPDX-License-Identifier: Apache-2.0
#include "measure/cuda/gpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <numeric>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "kareus/emulator/emulator.h"

namespace kareus::measure {

std::optional<OptionError> CudaBackendOptions::Validate() const {
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i] < 0) {
      return OptionError{"devices", std::to_string(devices[i]), "CUDA device ordinals are >= 0"};
    }
    for (size_t j = 0; j < i; ++j) {
      if (devices[j] == devices[i]) {
        return OptionError{"devices", std::to_string(devices[i]), "each device may appear once"};
      }
    }
  }
  auto non_negative = [](double v) { return std::isfinite(v) && v >= 0.0; };
  if (!non_negative(settle_s))
    return OptionError{"settle_s", Describe(settle_s), "must be a finite number >= 0"};
  if (warmup_runs < 0)
    return OptionError{"warmup_runs", std::to_string(warmup_runs), "must be >= 0"};
  if (!non_negative(min_warmup_s)) {
    return OptionError{"min_warmup_s", Describe(min_warmup_s), "must be a finite number >= 0"};
  }
  if (calibration_runs < 1) {
    return OptionError{"calibration_runs", std::to_string(calibration_runs), "must be >= 1"};
  }
  if (!(std::isfinite(window_s) && window_s > 0.0)) {
    return OptionError{"window_s", Describe(window_s), "must be a finite number > 0"};
  }
  if (min_counter_periods < 1) {
    return OptionError{"min_counter_periods", std::to_string(min_counter_periods), "must be >= 1"};
  }
  if (!non_negative(cooldown_s)) {
    return OptionError{"cooldown_s", Describe(cooldown_s), "must be a finite number >= 0"};
  }
  if (max_repeats < 1)
    return OptionError{"max_repeats", std::to_string(max_repeats), "must be >= 1"};
  if (!(std::isfinite(timeout_s) && timeout_s > 0.0)) {
    return OptionError{"timeout_s", Describe(timeout_s), "must be a finite number > 0"};
  }
  return std::nullopt;
}

}  // namespace kareus::measure

namespace kareus::measure::internal {

namespace {

// Energy counters tick every few to a hundred milliseconds; poll well inside one period.
constexpr double kTickPollS = 0.0005;
// The first wait for a counter update, before its period is known.
constexpr double kFirstTickTimeoutS = 2.0;
// Clock samples are taken between enqueued chunks of about this much GPU work.
constexpr double kSampleChunkS = 0.02;
// Reason bits that are not a slowdown: idle, application clocks, display clocks.
constexpr uint64_t kBenignReasons = 0x1 | 0x2 | 0x100;

std::string Join(const std::vector<std::string>& names, const char* separator) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : separator) + n;
  return out;
}

}  // namespace

std::vector<std::string> ClockEventReasonNames(uint64_t reasons) {
  static const std::pair<uint64_t, const char*> kNames[] = {
      {0x1, "gpu_idle"},
      {0x2, "applications_clocks"},
      {0x4, "sw_power_cap"},
      {0x8, "hw_slowdown"},
      {0x10, "sync_boost"},
      {0x20, "sw_thermal_slowdown"},
      {0x40, "hw_thermal_slowdown"},
      {0x80, "hw_power_brake_slowdown"},
      {0x100, "display_clocks"},
  };
  std::vector<std::string> names;
  uint64_t known = 0;
  for (const auto& [bit, name] : kNames) {
    known |= bit;
    if (reasons & bit) names.emplace_back(name);
  }
  if (reasons & ~known) names.push_back(fmt::format("other_0x{:x}", reasons & ~known));
  return names;
}

int64_t RepeatsForWindow(double run_time_s, double window_s, double counter_period_s,
                         int min_periods, int64_t max_repeats) {
  KAREUS_CHECK(run_time_s > 0.0) << "run time " << run_time_s;
  const double window = std::max(window_s, min_periods * std::max(0.0, counter_period_s));
  const double runs = std::ceil(window / run_time_s);
  if (!(runs < static_cast<double>(max_repeats))) return max_repeats;
  return std::max<int64_t>(1, static_cast<int64_t>(runs));
}

double WindowEnergyJ(const CounterTick& before, double start_s, double end_s,
                     const CounterTick& after, double idle_power_w) {
  const double lead = std::max(0.0, start_s - before.time_s);
  const double tail = std::max(0.0, after.time_s - end_s);
  return (after.energy_j - before.energy_j) - idle_power_w * (lead + tail);
}

Sample AggregateRanks(const std::vector<RankReading>& ranks, double static_power_w) {
  KAREUS_CHECK(!ranks.empty()) << "no rank readings";
  Sample s;
  double energy = 0.0, clock = 0.0;
  for (const RankReading& r : ranks) {
    s.time_s = std::max(s.time_s, r.time_s);
    s.seconds = std::max(s.seconds, r.seconds);
    energy += r.energy_j;
    clock += r.realized_freq_mhz;
  }
  const double n = static_cast<double>(ranks.size());
  s.energy_j = energy / n;
  s.realized_freq_mhz = clock / n;
  s.static_energy_j = static_power_w * s.time_s;
  s.dynamic_energy_j = s.energy_j - s.static_energy_j;
  s.gpus = static_cast<int>(ranks.size());
  s.noise_free = false;
  return s;
}

Json Reading::ToJson() const {
  uint64_t reasons = 0;
  Json ranks_json = Json::array();
  for (const RankReading& r : ranks) {
    reasons |= r.clock_event_reasons;
    ranks_json.push_back({{"device", r.ordinal},
                          {"time_s", r.time_s},
                          {"energy_j", r.energy_j},
                          {"realized_freq_mhz", r.realized_freq_mhz},
                          {"clock_event_reasons", ClockEventReasonNames(r.clock_event_reasons)},
                          {"repeats", r.repeats},
                          {"window_s", r.window_s},
                          {"seconds", r.seconds}});
  }
  return Json{{"what", what},
              {"freq_mhz", freq_mhz},
              {"time_s", sample.time_s},
              {"energy_j", sample.energy_j},
              {"avg_power_w", sample.time_s > 0.0 ? sample.energy_j / sample.time_s : 0.0},
              {"realized_freq_mhz", sample.realized_freq_mhz},
              {"clock_event_reasons", ClockEventReasonNames(reasons)},
              {"gpus", sample.gpus},
              {"seconds", sample.seconds},
              {"ranks", ranks_json}};
}

void AbortableBarrier::Wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (aborted_) throw Aborted{};
  const int64_t generation = generation_;
  if (++waiting_ == parties_) {
    waiting_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != generation || aborted_; });
  if (generation_ == generation) throw Aborted{};
}

void AbortableBarrier::Abort() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    aborted_ = true;
  }
  cv_.notify_all();
}

// --- GpuBackend -------------------------------------------------------------------------------

struct GpuBackend::Shared {
  explicit Shared(int n)
      : barrier(n),
        warm_s(static_cast<size_t>(n)),
        calibration_s(static_cast<size_t>(n)),
        readings(static_cast<size_t>(n)) {}
  AbortableBarrier barrier;
  std::vector<double> warm_s;  // one run's time after the first launch
  std::vector<double> calibration_s;
  std::vector<RankReading> readings;
  int64_t repeats = 0;
  std::mutex ids_mutex;
  std::map<std::tuple<CommKey, int, int, int>, CommId> ids;  // (key, tp, cp, group index)
};

GpuBackend::GpuBackend(const workload::WorkloadModel& model, const CudaBackendOptions& options,
                       std::unique_ptr<DeviceSystem> system)
    : model_(model), options_(options), system_(std::move(system)) {
  ThrowIfInvalid(options_.Validate());
  KAREUS_CHECK(system_ != nullptr) << "GpuBackend needs a device system";
  const int available = system_->DeviceCount();
  if (options_.devices.empty()) {
    for (int i = 0; i < available; ++i) ordinals_.push_back(i);
  } else {
    for (int ordinal : options_.devices) {
      if (ordinal >= available) {
        throw EnvironmentError(
            fmt::format("devices = {}: this machine has {} CUDA device(s) (0..{})", ordinal,
                        available, available - 1));
      }
      ordinals_.push_back(ordinal);
    }
  }
  if (ordinals_.empty()) throw EnvironmentError("no CUDA device is available for measurements");
  ranks_.resize(ordinals_.size());
  const DeviceInfo& info = RankInfo(0);

  gpu_ = model_.workload.gpu;
  const hw::ClockGrid& grid = gpu_.clock;
  // The clock as found: an unlocked GPU boosts up to its maximum SM clock (the preset's
  // default_mhz when NVML does not say), placed on the preset's grid.
  int level = info.max_sm_clock_mhz > 0 ? info.max_sm_clock_mhz : grid.default_mhz;
  level = std::clamp(level, grid.min_mhz, grid.max_mhz);
  if (grid.step_mhz > 0)
    level = grid.min_mhz + (level - grid.min_mhz) / grid.step_mhz * grid.step_mhz;
  clock_level_mhz_ = level;
  if (!options_.allow_clock_control) {
    gpu_.clock.min_mhz = gpu_.clock.max_mhz = gpu_.clock.default_mhz = gpu_.clock.profile_min_mhz =
        level;
  }
  validation_model_ = model_;
  validation_model_.workload.gpu = gpu_;

  const std::string power =
      info.power_limit_w > 0.0 ? fmt::format("{:.0f} W", info.power_limit_w) : "unknown";
  description_ = fmt::format(
      "cuda({}, driver {}, power limit {}, {}, attention {}, {})", info.name,
      system_->DriverVersion(), power, system_->LibraryVersions(), system_->AttentionMethod(),
      options_.allow_clock_control
          ? std::string("SM clock locked per measurement")
          : fmt::format("clock as found (up to {} MHz): one clock level, no --allow-clock-control",
                        level));
  if (!options_.quiet) {
    if (info.sm_count > 0 && info.sm_count != gpu_.sm_count) {
      std::fprintf(
          stderr,
          "kareus: note: device %d (%s) has %d SMs; the workload's GPU preset %s has %d: knob "
          "choices follow the preset\n",
          info.ordinal, info.name.c_str(), info.sm_count, gpu_.name.c_str(), gpu_.sm_count);
    }
    if (!options_.allow_clock_control) {
      std::fprintf(stderr,
                   "kareus: note: measuring at the clock as found (up to %d MHz); without "
                   "--allow-clock-control only that clock level is profiled, so each partition's "
                   "space is its SM counts x slots (a --budget-fraction of 0.5 or more, or 1 for "
                   "all of them, keeps the budget above the initial design)\n",
                   level);
    }
  }
}

GpuBackend::~GpuBackend() {
  // Run() resets what it locked; this is the last line of defence (kareus::device's guard also
  // resets on signals and exit).
  for (Rank& rank : ranks_) {
    if (rank.device && rank.locked_mhz != 0) {
      try {
        rank.device->ResetClock();
      } catch (...) {
      }
      rank.locked_mhz = 0;
    }
  }
}

double GpuBackend::IdlePowerW() const {
  double sum = 0.0;
  int n = 0;
  for (const Rank& rank : ranks_) {
    if (rank.counter_period_s > 0.0 && rank.idle_power_w > 0.0) {
      sum += rank.idle_power_w;
      ++n;
    }
  }
  return n > 0 ? sum / n : Gpu().power.idle_w;
}

double GpuBackend::BatchOverheadSeconds() const {
  // Process and communicator start-up plus warm-ups, as measured so far (published ~10 s).
  return batches_ > 0 ? batch_overhead_total_s_ / batches_ : 10.0;
}

GpuBackend::Rank& GpuBackend::OpenRank(int rank) {
  KAREUS_CHECK(rank >= 0 && rank < static_cast<int>(ranks_.size())) << "rank " << rank;
  Rank& r = ranks_[static_cast<size_t>(rank)];
  if (!r.device) r.device = system_->OpenRank(ordinals_[static_cast<size_t>(rank)]);
  return r;
}

const DeviceInfo& GpuBackend::RankInfo(int rank) { return OpenRank(rank).device->Info(); }

int GpuBackend::CheckRanks(const RankLayout& layout, const std::string& what) {
  const int n = layout.Ranks();
  if (n > static_cast<int>(ordinals_.size())) {
    throw EnvironmentError(fmt::format("{} needs {} GPUs (TP {} x CP {}); {} available here{}",
                                       what, n, layout.tp, layout.cp, ordinals_.size(),
                                       options_.devices.empty() ? "" : " (--devices)"));
  }
  for (int r = 0; r < n; ++r) OpenRank(r);
  return n;
}

std::pair<double, double> GpuBackend::CounterOf(int rank) {
  Rank& r = OpenRank(rank);
  Characterize(r);
  return {r.counter_period_s, r.idle_power_w};
}

CounterTick GpuBackend::WaitForTick(Rank& rank, double timeout_s) {
  DeviceRank& dev = *rank.device;
  const std::optional<double> first = dev.EnergyJ();
  if (!first) {
    throw EnvironmentError(
        fmt::format("device {} ({}): NVML's total energy counter is not supported; "
                    "energy cannot be measured",
                    dev.Info().ordinal, dev.Info().name));
  }
  const double start = dev.NowS();
  while (true) {
    const std::optional<double> value = dev.EnergyJ();
    const double now = dev.NowS();
    if (value && *value != *first) return {now, *value};
    if (now - start > timeout_s) {
      throw EnvironmentError(
          fmt::format("device {} ({}): NVML's total energy counter did not change in "
                      "{:.1f} s",
                      dev.Info().ordinal, dev.Info().name, timeout_s));
    }
    dev.SleepS(kTickPollS);
  }
}

void GpuBackend::Characterize(Rank& rank) {
  if (rank.counter_period_s > 0.0) return;
  // Three consecutive updates at idle: the period and the idle power between them.
  const CounterTick a = WaitForTick(rank, kFirstTickTimeoutS);
  const CounterTick b = WaitForTick(rank, kFirstTickTimeoutS);
  const CounterTick c = WaitForTick(rank, kFirstTickTimeoutS);
  (void)b;
  const double span = c.time_s - a.time_s;
  rank.counter_period_s = std::max(1e-4, span / 2.0);
  rank.idle_power_w = span > 0.0 ? std::max(0.0, (c.energy_j - a.energy_j) / span) : 0.0;
}

void GpuBackend::EnsureComms(int r, const RankLayout& layout, const std::vector<CommKey>& keys,
                             Shared& shared) {
  Rank& rank = ranks_[static_cast<size_t>(r)];
  std::vector<CommKey> sorted(keys);
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  for (const CommKey& key : sorted) {
    const auto cache_key = std::make_tuple(key, layout.tp, layout.cp);
    if (rank.comms.count(cache_key)) continue;
    // Every rank walks the same sorted list, so the ranks of a group create it together.
    const int group = layout.GroupIndex(key.group, r);
    CommId id;
    {
      std::lock_guard<std::mutex> lock(shared.ids_mutex);
      const auto id_key = std::make_tuple(key, layout.tp, layout.cp, group);
      auto it = shared.ids.find(id_key);
      if (it == shared.ids.end()) it = shared.ids.emplace(id_key, system_->NewCommId()).first;
      id = it->second;
    }
    rank.comms[cache_key] = rank.device->CreateCommunicator(key, id, layout.GroupSize(key.group),
                                                            layout.RankInGroup(key.group, r));
  }
}

void GpuBackend::Record(const Reading& reading) {
  records_.push_back(reading);
  const uint64_t slowdowns = reading.clock_event_reasons & ~kBenignReasons;
  if (slowdowns != 0 && !options_.quiet && !reasons_noted_[slowdowns]) {
    reasons_noted_[slowdowns] = true;
    std::fprintf(stderr, "kareus: note: clock event reasons during %s: %s (realized %.0f MHz)\n",
                 reading.what.c_str(), Join(ClockEventReasonNames(slowdowns), ", ").c_str(),
                 reading.sample.realized_freq_mhz);
  }
  if (!options_.log_path.empty()) {
    const DeviceInfo& info = ranks_.front().device->Info();
    Json line = reading.ToJson();
    line["gpu_name"] = info.name;
    line["driver"] = system_->DriverVersion();
    line["power_limit_w"] = info.power_limit_w;
    line["clock_control"] = options_.allow_clock_control;
    std::ofstream out(options_.log_path, std::ios::app);
    out << line.dump() << "\n";
    if (!out) throw EnvironmentError("cannot append to the measurement log " + options_.log_path);
  }
}

int GpuBackend::MeasureClock(int requested_mhz) const {
  return options_.allow_clock_control ? requested_mhz : clock_level_mhz_;
}

void GpuBackend::AccountBatch(double wall_s, int gpus, double measured_seconds) {
  const double overhead = std::max(0.0, wall_s - measured_seconds);
  batch_overhead_total_s_ += overhead;
  ++batches_;
  Account(overhead * gpus, 0);
}

void GpuBackend::Run(const RankLayout& layout, const std::vector<MeasureSpec>& specs,
                     const std::function<void(size_t, const Reading&)>& on_reading) {
  if (!broken_.empty()) {
    throw EnvironmentError("the cuda backend stopped after an earlier failure: " + broken_);
  }
  if (specs.empty()) return;
  const int n = CheckRanks(layout, specs.front().what);
  Shared shared(n);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    ranks_[static_cast<size_t>(r)].device->SetCancel(shared.barrier.flag());
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        RankMain(r, layout, specs, shared, on_reading);
      } catch (const AbortableBarrier::Aborted&) {
        // another rank failed first; its error is reported
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
        shared.barrier.Abort();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < n; ++r) ranks_[static_cast<size_t>(r)].device->SetCancel(nullptr);
  for (const std::exception_ptr& error : errors) {
    if (!error) continue;
    if (n > 1) {
      // Communicators of the other ranks may be mid-collective: do not trust them again.
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        broken_ = e.what();
      }
    }
    std::rethrow_exception(error);
  }
}

void GpuBackend::RankMain(int r, const RankLayout& layout, const std::vector<MeasureSpec>& specs,
                          Shared& shared,
                          const std::function<void(size_t, const Reading&)>& on_reading) {
  Rank& rank = ranks_[static_cast<size_t>(r)];
  // Clocks this thread locked go back to the default however it leaves.
  struct ClockReset {
    Rank& rank;
    ~ClockReset() {
      if (rank.locked_mhz != 0) {
        rank.locked_mhz = 0;
        try {
          rank.device->ResetClock();
        } catch (...) {
        }
      }
    }
  } reset{rank};
  const bool energy =
      std::any_of(specs.begin(), specs.end(), [](const MeasureSpec& s) { return s.energy; });
  if (energy) Characterize(rank);
  for (size_t i = 0; i < specs.size(); ++i) MeasureOne(r, layout, specs[i], i, shared, on_reading);
}

void GpuBackend::MeasureOne(int r, const RankLayout& layout, const MeasureSpec& spec, size_t index,
                            Shared& shared,
                            const std::function<void(size_t, const Reading&)>& on_reading) {
  Rank& rank = ranks_[static_cast<size_t>(r)];
  DeviceRank& dev = *rank.device;
  // Nobody starts a measurement (communicator creation blocks until the whole group joins)
  // before rank 0 has handed over the previous one: a failure there stops every rank here.
  shared.barrier.Wait();
  const double begin_s = dev.NowS();
  if (options_.allow_clock_control && spec.freq_mhz != rank.locked_mhz) {
    const ClockResult result = dev.LockClock(spec.freq_mhz);
    if (result == ClockResult::kNoPermission) {
      throw EnvironmentError(fmt::format(
          "--allow-clock-control: device {} refused to lock its SM clock at {} MHz (no permission: "
          "needs root or CAP_SYS_ADMIN); rerun with the privilege, or without "
          "--allow-clock-control "
          "to measure at the clock as found",
          dev.Info().ordinal, spec.freq_mhz));
    }
    if (result != ClockResult::kOk) {
      throw EnvironmentError(fmt::format("device {}: locking the SM clock at {} MHz failed",
                                         dev.Info().ordinal, spec.freq_mhz));
    }
    rank.locked_mhz = spec.freq_mhz;
    dev.SleepS(options_.settle_s);
  }
  EnsureComms(r, layout, spec.comms, shared);
  const Program program = spec.build([&](const CommKey& key) {
    auto it = rank.comms.find(std::make_tuple(key, layout.tp, layout.cp));
    KAREUS_CHECK(it != rank.comms.end()) << "communicator (" << static_cast<int>(key.group) << ", "
                                         << key.ctas << ") was not created";
    return it->second;
  });
  dev.Prepare(program);
  const double timeout = options_.timeout_s;
  auto run = [&](int64_t repeats) {
    dev.BeginTiming();
    dev.Enqueue(program, repeats);
    return dev.EndTiming(timeout);
  };
  // Timed runs enqueued in chunks of ~20 ms, sampling the SM clock and the clock event reasons
  // between chunks (the host runs ahead of the GPU by the launch queue, so samples follow it).
  double clock_sum = 0.0;
  int clock_samples = 0;
  uint64_t reasons = 0;
  auto sampled = [&](int64_t repeats, double run_s) {
    clock_sum = 0.0;
    clock_samples = 0;
    reasons = 0;
    dev.BeginTiming();
    const int64_t chunk =
        std::max<int64_t>(1, static_cast<int64_t>(std::ceil(kSampleChunkS / run_s)));
    for (int64_t done = 0; done < repeats;) {
      const int64_t now = std::min(chunk, repeats - done);
      dev.Enqueue(program, now);
      done += now;
      const int clock = dev.SmClockMhz();
      if (clock > 0) {
        clock_sum += clock;
        ++clock_samples;
      }
      reasons |= dev.ClockEventReasons();
    }
    return dev.EndTiming(timeout + 2.0 * static_cast<double>(repeats) * run_s);
  };
  // Warm-up: at least `warmup_runs` and `min_warmup_s` of work (an idle GPU needs a moment to
  // leave its idle clock). Repeat counts are the same on every rank (collectives must match), so
  // they are sized on the slowest rank.
  const auto slowest = [&](const std::vector<double>& times) {
    return std::max(1e-7, *std::max_element(times.begin(), times.end()));
  };
  const auto warm_repeats = [&](double run_s) {
    const double wanted = std::ceil(options_.min_warmup_s / run_s);
    return std::max<int64_t>(options_.warmup_runs,
                             wanted < static_cast<double>(options_.max_repeats)
                                 ? static_cast<int64_t>(wanted)
                                 : options_.max_repeats);
  };

  shared.barrier.Wait();
  shared.warm_s[static_cast<size_t>(r)] = run(1);
  shared.barrier.Wait();
  const double first_s = slowest(shared.warm_s);
  if (const int64_t warm = warm_repeats(first_s); warm > 0) run(warm);
  shared.calibration_s[static_cast<size_t>(r)] =
      sampled(options_.calibration_runs, first_s) / options_.calibration_runs;
  shared.barrier.Wait();
  const double run_s = slowest(shared.calibration_s);

  RankReading reading;
  reading.ordinal = dev.Info().ordinal;
  if (!spec.energy) {
    reading.time_s = shared.calibration_s[static_cast<size_t>(r)];
    reading.repeats = options_.calibration_runs;
    reading.window_s = reading.time_s * options_.calibration_runs;
  } else {
    double period = 0.0;
    for (int q = 0; q < layout.Ranks(); ++q)
      period = std::max(period, ranks_[static_cast<size_t>(q)].counter_period_s);
    const double window_s = spec.window_s > 0.0 ? spec.window_s : options_.window_s;
    const int64_t repeats = RepeatsForWindow(run_s, window_s, period, options_.min_counter_periods,
                                             options_.max_repeats);
    dev.SleepS(options_.cooldown_s);
    if (const int64_t warm = warm_repeats(run_s); warm > 0) run(warm);
    const CounterTick before = WaitForTick(rank, std::max(1.0, 4.0 * rank.counter_period_s));
    shared.barrier.Wait();
    const double start_s = dev.NowS();
    const double gpu_s = sampled(repeats, run_s);
    const double end_s = dev.NowS();
    const CounterTick after = WaitForTick(rank, std::max(1.0, 4.0 * rank.counter_period_s));
    reading.repeats = repeats;
    reading.window_s = gpu_s;
    reading.time_s = gpu_s / static_cast<double>(repeats);
    reading.energy_j = WindowEnergyJ(before, start_s, end_s, after, rank.idle_power_w) /
                       static_cast<double>(repeats);
  }
  reading.realized_freq_mhz = clock_samples > 0 ? clock_sum / clock_samples : 0.0;
  reading.clock_event_reasons = reasons;
  reading.seconds = dev.NowS() - begin_s;
  shared.readings[static_cast<size_t>(r)] = reading;
  shared.barrier.Wait();
  if (r == 0) {
    Reading result;
    result.what = spec.what;
    result.freq_mhz = spec.freq_mhz;
    result.ranks = shared.readings;
    result.sample = AggregateRanks(result.ranks, StaticPowerW());
    for (const RankReading& rr : result.ranks) result.clock_event_reasons |= rr.clock_event_reasons;
    Record(result);
    on_reading(index, result);
  }
}

// --- The Backend interface ------------------------------------------------------------------

void GpuBackend::CheckClock(int freq_mhz) const {
  if (!options_.allow_clock_control && freq_mhz != clock_level_mhz_) {
    ThrowInput("freq_mhz", std::to_string(freq_mhz),
               fmt::format("the cuda backend measures at the clock as found ({} MHz) unless "
                           "--allow-clock-control is given",
                           clock_level_mhz_));
  }
  if (!gpu_.clock.Contains(freq_mhz)) {
    ThrowInput("freq_mhz", std::to_string(freq_mhz),
               fmt::format("not on {}'s clock grid ({}..{} MHz in steps of {})", gpu_.name,
                           gpu_.clock.min_mhz, gpu_.clock.max_mhz, gpu_.clock.step_mhz));
  }
}

void GpuBackend::RunBatch(const RankLayout& layout, const std::vector<MeasureSpec>& specs,
                          const SampleCallback& on_sample) {
  if (specs.empty()) return;
  CheckRanks(layout, specs.front().what);
  DeviceRank& clock = *ranks_.front().device;
  const double start_s = clock.NowS();
  double measured_s = 0.0;
  Run(layout, specs, [&](size_t i, const Reading& reading) {
    measured_s += reading.sample.seconds;
    Account(reading.sample.GpuSeconds(), 1);
    on_sample(i, reading.sample);
  });
  AccountBatch(clock.NowS() - start_s, layout.Ranks(), measured_s);
}

void GpuBackend::MeasureBatch(const workload::PartitionType& partition,
                              const std::vector<PartitionKnobs>& batch,
                              const SampleCallback& on_sample) {
  if (batch.empty()) return;
  for (const PartitionKnobs& knobs : batch) {
    CheckClock(knobs.freq_mhz);
    emulator::ValidatePartitionKnobs(gpu_, partition, knobs);
  }
  std::vector<MeasureSpec> specs;
  for (const PartitionKnobs& knobs : batch) {
    specs.push_back(MeasureSpec{.what = fmt::format("{} {} MHz {}@{}", partition.name,
                                                    knobs.freq_mhz, knobs.sms, knobs.slot),
                                .freq_mhz = MeasureClock(knobs.freq_mhz),
                                .comms = PartitionComms(partition, knobs),
                                .build = [this, &partition, knobs](const CommHandleOf& comm_of) {
                                  return PartitionProgram(partition, knobs, model_.workload,
                                                          comm_of);
                                }});
  }
  RunBatch(PartitionLayout(partition), specs, on_sample);
}

void GpuBackend::CheckModel(const workload::WorkloadModel& model) const {
  if (model.workload.Signature() != model_.workload.Signature()) {
    ThrowInput("workload", model.workload.name,
               "this cuda backend was made for workload " + model_.workload.name);
  }
}

void GpuBackend::MeasureInstructions(const workload::WorkloadModel& model,
                                     const std::vector<InstructionRequest>& batch,
                                     const SampleCallback& on_sample) {
  if (batch.empty()) return;
  CheckModel(model);
  std::vector<MeasureSpec> specs;
  for (const InstructionRequest& request : batch) {
    CheckClock(request.knobs.freq_mhz);
    // The emulator validates stage, mode and knobs (InputError listing the choices).
    emulator::SimulateInstruction(validation_model_, request.stage, request.chunk,
                                  request.direction, request.knobs);
    const InstructionPlan plan = ResolveInstruction(model_, request);
    specs.push_back(MeasureSpec{
        .what = fmt::format("stage {} chunk {} {} {} MHz ({})", request.stage, request.chunk,
                            schedule::ToString(request.direction), request.knobs.freq_mhz,
                            schedule::ToString(request.knobs.mode)),
        .freq_mhz = MeasureClock(request.knobs.freq_mhz),
        .comms = InstructionComms(model_, plan),
        .build = [this, plan](const CommHandleOf& comm_of) {
          return InstructionProgram(model_, plan, comm_of);
        }});
  }
  RunBatch(InstructionLayout(model_), specs, on_sample);
}

void GpuBackend::MeasureFixedWork(const workload::WorkloadModel& model,
                                  const std::vector<FixedWorkRequest>& batch,
                                  const SampleCallback& on_sample) {
  if (batch.empty()) return;
  CheckModel(model);
  std::vector<MeasureSpec> specs;
  for (const FixedWorkRequest& request : batch) {
    CheckClock(request.freq_mhz);
    std::vector<workload::Op> ops =
        workload::FixedWorkOps(model_, request.stage, request.chunk, request.direction);
    KAREUS_CHECK(!ops.empty()) << "stage " << request.stage << " "
                               << schedule::ToString(request.direction) << " has no fixed work";
    specs.push_back(
        MeasureSpec{.what = fmt::format("fixed work stage {} {} {} MHz", request.stage,
                                        schedule::ToString(request.direction), request.freq_mhz),
                    .freq_mhz = MeasureClock(request.freq_mhz),
                    .comms = SequentialComms(ops),
                    .build = [this, ops](const CommHandleOf& comm_of) {
                      return SequentialProgram(ops, model_.workload, comm_of);
                    }});
  }
  RunBatch(InstructionLayout(model_), specs, on_sample);
}

// The ranks this backend runs are one replica's TP x CP group (InstructionLayout); the
// data-parallel reduction spans DP x CP replicas, on other nodes for a large job. Not measured
// here: a clear refusal instead of a made-up figure.
void GpuBackend::MeasureGradientSync(const workload::WorkloadModel& model,
                                     const std::vector<GradientSyncRequest>& batch,
                                     const SampleCallback& on_sample) {
  (void)on_sample;
  if (batch.empty()) return;
  CheckModel(model);
  ThrowInput("parallelism.dp", std::to_string(model.workload.parallelism.dp),
             "the cuda backend measures one replica's TP x CP group and not the data-parallel "
             "gradient sync across DP x CP = " +
                 std::to_string(model.workload.parallelism.dp * model.workload.parallelism.cp) +
                 " replicas; plan a workload with a gradient sync with --backend emulator");
}

}  // namespace kareus::measure::internal
