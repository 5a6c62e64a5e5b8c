// SPDX-License-Identifier: Apache-2.0
#include "kareus/emulator/calibrate.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include "emulator/validate_internal.h"
#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/common/table.h"
#include "kareus/hw/gpu_spec.h"

namespace kareus::emulator {
namespace {

using internal::Cell;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- The parameters ------------------------------------------------------------------------

// u = (ln dynamic power, ln static power, voltage shift / 100 MHz, ln voltage rise,
// ln compute efficiency, ln memory efficiency, ln collective bandwidth, ln memory-bound
// activity): 0 is the preset.
constexpr int kParams = 8;
struct ParamSpec {
  const char* name;
  const char* meaning;
  double sigma;  // the prior's, before CalibrateOptions::prior_width
  double bound;  // |u| at most
  double step;   // forward difference
  bool log;      // the value shown is exp(u) (a scale), else 100 u (MHz)
};
constexpr ParamSpec kSpec[kParams] = {
    {"dynamic_power", "x power.dynamic_max_w", 0.3, 0.7, 0.02, true},
    {"static_power", "x power.idle_w and power.static_w", 0.2, 0.5, 0.02, true},
    {"voltage_shift", "MHz: the voltage curve moved along the clock axis", 1.0, 3.0, 0.1, false},
    {"voltage_rise", "x the voltage curve's rise above its floor", 0.3, 0.7, 0.03, true},
    {"compute_efficiency", "x gemm_efficiency and attention_efficiency", 0.2, 0.5, 0.02, true},
    {"memory_efficiency", "x hbm_efficiency", 0.2, 0.5, 0.02, true},
    {"collective_bandwidth", "x interconnect bus and channel bandwidth", 0.3, 0.7, 0.02, true},
    {"memory_bound_activity", "x activity.elementwise and activity.memory_stall", 0.3, 0.7, 0.02,
     true},
};
using Params = Eigen::Matrix<double, kParams, 1>;

// What a calibrated emulator is expected to miss, in log units (3 %): the residuals are scaled
// by it against the prior on the parameters.
constexpr double kResidualSigma = 0.03;
// The loss is Cauchy's beyond this many sigmas (9 %): a row the emulator cannot model (a kernel
// whose efficiency its stand-in misses by 30 %) pulls the constants only a little, so that what is
// fitted is the chip, not the rows that are structurally off.
constexpr double kRobustScale = 3.0;

// The residual whose square is Cauchy's loss of the scaled residual z: z near 0, sign(z) c
// sqrt(ln(1 + (z/c)^2)) beyond (smooth, so Levenberg-Marquardt runs on it as on least squares).
double Robust(double z) {
  const double q = z / kRobustScale;
  return std::copysign(kRobustScale * std::sqrt(std::log1p(q * q)), z);
}
// A dataset counts as at most this many rows, so that a 60-clock profile does not drown a
// 9-limit sweep.
constexpr int kMaxRowsPerDataset = 16;
// Without --hold-out, the rows i with i % kHoldOutEvery == kHoldOutEvery - 1 are held out.
constexpr int kHoldOutEvery = 4;

double Clamp(double x, double bound) { return std::clamp(x, -bound, bound); }

hw::GpuOverlay OverlayFromParams(const hw::GpuSpec& preset, const Params& u) {
  hw::GpuOverlay o;
  o.preset = preset.name;
  o.dynamic_max_w = preset.power.dynamic_max_w * std::exp(u(0));
  // Idle power stays below the lowest settable limit (the preset file's rule).
  const double static_scale = std::min(
      std::exp(u(1)), 0.98 * preset.power.min_limit_w / std::max(preset.power.idle_w, 1e-9));
  o.idle_w = preset.power.idle_w * static_scale;
  o.static_w = preset.power.static_w * static_scale;
  const int shift = static_cast<int>(std::lround(100.0 * u(2)));
  const double rise = std::exp(u(3));
  const double floor_v = preset.voltage_curve.front().volts;
  for (const hw::VoltagePoint& p : preset.voltage_curve) {
    o.voltage_curve.push_back(
        {std::max(1, p.freq_mhz + shift), std::max(0.05, floor_v + (p.volts - floor_v) * rise)});
  }
  // A point shifted below 1 MHz collides with the next: keep the curve ascending.
  for (size_t i = 1; i < o.voltage_curve.size(); ++i) {
    o.voltage_curve[i].freq_mhz =
        std::max(o.voltage_curve[i].freq_mhz, o.voltage_curve[i - 1].freq_mhz + 1);
  }
  o.gemm_efficiency = std::min(1.0, preset.gemm_efficiency * std::exp(u(4)));
  o.attention_efficiency = std::min(1.0, preset.attention_efficiency * std::exp(u(4)));
  o.hbm_efficiency = std::min(1.0, preset.hbm_efficiency * std::exp(u(5)));
  o.bus_bandwidth_gbps = preset.interconnect.bus_bandwidth_gbps * std::exp(u(6));
  o.channel_bandwidth_gbps = preset.interconnect.channel_bandwidth_gbps * std::exp(u(6));
  // Non-GEMM work draws at most what a GEMM draws per SM (ActivitySpec's scale).
  o.activity_elementwise = std::min(1.0, preset.activity.elementwise * std::exp(u(7)));
  o.activity_memory_stall = std::min(1.0, preset.activity.memory_stall * std::exp(u(7)));
  return o;
}

// ---- The residuals -------------------------------------------------------------------------

// One comparison of a dataset: ln(emulated / measured) (shape: of normalized values), and the
// row it belongs to (the unit of the held-out split).
struct Residual {
  int row = 0;
  double value = 0.0;
};

double LogRatio(double emulated, double measured) {
  if (!(emulated > 0.0) || !(measured > 0.0) || !std::isfinite(emulated) ||
      !std::isfinite(measured)) {
    return kNaN;
  }
  return std::log(emulated / measured);
}

void Add(std::vector<Residual>& out, int row, double value) {
  if (std::isfinite(value)) out.push_back({row, value});
}

std::vector<Residual> Residuals(const DatasetResult& d) {
  std::vector<Residual> out;
  int row = 0;
  switch (d.kind) {
    case DatasetKind::kStageProfile:
      for (const StageCurve& c : d.curves) {
        for (size_t i = 0; i < c.freqs_mhz.size(); ++i, ++row) {
          if (d.absolute) {
            Add(out, row, LogRatio(c.emulated_time_s[i], c.measured_time_s[i]));
            Add(out, row, LogRatio(c.emulated_energy_j[i], c.measured_energy_j[i]));
          } else if (i > 0) {
            Add(out, row,
                LogRatio(c.emulated_time_s[i] / c.emulated_time_s[0],
                         c.measured_time_s[i] / c.measured_time_s[0]));
            Add(out, row,
                LogRatio(c.emulated_energy_j[i] / c.emulated_energy_j[0],
                         c.measured_energy_j[i] / c.measured_energy_j[0]));
          }
        }
      }
      break;
    case DatasetKind::kPowerLimitSweep: {
      const PowerLimitPoint& top = d.limits.front();
      for (size_t i = 0; i < d.limits.size(); ++i, ++row) {
        const PowerLimitPoint& p = d.limits[i];
        if (d.absolute) {
          Add(out, row, LogRatio(p.emulated_time_s, p.measured_time_s));
          Add(out, row, LogRatio(p.emulated_energy_j, p.measured_energy_j));
        } else if (i > 0) {
          Add(out, row, LogRatio(p.emulated_time_ratio, p.measured_time_ratio));
          Add(out, row,
              LogRatio(p.emulated_energy_j / top.emulated_energy_j,
                       p.measured_energy_j / top.measured_energy_j));
        }
      }
      break;
    }
    case DatasetKind::kDeviceCheck:
    case DatasetKind::kPowerProbe:
      // Rows the emulator does not model stay out, as they stay out of validate's medians.
      for (const DeviceRow& r : d.rows) {
        if (r.comparable) {
          Add(out, row, LogRatio(r.emulated_time_s, r.measured_time_s));
          Add(out, row, LogRatio(r.emulated_energy_j, r.measured_energy_j));
          // The clock the power limit held: under a cap, a chip that draws more per clock and
          // computes more per clock runs as long at a lower clock, and only the clock tells the
          // two apart.
          Add(out, row, LogRatio(r.emulated_freq_mhz, r.measured_freq_mhz));
        }
        ++row;
      }
      break;
  }
  return out;
}

double RmsPct(const std::vector<double>& v) {
  if (v.empty()) return kNaN;
  double sq = 0.0;
  for (double x : v) sq += x * x;
  return 100.0 * std::sqrt(sq / double(v.size()));
}

// ---- The datasets --------------------------------------------------------------------------

std::filesystem::path ManifestFolder(const std::filesystem::path& data) {
  if (std::filesystem::is_directory(data)) return data;
  if (data.filename() == "datasets.yaml") return data.parent_path();
  throw InputError(data.string() +
                   ": not a folder holding datasets.yaml, nor a datasets.yaml (the manifest "
                   "lists each measured file with its kind and workload)");
}

struct Manifest {
  std::filesystem::path folder;
  std::vector<std::string> fit;  // the datasets of it that are fitted
};

bool Contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

std::optional<OptionError> CalibrateOptions::Validate() const {
  if (gpu.empty()) return OptionError{"gpu", "\"\"", "a GPU preset is required"};
  if (!(prior_width > 0.0 && prior_width <= 100.0)) {
    return OptionError{"prior_width", Describe(prior_width), "must be in (0, 100]"};
  }
  for (const std::string& name : hold_out) {
    if (!datasets.empty() && !Contains(datasets, name)) {
      return OptionError{"hold_out", name, "is not one of the datasets chosen (datasets)"};
    }
  }
  return std::nullopt;
}

GpuCalibration CalibrateGpu(const CalibrateOptions& options) {
  ThrowIfInvalid(options.Validate());
  const hw::GpuSpec preset = hw::GpuPreset(options.gpu);
  GpuCalibration out;
  out.gpu = options.gpu;

  // The preset's replay of every dataset of the GPU: which datasets there are, and the
  // "before" of every error.
  std::vector<std::filesystem::path> folders;
  for (const auto& d : options.data) folders.push_back(ManifestFolder(d));
  if (folders.empty()) folders.push_back({});  // the installed data/validation
  std::vector<Manifest> manifests;
  std::vector<std::string> seen;
  for (const std::filesystem::path& folder : folders) {
    ValidationReport report =
        ReplayDatasets({.data_dir = folder, .datasets = {}, .gpu = options.gpu, .overlays = {}});
    for (const DatasetResult& d : report.datasets) seen.push_back(d.name);
    std::erase_if(report.datasets, [&](const DatasetResult& d) {
      return !options.datasets.empty() && !Contains(options.datasets, d.name);
    });
    Manifest m{.folder = folder, .fit = {}};
    for (const DatasetResult& d : report.datasets) {
      if (!Contains(options.hold_out, d.name)) m.fit.push_back(d.name);
    }
    manifests.push_back(std::move(m));
    out.preset.push_back(std::move(report));
  }
  for (const auto& list : {options.datasets, options.hold_out}) {
    for (const std::string& name : list) {
      if (!Contains(seen, name)) {
        throw InputError("dataset " + ShownValue(name) + ": no dataset of this name measured on " +
                         options.gpu + " in the manifests given (found: " +
                         (seen.empty() ? std::string("none") : JoinNames(seen)) + ")");
      }
    }
  }
  if (seen.empty()) {
    throw InputError("no dataset measured on " + options.gpu +
                     " in the manifests given: nothing to calibrate on");
  }
  if (std::all_of(manifests.begin(), manifests.end(),
                  [](const Manifest& m) { return m.fit.empty(); })) {
    ThrowInput("hold_out", JoinNames(options.hold_out),
               "holds out every dataset chosen: nothing is left to fit");
  }
  const bool row_split = options.hold_out.empty();
  const auto fitted_row = [&](const std::string& name, int row) {
    if (Contains(options.hold_out, name)) return false;
    return !row_split || row % kHoldOutEvery != kHoldOutEvery - 1;
  };

  // The fitted residual vector at parameters u: every fitted dataset's fitted rows, scaled,
  // then the prior.
  const auto fit_residuals = [&](const Params& u) {
    const hw::GpuOverlay overlay = OverlayFromParams(preset, u);
    std::vector<double> r;
    for (const Manifest& m : manifests) {
      if (m.fit.empty()) continue;
      const ValidationReport report = ReplayDatasets(
          {.data_dir = m.folder, .datasets = m.fit, .gpu = options.gpu, .overlays = {overlay}});
      ++out.evaluations;
      for (const DatasetResult& d : report.datasets) {
        std::vector<double> mine;
        for (const Residual& x : Residuals(d)) {
          if (fitted_row(d.name, x.row)) mine.push_back(x.value);
        }
        const double weight = std::sqrt(std::min<double>(kMaxRowsPerDataset, double(mine.size())) /
                                        std::max<double>(1.0, double(mine.size())));
        for (double x : mine) r.push_back(weight * Robust(x / kResidualSigma));
      }
    }
    for (int k = 0; k < kParams; ++k) r.push_back(u(k) / (kSpec[k].sigma * options.prior_width));
    return Eigen::VectorXd(Eigen::Map<Eigen::VectorXd>(r.data(), Eigen::Index(r.size())));
  };
  const auto clamp = [](Params u) {
    for (int k = 0; k < kParams; ++k) u(k) = Clamp(u(k), kSpec[k].bound);
    u(2) = std::round(100.0 * u(2)) / 100.0;  // whole MHz
    return u;
  };

  // Levenberg-Marquardt from several starts: the preset, and the voltage curve moved both ways
  // (the power's clock trend is piecewise linear in the shift: a local search can stall at a
  // knee of the curve).
  Params best = Params::Zero();
  double best_cost = fit_residuals(best).squaredNorm();
  for (const double shift : {0.0, -1.0, 1.0}) {
    Params u = Params::Zero();
    u(2) = shift;
    Eigen::VectorXd r = fit_residuals(u);
    double cost = r.squaredNorm();
    double lambda = 1e-2;
    for (int iteration = 0; iteration < 25; ++iteration) {
      Eigen::MatrixXd jac(r.size(), kParams);
      for (int k = 0; k < kParams; ++k) {
        Params v = u;
        double h = kSpec[k].step;
        if (v(k) + h > kSpec[k].bound) h = -h;
        v(k) += h;
        jac.col(k) = (fit_residuals(v) - r) / h;
      }
      const Eigen::Matrix<double, kParams, kParams> jtj = jac.transpose() * jac;
      const Params grad = jac.transpose() * r;
      bool stepped = false, converged = false;
      for (int tries = 0; tries < 6 && !stepped; ++tries) {
        Eigen::Matrix<double, kParams, kParams> a = jtj;
        a.diagonal() += lambda * jtj.diagonal().cwiseMax(1e-9);
        const Params next = clamp(u + a.ldlt().solve(-grad));
        if ((next - u).cwiseAbs().maxCoeff() < 1e-4) break;
        const Eigen::VectorXd rn = fit_residuals(next);
        const double next_cost = rn.squaredNorm();
        if (next_cost < cost) {
          stepped = true;
          converged = (cost - next_cost) < 1e-4 * std::max(cost, 1e-300);
          u = next;
          r = rn;
          cost = next_cost;
          lambda = std::max(1e-6, lambda / 3.0);
        } else {
          lambda *= 8.0;
        }
      }
      if (!stepped || converged) break;
    }
    if (cost < best_cost) {
      best_cost = cost;
      best = u;
    }
  }

  out.overlay = OverlayFromParams(preset, best);
  std::vector<std::string> fit_names, held_names;
  for (const Manifest& m : manifests) {
    for (const std::string& name : m.fit) fit_names.push_back(name);
  }
  for (const std::string& name : options.hold_out) held_names.push_back(name);
  out.overlay.fitted_on =
      "kareus calibrate on " + JoinNames(fit_names) +
      (row_split ? " (every " + std::to_string(kHoldOutEvery) + "th row held out)"
                 : "; held out: " + JoinNames(held_names));
  for (int k = 0; k < kParams; ++k) {
    out.parameters.push_back({.name = kSpec[k].name,
                              .meaning = kSpec[k].meaning,
                              .value = kSpec[k].log ? std::exp(best(k)) : 100.0 * best(k),
                              .sigma = kSpec[k].sigma * options.prior_width});
  }

  // The errors, before and after, per dataset and pooled.
  std::vector<double> pooled[2][2];  // [fit/held][before/after]
  for (size_t i = 0; i < manifests.size(); ++i) {
    out.calibrated.push_back(ReplayDatasets({.data_dir = manifests[i].folder,
                                             .datasets = {},
                                             .gpu = options.gpu,
                                             .overlays = {out.overlay}}));
    std::erase_if(out.calibrated.back().datasets, [&](const DatasetResult& d) {
      return !options.datasets.empty() && !Contains(options.datasets, d.name);
    });
    for (size_t j = 0; j < out.preset[i].datasets.size(); ++j) {
      const DatasetResult& before = out.preset[i].datasets[j];
      const DatasetResult& after = out.calibrated[i].datasets[j];
      DatasetFit fit{.name = before.name, .manifest = manifests[i].folder, .kind = before.kind};
      std::vector<double> part[2][2];
      std::set<int> rows[2];  // the rows fitted and held out
      for (int when = 0; when < 2; ++when) {
        for (const Residual& x : Residuals(when == 0 ? before : after)) {
          const int which = fitted_row(before.name, x.row) ? 0 : 1;
          part[which][when].push_back(x.value);
          pooled[which][when].push_back(x.value);
          if (when == 0) rows[which].insert(x.row);
        }
      }
      fit.fit_rows = int(rows[0].size());
      fit.held_rows = int(rows[1].size());
      fit.fit_before_pct = RmsPct(part[0][0]);
      fit.fit_after_pct = RmsPct(part[0][1]);
      fit.held_before_pct = RmsPct(part[1][0]);
      fit.held_after_pct = RmsPct(part[1][1]);
      out.datasets.push_back(fit);
    }
  }
  out.fit_before_pct = RmsPct(pooled[0][0]);
  out.fit_after_pct = RmsPct(pooled[0][1]);
  out.held_before_pct = RmsPct(pooled[1][0]);
  out.held_after_pct = RmsPct(pooled[1][1]);
  return out;
}

namespace {

Json Number(double value) { return std::isfinite(value) ? Json(value) : Json(); }

}  // namespace

Json ToJson(const GpuCalibration& c) {
  Json params = Json::array();
  for (const CalibrationParameter& p : c.parameters) {
    params.push_back(
        {{"name", p.name}, {"meaning", p.meaning}, {"value", p.value}, {"sigma", p.sigma}});
  }
  Json datasets = Json::array();
  for (const DatasetFit& d : c.datasets) {
    datasets.push_back(
        {{"name", d.name},
         {"manifest", d.manifest.string()},
         {"kind", ToString(d.kind)},
         {"fit_rows", d.fit_rows},
         {"held_rows", d.held_rows},
         {"fit_rms_pct",
          {{"preset", Number(d.fit_before_pct)}, {"overlay", Number(d.fit_after_pct)}}},
         {"held_out_rms_pct",
          {{"preset", Number(d.held_before_pct)}, {"overlay", Number(d.held_after_pct)}}}});
  }
  Json preset = Json::array(), calibrated = Json::array();
  for (const ValidationReport& r : c.preset) preset.push_back(ToJson(r));
  for (const ValidationReport& r : c.calibrated) calibrated.push_back(ToJson(r));
  return Json{
      {"format", "kareus.calibration/1"},
      {"gpu", c.gpu},
      {"overlay", hw::ToJson(c.overlay)},
      {"parameters", params},
      {"datasets", datasets},
      {"fit_rms_pct", {{"preset", Number(c.fit_before_pct)}, {"overlay", Number(c.fit_after_pct)}}},
      {"held_out_rms_pct",
       {{"preset", Number(c.held_before_pct)}, {"overlay", Number(c.held_after_pct)}}},
      {"evaluations", c.evaluations},
      {"validation_preset", preset},
      {"validation_overlay", calibrated}};
}

std::string RenderCalibration(const GpuCalibration& c) {
  std::ostringstream out;
  out << "Calibrated " << c.gpu << ": overlay " << c.overlay.Tag() << " (" << c.evaluations
      << " replays)\n  " << c.overlay.fitted_on << "\n\n";
  Table params({"parameter", "value", "prior sigma", "meaning"});
  for (const CalibrationParameter& p : c.parameters) {
    const bool mhz = p.name == "voltage_shift";
    params.AddRow({p.name, mhz ? FormatFixed(p.value, 0) : FormatFixed(p.value, 3),
                   mhz ? FormatFixed(100.0 * p.sigma, 0) : FormatFixed(p.sigma, 2), p.meaning});
  }
  out << params.ToString() << "\n";
  out << "RMS of 100 x ln(emulated / measured) (shape datasets: normalized to the top clock or\n"
         "the highest limit), preset -> overlay:\n";
  Table table({"dataset", "kind", "fit rows", "fit %", "held-out rows", "held-out %"});
  for (const DatasetFit& d : c.datasets) {
    table.AddRow(
        {d.name, ToString(d.kind), std::to_string(d.fit_rows),
         d.fit_rows ? Cell(d.fit_before_pct, 2) + " -> " + Cell(d.fit_after_pct, 2) : "-",
         std::to_string(d.held_rows),
         d.held_rows ? Cell(d.held_before_pct, 2) + " -> " + Cell(d.held_after_pct, 2) : "-"});
  }
  table.AddRow({"all", "", "", Cell(c.fit_before_pct, 2) + " -> " + Cell(c.fit_after_pct, 2), "",
                Cell(c.held_before_pct, 2) + " -> " + Cell(c.held_after_pct, 2)});
  out << table.ToString() << "\n";
  for (size_t i = 0; i < c.preset.size() && i < c.calibrated.size(); ++i) {
    out << RenderComparison(c.preset[i], c.calibrated[i]);
  }
  return out.str();
}

}  // namespace kareus::emulator
