// SPDX-License-Identifier: Apache-2.0
#include "kareus/measure/device_check.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "kareus/common/io.h"
#include "kareus/common/table.h"
#include "kareus/device/nvml.h"
#include "kareus/emulator/emulator.h"
#include "kareus/measure/cuda_backend.h"
#include "kareus/workload/ops.h"
#include "measure/cuda/device_check_internal.h"
#include "measure/cuda/gpu_backend.h"
#include "measure/cuda/program.h"

namespace kareus::measure {

std::optional<OptionError> DeviceCheckOptions::Validate() const {
  if (!(std::isfinite(window_s) && window_s > 0.0)) {
    return OptionError{"window_s", Describe(window_s), "must be a finite number > 0"};
  }
  if (!(std::isfinite(cooldown_s) && cooldown_s >= 0.0)) {
    return OptionError{"cooldown_s", Describe(cooldown_s), "must be a finite number >= 0"};
  }
  if (kernel_runs < 1)
    return OptionError{"kernel_runs", std::to_string(kernel_runs), "must be >= 1"};
  CudaBackendOptions backend;
  backend.devices = devices;
  if (auto error = backend.Validate()) return error;
  return std::nullopt;
}

std::filesystem::path DefaultDeviceCheckWorkload() {
  try {
    const auto path = DataDir().parent_path() / "examples" / "device" / "llama3.2-3b-tp8-h200.yaml";
    if (std::filesystem::exists(path)) return path;
  } catch (const Error&) {
  }
  return {};
}

namespace internal {
namespace {

// JSON has no NaN or infinity: those become null.
Json Number(double value) { return std::isfinite(value) ? Json(value) : Json(nullptr); }

Json RelError(double emulated, double measured) {
  return measured > 0.0 ? Number((emulated - measured) / measured) : Json(nullptr);
}

Json Error(const std::string& message) { return Json{{"status", "error"}, {"error", message}}; }

// Runs `body` into a section; any exception becomes the section's error.
template <typename Body>
Json Section(Body body) {
  try {
    Json section = Json{{"status", "ok"}};
    body(section);
    return section;
  } catch (const std::exception& e) {
    return Error(e.what());
  }
}

std::string Status(device::NvmlStatus status) {
  return status == device::NvmlStatus::kFunctionNotFound
             ? "not exported by this driver"
             : fmt::format("NVML error {}", static_cast<int>(status));
}

Json NvmlDevice(const device::Nvml& nvml, int i) {
  Json d{{"index", i}};
  std::string text;
  d["name"] =
      nvml.DeviceName(i, &text) == device::NvmlStatus::kSuccess ? Json(text) : Json(nullptr);
  d["uuid"] =
      nvml.DeviceUuid(i, &text) == device::NvmlStatus::kSuccess ? Json(text) : Json(nullptr);
  double watts = 0.0;
  auto status = nvml.PowerManagementLimitW(i, &watts);
  d["power_management_limit_w"] =
      status == device::NvmlStatus::kSuccess ? Json(watts) : Json(Status(status));
  status = nvml.EnforcedPowerLimitW(i, &watts);
  d["enforced_power_limit_w"] =
      status == device::NvmlStatus::kSuccess ? Json(watts) : Json(Status(status));
  int mhz = 0;
  status = nvml.MaxClockMhz(i, device::ClockType::kSm, &mhz);
  d["max_sm_clock_mhz"] = status == device::NvmlStatus::kSuccess ? Json(mhz) : Json(Status(status));
  try {
    d["sm_clock_mhz"] = nvml.ClockMhz(i, device::ClockType::kSm);
    d["memory_clock_mhz"] = nvml.ClockMhz(i, device::ClockType::kMemory);
  } catch (const std::exception& e) {
    d["clocks_error"] = e.what();
  }
  try {
    const std::vector<int> memory = nvml.SupportedMemoryClocksMhz(i);
    d["supported_memory_clocks_mhz"] = memory;
    if (!memory.empty()) {
      std::vector<int> sm =
          nvml.SupportedGraphicsClocksMhz(i, *std::max_element(memory.begin(), memory.end()));
      std::sort(sm.begin(), sm.end(), std::greater<>());
      d["supported_sm_clocks_mhz"] = Json{{"count", sm.size()},
                                          {"max", sm.empty() ? 0 : sm.front()},
                                          {"min", sm.empty() ? 0 : sm.back()},
                                          {"values", sm}};
    }
  } catch (const std::exception& e) {
    d["supported_clocks_error"] = e.what();
  }
  uint64_t reasons = 0;
  status = nvml.ClockEventReasons(i, &reasons);
  d["clock_event_reasons"] = status == device::NvmlStatus::kSuccess
                                 ? Json(ClockEventReasonNames(reasons))
                                 : Json(Status(status));
  int celsius = 0;
  status = nvml.TemperatureC(i, &celsius);
  d["temperature_c"] =
      status == device::NvmlStatus::kSuccess ? Json(celsius) : Json(Status(status));
  try {
    d["power_w"] = nvml.PowerW(i);
  } catch (const std::exception& e) {
    d["power_w"] = e.what();
  }
  uint64_t energy_mj = 0;
  status = nvml.TotalEnergyMj(i, &energy_mj);
  d["energy_counter"] = status == device::NvmlStatus::kSuccess
                            ? Json{{"works", true}, {"total_mj", energy_mj}}
                            : Json{{"works", false}, {"error", Status(status)}};
  return d;
}

std::string ShapeOf(const KernelSpec& k) {
  switch (k.kind) {
    case KernelKind::kGemm:
      return fmt::format("{}x{}x{}", k.m, k.n, k.k);
    case KernelKind::kAttention:
      return fmt::format("b{} h{}/{} d{} q{} kv{}{}", k.attention.batch, k.attention.heads,
                         k.attention.kv_heads, k.attention.head_dim, k.attention.q_len,
                         k.attention.kv_len, k.attention.backward ? " bwd" : "");
    case KernelKind::kMemory:
      return fmt::format("{} {}x{}", ToString(k.pattern), k.rows, k.cols);
  }
  return "?";
}

const char* KindName(KernelKind kind) {
  switch (kind) {
    case KernelKind::kGemm:
      return "gemm";
    case KernelKind::kAttention:
      return "attention";
    case KernelKind::kMemory:
      return "memory";
  }
  return "?";
}

Json Measured(const Reading& r) {
  return Json{
      {"time_s", Number(r.sample.time_s)},
      {"energy_j", Number(r.sample.energy_j)},
      {"avg_power_w", Number(r.sample.time_s > 0.0 ? r.sample.energy_j / r.sample.time_s : 0.0)},
      {"realized_freq_mhz", Number(r.sample.realized_freq_mhz)},
      {"clock_event_reasons", ClockEventReasonNames(r.clock_event_reasons)},
      {"repeats", r.ranks.empty() ? 0 : r.ranks.front().repeats},
      {"window_s", r.ranks.empty() ? 0.0 : r.ranks.front().window_s}};
}

Json Emulated(const emulator::SimResult& s) {
  return Json{{"time_s", Number(s.time_s)},
              {"energy_j", Number(s.energy_j)},
              {"avg_power_w", Number(s.avg_power_w)},
              {"effective_freq_mhz", Number(s.effective_freq_mhz)}};
}

Json Compare(const Reading& r, const emulator::SimResult& s) {
  const double power = r.sample.time_s > 0.0 ? r.sample.energy_j / r.sample.time_s : 0.0;
  return Json{{"measured", Measured(r)},
              {"emulated", Emulated(s)},
              {"rel_error", Json{{"time", RelError(s.time_s, r.sample.time_s)},
                                 {"energy", RelError(s.energy_j, r.sample.energy_j)},
                                 {"avg_power", RelError(s.avg_power_w, power)}}}};
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One measurement through the backend (rank 0 alone, or `layout`).
Reading MeasureOne(GpuBackend& backend, const RankLayout& layout, MeasureSpec spec) {
  Reading out;
  backend.Run(layout, {std::move(spec)}, [&](size_t, const Reading& r) { out = r; });
  return out;
}

// A partition's compute ops of one nanobatch on one GPU, with energy (`window_s` 0: the
// backend's window).
MeasureSpec ComputeOnlySpec(const workload::PartitionType& type,
                            const workload::WorkloadModel& model, int clock, double window_s) {
  return MeasureSpec{
      .what = type.name + " compute only",
      .freq_mhz = clock,
      .comms = {},
      .build = [&type,
                &model](const CommHandleOf&) { return ComputeOnlyProgram(type, model.workload); },
      .energy = true,
      .window_s = window_s};
}

}  // namespace

Json RunDeviceCheck(const DeviceCheckOptions& options, const DeviceCheckEnv& env) {
  ThrowIfInvalid(options.Validate());
  const workload::Workload workload = workload::LoadWorkloadFile(options.workload);
  const workload::WorkloadModel model = workload::BuildWorkloadModel(workload);
  // The emulator's GPU: the workload's preset, held to the device's power limit once known.
  hw::GpuSpec gpu = model.workload.gpu;
  std::string power_limit_note = "the preset's default power limit";

  Json report;
  report["format"] = "kareus-device-check";
  report["version"] = 1;
  {
    const std::time_t now = std::time(nullptr);
    char stamp[32] = {};
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    report["started_at"] = stamp;
  }
  report["cuda_backend_built"] = CudaBackendBuilt();
  report["read_only"] = "never changes clocks or power limits";
  const auto started = std::chrono::steady_clock::now();
  auto saved = [&]() {
    if (options.on_section) {
      report["elapsed_s"] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      options.on_section(report);
    }
  };

  // --- nvml
  std::shared_ptr<device::Nvml> nvml;
  report["nvml"] = Section([&](Json& s) {
    nvml = env.open_nvml();
    std::string driver;
    s["library"] = nvml->library_path();
    s["driver"] =
        nvml->DriverVersion(&driver) == device::NvmlStatus::kSuccess ? Json(driver) : Json(nullptr);
    Json devices = Json::array();
    for (int i = 0; i < nvml->device_count(); ++i) devices.push_back(NvmlDevice(*nvml, i));
    s["devices"] = devices;
  });
  saved();

  // --- cuda: the backend (device system) the measurement sections share
  std::unique_ptr<GpuBackend> backend;
  CudaBackendOptions backend_options;
  backend_options.devices = options.devices;
  backend_options.allow_clock_control = false;  // read-only, always
  backend_options.settle_s = 0.0;
  backend_options.warmup_runs = 5;
  backend_options.calibration_runs = options.kernel_runs;
  backend_options.window_s = options.window_s;
  backend_options.min_counter_periods = 10;
  backend_options.cooldown_s = options.cooldown_s;
  backend_options.timeout_s = 120.0;
  backend_options.quiet = options.quiet;
  report["cuda"] = Section([&](Json& s) {
    backend = std::make_unique<GpuBackend>(model, backend_options, env.open_system());
    DeviceSystem& system = backend->System();
    s["driver"] = system.DriverVersion();
    s["libraries"] = system.LibraryVersions();
    s["attention"] = system.AttentionMethod();
    s["device_count"] = system.DeviceCount();
    s["backend"] = backend->Description();
    const DeviceInfo& info = backend->RankInfo(0);
    s["rank0"] = Json{{"ordinal", info.ordinal},
                      {"name", info.name},
                      {"uuid", info.uuid},
                      {"nvml_index", info.nvml_index},
                      {"sm_count", info.sm_count},
                      {"memory_gib", info.memory_bytes / 1073741824.0},
                      {"max_sm_clock_mhz", info.max_sm_clock_mhz},
                      {"power_limit_w", info.power_limit_w}};
  });
  saved();
  auto need_backend = [&]() {
    if (!backend)
      throw EnvironmentError("needs the CUDA backend, which failed (see the cuda section)");
  };

  if (backend && backend->RankInfo(0).power_limit_w > 0.0) {
    const double watts = backend->RankInfo(0).power_limit_w;
    try {
      hw::SetPowerLimit(gpu, watts, "device power limit");
      power_limit_note = "the device's enforced power limit";
    } catch (const InputError& e) {
      power_limit_note = std::string("the preset's default power limit (") + e.what() + ")";
    }
  }

  // --- energy counter
  report["energy_counter"] = Section([&](Json& s) {
    need_backend();
    const auto [period, idle] = backend->CounterOf(0);
    s["device"] = backend->RankInfo(0).ordinal;
    s["update_period_s"] = Number(period);
    s["idle_power_w"] = Number(idle);
    s["note"] = "three consecutive updates of nvmlDeviceGetTotalEnergyConsumption at idle";
  });
  saved();

  // --- workload
  const int clock = backend ? backend->ClockLevelMhz() : gpu.clock.default_mhz;
  report["workload"] = Section([&](Json& s) {
    s["file"] = options.workload.string();
    s["name"] = model.workload.name;
    s["signature"] = model.workload.Signature();
    s["gpu_preset"] = gpu.name;
    s["preset_sm_count"] = gpu.sm_count;
    s["clock_mhz"] = clock;
    s["clock_note"] = "measured at the clock as found; the emulator is run at this clock, locked";
    s["emulator_power_limit_w"] = gpu.power.cap_w;
    s["emulator_power_limit_note"] = power_limit_note;
    if (backend) {
      const DeviceInfo& info = backend->RankInfo(0);
      s["device_matches_preset"] = info.sm_count == gpu.sm_count;
    }
    Json types = Json::array();
    for (const auto& t : model.partition_types) {
      types.push_back(Json{{"type", t.name},
                           {"collective", workload::ToString(t.collective.collective)},
                           {"group", t.collective.group_size},
                           {"compute_ops", t.compute_ops.size()}});
    }
    s["partition_types"] = types;
  });
  saved();

  // --- kernels
  report["kernels"] = Section([&](Json& s) {
    need_backend();
    if (model.partition_types.empty())
      throw InputError("workload " + model.workload.name + " has no partitions");
    Json rows = Json::array();
    std::vector<KernelSpec> seen;
    std::vector<double> errors;
    for (const auto& type : model.partition_types) {
      for (const auto& op : type.compute_ops) {
        const KernelSpec spec = ResolveKernel(op, model.workload);
        if (std::any_of(seen.begin(), seen.end(),
                        [&](const KernelSpec& k) { return k.SameShape(spec); }))
          continue;
        seen.push_back(spec);
        Json row{{"type", type.name},
                 {"op", op.name},
                 {"kind", KindName(spec.kind)},
                 {"shape", ShapeOf(spec)}};
        try {
          const Reading r = MeasureOne(*backend, {1, 1},
                                       MeasureSpec{.what = "kernel " + op.name,
                                                   .freq_mhz = clock,
                                                   .comms = {},
                                                   .build =
                                                       [spec](const CommHandleOf& comm_of) {
                                                         ProgramBuilder b(comm_of);
                                                         b.AddPartition({spec}, std::nullopt, 0, 0);
                                                         return b.Finish();
                                                       },
                                                   .energy = false});
          const emulator::SimResult e = emulator::SimulateKernel(gpu, op, gpu.sm_count, clock);
          row["measured_time_s"] = Number(r.sample.time_s);
          row["emulated_time_s"] = Number(e.time_s);
          row["rel_error_time"] = RelError(e.time_s, r.sample.time_s);
          row["realized_freq_mhz"] = Number(r.sample.realized_freq_mhz);
          row["flops"] = op.flops;
          row["bytes"] = op.bytes;
          row["measured_tflops"] =
              Number(r.sample.time_s > 0.0 ? op.flops / r.sample.time_s / 1e12 : 0.0);
          row["measured_gbps"] =
              Number(r.sample.time_s > 0.0 ? op.bytes / r.sample.time_s / 1e9 : 0.0);
          const bool comparable = spec.kind != KernelKind::kAttention;
          row["comparable"] = comparable;
          if (!comparable) {
            row["note"] =
                "unfused attention over the full S x S scores; the emulator models causal flash "
                "attention";
          } else if (r.sample.time_s > 0.0) {
            errors.push_back(std::abs((e.time_s - r.sample.time_s) / r.sample.time_s));
          }
        } catch (const std::exception& e) {
          row["error"] = e.what();
        }
        rows.push_back(row);
      }
    }
    s["clock_mhz"] = clock;
    s["rows"] = rows;
    s["median_abs_rel_error_time"] = Number(Median(errors));
  });
  saved();

  // --- partitions
  report["partitions"] = Section([&](Json& s) {
    need_backend();
    const int available = backend->System().DeviceCount();
    Json rows = Json::array();
    std::map<std::string, std::vector<double>> errors;
    for (const auto& type : model.partition_types) {
      Json row{{"type", type.name}, {"mode", "compute_only"}, {"knobs", Json{{"freq_mhz", clock}}}};
      try {
        const Reading r = MeasureOne(*backend, {1, 1}, ComputeOnlySpec(type, model, clock, 0.0));
        const emulator::SimResult e = emulator::SimulateSequential(
            gpu, type.compute_ops, clock, gpu.interconnect.library_default_sms);
        row.update(Compare(r, e));
        for (const char* key : {"time", "energy", "avg_power"}) {
          const Json& v = row["rel_error"][key];
          if (v.is_number()) errors[key].push_back(std::abs(v.get<double>()));
        }
      } catch (const std::exception& e) {
        row["error"] = e.what();
      }
      rows.push_back(row);

      const int group = type.collective.group_size;
      if (available < group) continue;
      // Enough GPUs: the whole partition at the SM extremes and a middle count, first slot.
      std::vector<int> sms = {type.sm_choices.front(), type.sm_choices[type.sm_choices.size() / 2],
                              type.sm_choices.back()};
      if (!type.tunable) sms = {type.fixed_sms};
      for (int c : sms) {
        const PartitionKnobs knobs{
            .freq_mhz = clock,
            .sms = c,
            .slot = type.tunable ? type.launch_slots.front() : type.fixed_slot};
        Json full{{"type", type.name},
                  {"mode", "with_collective"},
                  {"knobs", Json{{"freq_mhz", clock}, {"sms", c}, {"slot", knobs.slot}}}};
        try {
          const Reading r = MeasureOne(
              *backend, PartitionLayout(type),
              MeasureSpec{.what = fmt::format("{} {}@{}", type.name, c, knobs.slot),
                          .freq_mhz = clock,
                          .comms = PartitionComms(type, knobs),
                          .build = [&type, &model, knobs](const CommHandleOf& comm_of) {
                            return PartitionProgram(type, knobs, model.workload, comm_of);
                          }});
          full.update(Compare(r, emulator::SimulatePartition(gpu, type, knobs)));
        } catch (const std::exception& e) {
          full["error"] = e.what();
        }
        rows.push_back(full);
      }
    }
    s["clock_mhz"] = clock;
    s["gpus_available"] = available;
    std::set<int> groups;
    for (const auto& type : model.partition_types) groups.insert(type.collective.group_size);
    const int largest = groups.empty() ? 1 : *groups.rbegin();
    s["with_collective"] =
        available >= largest
            ? std::string("measured at three SM counts per type")
            : fmt::format("not measured: the collectives need up to {} GPUs, {} available", largest,
                          available);
    s["rows"] = rows;
    s["median_abs_rel_error"] = Json{{"time", Number(Median(errors["time"]))},
                                     {"energy", Number(Median(errors["energy"]))},
                                     {"avg_power", Number(Median(errors["avg_power"]))}};
    s["note"] =
        "compute_only: one nanobatch's compute ops back to back (the partition occurrence without "
        "a collective), "
        "against emulator::SimulateSequential; with_collective rows need the collective's group of "
        "GPUs";
  });
  saved();

  // --- energy window consistency
  report["energy_window"] = Section([&](Json& s) {
    need_backend();
    if (model.partition_types.empty()) throw InputError("workload has no partitions");
    const auto& type = model.partition_types.front();
    Json rows = Json::array();
    std::vector<double> per_run;
    for (double window : {options.window_s, 3.0 * options.window_s}) {
      const Reading r = MeasureOne(*backend, {1, 1}, ComputeOnlySpec(type, model, clock, window));
      per_run.push_back(r.sample.energy_j);
      rows.push_back(Json{{"window_s", window}, {"measured", Measured(r)}});
    }
    s["type"] = type.name;
    s["rows"] = rows;
    s["rel_difference_energy"] = RelError(per_run[0], per_run[1]);
    s["note"] =
        "energy per run from a short and a 3x longer window: an unbiased window protocol agrees";
  });
  saved();

  // --- nccl
  report["nccl"] = Section([&](Json& s) {
    need_backend();
    if (model.partition_types.empty()) throw InputError("workload has no partitions");
    const auto& type = model.partition_types.front();
    const int available = backend->System().DeviceCount();
    const int n = std::max(1, std::min(available, type.collective.group_size));
    CollectiveSpec spec = ResolveCollective(type.collective);
    spec.group_size = n;
    workload::Op op = type.collective;
    op.group_size = n;
    const RankLayout layout =
        GroupOf(spec.type) == GroupKind::kTensor ? RankLayout{n, 1} : RankLayout{1, n};
    Json rows = Json::array();
    const std::vector<int> counts =
        n == 1 ? std::vector<int>{4} : std::vector<int>{2, 4, 8, 16, 32};
    for (int c : counts) {
      Json row{
          {"ranks", n}, {"sms", c}, {"bytes", spec.bytes}, {"type", workload::ToString(spec.type)}};
      try {
        const Reading r = MeasureOne(
            *backend, layout,
            MeasureSpec{
                .what = fmt::format("{} {} ranks {} SMs", row["type"].get<std::string>(), n, c),
                .freq_mhz = clock,
                .comms = {CommKey{GroupOf(spec.type), c}},
                .build =
                    [spec, c](const CommHandleOf& comm_of) {
                      ProgramBuilder b(comm_of);
                      b.AddCollective(spec, c);
                      return b.Finish();
                    },
                .energy = false});
        row["measured_time_s"] = Number(r.sample.time_s);
        if (n > 1) {
          const double factor = spec.type == workload::CollectiveType::kAllReduce
                                    ? 2.0 * (n - 1) / n
                                    : double(n - 1) / n;
          row["bus_bandwidth_gbps"] =
              Number(r.sample.time_s > 0.0 ? spec.bytes * factor / r.sample.time_s / 1e9 : 0.0);
          const emulator::SimResult e = emulator::SimulateKernel(gpu, op, c, clock);
          row["emulated_time_s"] = Number(e.time_s);
          row["rel_error_time"] = RelError(e.time_s, r.sample.time_s);
        } else {
          row["note"] =
              "one rank: NCCL copies locally; checks communicator creation with minCTAs = maxCTAs "
              "and "
              "the launch on the second stream, not bandwidth";
        }
      } catch (const std::exception& e) {
        row["error"] = e.what();
      }
      rows.push_back(row);
    }
    s["rows"] = rows;
  });
  saved();

  report["elapsed_s"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return report;
}

}  // namespace internal

Json RunDeviceCheck(const DeviceCheckOptions& options) {
  internal::DeviceCheckEnv env;
  env.open_system = [] { return internal::OpenCudaSystem(); };
  env.open_nvml = [] { return device::Nvml::Open(); };
  return internal::RunDeviceCheck(options, env);
}

namespace {

std::string Cell(const Json& v, int decimals, double scale = 1.0) {
  if (!v.is_number()) return "-";
  return FormatFixed(v.get<double>() * scale, decimals);
}

std::string Percent(const Json& v) {
  if (!v.is_number()) return "-";
  return fmt::format("{:+.1f}%", 100.0 * v.get<double>());
}

std::string Header(const Json& report, const char* name, const char* title) {
  const Json& s = report.contains(name) ? report[name] : Json();
  std::string out = fmt::format("\n== {} ({})", title, s.value("status", "missing"));
  if (s.contains("error")) out += ": " + s["error"].get<std::string>();
  return out + "\n";
}

}  // namespace

std::string FormatDeviceCheck(const Json& report) {
  std::ostringstream out;
  out << "kareus device-check (read-only: never changes clocks or power limits)\n";
  out << Header(report, "nvml", "GPUs NVML sees");
  if (report["nvml"].value("status", "") == "ok") {
    out << "driver " << report["nvml"].value("driver", Json("?")).dump() << "\n";
    Table t({"index", "name", "SM clocks MHz", "power limit W", "SM MHz now", "energy counter",
             "reasons"});
    for (const Json& d : report["nvml"]["devices"]) {
      std::string clocks = "-";
      if (d.contains("supported_sm_clocks_mhz")) {
        const Json& c = d["supported_sm_clocks_mhz"];
        clocks = fmt::format("{}..{} ({})", c["min"].get<int>(), c["max"].get<int>(),
                             c["count"].get<size_t>());
      }
      std::string reasons;
      if (d["clock_event_reasons"].is_array()) {
        for (const Json& r : d["clock_event_reasons"]) {
          if (!reasons.empty()) reasons += ',';
          reasons += r.get<std::string>();
        }
      }
      t.AddRow({std::to_string(d["index"].get<int>()),
                d["name"].is_string() ? d["name"].get<std::string>() : "?", clocks,
                Cell(d["enforced_power_limit_w"], 0),
                d.contains("sm_clock_mhz") ? std::to_string(d["sm_clock_mhz"].get<int>()) : "-",
                d["energy_counter"].value("works", false) ? "works" : "no",
                reasons.empty() ? "-" : reasons});
    }
    out << t.ToString();
  }
  out << Header(report, "cuda", "CUDA");
  if (report["cuda"].value("status", "") == "ok") {
    out << report["cuda"]["backend"].get<std::string>() << "\n";
  }
  out << Header(report, "energy_counter", "energy counter");
  if (report["energy_counter"].value("status", "") == "ok") {
    out << "update period " << Cell(report["energy_counter"]["update_period_s"], 1, 1e3)
        << " ms, idle " << Cell(report["energy_counter"]["idle_power_w"], 1) << " W\n";
  }
  out << Header(report, "workload", "workload");
  if (report["workload"].value("status", "") == "ok") {
    out << report["workload"]["name"].get<std::string>() << " on preset "
        << report["workload"]["gpu_preset"].get<std::string>()
        << ", measured at the clock as found (" << report["workload"]["clock_mhz"].get<int>()
        << " MHz)\n";
  }
  out << Header(report, "kernels", "kernels alone: measured vs emulated time");
  if (report["kernels"].value("status", "") == "ok") {
    Table t({"type", "op", "shape", "measured us", "emulated us", "error", "TFLOP/s", "GB/s"});
    for (const Json& r : report["kernels"]["rows"]) {
      t.AddRow({r["type"].get<std::string>(),
                r["op"].get<std::string>() + (r.value("comparable", true) ? "" : " *"),
                r["shape"].get<std::string>(), Cell(r.value("measured_time_s", Json()), 1, 1e6),
                Cell(r.value("emulated_time_s", Json()), 1, 1e6),
                Percent(r.value("rel_error_time", Json())),
                Cell(r.value("measured_tflops", Json()), 1),
                Cell(r.value("measured_gbps", Json()), 0)});
    }
    out << t.ToString()
        << "* unfused attention (not comparable with the emulator's flash model); median |error| "
        << Percent(report["kernels"]["median_abs_rel_error_time"]) << "\n";
  }
  out << Header(report, "partitions", "partitions: measured vs emulated");
  if (report["partitions"].value("status", "") == "ok") {
    Table t({"type", "mode", "SMs@slot", "time ms", "emu ms", "err", "energy J", "emu J", "err",
             "power W", "emu W", "err", "MHz"});
    for (const Json& r : report["partitions"]["rows"]) {
      const Json& k = r["knobs"];
      const std::string knobs = k.contains("sms") ? fmt::format("{}@{}", k["sms"].get<int>(),
                                                                k["slot"].get<std::string>())
                                                  : "-";
      if (!r.contains("measured")) {
        t.AddRow({r["type"].get<std::string>(), r["mode"].get<std::string>(), knobs,
                  "error: " + r.value("error", std::string("?")), "", "", "", "", "", "", "", "",
                  ""});
        continue;
      }
      const Json &m = r["measured"], &e = r["emulated"], &err = r["rel_error"];
      t.AddRow({r["type"].get<std::string>(), r["mode"].get<std::string>(), knobs,
                Cell(m["time_s"], 3, 1e3), Cell(e["time_s"], 3, 1e3), Percent(err["time"]),
                Cell(m["energy_j"], 4), Cell(e["energy_j"], 4), Percent(err["energy"]),
                Cell(m["avg_power_w"], 0), Cell(e["avg_power_w"], 0), Percent(err["avg_power"]),
                Cell(m["realized_freq_mhz"], 0)});
    }
    const Json& med = report["partitions"]["median_abs_rel_error"];
    out << t.ToString() << "median |error|: time " << Percent(med["time"]) << ", energy "
        << Percent(med["energy"]) << ", power " << Percent(med["avg_power"]) << "\n";
  }
  out << Header(report, "energy_window", "energy window consistency");
  if (report["energy_window"].value("status", "") == "ok") {
    out << "energy per run, 3x window vs 1x: "
        << Percent(report["energy_window"]["rel_difference_energy"]) << "\n";
  }
  out << Header(report, "nccl", "NCCL communicators (minCTAs = maxCTAs)");
  if (report["nccl"].value("status", "") == "ok") {
    Table t({"ranks", "SMs", "MiB", "measured us", "bus GB/s", "emulated us", "error"});
    for (const Json& r : report["nccl"]["rows"]) {
      t.AddRow({std::to_string(r["ranks"].get<int>()), std::to_string(r["sms"].get<int>()),
                FormatFixed(r["bytes"].get<double>() / 1048576.0, 1),
                Cell(r.value("measured_time_s", Json()), 1, 1e6),
                Cell(r.value("bus_bandwidth_gbps", Json()), 1),
                Cell(r.value("emulated_time_s", Json()), 1, 1e6),
                r.contains("error") ? "error: " + r["error"].get<std::string>()
                                    : Percent(r.value("rel_error_time", Json()))});
    }
    out << t.ToString();
  }
  out << fmt::format("\nelapsed {:.1f} s\n", report.value("elapsed_s", 0.0));
  return out.str();
}

}  // namespace kareus::measure
