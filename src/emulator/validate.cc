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

#include "emulator/validate_internal.h"
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

using internal::Percent;
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

}  // namespace

const char* ToString(RowSection section) {
  switch (section) {
    case RowSection::kPartition:
      return "partition";
    case RowSection::kKernel:
      return "kernel";
    case RowSection::kProbe:
      return "probe";
  }
  return "unknown";
}

const char* ToString(DatasetKind kind) {
  switch (kind) {
    case DatasetKind::kStageProfile:
      return "stage_profile";
    case DatasetKind::kPowerLimitSweep:
      return "power_limit_sweep";
    case DatasetKind::kDeviceCheck:
      return "device_check";
    case DatasetKind::kPowerProbe:
      return "power_probe";
  }
  return "unknown";
}

ValidationReport ReplayDatasets(const ReplayOptions& options) {
  const std::filesystem::path dir =
      options.data_dir.empty() ? DataDir() / "validation" : options.data_dir;
  const std::filesystem::path manifest = dir / "datasets.yaml";
  const YamlMap root = YamlMap::Parse(ReadTextFile(manifest), manifest.string());
  ValidationReport report;
  std::vector<std::string> names;
  // The overlay of `gpu`'s preset, applied; where an overlay breaks a preset rule the message
  // names the dataset.
  const auto overlay = [&](hw::GpuSpec& gpu, DatasetResult& d) {
    d.gpu_preset = gpu.name;
    for (const hw::GpuOverlay& o : options.overlays) {
      if (o.preset != gpu.name) continue;
      hw::ApplyGpuOverlay(gpu, o, manifest.string() + ": dataset " + d.name + ": overlay");
      d.overlay = o.Tag();
    }
  };
  const auto wanted = [&](const std::string& name) {
    return options.datasets.empty() || std::find(options.datasets.begin(), options.datasets.end(),
                                                 name) != options.datasets.end();
  };
  for (const YamlMap& entry : root.MapList("datasets")) {
    DatasetResult d;
    d.name = entry.String("name");
    names.push_back(d.name);
    const std::string kind = entry.String("kind");
    bool known = false;
    for (DatasetKind k : {DatasetKind::kStageProfile, DatasetKind::kPowerLimitSweep,
                          DatasetKind::kDeviceCheck, DatasetKind::kPowerProbe}) {
      if (kind == ToString(k)) {
        d.kind = k;
        known = true;
      }
    }
    d.file = entry.String("file");
    d.source = entry.String("source");
    d.calibrates = entry.Has("calibrates") ? entry.String("calibrates") : std::string();
    if (known && d.kind == DatasetKind::kPowerProbe) {
      // A microbenchmark of the GPU alone: a preset, no workload.
      const std::string preset = entry.String("gpu");
      entry.RejectUnknownKeys();
      if (!wanted(d.name) || (!options.gpu.empty() && preset != options.gpu)) continue;
      hw::GpuSpec gpu = hw::GpuPreset(preset);
      overlay(gpu, d);
      internal::ReplayPowerProbe(dir / d.file, gpu, d);
      report.datasets.push_back(std::move(d));
      continue;
    }
    d.workload = entry.String("workload");
    if (entry.Has("compare")) {
      const std::string compare = entry.String("compare");
      if (compare == "absolute") {
        d.absolute = true;
      } else if (compare != "shape") {
        entry.Fail("compare", compare, "valid: shape, absolute");
      }
    }
    entry.RejectUnknownKeys();
    if (!known) {
      entry.Fail("kind", kind,
                 "valid: stage_profile, power_limit_sweep, device_check, power_probe");
    }
    if (!wanted(d.name)) continue;
    workload::Workload w = workload::LoadWorkloadFile(dir / d.workload);
    if (!options.gpu.empty() && w.gpu.name != options.gpu) continue;
    overlay(w.gpu, d);
    d.gpu = w.gpu.name + " (" + FormatFixed(w.gpu.power.cap_w, 0) + " W limit)";
    if (d.kind == DatasetKind::kStageProfile) {
      ReplayStageProfile(dir / d.file, w, d);
    } else if (d.kind == DatasetKind::kPowerLimitSweep) {
      ReplayPowerLimitSweep(dir / d.file, w, d);
    } else {
      internal::ReplayDeviceCheck(dir / d.file, w, d);
    }
    report.datasets.push_back(std::move(d));
  }
  root.RejectUnknownKeys();
  for (const std::string& name : options.datasets) {
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      throw InputError(manifest.string() + ": no dataset named " + ShownValue(name) +
                       " (datasets: " + JoinNames(names) + ")");
    }
  }
  if (names.empty()) throw InputError(manifest.string() + ": no datasets");
  return report;
}

}  // namespace kareus::emulator
