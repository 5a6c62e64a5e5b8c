// SPDX-License-Identifier: Apache-2.0
#include "kareus/hw/gpu_spec.h"

#include <algorithm>
#include <filesystem>

#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/common/yaml.h"

namespace kareus::hw {

bool ClockGrid::Contains(int freq_mhz) const {
  return freq_mhz >= min_mhz && freq_mhz <= max_mhz && (max_mhz - freq_mhz) % step_mhz == 0;
}

std::vector<int> ClockGrid::Supported() const {
  std::vector<int> out;
  for (int f = max_mhz; f >= min_mhz; f -= step_mhz) out.push_back(f);
  return out;
}

std::vector<int> ClockGrid::ProfileGrid() const {
  std::vector<int> out;
  for (int f = max_mhz; f >= profile_min_mhz; f -= profile_step_mhz) out.push_back(f);
  return out;
}

double GpuSpec::PeakTensorFlops(int freq_mhz) const {
  return sm_count * tensor_flops_per_clock_per_sm * freq_mhz * 1e6;
}

double GpuSpec::VoltageAt(int freq_mhz) const {
  KAREUS_CHECK(!voltage_curve.empty()) << name << ": empty voltage curve";
  if (freq_mhz <= voltage_curve.front().freq_mhz) return voltage_curve.front().volts;
  for (size_t i = 1; i < voltage_curve.size(); ++i) {
    const auto& lo = voltage_curve[i - 1];
    const auto& hi = voltage_curve[i];
    if (freq_mhz <= hi.freq_mhz) {
      const double w = double(freq_mhz - lo.freq_mhz) / double(hi.freq_mhz - lo.freq_mhz);
      return lo.volts + w * (hi.volts - lo.volts);
    }
  }
  return voltage_curve.back().volts;
}

namespace {

double Positive(const YamlMap& map, const std::string& key) {
  const double value = map.Double(key);
  if (!(value > 0.0)) map.Fail(key, Describe(value), "must be positive");
  return value;
}

double NonNegative(const YamlMap& map, const std::string& key) {
  const double value = map.Double(key);
  if (!(value >= 0.0)) map.Fail(key, Describe(value), "must not be negative");
  return value;
}

double Fraction(const YamlMap& map, const std::string& key) {
  const double value = map.Double(key);
  if (!(value > 0.0 && value <= 1.0)) map.Fail(key, Describe(value), "must be in (0, 1]");
  return value;
}

int PositiveInt(const YamlMap& map, const std::string& key) {
  const int64_t value = map.Int(key);
  if (value <= 0) map.Fail(key, Describe(value), "must be a positive integer");
  return static_cast<int>(value);
}

GpuSpec ParseGpuSpec(const std::string& text, const std::string& source) {
  const YamlMap root = YamlMap::Parse(text, source);
  GpuSpec gpu;
  gpu.name = root.String("name");
  if (root.Has("calibration")) gpu.calibration = root.String("calibration");
  gpu.sm_count = PositiveInt(root, "sm_count");

  const YamlMap clock = root.Map("clock");
  gpu.clock.min_mhz = PositiveInt(clock, "min_mhz");
  gpu.clock.max_mhz = PositiveInt(clock, "max_mhz");
  gpu.clock.step_mhz = PositiveInt(clock, "step_mhz");
  gpu.clock.default_mhz = PositiveInt(clock, "default_mhz");
  gpu.clock.profile_min_mhz = PositiveInt(clock, "profile_min_mhz");
  gpu.clock.profile_step_mhz = PositiveInt(clock, "profile_step_mhz");
  clock.RejectUnknownKeys();
  if (gpu.clock.max_mhz < gpu.clock.min_mhz) {
    clock.Fail("max_mhz", Describe(gpu.clock.max_mhz), "must be at least min_mhz");
  }
  if (!gpu.clock.Contains(gpu.clock.default_mhz)) {
    clock.Fail("default_mhz", Describe(gpu.clock.default_mhz), "must be on the clock grid");
  }
  if (gpu.clock.profile_step_mhz % gpu.clock.step_mhz != 0 ||
      !gpu.clock.Contains(gpu.clock.profile_min_mhz)) {
    clock.Fail("profile_min_mhz", Describe(gpu.clock.profile_min_mhz),
               "the profile grid must lie on the clock grid");
  }

  gpu.tensor_flops_per_clock_per_sm = Positive(root, "tensor_flops_per_clock_per_sm");
  gpu.gemm_efficiency = Fraction(root, "gemm_efficiency");
  gpu.attention_efficiency = Fraction(root, "attention_efficiency");
  gpu.hbm_bandwidth_gbps = Positive(root, "hbm_bandwidth_gbps");
  gpu.hbm_efficiency = Fraction(root, "hbm_efficiency");
  gpu.sm_memory_bandwidth_gbps = Positive(root, "sm_memory_bandwidth_gbps");

  const YamlMap power = root.Map("power");
  gpu.power.cap_w = Positive(power, "cap_w");
  gpu.power.min_limit_w =
      power.Has("min_limit_w") ? Positive(power, "min_limit_w") : gpu.power.cap_w;
  gpu.power.max_limit_w =
      power.Has("max_limit_w") ? Positive(power, "max_limit_w") : gpu.power.cap_w;
  gpu.power.idle_w = NonNegative(power, "idle_w");
  gpu.power.static_w = NonNegative(power, "static_w");
  gpu.power.dynamic_max_w = Positive(power, "dynamic_max_w");
  gpu.power.memory_w = NonNegative(power, "memory_w");
  if (power.Has("cap_mode")) {
    const std::string mode = power.String("cap_mode");
    if (mode == "average") {
      gpu.power.cap_mode = PowerSpec::CapMode::kAverage;
    } else if (mode != "each_set") {
      power.Fail("cap_mode", mode, "valid: each_set, average");
    }
  }
  power.RejectUnknownKeys();
  if (gpu.power.static_w >= gpu.power.cap_w) {
    power.Fail("static_w", Describe(gpu.power.static_w), "must be below cap_w");
  }
  if (gpu.power.idle_w >= gpu.power.min_limit_w) {
    power.Fail("idle_w", Describe(gpu.power.idle_w), "must be below min_limit_w");
  }
  if (gpu.power.min_limit_w > gpu.power.cap_w) {
    power.Fail("min_limit_w", Describe(gpu.power.min_limit_w), "must not exceed cap_w");
  }
  if (gpu.power.max_limit_w < gpu.power.cap_w) {
    power.Fail("max_limit_w", Describe(gpu.power.max_limit_w), "must be at least cap_w");
  }

  for (const YamlMap& point : root.MapList("voltage_curve")) {
    VoltagePoint vp{.freq_mhz = PositiveInt(point, "freq_mhz"), .volts = Positive(point, "volts")};
    point.RejectUnknownKeys();
    if (!gpu.voltage_curve.empty() && vp.freq_mhz <= gpu.voltage_curve.back().freq_mhz) {
      point.Fail("freq_mhz", Describe(vp.freq_mhz), "the curve must be ascending in freq_mhz");
    }
    gpu.voltage_curve.push_back(vp);
  }
  if (gpu.voltage_curve.empty()) root.Fail("voltage_curve", "[]", "needs at least one point");

  const YamlMap net = root.Map("interconnect");
  gpu.interconnect.bus_bandwidth_gbps = Positive(net, "bus_bandwidth_gbps");
  gpu.interconnect.channel_bandwidth_gbps = Positive(net, "channel_bandwidth_gbps");
  gpu.interconnect.channel_clock_exponent = NonNegative(net, "channel_clock_exponent");
  gpu.interconnect.latency_us = NonNegative(net, "latency_us");
  gpu.interconnect.inter_node_bandwidth_gbps = Positive(net, "inter_node_bandwidth_gbps");
  gpu.interconnect.inter_node_latency_us = NonNegative(net, "inter_node_latency_us");
  gpu.interconnect.library_default_sms = PositiveInt(net, "library_default_sms");
  net.RejectUnknownKeys();
  if (gpu.interconnect.library_default_sms >= gpu.sm_count) {
    net.Fail("library_default_sms", Describe(gpu.interconnect.library_default_sms),
             "must be below sm_count");
  }
  if (root.Has("activity")) {
    const YamlMap activity = root.Map("activity");
    ActivitySpec& a = gpu.activity;
    for (auto [key, field] :
         {std::pair{"gemm", &a.gemm}, std::pair{"attention", &a.attention},
          std::pair{"elementwise", &a.elementwise}, std::pair{"memory_stall", &a.memory_stall},
          std::pair{"comm", &a.comm}}) {
      if (activity.Has(key)) *field = Fraction(activity, key);
    }
    activity.RejectUnknownKeys();
  }
  if (root.Has("launch")) {
    const YamlMap launch = root.Map("launch");
    if (launch.Has("kernel_gap_us"))
      gpu.launch.kernel_gap_us = NonNegative(launch, "kernel_gap_us");
    if (launch.Has("host_launch_us")) {
      gpu.launch.host_launch_us = NonNegative(launch, "host_launch_us");
    }
    launch.RejectUnknownKeys();
  }
  root.RejectUnknownKeys();
  return gpu;
}

}  // namespace

void SetPowerLimit(GpuSpec& gpu, double watts, const std::string& field) {
  if (!(watts >= gpu.power.min_limit_w && watts <= gpu.power.max_limit_w)) {
    ThrowInput(field, Describe(watts) + " W",
               "must lie in the power-limit range of " + gpu.name + ": " +
                   Describe(gpu.power.min_limit_w) + " to " + Describe(gpu.power.max_limit_w) +
                   " W");
  }
  gpu.power.cap_w = watts;
}

GpuSpec LoadGpuSpecFile(const std::string& path) { return ParseGpuSpec(ReadTextFile(path), path); }

std::vector<std::string> GpuPresetNames() { return PresetNames("gpus"); }

GpuSpec GpuPreset(const std::string& name) {
  const auto names = GpuPresetNames();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    throw InputError("gpu = " + ShownValue(name) +
                     ": unknown GPU preset (valid: " + JoinNames(names) + ")");
  }
  GpuSpec gpu = LoadGpuSpecFile((DataDir() / "gpus" / (name + ".yaml")).string());
  if (gpu.name != name) {
    throw InputError((DataDir() / "gpus" / (name + ".yaml")).string() + ": name = " + gpu.name +
                     ": must equal the file name " + name);
  }
  return gpu;
}

}  // namespace kareus::hw
