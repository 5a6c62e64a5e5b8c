// SPDX-License-Identifier: Apache-2.0
#include "kareus/emulator/validate.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>

#include "kareus/common/csv.h"
#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/common/json.h"
#include "kareus/common/table.h"
#include "kareus/common/yaml.h"
#include "kareus/emulator/emulator.h"
#include "kareus/hw/gpu_spec.h"

namespace kareus::emulator {
namespace {

using schedule::Direction;

// The measured files: a header row naming the columns, then rows of comma-separated fields, as
// many as the header's (no quoting, no trimming in these files).
struct Csv {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;

  size_t Column(const std::string& name, const std::string& file) const {
    const auto it = std::find(header.begin(), header.end(), name);
    if (it == header.end()) {
      throw InputError(file + ": no column '" + name + "' (header: " + JoinNames(header) + ")");
    }
    return static_cast<size_t>(it - header.begin());
  }
};

Csv ReadCsv(const std::filesystem::path& path) {
  // "PATH:LINE: 3 fields, the header has 5" for a row of another length.
  std::vector<CsvRow> rows =
      ParseCsvOrThrow(ReadTextFile(path), path.string(), {.fixed_field_count = true});
  Csv csv;
  for (CsvRow& row : rows) {
    if (csv.header.empty()) {
      csv.header = std::move(row.fields);
    } else {
      csv.rows.push_back(std::move(row.fields));
    }
  }
  if (csv.rows.empty()) throw InputError(path.string() + ": no data rows");
  return csv;
}

// A number as std::stod reads it (these files were read so): ParseCsvNumber's, after leading
// spaces and a '+' sign, or a hexadecimal float ("0x1.8p3"); finite and within a double's range.
double ParseNumber(const std::string& text, const std::string& where) {
  std::string_view rest = text;
  while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.front()))) {
    rest.remove_prefix(1);
  }
  const bool negative = !rest.empty() && rest.front() == '-';
  if (!rest.empty() && (rest.front() == '+' || rest.front() == '-')) rest.remove_prefix(1);
  std::optional<double> value;
  if ((rest.starts_with("0x") || rest.starts_with("0X")) && !rest.substr(2).starts_with("+") &&
      !rest.substr(2).starts_with("-")) {
    double hex = 0.0;
    const char* end = rest.data() + rest.size();
    const auto [ptr, ec] = std::from_chars(rest.data() + 2, end, hex, std::chars_format::hex);
    if (ec == std::errc() && ptr == end && std::isfinite(hex)) value = hex;
  } else if (!rest.starts_with("+") && !rest.starts_with("-")) {
    if (const CsvNumber number = ParseCsvNumber(rest); number.ok()) value = number.value;
  }
  if (!value) throw InputError(where + " = '" + text + "': not a number");
  return negative ? -*value : *value;
}

double Percent(double value) { return 100.0 * value; }

// Least-squares fit of t = a + b x over the points (x = 1/f); {a, b}. Needs two distinct x.
std::pair<double, double> FitLine(const std::vector<double>& x, const std::vector<double>& t) {
  const double n = double(x.size());
  double mx = 0.0, mt = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    mx += x[i] / n;
    mt += t[i] / n;
  }
  double sxx = 0.0, sxt = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxt += (x[i] - mx) * (t[i] - mt);
  }
  const double b = sxx > 0.0 ? sxt / sxx : 0.0;
  return {mt - b * mx, b};
}

// StageCurve::measured_fixed_s and the rest: t(f) = a + b/f over the clocks where the measured
// power is at most 90 % of the top clock's (the GPU not held by its power limit there).
void SplitTime(StageCurve& c) {
  constexpr double kUnlimitedPowerShare = 0.9;
  std::vector<double> x, tm, te;
  for (size_t i = 0; i < c.freqs_mhz.size(); ++i) {
    const double power_w = c.measured_energy_j[i] / c.measured_time_s[i];
    if (power_w > kUnlimitedPowerShare * c.measured_top_power_w) continue;
    if (x.empty()) c.fit_top_mhz = c.freqs_mhz[i];
    x.push_back(1.0 / c.freqs_mhz[i]);
    tm.push_back(c.measured_time_s[i]);
    te.push_back(c.emulated_time_s[i]);
  }
  if (x.size() < 2) return;
  const auto [am, bm] = FitLine(x, tm);
  const auto [ae, be] = FitLine(x, te);
  c.measured_fixed_s = am;
  c.emulated_fixed_s = ae;
  c.measured_scaled_s = bm / c.fit_top_mhz;
  c.emulated_scaled_s = be / c.fit_top_mhz;
}

// The shape metrics of one curve (RMS of normalized time and energy, optimum, saving, power at
// the top clock). Clocks are descending: index 0 is the top clock.
void Score(StageCurve& c) {
  const size_t n = c.freqs_mhz.size();
  double time_sq = 0.0, energy_sq = 0.0;
  size_t meas_opt = 0, emu_opt = 0;
  for (size_t i = 0; i < n; ++i) {
    const double dt =
        c.emulated_time_s[i] / c.emulated_time_s[0] - c.measured_time_s[i] / c.measured_time_s[0];
    const double de = c.emulated_energy_j[i] / c.emulated_energy_j[0] -
                      c.measured_energy_j[i] / c.measured_energy_j[0];
    time_sq += dt * dt;
    energy_sq += de * de;
    if (c.measured_energy_j[i] < c.measured_energy_j[meas_opt]) meas_opt = i;
    if (c.emulated_energy_j[i] < c.emulated_energy_j[emu_opt]) emu_opt = i;
  }
  c.time_rms_points = Percent(std::sqrt(time_sq / double(n)));
  c.energy_rms_points = Percent(std::sqrt(energy_sq / double(n)));
  c.measured_optimal_mhz = c.freqs_mhz[meas_opt];
  c.emulated_optimal_mhz = c.freqs_mhz[emu_opt];
  c.measured_saving_pct = Percent(1.0 - c.measured_energy_j[meas_opt] / c.measured_energy_j[0]);
  c.emulated_saving_pct = Percent(1.0 - c.emulated_energy_j[emu_opt] / c.emulated_energy_j[0]);
  c.measured_top_power_w = c.measured_energy_j[0] / c.measured_time_s[0];
  c.emulated_top_power_w = c.emulated_energy_j[0] / c.emulated_time_s[0];
  c.top_power_error_pct = Percent(c.emulated_top_power_w / c.measured_top_power_w - 1.0);
  SplitTime(c);
}

// Columns stage,instruction,frequency,time,energy (Perseus's stage profiles): one sequential
// instruction per (stage, direction, clock) on the stand-in, the Megatron-style execution the
// profiles were taken with.
void ReplayStageProfile(const std::filesystem::path& csv_path, const workload::Workload& w,
                        DatasetResult& out) {
  const Csv csv = ReadCsv(csv_path);
  const size_t c_stage = csv.Column("stage", csv_path.string());
  const size_t c_instr = csv.Column("instruction", csv_path.string());
  const size_t c_freq = csv.Column("frequency", csv_path.string());
  const size_t c_time = csv.Column("time", csv_path.string());
  const size_t c_energy = csv.Column("energy", csv_path.string());
  // (stage, direction) -> clock -> (time, energy)
  std::map<std::pair<int, int>, std::map<int, std::pair<double, double>, std::greater<>>> data;
  for (size_t r = 0; r < csv.rows.size(); ++r) {
    const auto& row = csv.rows[r];
    const std::string where = csv_path.string() + " row " + std::to_string(r + 2);
    const std::string& instr = row[c_instr];
    if (instr != "forward" && instr != "backward") {
      throw InputError(where + ": instruction = '" + instr + "': valid: forward, backward");
    }
    const int stage = static_cast<int>(ParseNumber(row[c_stage], where + " stage"));
    const int freq = static_cast<int>(ParseNumber(row[c_freq], where + " frequency"));
    const double time = ParseNumber(row[c_time], where + " time");
    const double energy = ParseNumber(row[c_energy], where + " energy");
    if (!(time > 0.0 && energy > 0.0)) throw InputError(where + ": time and energy must be > 0");
    data[{stage, instr == "forward" ? 0 : 1}][freq] = {time, energy};
  }
  const workload::WorkloadModel model = workload::BuildWorkloadModel(w);
  for (const auto& [key, clocks] : data) {
    const auto [stage, dir] = key;
    if (stage < 0 || stage >= static_cast<int>(model.stages.size())) {
      throw InputError(csv_path.string() + ": stage " + std::to_string(stage) +
                       " is not a stage of the stand-in workload (pp = " +
                       std::to_string(model.stages.size()) + ")");
    }
    StageCurve curve;
    curve.stage = stage;
    curve.direction = dir == 0 ? Direction::kForward : Direction::kBackward;
    for (const auto& [freq, te] : clocks) {
      const SimResult r = SimulateInstruction(
          model, stage, curve.direction,
          {.freq_mhz = freq, .mode = ExecutionMode::kSequential, .partitions = {}});
      curve.freqs_mhz.push_back(freq);
      curve.measured_time_s.push_back(te.first);
      curve.measured_energy_j.push_back(te.second);
      curve.emulated_time_s.push_back(r.time_s);
      curve.emulated_energy_j.push_back(r.energy_j);
    }
    if (curve.freqs_mhz.size() < 2) {
      throw InputError(csv_path.string() + ": stage " + std::to_string(stage) +
                       " needs at least two clocks");
    }
    Score(curve);
    out.curves.push_back(std::move(curve));
  }
}

// Columns window_name (..._<limit W>), elapsed_time, gpu0_energy (Zeus's power-limit profiles):
// one training step (forward + backward of the single stage) per limit, unlocked at the GPU's
// default clock with its power limit set.
void ReplayPowerLimitSweep(const std::filesystem::path& csv_path, const workload::Workload& w,
                           DatasetResult& out) {
  const Csv csv = ReadCsv(csv_path);
  const size_t c_window = csv.Column("window_name", csv_path.string());
  const size_t c_time = csv.Column("elapsed_time", csv_path.string());
  size_t c_energy = csv.header.size();
  for (size_t i = 0; i < csv.header.size(); ++i) {
    if (csv.header[i].ends_with("_energy")) c_energy = i;
  }
  if (c_energy == csv.header.size()) {
    throw InputError(csv_path.string() + ": no *_energy column (header: " + JoinNames(csv.header) +
                     ")");
  }
  workload::WorkloadModel model = workload::BuildWorkloadModel(w);
  if (model.stages.size() != 1) {
    throw InputError(out.workload + ": a power-limit stand-in must have one stage (pp = 1)");
  }
  const int clock = model.workload.gpu.clock.default_mhz;
  for (size_t r = 0; r < csv.rows.size(); ++r) {
    const auto& row = csv.rows[r];
    const std::string where = csv_path.string() + " row " + std::to_string(r + 2);
    const std::string& window = row[c_window];
    const size_t underscore = window.rfind('_');
    if (underscore == std::string::npos) {
      throw InputError(where + ": window_name = '" + window + "': expected <name>_<limit W>");
    }
    PowerLimitPoint point;
    point.limit_w = ParseNumber(window.substr(underscore + 1), where + " window_name limit");
    point.measured_time_s = ParseNumber(row[c_time], where + " elapsed_time");
    point.measured_energy_j = ParseNumber(row[c_energy], where + " energy");
    hw::SetPowerLimit(model.workload.gpu, point.limit_w, where + " power limit");
    SimResult step;
    double freq_time = 0.0;
    for (Direction d : {Direction::kForward, Direction::kBackward}) {
      const SimResult r_d = SimulateInstruction(
          model, 0, d, {.freq_mhz = clock, .mode = ExecutionMode::kSequential, .partitions = {}});
      step.time_s += r_d.time_s;
      step.energy_j += r_d.energy_j;
      freq_time += r_d.effective_freq_mhz * r_d.time_s;
    }
    point.emulated_time_s = step.time_s;
    point.emulated_energy_j = step.energy_j;
    point.emulated_freq_mhz = freq_time / step.time_s;
    point.measured_power_w = point.measured_energy_j / point.measured_time_s;
    point.emulated_power_w = point.emulated_energy_j / point.emulated_time_s;
    out.limits.push_back(point);
  }
  std::sort(
      out.limits.begin(), out.limits.end(),
      [](const PowerLimitPoint& a, const PowerLimitPoint& b) { return a.limit_w > b.limit_w; });
  const PowerLimitPoint top = out.limits.front();
  for (PowerLimitPoint& p : out.limits) {
    p.measured_time_ratio = p.measured_time_s / top.measured_time_s;
    p.emulated_time_ratio = p.emulated_time_s / top.emulated_time_s;
    p.time_ratio_error_pct = Percent(p.emulated_time_ratio / p.measured_time_ratio - 1.0);
  }
}

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
    r.section = "partition";
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
    r.section = "kernel";
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
  out.partitions = MediansOf(
      out.rows, [](const DeviceRow& r) { return r.section == "partition" && r.comparable; });
  out.partitions_not_comparable = MediansOf(
      out.rows, [](const DeviceRow& r) { return r.section == "partition" && !r.comparable; });
  out.kernels =
      MediansOf(out.rows, [](const DeviceRow& r) { return r.section == "kernel" && r.comparable; });
}

// "gemm bf16 MxNxK..." -> {M, N, K}; false when the load is not a GEMM of that form.
bool ParseGemmLoad(const std::string& load, int64_t* m, int64_t* n, int64_t* k) {
  long long a = 0, b = 0, c = 0;
  if (std::sscanf(load.c_str(), "gemm bf16 %lldx%lldx%lld", &a, &b, &c) != 3) return false;
  *m = a;
  *n = b;
  *k = c;
  return a > 0 && b > 0 && c > 0;
}

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
    r.section = "probe";
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
      b.section = "probe";
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
  idle.section = "probe";
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

}  // namespace

ValidationReport Validate(const ValidateOptions& options) {
  const std::filesystem::path dir =
      options.data_dir.empty() ? DataDir() / "validation" : options.data_dir;
  const std::filesystem::path manifest = dir / "datasets.yaml";
  const YamlMap root = YamlMap::Parse(ReadTextFile(manifest), manifest.string());
  ValidationReport report;
  for (const YamlMap& entry : root.MapList("datasets")) {
    DatasetResult d;
    d.name = entry.String("name");
    d.kind = entry.String("kind");
    d.file = entry.String("file");
    d.source = entry.String("source");
    d.calibrates = entry.Has("calibrates") ? entry.String("calibrates") : std::string();
    if (d.kind == "power_probe") {
      // A microbenchmark of the GPU alone: a preset, no workload.
      const std::string preset = entry.String("gpu");
      entry.RejectUnknownKeys();
      ReplayPowerProbe(dir / d.file, hw::GpuPreset(preset), d);
      report.datasets.push_back(std::move(d));
      continue;
    }
    d.workload = entry.String("workload");
    entry.RejectUnknownKeys();
    const workload::Workload w = workload::LoadWorkloadFile(dir / d.workload);
    d.gpu = w.gpu.name + " (" + FormatFixed(w.gpu.power.cap_w, 0) + " W limit)";
    if (d.kind == "stage_profile") {
      ReplayStageProfile(dir / d.file, w, d);
    } else if (d.kind == "power_limit_sweep") {
      ReplayPowerLimitSweep(dir / d.file, w, d);
    } else if (d.kind == "device_check") {
      ReplayDeviceCheck(dir / d.file, w, d);
    } else {
      entry.Fail("kind", d.kind,
                 "valid: stage_profile, power_limit_sweep, device_check, power_probe");
    }
    report.datasets.push_back(std::move(d));
  }
  root.RejectUnknownKeys();
  if (report.datasets.empty()) throw InputError(manifest.string() + ": no datasets");
  return report;
}

Json ToJson(const ValidationReport& report) {
  Json datasets = Json::array();
  for (const DatasetResult& d : report.datasets) {
    Json j{{"name", d.name},
           {"kind", d.kind},
           {"file", d.file},
           {"source", d.source},
           {"workload", d.workload},
           {"gpu", d.gpu},
           {"calibrates", d.calibrates}};
    if (d.kind == "stage_profile") {
      Json curves = Json::array();
      for (const StageCurve& c : d.curves) {
        curves.push_back({{"stage", c.stage},
                          {"instruction", schedule::ToString(c.direction)},
                          {"freqs_mhz", c.freqs_mhz},
                          {"measured_time_s", c.measured_time_s},
                          {"measured_energy_j", c.measured_energy_j},
                          {"emulated_time_s", c.emulated_time_s},
                          {"emulated_energy_j", c.emulated_energy_j},
                          {"time_rms_points", c.time_rms_points},
                          {"energy_rms_points", c.energy_rms_points},
                          {"measured_optimal_mhz", c.measured_optimal_mhz},
                          {"emulated_optimal_mhz", c.emulated_optimal_mhz},
                          {"measured_saving_pct", c.measured_saving_pct},
                          {"emulated_saving_pct", c.emulated_saving_pct},
                          {"measured_top_power_w", c.measured_top_power_w},
                          {"emulated_top_power_w", c.emulated_top_power_w},
                          {"top_power_error_pct", c.top_power_error_pct},
                          {"fit_top_mhz", c.fit_top_mhz},
                          {"measured_fixed_s", c.measured_fixed_s},
                          {"emulated_fixed_s", c.emulated_fixed_s},
                          {"measured_scaled_s", c.measured_scaled_s},
                          {"emulated_scaled_s", c.emulated_scaled_s}});
      }
      j["curves"] = curves;
    } else if (d.kind == "device_check" || d.kind == "power_probe") {
      j["device"] = d.device;
      Json rows = Json::array();
      for (const DeviceRow& r : d.rows) {
        rows.push_back({{"section", r.section},
                        {"name", r.name},
                        {"shape", r.shape},
                        {"comparable", r.comparable},
                        {"note", r.note},
                        {"measured",
                         {{"time_s", r.measured_time_s},
                          {"energy_j", r.measured_energy_j},
                          {"avg_power_w", r.measured_power_w},
                          {"realized_freq_mhz", r.measured_freq_mhz}}},
                        {"emulated",
                         {{"time_s", r.emulated_time_s},
                          {"energy_j", r.emulated_energy_j},
                          {"avg_power_w", r.emulated_power_w},
                          {"realized_freq_mhz", r.emulated_freq_mhz}}},
                        {"error_pct",
                         {{"time", r.time_error_pct},
                          {"energy", r.energy_error_pct},
                          {"avg_power", r.power_error_pct},
                          {"realized_freq", r.freq_error_pct}}}});
      }
      j["rows"] = rows;
      auto medians = [](const DeviceMedians& m) {
        return Json{{"rows", m.rows},
                    {"time_pct", m.time_pct},
                    {"energy_pct", m.energy_pct},
                    {"avg_power_pct", m.power_pct},
                    {"realized_freq_pct", m.freq_pct}};
      };
      if (d.kind == "device_check") {
        j["median_abs_error"] = {
            {"partitions", medians(d.partitions)},
            {"partitions_not_comparable", medians(d.partitions_not_comparable)},
            {"kernels", medians(d.kernels)}};
      } else {
        j["median_abs_error"] = {{"loads", medians(d.probe)}};
      }
    } else {
      Json limits = Json::array();
      for (const PowerLimitPoint& p : d.limits) {
        limits.push_back({{"limit_w", p.limit_w},
                          {"measured_time_s", p.measured_time_s},
                          {"measured_energy_j", p.measured_energy_j},
                          {"emulated_time_s", p.emulated_time_s},
                          {"emulated_energy_j", p.emulated_energy_j},
                          {"measured_time_ratio", p.measured_time_ratio},
                          {"emulated_time_ratio", p.emulated_time_ratio},
                          {"time_ratio_error_pct", p.time_ratio_error_pct},
                          {"measured_power_w", p.measured_power_w},
                          {"emulated_power_w", p.emulated_power_w},
                          {"emulated_freq_mhz", p.emulated_freq_mhz}});
      }
      j["limits"] = limits;
    }
    datasets.push_back(j);
  }
  return Json{{"format", "kareus.validation/1"}, {"datasets", datasets}};
}

namespace {

std::string Cell(double value, int decimals) {
  return std::isfinite(value) ? FormatFixed(value, decimals) : std::string("-");
}

std::string MediansLine(const DeviceMedians& m) {
  return std::to_string(m.rows) + " rows: time " + Cell(m.time_pct, 1) + " %, energy " +
         Cell(m.energy_pct, 1) + " %, power " + Cell(m.power_pct, 1) + " %, clock " +
         Cell(m.freq_pct, 1) + " %";
}

void RenderDeviceRows(const DatasetResult& d, std::ostringstream& out) {
  out << d.name << ": " << d.file << ", measured on " << d.device << ", emulated on " << d.gpu
      << (d.workload.empty() ? std::string() : ", workload " + d.workload) << "\n";
  out << "  source: " << d.source << "\n";
  out << "  calibrated: " << (d.calibrates.empty() ? "nothing (validation only)" : d.calibrates)
      << "\n";
  Table table({"section", "name", "shape", "t_us", "emu_t_us", "t_err_%", "E_err_%", "P_w",
               "emu_P_w", "P_err_%", "mhz", "emu_mhz", "f_err_%"});
  std::vector<std::string> notes;
  for (const DeviceRow& r : d.rows) {
    std::string name = r.name;
    if (!r.comparable) {
      const auto it = std::find(notes.begin(), notes.end(), r.note);
      const size_t index = static_cast<size_t>(it - notes.begin());
      if (it == notes.end()) notes.push_back(r.note);
      name += " *" + std::to_string(index + 1);
    }
    table.AddRow(
        {r.section, name, r.shape, Cell(1e6 * r.measured_time_s, 1),
         Cell(1e6 * r.emulated_time_s, 1), Cell(r.time_error_pct, 1), Cell(r.energy_error_pct, 1),
         Cell(r.measured_power_w, 0), Cell(r.emulated_power_w, 0), Cell(r.power_error_pct, 1),
         Cell(r.measured_freq_mhz, 0), Cell(r.emulated_freq_mhz, 0), Cell(r.freq_error_pct, 1)});
  }
  out << table.ToString();
  for (size_t i = 0; i < notes.size(); ++i) {
    out << "  *" << i + 1 << " not comparable, out of the medians: " << notes[i] << "\n";
  }
  out << "  median |error|";
  if (d.kind == "device_check") {
    out << ", partitions: " << MediansLine(d.partitions) << "\n";
    out << "  median |error|, partitions not comparable (*): "
        << MediansLine(d.partitions_not_comparable) << "\n";
    out << "  median |error|, kernels (at their realized clock, time only): "
        << MediansLine(d.kernels) << "\n";
  } else {
    out << ", loads: " << MediansLine(d.probe) << "\n";
  }
  out << "\n";
}

}  // namespace

std::string RenderValidation(const ValidationReport& report) {
  std::ostringstream out;
  for (const DatasetResult& d : report.datasets) {
    if (d.kind == "device_check" || d.kind == "power_probe") {
      RenderDeviceRows(d, out);
      continue;
    }
    out << d.name << ": " << d.file << " on " << d.gpu << ", stand-in " << d.workload << "\n";
    out << "  source: " << d.source << "\n";
    out << "  calibrated: " << (d.calibrates.empty() ? "nothing (validation only)" : d.calibrates)
        << "\n";
    if (d.kind == "stage_profile") {
      Table table({"stage", "instr", "time_rms_pt", "energy_rms_pt", "opt_mhz", "emu_opt_mhz",
                   "saving_%", "emu_saving_%", "P_top_w", "emu_P_top_w", "P_top_err_%", "fit_mhz",
                   "fixed_ms", "emu_fixed_ms", "scaled_ms", "emu_scaled_ms"});
      for (const StageCurve& c : d.curves) {
        table.AddRow(
            {std::to_string(c.stage), schedule::ToString(c.direction),
             FormatFixed(c.time_rms_points, 2), FormatFixed(c.energy_rms_points, 2),
             std::to_string(c.measured_optimal_mhz), std::to_string(c.emulated_optimal_mhz),
             FormatFixed(c.measured_saving_pct, 1), FormatFixed(c.emulated_saving_pct, 1),
             FormatFixed(c.measured_top_power_w, 0), FormatFixed(c.emulated_top_power_w, 0),
             FormatFixed(c.top_power_error_pct, 1), std::to_string(c.fit_top_mhz),
             FormatFixed(1e3 * c.measured_fixed_s, 1), FormatFixed(1e3 * c.emulated_fixed_s, 1),
             FormatFixed(1e3 * c.measured_scaled_s, 1), FormatFixed(1e3 * c.emulated_scaled_s, 1)});
      }
      out << table.ToString();
    } else {
      Table table({"limit_w", "time_ratio", "emu_time_ratio", "ratio_err_%", "power_w",
                   "emu_power_w", "emu_mhz"});
      for (const PowerLimitPoint& p : d.limits) {
        table.AddRow({FormatFixed(p.limit_w, 0), FormatFixed(p.measured_time_ratio, 3),
                      FormatFixed(p.emulated_time_ratio, 3), FormatFixed(p.time_ratio_error_pct, 1),
                      FormatFixed(p.measured_power_w, 0), FormatFixed(p.emulated_power_w, 0),
                      FormatFixed(p.emulated_freq_mhz, 0)});
      }
      out << table.ToString();
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace kareus::emulator
