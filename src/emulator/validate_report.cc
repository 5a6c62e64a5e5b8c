// SPDX-License-Identifier: Apache-2.0
// kareus validate's report: validation.json (ToJson) and the terminal tables (RenderValidation).
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "emulator/validate_internal.h"
#include "kareus/common/json.h"
#include "kareus/common/table.h"
#include "kareus/emulator/validate.h"

namespace kareus::emulator {

Json ToJson(const ValidationReport& report) {
  Json datasets = Json::array();
  for (const DatasetResult& d : report.datasets) {
    Json j{{"name", d.name},
           {"kind", ToString(d.kind)},
           {"file", d.file},
           {"source", d.source},
           {"workload", d.workload},
           {"gpu", d.gpu},
           {"calibrates", d.calibrates}};
    // Replayed with refitted constants (kareus validate --gpu-overlay); absent: the preset.
    if (!d.overlay.empty()) j["overlay"] = d.overlay;
    if (d.absolute) j["compare"] = "absolute";
    if (d.kind == DatasetKind::kStageProfile) {
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
    } else if (d.kind == DatasetKind::kDeviceCheck || d.kind == DatasetKind::kPowerProbe) {
      j["device"] = d.device;
      Json rows = Json::array();
      for (const DeviceRow& r : d.rows) {
        rows.push_back({{"section", ToString(r.section)},
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
      if (d.kind == DatasetKind::kDeviceCheck) {
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

std::string internal::Cell(double value, int decimals) {
  return std::isfinite(value) ? FormatFixed(value, decimals) : std::string("-");
}

namespace {

using internal::Cell;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// validate's headline metrics of one dataset: (metric, measured, emulated) rows.
struct Metric {
  std::string name;
  double measured = kNaN;
  double emulated = kNaN;
};

std::vector<Metric> Headline(const DatasetResult& d) {
  std::vector<Metric> out;
  switch (d.kind) {
    case DatasetKind::kStageProfile:
      for (const StageCurve& c : d.curves) {
        const std::string at =
            "stage " + std::to_string(c.stage) + " " + schedule::ToString(c.direction) + " ";
        out.push_back({at + "saving %", c.measured_saving_pct, c.emulated_saving_pct});
        out.push_back(
            {at + "optimum MHz", double(c.measured_optimal_mhz), double(c.emulated_optimal_mhz)});
        out.push_back({at + "time RMS pt", kNaN, c.time_rms_points});
        out.push_back({at + "energy RMS pt", kNaN, c.energy_rms_points});
        out.push_back({at + "P top W", c.measured_top_power_w, c.emulated_top_power_w});
      }
      break;
    case DatasetKind::kPowerLimitSweep: {
      double worst = 0.0;
      for (const PowerLimitPoint& p : d.limits) {
        out.push_back({"time ratio at " + FormatFixed(p.limit_w, 0) + " W", p.measured_time_ratio,
                       p.emulated_time_ratio});
        worst = std::max(worst, std::abs(p.time_ratio_error_pct));
      }
      out.push_back({"worst |ratio error| %", kNaN, worst});
      break;
    }
    case DatasetKind::kDeviceCheck:
    case DatasetKind::kPowerProbe: {
      const DeviceMedians& m = d.kind == DatasetKind::kPowerProbe ? d.probe : d.partitions;
      const std::string of = d.kind == DatasetKind::kPowerProbe ? "loads" : "partitions";
      out.push_back({of + " median |time err| %", kNaN, m.time_pct});
      out.push_back({of + " median |energy err| %", kNaN, m.energy_pct});
      out.push_back({of + " median |power err| %", kNaN, m.power_pct});
      if (d.kind == DatasetKind::kDeviceCheck) {
        out.push_back({"kernels median |time err| %", kNaN, d.kernels.time_pct});
      }
      break;
    }
  }
  return out;
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
  if (!d.overlay.empty()) out << "  with the overlay " << d.overlay << "\n";
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
        {ToString(r.section), name, r.shape, Cell(1e6 * r.measured_time_s, 1),
         Cell(1e6 * r.emulated_time_s, 1), Cell(r.time_error_pct, 1), Cell(r.energy_error_pct, 1),
         Cell(r.measured_power_w, 0), Cell(r.emulated_power_w, 0), Cell(r.power_error_pct, 1),
         Cell(r.measured_freq_mhz, 0), Cell(r.emulated_freq_mhz, 0), Cell(r.freq_error_pct, 1)});
  }
  out << table.ToString();
  for (size_t i = 0; i < notes.size(); ++i) {
    out << "  *" << i + 1 << " not comparable, out of the medians: " << notes[i] << "\n";
  }
  out << "  median |error|";
  if (d.kind == DatasetKind::kDeviceCheck) {
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
    if (d.kind == DatasetKind::kDeviceCheck || d.kind == DatasetKind::kPowerProbe) {
      RenderDeviceRows(d, out);
      continue;
    }
    out << d.name << ": " << d.file << " on " << d.gpu << ", stand-in " << d.workload << "\n";
    out << "  source: " << d.source << "\n";
    out << "  calibrated: " << (d.calibrates.empty() ? "nothing (validation only)" : d.calibrates)
        << "\n";
    if (!d.overlay.empty()) out << "  with the overlay " << d.overlay << "\n";
    if (d.kind == DatasetKind::kStageProfile) {
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

std::string RenderComparison(const ValidationReport& preset, const ValidationReport& overlay) {
  std::ostringstream out;
  for (const DatasetResult& before : preset.datasets) {
    const auto it = std::find_if(overlay.datasets.begin(), overlay.datasets.end(),
                                 [&](const DatasetResult& d) { return d.name == before.name; });
    if (it == overlay.datasets.end()) continue;
    out << before.name << " (" << ToString(before.kind) << ", " << before.gpu_preset
        << "): the preset against the overlay " << it->overlay << "\n";
    Table table({"metric", "measured", "preset", "overlay"});
    const std::vector<Metric> a = Headline(before), b = Headline(*it);
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      table.AddRow(
          {a[i].name, Cell(a[i].measured, 2), Cell(a[i].emulated, 2), Cell(b[i].emulated, 2)});
    }
    out << table.ToString() << "\n";
  }
  return out.str();
}

}  // namespace kareus::emulator
