// SPDX-License-Identifier: Apache-2.0
// A fake device layer for the orchestration tests: every GPU runs on its own virtual clock, a
// program's two streams are simulated step by step (launch, record, wait) with kernel times from
// simple rates, power is `active_power_w` while work runs and `idle_power_w` otherwise, and the
// energy counter only changes every `counter_period_s` (as NVML's). Every call that matters
// (communicators, clock locks and resets, preparations) is logged.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "measure/cuda/device.h"

namespace kareus::measure::testing {

using internal::ClockResult;
using internal::CollectiveSpec;
using internal::CommId;
using internal::CommKey;
using internal::DeviceInfo;
using internal::KernelKind;
using internal::KernelSpec;
using internal::Program;
using internal::Step;

struct FakeConfig {
  int devices = 1;
  double idle_power_w = 80.0;
  double active_power_w = 400.0;
  std::vector<double> rank_power_w;  // per ordinal, overrides active_power_w
  std::vector<double> rank_speed;    // per ordinal: kernel times are divided by it
  double counter_period_s = 0.1;
  bool energy_supported = true;
  int sm_clock_mhz = 1755;
  int max_sm_clock_mhz = 1980;
  uint64_t reasons = 0;
  int sm_count = 132;
  double power_limit_w = 700.0;
  std::string name = "Fake H200";
  ClockResult lock_result = ClockResult::kOk;
  int fail_enqueue_on_ordinal = -1;  // Enqueue throws there (a failing rank)

  // Seconds of one kernel / one collective with `ctas` CTAs (0: the library default).
  std::function<double(const KernelSpec&)> kernel_time = [](const KernelSpec& k) {
    switch (k.kind) {
      case KernelKind::kGemm:
        return 2.0 * k.m * k.n * k.k / 5e14 + 5e-6;
      case KernelKind::kAttention:
        return 1e-4;
      case KernelKind::kMemory:
        return k.bytes / 3e12 + 3e-6;
    }
    return 1e-5;
  };
  std::function<double(const CollectiveSpec&, int)> collective_time = [](const CollectiveSpec& c,
                                                                         int ctas) {
    const int channels = ctas > 0 ? ctas : 32;
    return 1e-5 + c.bytes / (std::min(channels, 12) * 30e9);
  };
};

// What the fake saw, shared by all ranks (thread-safe).
struct FakeLog {
  std::mutex mutex;
  std::vector<std::string> lines;
  struct Comm {
    int ordinal;
    CommKey key;
    int nranks;
    int rank;
    std::string id;
  };
  std::vector<Comm> comms;
  std::vector<std::pair<int, int>> locks;  // (ordinal, mhz); mhz 0 = reset
  int prepares = 0;

  void Add(const std::string& line) {
    std::lock_guard<std::mutex> lock(mutex);
    lines.push_back(line);
  }
};

// The timeline of one simulated run of a program: start and end of every launch.
struct LaunchTime {
  int step = 0;
  int stream = 0;
  int item = 0;
  double start_s = 0.0;
  double end_s = 0.0;
};

// Simulates one run of `program` on two streams from t = 0. Waiting for an event never recorded
// is an error (as it would be a silent no-op on a GPU).
inline std::vector<LaunchTime> SimulateProgram(const Program& program, const FakeConfig& config,
                                               const std::map<int, int>& comm_ctas, double speed,
                                               double* run_s) {
  double t[2] = {0.0, 0.0};
  std::vector<double> event(static_cast<size_t>(program.events), -1.0);
  std::vector<LaunchTime> launches;
  for (size_t i = 0; i < program.steps.size(); ++i) {
    const Step& s = program.steps[i];
    if (s.stream < 0 || s.stream > 1) throw std::runtime_error("bad stream");
    switch (s.kind) {
      case Step::Kind::kLaunch: {
        const auto& item = program.items.at(static_cast<size_t>(s.item));
        double d = 0.0;
        if (item.kernel) {
          d = config.kernel_time(*item.kernel) / speed;
        } else {
          auto it = comm_ctas.find(item.comm);
          if (it == comm_ctas.end())
            throw std::runtime_error("collective on an unknown communicator");
          d = config.collective_time(*item.collective, it->second);
        }
        launches.push_back({static_cast<int>(i), s.stream, s.item, t[s.stream], t[s.stream] + d});
        t[s.stream] += d;
        break;
      }
      case Step::Kind::kRecord:
        event.at(static_cast<size_t>(s.event)) = t[s.stream];
        break;
      case Step::Kind::kWait: {
        const double e = event.at(static_cast<size_t>(s.event));
        if (e < 0.0) throw std::runtime_error("wait for an event never recorded");
        t[s.stream] = std::max(t[s.stream], e);
        break;
      }
    }
  }
  *run_s = std::max(t[0], t[1]);
  return launches;
}

class FakeRank final : public internal::DeviceRank {
 public:
  FakeRank(int ordinal, const FakeConfig& config, std::shared_ptr<FakeLog> log)
      : config_(config), log_(std::move(log)) {
    info_.ordinal = ordinal;
    info_.nvml_index = ordinal;
    info_.name = config.name;
    info_.sm_count = config.sm_count;
    info_.max_sm_clock_mhz = config.max_sm_clock_mhz;
    info_.power_limit_w = config.power_limit_w;
    speed_ =
        ordinal < static_cast<int>(config.rank_speed.size()) ? config.rank_speed[ordinal] : 1.0;
    power_ = ordinal < static_cast<int>(config.rank_power_w.size()) ? config.rank_power_w[ordinal]
                                                                    : config.active_power_w;
    now_ = 1000.0 + 0.0137 * ordinal;  // clocks that are not aligned to the counter's period
  }

  const DeviceInfo& Info() const override { return info_; }

  int CreateCommunicator(const CommKey& key, const CommId& id, int nranks, int rank) override {
    const int handle = next_comm_++;
    comm_ctas_[handle] = key.ctas;
    std::lock_guard<std::mutex> lock(log_->mutex);
    log_->comms.push_back({info_.ordinal, key, nranks, rank, std::string(id.bytes.data())});
    return handle;
  }

  void Prepare(const Program& program) override {
    for (const auto& item : program.items) {
      if (!item.kernel && !item.collective) throw std::runtime_error("empty program item");
      if (item.collective && !comm_ctas_.count(item.comm))
        throw std::runtime_error("unknown communicator");
    }
    std::lock_guard<std::mutex> lock(log_->mutex);
    ++log_->prepares;
  }

  void BeginTiming() override { timing_start_ = std::max(now_, busy_until_); }

  void Enqueue(const Program& program, int64_t repeats) override {
    if (info_.ordinal == config_.fail_enqueue_on_ordinal)
      throw std::runtime_error("fake device failure");
    double run_s = 0.0;
    last_launches_ = SimulateProgram(program, config_, comm_ctas_, speed_, &run_s);
    last_run_s_ = run_s;
    const double start = std::max(now_, busy_until_);
    busy_.push_back({start, start + run_s * static_cast<double>(repeats)});
    busy_until_ = busy_.back().second;
  }

  double EndTiming(double /*timeout_s*/) override {
    now_ = std::max(now_, busy_until_);
    return busy_until_ - timing_start_;
  }

  std::optional<double> EnergyJ() override {
    if (!config_.energy_supported) return std::nullopt;
    const double tick = config_.counter_period_s > 0.0
                            ? std::floor(now_ / config_.counter_period_s) * config_.counter_period_s
                            : now_;
    return EnergyAt(tick);
  }
  int SmClockMhz() override { return config_.sm_clock_mhz; }
  uint64_t ClockEventReasons() override { return config_.reasons; }

  ClockResult LockClock(int mhz) override {
    std::lock_guard<std::mutex> lock(log_->mutex);
    log_->locks.push_back({info_.ordinal, mhz});
    return config_.lock_result;
  }
  void ResetClock() override {
    std::lock_guard<std::mutex> lock(log_->mutex);
    log_->locks.push_back({info_.ordinal, 0});
  }

  double NowS() override { return now_; }
  void SleepS(double seconds) override { now_ += seconds; }

  // Exact energy since t = 0 (idle outside the busy intervals).
  double EnergyAt(double t) const {
    double busy = 0.0;
    for (const auto& [a, b] : busy_) busy += std::max(0.0, std::min(b, t) - a);
    return config_.idle_power_w * t + (power_ - config_.idle_power_w) * busy;
  }
  double power_w() const { return power_; }
  double last_run_s() const { return last_run_s_; }
  const std::vector<LaunchTime>& last_launches() const { return last_launches_; }

 private:
  FakeConfig config_;
  std::shared_ptr<FakeLog> log_;
  DeviceInfo info_;
  double speed_ = 1.0;
  double power_ = 0.0;
  double now_ = 0.0;
  double busy_until_ = 0.0;
  double timing_start_ = 0.0;
  std::vector<std::pair<double, double>> busy_;
  std::map<int, int> comm_ctas_;
  int next_comm_ = 0;
  double last_run_s_ = 0.0;
  std::vector<LaunchTime> last_launches_;
};

class FakeSystem final : public internal::DeviceSystem {
 public:
  explicit FakeSystem(FakeConfig config, std::shared_ptr<FakeLog> log = std::make_shared<FakeLog>())
      : config_(std::move(config)), log_(std::move(log)) {}
  int DeviceCount() const override { return config_.devices; }
  std::unique_ptr<internal::DeviceRank> OpenRank(int ordinal) override {
    auto rank = std::make_unique<FakeRank>(ordinal, config_, log_);
    opened_.push_back(rank.get());
    return rank;
  }
  CommId NewCommId() override {
    CommId id;
    const std::string text = "id" + std::to_string(next_id_++);
    std::memcpy(id.bytes.data(), text.c_str(), text.size() + 1);
    return id;
  }
  std::string DriverVersion() const override { return "fake-1.0"; }
  std::string LibraryVersions() const override { return "fake-blas, fake-nccl"; }
  std::string AttentionMethod() const override { return "fake"; }

  const std::shared_ptr<FakeLog>& log() const { return log_; }
  // The ranks opened so far (owned by the backend; valid while it lives).
  const std::vector<FakeRank*>& opened() const { return opened_; }

 private:
  FakeConfig config_;
  std::shared_ptr<FakeLog> log_;
  int next_id_ = 0;
  std::vector<FakeRank*> opened_;
};

}  // namespace kareus::measure::testing
