// SPDX-License-Identifier: Apache-2.0
// The torch backend (kareus/measure/torch_backend.h): a measure::Backend over the
// kareus.torch.measure worker.
#include "kareus/measure/torch_backend.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "kareus/common/error.h"
#include "kareus/emulator/emulator.h"
#include "kareus/workload/ops.h"
#include "measure/torch/worker_process.h"

namespace kareus::measure {

namespace {

constexpr const char* kProtocol = "kareus.measure/1";

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::string(value) : std::string();
}

std::string Interpreter(const TorchBackendOptions& options) {
  if (!options.python.empty()) return options.python;
  if (const std::string env = Env("KAREUS_PYTHON"); !env.empty()) return env;
  if (access("/usr/bin/python3", X_OK) == 0) return "/usr/bin/python3";
  return "python3";
}

// Where the worker finds the kareus package: the option, $KAREUS_PYTHONPATH, else this build's
// package folder (compiled in) when it exists.
std::string PackageFolder(const TorchBackendOptions& options) {
  if (!options.python_path.empty()) return options.python_path;
  if (const std::string env = Env("KAREUS_PYTHONPATH"); !env.empty()) return env;
#ifdef KAREUS_PYTHON_BUILD_DIR
  if (std::filesystem::exists(std::filesystem::path(KAREUS_PYTHON_BUILD_DIR) / "kareus")) {
    return KAREUS_PYTHON_BUILD_DIR;
  }
#endif
  return "";
}

std::map<std::string, std::string> WorkerEnvironment(const TorchBackendOptions& options) {
  std::map<std::string, std::string> env;
  const std::string folder = PackageFolder(options);
  if (!folder.empty()) {
    const std::string existing = Env("PYTHONPATH");
    env["PYTHONPATH"] = existing.empty() ? folder : folder + ":" + existing;
  }
  env["PYTHONDONTWRITEBYTECODE"] = "1";
  return env;
}

std::string WhereFrom(const TorchBackendOptions& options) {
  const std::string folder = PackageFolder(options);
  return fmt::format("interpreter {}, kareus package from {}", Interpreter(options),
                     folder.empty() ? "the interpreter's own path" : folder);
}

Sample ToSample(const Json& reply, double static_power_w) {
  Sample s;
  s.time_s = reply.at("time_s").get<double>();
  s.energy_j = reply.at("energy_j").get<double>();
  s.static_energy_j = static_power_w * s.time_s;
  s.dynamic_energy_j = s.energy_j - s.static_energy_j;
  s.realized_freq_mhz = reply.value("realized_mhz", 0.0);
  s.seconds = reply.at("seconds").get<double>();
  s.gpus = reply.at("gpus").get<int>();
  s.noise_free = false;
  if (!(std::isfinite(s.time_s) && s.time_s > 0.0 && std::isfinite(s.energy_j) &&
        s.energy_j >= 0.0 && std::isfinite(s.seconds) && s.seconds >= 0.0 && s.gpus >= 1)) {
    throw EnvironmentError("it answered an impossible reading: " + reply.dump());
  }
  return s;
}

Json KnobsJson(const std::map<std::string, CommKnobs>& partitions) {
  Json out = Json::object();
  for (const auto& [type, knobs] : partitions)
    out[type] = {{"sms", knobs.sms}, {"slot", knobs.slot}};
  return out;
}

class TorchBackend final : public Backend {
 public:
  TorchBackend(const workload::WorkloadModel& model, const TorchBackendOptions& options,
               uint64_t seed)
      : options_(options), gpu_(model.workload.gpu), seed_(seed) {
    if (!options_.allow_clock_control) {
      // The clock as found: one level, the preset's default clock.
      const int level = gpu_.clock.default_mhz;
      gpu_.clock.min_mhz = gpu_.clock.max_mhz = gpu_.clock.profile_min_mhz = level;
    }
    Start(model);
  }

  std::string Description() const override { return description_; }
  const hw::GpuSpec& Gpu() const override { return gpu_; }
  bool NoiseFree() const override { return false; }
  double BatchOverheadSeconds() const override {
    return batches_ > 0 ? overhead_total_s_ / static_cast<double>(batches_) : 2.0;
  }

  void MeasureBatch(const workload::PartitionType& partition,
                    const std::vector<PartitionKnobs>& batch,
                    const SampleCallback& on_sample) override {
    if (batch.empty()) return;
    Json configurations = Json::array();
    for (const PartitionKnobs& k : batch) {
      emulator::ValidatePartitionKnobs(gpu_, partition, k);
      configurations.push_back({{"freq_mhz", k.freq_mhz}, {"sms", k.sms}, {"slot", k.slot}});
    }
    Request(
        Json{{"kind", "partition"}, {"type", partition.name}, {"configurations", configurations}},
        fmt::format("partition {}, {} configuration(s)", partition.name, batch.size()), on_sample);
  }

  // The worker runs the workload it was started for (its program): `model` is that one.
  void MeasureInstructions(const workload::WorkloadModel& /*model*/,
                           const std::vector<InstructionRequest>& batch,
                           const SampleCallback& on_sample) override {
    if (batch.empty()) return;
    Json configurations = Json::array();
    for (const InstructionRequest& r : batch) {
      CheckClock(r.knobs.freq_mhz);
      configurations.push_back({{"stage", r.stage},
                                {"chunk", r.chunk},
                                {"direction", schedule::ToString(r.direction)},
                                {"freq_mhz", r.knobs.freq_mhz},
                                {"mode", schedule::ToString(r.knobs.mode)},
                                {"partitions", KnobsJson(r.knobs.partitions)}});
    }
    Request(Json{{"kind", "instruction"}, {"configurations", configurations}},
            fmt::format("{} instruction(s)", batch.size()), on_sample);
  }

  void MeasureFixedWork(const workload::WorkloadModel& /*model*/,
                        const std::vector<FixedWorkRequest>& batch,
                        const SampleCallback& on_sample) override {
    if (batch.empty()) return;
    Json configurations = Json::array();
    for (const FixedWorkRequest& r : batch) {
      CheckClock(r.freq_mhz);
      configurations.push_back({{"stage", r.stage},
                                {"chunk", r.chunk},
                                {"direction", schedule::ToString(r.direction)},
                                {"freq_mhz", r.freq_mhz}});
    }
    Request(Json{{"kind", "fixed_work"}, {"configurations", configurations}},
            fmt::format("fixed work of {} instruction(s)", batch.size()), on_sample);
  }

  // The reductions kareus.torch runs: every bucket all-reduced over the DP x CP replicas after
  // the last backward. The overlapped kind is that backward plus those buckets: the executor
  // reduces after the backward, so this is what a plan's overlapped sync costs when it runs.
  void MeasureGradientSync(const workload::WorkloadModel& model,
                           const std::vector<GradientSyncRequest>& batch,
                           const SampleCallback& on_sample) override {
    if (batch.empty()) return;
    KAREUS_CHECK(model.gradient_sync.enabled) << "gradient sync requested without DP x CP > 1";
    Json reductions = Json::array();
    std::vector<InstructionRequest> backwards;
    std::vector<std::size_t> backward_of;  // request index of each backward measured
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const GradientSyncRequest& r = batch[i];
      CheckClock(r.freq_mhz);
      const std::vector<workload::GradientBucket> buckets =
          r.work == GradientSyncWork::kSyncNode
              ? workload::GradientSyncBuckets(model, r.stage, r.chunk)
              : workload::LastBackwardBuckets(model, r.stage);
      Json bytes = Json::array();
      for (const workload::GradientBucket& b : buckets) bytes.push_back(b.collective.bytes);
      reductions.push_back({{"stage", r.stage},
                            {"freq_mhz", r.freq_mhz},
                            {"sms", r.sms},
                            {"bytes", bytes},
                            {"element_bytes", model.workload.gradient_sync.reduce_bytes}});
      if (r.work == GradientSyncWork::kOverlapped) {
        backwards.push_back({.stage = r.stage,
                             .direction = schedule::Direction::kBackward,
                             .knobs = {.freq_mhz = r.freq_mhz,
                                       .mode = schedule::ExecutionMode::kSequential,
                                       .partitions = {}},
                             .chunk = 0});
        backward_of.push_back(i);
      }
    }
    std::vector<Sample> instruction_samples(backwards.size());
    if (!backwards.empty()) {
      MeasureInstructions(model, backwards,
                          [&](std::size_t k, const Sample& s) { instruction_samples[k] = s; });
    }
    std::map<std::size_t, std::size_t> backward_index;
    for (std::size_t k = 0; k < backward_of.size(); ++k) backward_index[backward_of[k]] = k;
    Request(Json{{"kind", "reduction"}, {"configurations", reductions}},
            fmt::format("gradient reduction of {} request(s)", batch.size()),
            [&](std::size_t i, const Sample& reduction) {
              Sample s = reduction;
              if (const auto it = backward_index.find(i); it != backward_index.end()) {
                const Sample& b = instruction_samples[it->second];
                s.time_s += b.time_s;
                s.energy_j += b.energy_j;
                s.static_energy_j += b.static_energy_j;
                s.dynamic_energy_j += b.dynamic_energy_j;
              }
              on_sample(i, s);
            });
  }

 private:
  void Start(const workload::WorkloadModel& model) {
    std::vector<std::string> argv = {Interpreter(options_), "-m", "kareus.torch.measure"};
    worker_ = std::make_unique<internal::WorkerProcess>(argv, WorkerEnvironment(options_));
    const Json hello = {{"protocol", kProtocol},
                        {"workload", model.workload.ToJson()},
                        {"virtual_stages", model.workload.parallelism.virtual_stages},
                        {"options",
                         {{"device", options_.device},
                          {"allow_clock_control", options_.allow_clock_control},
                          {"warmup_runs", options_.warmup_runs},
                          {"min_runs", options_.min_runs},
                          {"window_s", options_.window_s},
                          {"min_energy_window_s", options_.window_s},
                          {"threads", options_.threads},
                          {"seed", seed_},
                          {"default_mhz", gpu_.clock.default_mhz}}}};
    Json ready;
    const std::string what = "start (" + WhereFrom(options_) + ")";
    if (!worker_->Send(hello)) Fail(what, "it did not read its first line");
    std::string garbage;
    const auto outcome = worker_->Receive(options_.timeout_s, ready, garbage);
    if (outcome != internal::WorkerProcess::Outcome::kLine) Fail(what, Why(outcome, garbage));
    if (ready.contains("error")) {
      throw EnvironmentError("the torch backend cannot measure workload " + model.workload.name +
                             ": " + ready["error"].get<std::string>());
    }
    if (ready.value("protocol", "") != kProtocol || !ready.value("ready", false)) {
      Fail(what, "it answered " + ready.dump() + " (expected " + kProtocol + " ready)");
    }
    description_ = fmt::format(
        "torch({}; {})", ready.value("description", "?"),
        options_.allow_clock_control
            ? std::string("SM clock locked per measurement")
            : fmt::format("clock as found: one clock level ({} MHz), no --allow-clock-control",
                          gpu_.clock.default_mhz));
  }

  std::string Why(internal::WorkerProcess::Outcome outcome, const std::string& garbage) {
    switch (outcome) {
      case internal::WorkerProcess::Outcome::kTimeout:
        worker_->Kill();
        return fmt::format("it said nothing for {} s and was stopped", options_.timeout_s);
      case internal::WorkerProcess::Outcome::kClosed: {
        for (int i = 0; i < 100 && worker_->ExitStatus().empty(); ++i) usleep(10000);
        const std::string status = worker_->ExitStatus();
        return "it " + (status.empty() ? std::string("closed its output") : status);
      }
      case internal::WorkerProcess::Outcome::kGarbage:
        worker_->Kill();
        return "it answered something that is not a kareus.measure/1 line: " +
               ShownValue(garbage, 200);
      case internal::WorkerProcess::Outcome::kLine:
        break;
    }
    return "";
  }

  // A worker that broke the protocol is stopped: later requests fail at once.
  [[noreturn]] void Fail(const std::string& what, const std::string& why) {
    const std::string tail = worker_ ? worker_->StderrTail() : std::string();
    const pid_t pid = worker_ ? worker_->pid() : -1;
    worker_.reset();
    throw EnvironmentError(fmt::format("torch backend worker (pid {}), {}: {}{}", pid, what, why,
                                       tail.empty() ? "" : "; its last messages:\n" + tail));
  }

  void CheckClock(int freq_mhz) const {
    if (!options_.allow_clock_control && freq_mhz != gpu_.clock.default_mhz) {
      ThrowInput("freq_mhz", std::to_string(freq_mhz),
                 fmt::format("the torch backend measures at the clock as found ({} MHz) unless "
                             "--allow-clock-control is given",
                             gpu_.clock.default_mhz));
    }
    if (!gpu_.clock.Contains(freq_mhz)) {
      ThrowInput("freq_mhz", std::to_string(freq_mhz),
                 fmt::format("not on {}'s clock grid ({}..{} MHz in steps of {})", gpu_.name,
                             gpu_.clock.min_mhz, gpu_.clock.max_mhz, gpu_.clock.step_mhz));
    }
  }

  // Sends one request and delivers its samples as they arrive.
  void Request(Json request, const std::string& what, const SampleCallback& on_sample) {
    if (!worker_)
      throw EnvironmentError("the torch backend's worker stopped after an earlier failure");
    const int64_t id = ++next_id_;
    request["id"] = id;
    const std::string named = fmt::format("request {} ({})", id, what);
    const std::size_t expected = request["configurations"].size();
    if (!worker_->Send(request))
      Fail(named, "it no longer reads its input (" + worker_->ExitStatus() + ")");
    std::size_t next = 0;
    while (true) {
      Json reply;
      std::string garbage;
      const auto outcome = worker_->Receive(options_.timeout_s, reply, garbage);
      if (outcome != internal::WorkerProcess::Outcome::kLine) {
        Fail(fmt::format("{} after {} of {} measurements", named, next, expected),
             Why(outcome, garbage));
      }
      if (reply.value("id", int64_t{-1}) != id)
        Fail(named, "it answered another request: " + reply.dump());
      if (reply.contains("error")) {
        throw EnvironmentError(fmt::format("torch backend worker, {}: {}", named,
                                           reply["error"].is_string()
                                               ? reply["error"].get<std::string>()
                                               : reply["error"].dump()));
      }
      if (reply.value("done", false)) {
        if (next != expected)
          Fail(named, fmt::format("it finished after {} of {} measurements", next, expected));
        overhead_total_s_ += reply.value("overhead_s", 0.0);
        ++batches_;
        Account(reply.value("overhead_s", 0.0) * static_cast<double>(last_gpus_), 0);
        return;
      }
      if (reply.value("index", int64_t{-1}) != static_cast<int64_t>(next)) {
        Fail(named, "it answered out of order: " + reply.dump());
      }
      Sample sample;
      try {
        sample = ToSample(reply, StaticPowerW());
      } catch (const Json::exception&) {
        Fail(named, "it answered a reading without its fields: " + reply.dump());
      } catch (const EnvironmentError& e) {
        Fail(named, e.what());
      }
      last_gpus_ = sample.gpus;
      Account(sample.GpuSeconds(), 1);
      on_sample(next, sample);
      ++next;
    }
  }

  TorchBackendOptions options_;
  hw::GpuSpec gpu_;
  uint64_t seed_ = 1;
  std::unique_ptr<internal::WorkerProcess> worker_;
  std::string description_;
  int64_t next_id_ = 0;
  double overhead_total_s_ = 0.0;
  int64_t batches_ = 0;
  int last_gpus_ = 1;
};

}  // namespace

std::optional<OptionError> TorchBackendOptions::Validate() const {
  if (device != "auto" && device != "cpu" && device != "cuda") {
    return OptionError{"device", device, "must be auto, cpu or cuda"};
  }
  if (warmup_runs < 0 || warmup_runs > 1000) {
    return OptionError{"warmup_runs", std::to_string(warmup_runs), "must be in [0, 1000]"};
  }
  if (min_runs < 1 || min_runs > 1000000) {
    return OptionError{"min_runs", std::to_string(min_runs), "must be in [1, 1000000]"};
  }
  if (!(window_s >= 0.0 && window_s <= 3600.0)) {
    return OptionError{"window_s", fmt::format("{}", window_s), "must be in [0, 3600] s"};
  }
  if (threads < 1 || threads > 1024)
    return OptionError{"threads", std::to_string(threads), "must be in [1, 1024]"};
  if (!(timeout_s > 0.0 && timeout_s <= 86400.0)) {
    return OptionError{"timeout_s", fmt::format("{}", timeout_s), "must be in (0, 86400] s"};
  }
  return std::nullopt;
}

void CheckTorchBackendAvailable(const TorchBackendOptions& options) {
  ThrowIfInvalid(options.Validate());
  internal::WorkerProcess probe(
      {Interpreter(options), "-c",
       "import torch, kareus.torch.measure; print('{\"ok\": true}', flush=True)"},
      WorkerEnvironment(options));
  Json line;
  std::string garbage;
  if (probe.Receive(120.0, line, garbage) == internal::WorkerProcess::Outcome::kLine &&
      line.value("ok", false)) {
    return;
  }
  for (int i = 0; i < 100 && probe.ExitStatus().empty(); ++i) usleep(10000);
  throw EnvironmentError(fmt::format(
      "--backend torch needs PyTorch and the kareus Python package ({}); the check {}: {}",
      WhereFrom(options), probe.ExitStatus().empty() ? "did not finish" : probe.ExitStatus(),
      probe.StderrTail(800)));
}

std::unique_ptr<Backend> MakeTorchBackend(const workload::WorkloadModel& model,
                                          const TorchBackendOptions& options) {
  ThrowIfInvalid(options.Validate());
  return std::make_unique<TorchBackend>(model, options, options.seed);
}

BackendFactory TorchBackendFactory(const TorchBackendOptions& options) {
  ThrowIfInvalid(options.Validate());
  return
      [options](const workload::WorkloadModel& model, uint64_t seed) -> std::unique_ptr<Backend> {
        return std::make_unique<TorchBackend>(model, options, seed);
      };
}

}  // namespace kareus::measure
