// SPDX-License-Identifier: Apache-2.0
// kareus validate's replay of Kareus's own real-GPU checks (device_check and power_probe JSON
// files) on the emulator. The measured CSV datasets and the manifest: validate.cc; the report:
// validate_report.cc.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "emulator/validate_internal.h"
#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/common/json.h"
#include "kareus/common/table.h"
#include "kareus/emulator/emulator.h"
#include "kareus/emulator/validate.h"
#include "kareus/hw/gpu_spec.h"

namespace kareus::emulator::internal {
namespace {

using schedule::Direction;

// ---- Kareus's own real-GPU checks (device_check, power_probe) ------------------------------

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// (emulated - measured) / measured in percent; NaN where nothing was measured.
double ErrorPct(double emulated, double measured) {
  if (!(measured > 0.0) || !std::isfinite(emulated)) return kNaN;
  return Percent(emulated / measured - 1.0);
}

void FinishRow(DeviceRow& r) {
  r.time_error_pct = ErrorPct(r.emulated_time_s, r.measured_time_s);
  r.energy_error_pct = ErrorPct(r.emulated_energy_j, r.measured_energy_j);
  r.power_error_pct = ErrorPct(r.emulated_power_w, r.measured_power_w);
  r.freq_error_pct = ErrorPct(r.emulated_freq_mhz, r.measured_freq_mhz);
}

double MedianAbs(std::vector<double> v) {
  std::erase_if(v, [](double x) { return !std::isfinite(x); });
  if (v.empty()) return kNaN;
  for (double& x : v) x = std::abs(x);
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

template <typename Pred>
DeviceMedians MediansOf(const std::vector<DeviceRow>& rows, Pred take) {
  DeviceMedians m;
  std::vector<double> t, e, p, f;
  for (const DeviceRow& r : rows) {
    if (!take(r)) continue;
    ++m.rows;
    t.push_back(r.time_error_pct);
    e.push_back(r.energy_error_pct);
    p.push_back(r.power_error_pct);
    f.push_back(r.freq_error_pct);
  }
  m.time_pct = MedianAbs(t);
  m.energy_pct = MedianAbs(e);
  m.power_pct = MedianAbs(p);
  m.freq_pct = MedianAbs(f);
  return m;
}

const Json& Field(const Json& j, const std::string& key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) throw InputError(where + ": no field '" + key + "'");
  return j.at(key);
}

double NumberField(const Json& j, const std::string& key, const std::string& where) {
  const Json& v = Field(j, key, where);
  if (!v.is_number()) throw InputError(where + "." + key + " = " + v.dump() + ": not a number");
  return v.get<double>();
}

std::string StringField(const Json& j, const std::string& key, const std::string& where) {
  const Json& v = Field(j, key, where);
  if (!v.is_string()) throw InputError(where + "." + key + " = " + v.dump() + ": not a string");
  return v.get<std::string>();
}

// The nearest clock of the GPU's grid (the realized clock is a mean of samples).
int OnGrid(const hw::GpuSpec& gpu, double mhz) {
  const int step = std::max(1, gpu.clock.step_mhz);
  const int snapped =
      gpu.clock.min_mhz + step * static_cast<int>(std::lround((mhz - gpu.clock.min_mhz) / step));
  return std::clamp(snapped, gpu.clock.min_mhz, gpu.clock.max_mhz);
}

void SetMeasured(DeviceRow& r, const Json& m, const std::string& where) {
  r.measured_time_s = NumberField(m, "time_s", where);
  r.measured_energy_j = NumberField(m, "energy_j", where);
  r.measured_power_w = NumberField(m, "avg_power_w", where);
  r.measured_freq_mhz = NumberField(m, "realized_freq_mhz", where);
}

void SetEmulated(DeviceRow& r, const SimResult& e) {
  r.emulated_time_s = e.time_s;
  r.emulated_energy_j = e.energy_j;
  r.emulated_power_w = e.avg_power_w;
  r.emulated_freq_mhz = e.effective_freq_mhz;
}

}  // namespace

// A `kareus device-check` report (format kareus-device-check/1), replayed as the device check
// ran the emulator (src/measure/cuda/device_check.cc), on the preset held to the device's
// enforced power limit:
// - partitions: each measured row (compute_only: one nanobatch's compute back to back,
//   SimulateSequential; with_collective: SimulatePartition with the row's knobs) at the clock
//   as found (unlocked: the maximum), time, energy, average power and realized clock. A
//   partition with an attention op is not comparable (the backend's attention is unfused,
//   the emulator's flash).
// - kernels: every kernel alone at the clock it realized (its timing runs are a few
//   milliseconds: the board's power controller does not act within them, the clock it left is
//   the condition), time only.
void ReplayDeviceCheck(const std::filesystem::path& path, const workload::Workload& w,
                       DatasetResult& out) {
  const std::string file = path.string();
  const Json doc = ReadJsonFile(path);
  if (StringField(doc, "format", file) != "kareus-device-check") {
    throw InputError(file + ": format = '" + doc["format"].dump() +
                     "': expected kareus-device-check");
  }
  const Json& wl = Field(doc, "workload", file);
  const workload::WorkloadModel model = workload::BuildWorkloadModel(w);
  const std::string measured_signature = StringField(wl, "signature", file + ".workload");
  if (measured_signature != model.workload.Signature()) {
    throw InputError(file + ": workload.signature = '" + measured_signature + "' but " +
                     out.workload + " has '" + model.workload.Signature() +
                     "': the replay must run the workload that was measured");
  }
  const Json& devices = Field(Field(doc, "nvml", file), "devices", file + ".nvml");
  if (devices.is_array() && !devices.empty()) {
    out.device = StringField(devices[0], "name", file + ".nvml.devices[0]") + ", " +
                 StringField(devices[0], "uuid", file + ".nvml.devices[0]");
  }
  hw::GpuSpec gpu = model.workload.gpu;
  hw::SetPowerLimit(gpu, NumberField(wl, "emulator_power_limit_w", file + ".workload"),
                    file + ".workload.emulator_power_limit_w");
  out.gpu = gpu.name + " (" + FormatFixed(gpu.power.cap_w, 0) + " W limit)";
  const int clock = static_cast<int>(NumberField(wl, "clock_mhz", file + ".workload"));

  // The backend's forward dropout-add draws its keep mask from a splitmix64 hash per element in
  // 64-bit integer math: compute-bound at about half the HBM bandwidth, not the bandwidth-bound
  // kernel of the workload's op model (and of Megatron's fused kernel). Its kernel rows and the
  // partitions that run it are kept out of the medians.
  const Json& kernels = Field(Field(doc, "kernels", file), "rows", file + ".kernels");
  std::vector<std::string> hashed_dropout;  // op names
  for (const Json& row : kernels) {
    if (row.contains("shape") && row["shape"].is_string() &&
        row["shape"].get<std::string>().starts_with("dropout_add ") && row.contains("op")) {
      hashed_dropout.push_back(row["op"].get<std::string>());
    }
  }
  const std::string kDropoutNote =
      "the backend's dropout_add hashes its mask in 64-bit integer math (compute-bound at ~2350 "
      "GB/s): our kernel, not the bandwidth-bound op the emulator models";
  const std::string kAttentionNote = "unfused attention (the emulator models flash attention)";
  auto hashed = [&](const std::string& op) {
    return std::find(hashed_dropout.begin(), hashed_dropout.end(), op) != hashed_dropout.end();
  };

  const Json& partitions = Field(Field(doc, "partitions", file), "rows", file + ".partitions");
  for (size_t i = 0; i < partitions.size(); ++i) {
    const Json& row = partitions[i];
    const std::string where = file + ".partitions.rows[" + std::to_string(i) + "]";
    if (row.contains("error")) continue;  // not measured
    DeviceRow r;
    r.section = RowSection::kPartition;
    r.name = StringField(row, "type", where);
    const workload::PartitionType& type = FindPartitionType(model, r.name);
    const std::string mode = StringField(row, "mode", where);
    SimResult e;
    if (mode == "compute_only") {
      e = SimulateSequential(gpu, type.compute_ops, clock, gpu.interconnect.library_default_sms);
    } else if (mode == "with_collective") {
      const Json& knobs = Field(row, "knobs", where);
      r.shape = std::to_string(static_cast<int>(NumberField(knobs, "sms", where + ".knobs"))) +
                " SMs @ " + StringField(knobs, "slot", where + ".knobs");
      e = SimulatePartition(gpu, type,
                            {.freq_mhz = clock,
                             .sms = static_cast<int>(NumberField(knobs, "sms", where + ".knobs")),
                             .slot = StringField(knobs, "slot", where + ".knobs")});
    } else {
      throw InputError(where + ".mode = '" + mode + "': valid: compute_only, with_collective");
    }
    for (const workload::Op& op : type.compute_ops) {
      if (op.kind == workload::OpKind::kAttention) {
        r.comparable = false;
        r.note = kAttentionNote;
        break;
      }
      if (hashed(op.name)) {
        r.comparable = false;
        r.note = kDropoutNote;
      }
    }
    SetMeasured(r, Field(row, "measured", where), where + ".measured");
    SetEmulated(r, e);
    FinishRow(r);
    out.rows.push_back(std::move(r));
  }

  hw::GpuSpec at_clock = gpu;
  at_clock.power.cap_w = 0.0;  // the realized clock is given
  for (size_t i = 0; i < kernels.size(); ++i) {
    const Json& row = kernels[i];
    const std::string where = file + ".kernels.rows[" + std::to_string(i) + "]";
    if (row.contains("error")) continue;
    DeviceRow r;
    r.section = RowSection::kKernel;
    const std::string type_name = StringField(row, "type", where);
    const std::string op_name = StringField(row, "op", where);
    r.name = type_name + "/" + op_name;
    r.shape = StringField(row, "shape", where);
    const workload::PartitionType& type = FindPartitionType(model, type_name);
    const auto op = std::find_if(type.compute_ops.begin(), type.compute_ops.end(),
                                 [&](const workload::Op& o) { return o.name == op_name; });
    if (op == type.compute_ops.end()) {
      throw InputError(where + ".op = '" + op_name + "': not a compute op of " + type_name);
    }
    r.comparable = !row.contains("comparable") || row.at("comparable").get<bool>();
    if (!r.comparable) {
      r.note = kAttentionNote;
    } else if (hashed(op_name)) {
      r.comparable = false;
      r.note = kDropoutNote;
    }
    r.measured_time_s = NumberField(row, "measured_time_s", where);
    r.measured_freq_mhz = NumberField(row, "realized_freq_mhz", where);
    const SimResult e =
        SimulateKernel(at_clock, *op, at_clock.sm_count, OnGrid(at_clock, r.measured_freq_mhz));
    r.emulated_time_s = e.time_s;
    r.emulated_freq_mhz = e.effective_freq_mhz;
    r.measured_energy_j = r.emulated_energy_j = kNaN;
    r.measured_power_w = r.emulated_power_w = kNaN;
    FinishRow(r);
    r.freq_error_pct = kNaN;  // set, not predicted
    out.rows.push_back(std::move(r));
  }
  out.partitions = MediansOf(out.rows, [](const DeviceRow& r) {
    return r.section == RowSection::kPartition && r.comparable;
  });
  out.partitions_not_comparable = MediansOf(out.rows, [](const DeviceRow& r) {
    return r.section == RowSection::kPartition && !r.comparable;
  });
  out.kernels = MediansOf(out.rows, [](const DeviceRow& r) {
    return r.section == RowSection::kKernel && r.comparable;
  });
}

namespace {

// "gemm bf16 MxNxK..." -> {M, N, K}; false when the load is not a GEMM of that form.
bool ParseGemmLoad(const std::string& load, int64_t* m, int64_t* n, int64_t* k) {
  long long a = 0, b = 0, c = 0;
  if (std::sscanf(load.c_str(), "gemm bf16 %lldx%lldx%lld", &a, &b, &c) != 3) return false;
  *m = a;
  *n = b;
  *k = c;
  return a > 0 && b > 0 && c > 0;
}

}  // namespace

// The power probe of scripts/device-power-probe.py (steady loads of about 4 s, power from the
// energy counter, SM clock sampled every 10 ms), each load replayed on the preset held to the
// enforced power limit, unlocked (the maximum clock), the load run back to back:
// - idle (the mean of the idle windows) against power.idle_w;
// - a bf16 GEMM C = A B (torch.matmul) as one kernel: time per step, power, realized clock;
// - the device-to-device copy as a memory-bound kernel moving its bytes;
// - the fp32 elementwise loop in L2 and the GEMM over few tiles (cuBLAS splits K over the chip)
//   are reported, not comparable: the emulator has neither an L2 nor split-K GEMMs;
// - the GEMM at ~50 % duty cycle (the GEMM, then a device sleep as long as the GEMM took at the
//   maximum clock): the emulator's power cap acts on every running kernel at once, the board's
//   on an average over longer than a millisecond burst, so the row is not comparable; beside it
//   the burst it implies, "... burst": the GEMM's own power at the maximum clock,
//   (P - (1 - d) P_idle) / d with d = 1/2, against the emulator's GEMM at that clock, unheld.
void ReplayPowerProbe(const std::filesystem::path& path, const hw::GpuSpec& preset,
                      DatasetResult& out) {
  const std::string file = path.string();
  const Json doc = ReadJsonFile(path);
  const Json& device = Field(doc, "device", file);
  out.device = StringField(device, "name", file + ".device");
  hw::GpuSpec gpu = preset;
  hw::SetPowerLimit(gpu, NumberField(device, "enforced_power_limit_w", file + ".device"),
                    file + ".device.enforced_power_limit_w");
  out.gpu = gpu.name + " (" + FormatFixed(gpu.power.cap_w, 0) + " W limit)";
  const int clock = static_cast<int>(NumberField(device, "max_sm_mhz", file + ".device"));
  hw::GpuSpec unheld = gpu;
  unheld.power.cap_w = 0.0;

  const Json& rows = Field(doc, "rows", file);
  double idle_sum = 0.0, idle_freq = 0.0;
  int idle_n = 0;
  std::vector<DeviceRow> loads;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Json& row = rows[i];
    const std::string where = file + ".rows[" + std::to_string(i) + "]";
    const std::string load = StringField(row, "load", where);
    if (load.starts_with("idle")) {
      idle_sum += NumberField(row, "power_w", where);
      idle_freq += NumberField(row, "sm_mhz_mean", where);
      ++idle_n;
      continue;
    }
    DeviceRow r;
    r.section = RowSection::kProbe;
    r.name = load;
    const double steps = NumberField(row, "steps", where);
    r.measured_time_s = NumberField(row, "device_s", where) / steps;
    r.measured_power_w = NumberField(row, "power_w", where);
    r.measured_energy_j = r.measured_power_w * r.measured_time_s;
    r.measured_freq_mhz = NumberField(row, "sm_mhz_mean", where);
    const double rate = NumberField(row, "rate", where);
    r.shape = FormatFixed(rate, 1) + " " + StringField(row, "rate_unit", where);
    int64_t m = 0, n = 0, k = 0;
    const std::string gemm_prefix = "gemm 8192^3";
    if (ParseGemmLoad(load, &m, &n, &k)) {
      const workload::Op op = workload::GemmOp("gemm", m, n, k);
      SetEmulated(r, SimulateKernel(gpu, op, gpu.sm_count, clock));
      if (op.tiles < gpu.sm_count) {
        r.comparable = false;
        r.note =
            "cuBLAS splits K over the chip; the emulator's GEMM has one tile per 128x256 of C (" +
            std::to_string(op.tiles) + " tiles)";
      }
    } else if (load.starts_with("copy d2d")) {
      // rate is GB/s of traffic (read + write), so the traffic of one step is rate x time.
      const workload::Op op = workload::MemoryOp("copy", rate * 1e9 * r.measured_time_s);
      SetEmulated(r, SimulateKernel(gpu, op, gpu.sm_count, clock));
    } else if (load.starts_with("fma fp32")) {
      // two fp32 elementwise passes (mul_, add_) over 32 MiB: 4 x 32 MiB through L2 per step.
      const workload::Op op = workload::MemoryOp("l2_fma", 4.0 * 32.0 * 1048576.0);
      SetEmulated(r, SimulateKernel(gpu, op, gpu.sm_count, clock));
      r.comparable = false;
      r.note = "L2-resident; the emulator has no L2 (it streams the bytes from HBM)";
    } else if (load.starts_with(gemm_prefix)) {
      const workload::Op op = workload::GemmOp("gemm", 8192, 8192, 8192);
      const SimResult burst = SimulateKernel(unheld, op, gpu.sm_count, clock);
      const double sleep_s = burst.time_s;  // the sleep: the GEMM's time at the maximum clock
      // The GEMM and the sleep at idle power, at the clock the preset's limit allows: held on
      // its own (CapMode::kEachSet), or the highest grid clock whose average fits (kAverage).
      auto duty = [&](const SimResult& gemm, int sleep_clock) {
        SimResult e;
        e.time_s = gemm.time_s + sleep_s;
        e.energy_j = gemm.energy_j + gpu.power.idle_w * sleep_s;
        e.avg_power_w = e.energy_j / e.time_s;
        e.effective_freq_mhz =
            (gemm.effective_freq_mhz * gemm.time_s + sleep_clock * sleep_s) / e.time_s;
        return e;
      };
      SimResult e;
      if (gpu.power.cap_mode == hw::PowerSpec::CapMode::kAverage) {
        int f = clock;
        e = duty(burst, f);
        while (e.avg_power_w > gpu.power.cap_w && f - gpu.clock.step_mhz >= gpu.clock.min_mhz) {
          f -= gpu.clock.step_mhz;
          e = duty(SimulateKernel(unheld, op, gpu.sm_count, f), f);
        }
      } else {
        e = duty(SimulateKernel(gpu, op, gpu.sm_count, clock), clock);
        r.comparable = false;
        r.note =
            "the preset holds every kernel to the limit at once (power.cap_mode each_set); "
            "the board holds an average (no cap during these ~1.4 ms bursts)";
      }
      SetEmulated(r, e);
      FinishRow(r);
      DeviceRow b;
      b.section = RowSection::kProbe;
      b.name = "gemm 8192^3 burst (derived: 2P - P_idle)";
      b.shape = "duty 1/2";
      b.measured_time_s = r.measured_time_s / 2.0;
      b.measured_power_w = 2.0 * r.measured_power_w - (idle_n ? idle_sum / idle_n : 0.0);
      b.measured_energy_j = b.measured_power_w * b.measured_time_s;
      b.measured_freq_mhz = r.measured_freq_mhz;
      SetEmulated(b, burst);
      FinishRow(b);
      loads.push_back(std::move(r));
      loads.push_back(std::move(b));
      continue;
    } else {
      throw InputError(where + ".load = '" + load +
                       "': not a load the replay knows (idle, gemm bf16 MxNxK, copy d2d, fma "
                       "fp32, gemm 8192^3 + equal sleep)");
    }
    FinishRow(r);
    loads.push_back(std::move(r));
  }
  if (idle_n == 0) throw InputError(file + ": no idle row");
  DeviceRow idle;
  idle.section = RowSection::kProbe;
  idle.name = "idle (context held)";
  idle.shape = std::to_string(idle_n) + " windows";
  idle.measured_power_w = idle_sum / idle_n;
  idle.emulated_power_w = gpu.power.idle_w;
  idle.measured_time_s = idle.emulated_time_s = kNaN;
  idle.measured_energy_j = idle.emulated_energy_j = kNaN;
  idle.measured_freq_mhz = idle_freq / idle_n;
  idle.emulated_freq_mhz = kNaN;
  FinishRow(idle);
  out.rows.push_back(std::move(idle));
  for (DeviceRow& r : loads) out.rows.push_back(std::move(r));
  out.probe = MediansOf(out.rows, [](const DeviceRow& r) { return r.comparable; });
}

}  // namespace kareus::emulator::internal
