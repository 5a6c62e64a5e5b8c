// SPDX-License-Identifier: Apache-2.0
// `kareus device-check` on the fake device layer and the fake NVML: every section, the side by
// side comparison with the emulator, and a report that stays complete when parts fail.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "kareus/emulator/emulator.h"
#include "kareus/measure/device_check.h"
#include "kareus/workload/workload.h"
#include "measure/cuda/device_check_internal.h"
#include "measure/cuda/fake_device.h"

namespace kareus::measure {
namespace {

using testing::FakeConfig;
using testing::FakeSystem;

std::filesystem::path Workload() {
  const char* dir = std::getenv("KAREUS_SOURCE_DIR");
  return std::filesystem::path(dir ? dir : ".") / "examples" / "device" /
         "llama3.2-3b-tp8-h200.yaml";
}

internal::DeviceCheckEnv Env(int devices) {
  internal::DeviceCheckEnv env;
  env.open_system = [devices] {
    FakeConfig config;
    config.devices = devices;
    config.counter_period_s = 0.02;
    config.power_limit_w = 600.0;  // below the preset's 700 W default: the emulator follows it
    return std::make_unique<FakeSystem>(config);
  };
  env.open_nvml = [] { return device::Nvml::Open({.library_path = KAREUS_FAKE_NVML_PATH}); };
  return env;
}

DeviceCheckOptions Options() {
  DeviceCheckOptions o;
  o.workload = Workload();
  o.window_s = 0.5;
  o.cooldown_s = 0.1;
  o.kernel_runs = 5;
  return o;
}

TEST(DeviceCheck, OneGpuMeasuresEverySectionBesideTheEmulator) {
  const Json report = internal::RunDeviceCheck(Options(), Env(1));
  for (const char* name : {"nvml", "cuda", "energy_counter", "workload", "kernels", "partitions",
                           "energy_window", "nccl"}) {
    ASSERT_TRUE(report.contains(name)) << name;
    EXPECT_EQ(report[name]["status"], "ok") << name << ": " << report[name].dump();
  }
  EXPECT_EQ(report["format"], "kareus-device-check");
  EXPECT_EQ(report["nvml"]["devices"].size(), 2u);  // the fake NVML's two GPUs
  EXPECT_EQ(report["nvml"]["devices"][0]["name"], "Fake H100 0");
  EXPECT_EQ(report["nvml"]["devices"][0]["supported_sm_clocks_mhz"]["max"], 1980);
  EXPECT_NEAR(report["energy_counter"]["update_period_s"].get<double>(), 0.02, 1e-3);
  EXPECT_NEAR(report["energy_counter"]["idle_power_w"].get<double>(), 80.0, 1.0);

  EXPECT_EQ(report["workload"]["emulator_power_limit_w"], 600.0);  // the fake device's limit
  EXPECT_EQ(report["workload"]["emulator_power_limit_note"], "the device's enforced power limit");
  const auto model = workload::BuildWorkloadModel(workload::LoadWorkloadFile(Workload()));
  hw::GpuSpec held = model.workload.gpu;
  hw::SetPowerLimit(held, 600.0);
  const Json& partitions = report["partitions"];
  EXPECT_EQ(partitions["rows"].size(), model.partition_types.size());  // compute only: 1 GPU of 8
  EXPECT_THAT(partitions["with_collective"].get<std::string>(),
              ::testing::HasSubstr("need up to 8 GPUs"));
  for (const Json& row : partitions["rows"]) {
    EXPECT_EQ(row["mode"], "compute_only");
    const double measured = row["measured"]["time_s"].get<double>();
    const double emulated = row["emulated"]["time_s"].get<double>();
    EXPECT_GT(measured, 0.0);
    EXPECT_DOUBLE_EQ(row["rel_error"]["time"].get<double>(), (emulated - measured) / measured);
    const auto& type = model.Type(row["type"].get<std::string>());
    EXPECT_DOUBLE_EQ(emulated, emulator::SimulateSequential(held, type.compute_ops, 1980,
                                                            held.interconnect.library_default_sms)
                                   .time_s);
  }
  bool attention = false;
  for (const Json& row : report["kernels"]["rows"]) {
    EXPECT_GT(row["measured_time_s"].get<double>(), 0.0) << row.dump();
    if (row["kind"] == "attention") {
      attention = true;
      EXPECT_FALSE(row["comparable"].get<bool>());
    }
  }
  EXPECT_TRUE(attention);
  EXPECT_EQ(report["nccl"]["rows"].size(), 1u);  // one rank: plumbing only
  EXPECT_TRUE(report["nccl"]["rows"][0].contains("note"));
  EXPECT_LT(std::abs(report["energy_window"]["rel_difference_energy"].get<double>()), 0.01);
  const std::string text = FormatDeviceCheck(report);
  EXPECT_THAT(text, ::testing::HasSubstr("partitions: measured vs emulated (ok)"));
  EXPECT_THAT(text, ::testing::HasSubstr("fwd_attn"));
}

TEST(DeviceCheck, EightGpusAlsoMeasureWholePartitionsAndBandwidth) {
  const Json report = internal::RunDeviceCheck(Options(), Env(8));
  int with_collective = 0;
  for (const Json& row : report["partitions"]["rows"]) {
    if (row["mode"] != "with_collective") continue;
    ++with_collective;
    EXPECT_TRUE(row.contains("rel_error")) << row.dump();
  }
  // Three SM counts for each of the four tunable types, the fixed knobs of the two trail types.
  EXPECT_EQ(with_collective, 4 * 3 + 2);
  ASSERT_EQ(report["nccl"]["rows"].size(), 5u);
  for (const Json& row : report["nccl"]["rows"]) {
    EXPECT_EQ(row["ranks"], 8);
    EXPECT_GT(row["bus_bandwidth_gbps"].get<double>(), 0.0);
    EXPECT_TRUE(row.contains("emulated_time_s"));
  }
}

TEST(DeviceCheck, AFailingMachineStillGivesACompleteReport) {
  internal::DeviceCheckEnv env;
  env.open_system = []() -> std::unique_ptr<internal::DeviceSystem> {
    throw EnvironmentError("no NVIDIA driver on this machine");
  };
  env.open_nvml = []() -> std::shared_ptr<device::Nvml> {
    throw EnvironmentError("cannot load NVML");
  };
  DeviceCheckOptions options = Options();
  std::vector<size_t> sizes;  // the report saved after each section, growing
  options.on_section = [&](const Json& partial) { sizes.push_back(partial.size()); };
  const Json report = internal::RunDeviceCheck(options, env);
  ASSERT_EQ(sizes.size(), 8u);
  EXPECT_TRUE(std::is_sorted(sizes.begin(), sizes.end()));
  EXPECT_LT(sizes.front(), sizes.back());
  EXPECT_EQ(report["nvml"]["status"], "error");
  EXPECT_EQ(report["cuda"]["status"], "error");
  EXPECT_THAT(report["cuda"]["error"].get<std::string>(), ::testing::HasSubstr("no NVIDIA driver"));
  EXPECT_EQ(report["workload"]["status"], "ok");
  for (const char* name : {"energy_counter", "kernels", "partitions", "energy_window", "nccl"}) {
    EXPECT_EQ(report[name]["status"], "error") << name;
  }
  EXPECT_THAT(FormatDeviceCheck(report), ::testing::HasSubstr("CUDA (error)"));
  DeviceCheckOptions bad = Options();
  bad.window_s = -1.0;
  EXPECT_THROW(internal::RunDeviceCheck(bad, env), InputError);
  bad = Options();
  bad.workload = "/nonexistent.yaml";
  EXPECT_THROW(internal::RunDeviceCheck(bad, env), InputError);
}

}  // namespace
}  // namespace kareus::measure
