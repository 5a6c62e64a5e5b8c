// SPDX-License-Identifier: Apache-2.0
#include "kareus/hw/gpu_overlay.h"

#include <cinttypes>
#include <cstdio>
#include <sstream>
#include <utility>

#include "kareus/common/context.h"
#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/common/yaml.h"

namespace kareus::hw {
namespace {

constexpr const char* kFormat = "kareus.gpu_overlay/1";

// The scalar constants an overlay may set: its key, the overlay's field, the preset's field.
struct Scalar {
  const char* key;
  std::optional<double> GpuOverlay::*field;
  double& (*of)(GpuSpec&);
};

const Scalar kScalars[] = {
    {"dynamic_max_w", &GpuOverlay::dynamic_max_w,
     [](GpuSpec& g) -> double& { return g.power.dynamic_max_w; }},
    {"idle_w", &GpuOverlay::idle_w, [](GpuSpec& g) -> double& { return g.power.idle_w; }},
    {"static_w", &GpuOverlay::static_w, [](GpuSpec& g) -> double& { return g.power.static_w; }},
    {"memory_w", &GpuOverlay::memory_w, [](GpuSpec& g) -> double& { return g.power.memory_w; }},
    {"gemm_efficiency", &GpuOverlay::gemm_efficiency,
     [](GpuSpec& g) -> double& { return g.gemm_efficiency; }},
    {"attention_efficiency", &GpuOverlay::attention_efficiency,
     [](GpuSpec& g) -> double& { return g.attention_efficiency; }},
    {"hbm_efficiency", &GpuOverlay::hbm_efficiency,
     [](GpuSpec& g) -> double& { return g.hbm_efficiency; }},
    {"bus_bandwidth_gbps", &GpuOverlay::bus_bandwidth_gbps,
     [](GpuSpec& g) -> double& { return g.interconnect.bus_bandwidth_gbps; }},
    {"channel_bandwidth_gbps", &GpuOverlay::channel_bandwidth_gbps,
     [](GpuSpec& g) -> double& { return g.interconnect.channel_bandwidth_gbps; }},
    {"activity_elementwise", &GpuOverlay::activity_elementwise,
     [](GpuSpec& g) -> double& { return g.activity.elementwise; }},
    {"activity_memory_stall", &GpuOverlay::activity_memory_stall,
     [](GpuSpec& g) -> double& { return g.activity.memory_stall; }},
};

bool IsFraction(const char* key) {
  const std::string k = key;
  return k.ends_with("_efficiency");
}

// Full precision, shortest form ("540", "0.80125").
std::string Number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.10g", value);
  return buffer;
}

}  // namespace

bool GpuOverlay::Empty() const {
  for (const Scalar& s : kScalars) {
    if ((this->*s.field).has_value()) return false;
  }
  return voltage_curve.empty();
}

std::string GpuOverlay::Tag() const {
  std::ostringstream text;
  text << preset;
  for (const Scalar& s : kScalars) {
    if ((this->*s.field).has_value()) text << ";" << s.key << "=" << Number(*(this->*s.field));
  }
  for (const VoltagePoint& p : voltage_curve) text << ";v" << p.freq_mhz << "=" << Number(p.volts);
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "overlay-%012" PRIx64,
                static_cast<uint64_t>(HashString(text.str().c_str()) & 0xffffffffffffULL));
  return buffer;
}

GpuOverlay ParseGpuOverlay(const YamlMap& map) {
  GpuOverlay overlay;
  if (map.Has("format")) {
    const std::string format = map.String("format");
    if (format != kFormat) map.Fail("format", format, std::string("must be ") + kFormat);
  }
  overlay.preset = map.String("preset");
  if (map.Has("fitted_on")) overlay.fitted_on = map.String("fitted_on");
  if (map.Has("tag")) map.String("tag");  // what ToJson writes; recomputed, never trusted
  const YamlMap constants = map.Map("constants");
  for (const Scalar& s : kScalars) {
    if (!constants.Has(s.key)) continue;
    const double value = constants.Double(s.key);
    if (IsFraction(s.key) ? !(value > 0.0 && value <= 1.0) : !(value > 0.0)) {
      constants.Fail(s.key, Describe(value),
                     IsFraction(s.key) ? "must be in (0, 1]" : "must be positive");
    }
    overlay.*s.field = value;
  }
  if (constants.Has("voltage_curve")) {
    for (const YamlMap& point : constants.MapList("voltage_curve")) {
      const int64_t f = point.Int("freq_mhz");
      const double v = point.Double("volts");
      point.RejectUnknownKeys();
      if (f <= 0) point.Fail("freq_mhz", Describe(f), "must be a positive integer");
      if (!(v > 0.0)) point.Fail("volts", Describe(v), "must be positive");
      if (!overlay.voltage_curve.empty() && f <= overlay.voltage_curve.back().freq_mhz) {
        point.Fail("freq_mhz", Describe(f), "the curve must be ascending in freq_mhz");
      }
      overlay.voltage_curve.push_back({static_cast<int>(f), v});
    }
    if (overlay.voltage_curve.empty()) {
      constants.Fail("voltage_curve", "[]", "needs at least one point (or leave it out)");
    }
  }
  constants.RejectUnknownKeys();
  map.RejectUnknownKeys();
  if (overlay.Empty()) map.Fail("constants", "{}", "sets no constant");
  return overlay;
}

GpuOverlay LoadGpuOverlayFile(const std::filesystem::path& path) {
  return ParseGpuOverlay(YamlMap::Parse(ReadTextFile(path), path.string()));
}

std::string GpuOverlayToYaml(const GpuOverlay& overlay, const GpuSpec* preset) {
  std::ostringstream out;
  out << "# A GPU overlay (kareus calibrate): the preset's constants refitted to measurements.\n"
      << "# Name it in a workload (gpu: {name: " << overlay.preset
      << ", overlay: THIS_FILE}) or with --gpu-overlay.\n"
      << "format: " << kFormat << "\n"
      << "preset: " << overlay.preset << "\n";
  // A JSON string is a YAML string: quoted and escaped.
  if (!overlay.fitted_on.empty()) out << "fitted_on: " << Json(overlay.fitted_on).dump() << "\n";
  out << "# tag " << overlay.Tag() << "\n"
      << "constants:\n";
  for (const Scalar& s : kScalars) {
    if (!(overlay.*s.field).has_value()) continue;
    out << "  " << s.key << ": " << Number(*(overlay.*s.field));
    if (preset != nullptr) {
      GpuSpec copy = *preset;
      const double was = s.of(copy);
      out << "  # preset " << Number(was);
      if (was > 0.0) {
        char scale[32];
        std::snprintf(scale, sizeof scale, " (x%.3f)", *(overlay.*s.field) / was);
        out << scale;
      }
    }
    out << "\n";
  }
  if (!overlay.voltage_curve.empty()) {
    out << "  voltage_curve:";
    if (preset != nullptr) {
      out << "  # preset:";
      for (const VoltagePoint& p : preset->voltage_curve) {
        out << " " << p.freq_mhz << "/" << Number(p.volts);
      }
    }
    out << "\n";
    for (const VoltagePoint& p : overlay.voltage_curve) {
      out << "    - {freq_mhz: " << p.freq_mhz << ", volts: " << Number(p.volts) << "}\n";
    }
  }
  return out.str();
}

Json ToJson(const GpuOverlay& overlay) {
  Json constants = Json::object();
  for (const Scalar& s : kScalars) {
    if ((overlay.*s.field).has_value()) constants[s.key] = *(overlay.*s.field);
  }
  if (!overlay.voltage_curve.empty()) {
    Json curve = Json::array();
    for (const VoltagePoint& p : overlay.voltage_curve) {
      curve.push_back({{"freq_mhz", p.freq_mhz}, {"volts", p.volts}});
    }
    constants["voltage_curve"] = curve;
  }
  Json j{{"format", kFormat}, {"preset", overlay.preset}, {"tag", overlay.Tag()}};
  if (!overlay.fitted_on.empty()) j["fitted_on"] = overlay.fitted_on;
  j["constants"] = constants;
  return j;
}

void ApplyGpuOverlay(GpuSpec& gpu, const GpuOverlay& overlay, const std::string& where) {
  if (overlay.preset != gpu.name) {
    ThrowInput(where + ": preset", overlay.preset,
               "the overlay adjusts another GPU; the workload's GPU is " + gpu.name);
  }
  GpuSpec out = gpu;
  for (const Scalar& s : kScalars) {
    if ((overlay.*s.field).has_value()) s.of(out) = *(overlay.*s.field);
  }
  if (!overlay.voltage_curve.empty()) out.voltage_curve = overlay.voltage_curve;
  // The rules of a preset file that a constant of the overlay could break.
  if (out.power.idle_w >= out.power.min_limit_w) {
    ThrowInput(where + ": constants.idle_w", Describe(out.power.idle_w),
               "must be below the board's min_limit_w (" + Describe(out.power.min_limit_w) + " W)");
  }
  if (out.power.static_w >= out.power.cap_w) {
    ThrowInput(where + ": constants.static_w", Describe(out.power.static_w),
               "must be below the power limit (" + Describe(out.power.cap_w) + " W)");
  }
  out.calibration = out.calibration.empty() ? overlay.Tag() : out.calibration + "+" + overlay.Tag();
  gpu = std::move(out);
}

}  // namespace kareus::hw
