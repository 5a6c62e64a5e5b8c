// SPDX-License-Identifier: Apache-2.0
// Shared pieces of the runtime tests: the fake NVML (path, control functions, call log) and
// small 1F1B plans.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kareus/device/nvml.h"
#include "kareus/plan/plan_file.h"
#include "runtime/fake_nvml.h"

namespace kareus::runtime::testing {

// Clocks on the fake's grid (210..1980 MHz, step 15), with repeats so "only on change" shows.
inline int TestClockMhz(int stage, int index) {
  static constexpr int kClocks[] = {1980, 1410, 1200, 1605};
  return kClocks[(index / 2 + stage) % 4];
}

// A valid S x M 1F1B plan; `offset_mhz` shifts every clock (to tell swapped plans apart).
inline plan::Plan MakeTestPlan(int num_stages, int num_microbatches, int offset_mhz = 0) {
  plan::Plan plan;
  plan.method = "kareus";
  plan.workload = Json{{"test", true}};
  plan.num_microbatches = num_microbatches;
  plan.iteration = {
      .time_s = 1.0, .energy_j = 100.0, .static_energy_j = 0.0, .dynamic_energy_j = 100.0};
  for (int s = 0; s < num_stages; ++s) {
    plan::PlannedStage stage{.stage = s, .gpus = 1, .instructions = {}};
    int i = 0;
    for (const auto& slot :
         schedule::StageOrder(schedule::ScheduleKind::k1F1B, num_stages, s, num_microbatches)) {
      plan::PlannedInstruction instruction{.kind = slot.kind,
                                           .microbatch = slot.microbatch,
                                           .freq_mhz = TestClockMhz(s, i) - offset_mhz,
                                           .mode = schedule::ExecutionMode::kSequential,
                                           .partitions = {},
                                           .time_s = 0.1,
                                           .energy_j = 1.0};
      if (slot.kind == schedule::Direction::kForward) {
        instruction.mode = schedule::ExecutionMode::kNanobatched;
        instruction.partitions = {{.type = "fwd_attn", .sms = 8 + s, .slot = "rope_0"},
                                  {.type = "fwd_mlp", .sms = 4 + i % 3, .slot = "norm_0"}};
      }
      stage.instructions.push_back(instruction);
      ++i;
    }
    plan.stages.push_back(stage);
  }
  return plan;
}

inline std::string FakeNvmlPath() { return KAREUS_FAKE_NVML_PATH; }

// A fresh, empty folder for the running test (`prefix`_PID_TESTNAME under the temporary
// folder); the fake NVML logs its calls to nvml.log in it (FAKE_NVML_LOG), whose path is
// returned in `log`.
inline std::filesystem::path FreshTestDirWithNvmlLog(const std::string& prefix,
                                                     std::filesystem::path* log) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      (prefix + "_" + std::to_string(::getpid()) + "_" +
       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  *log = dir / "nvml.log";
  setenv("FAKE_NVML_LOG", log->c_str(), 1);
  return dir;
}

// The fake's control functions, resolved from the already-loaded library.
struct FakeNvml {
  void* handle = nullptr;
  FakeNvmlSetEnergyFn set_energy_mj = nullptr;
  FakeNvmlSetReturnFn set_return = nullptr;
  FakeNvmlSetPowerFn set_power_mw = nullptr;
  FakeNvmlLockedFn locked_mhz = nullptr;

  FakeNvml() {
    handle = dlopen(KAREUS_FAKE_NVML_PATH, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) std::abort();
    set_energy_mj = reinterpret_cast<FakeNvmlSetEnergyFn>(dlsym(handle, "fake_nvml_set_energy_mj"));
    set_return = reinterpret_cast<FakeNvmlSetReturnFn>(dlsym(handle, "fake_nvml_set_return"));
    set_power_mw = reinterpret_cast<FakeNvmlSetPowerFn>(dlsym(handle, "fake_nvml_set_power_mw"));
    locked_mhz = reinterpret_cast<FakeNvmlLockedFn>(dlsym(handle, "fake_nvml_locked_mhz"));
  }
  ~FakeNvml() { dlclose(handle); }
};

inline std::vector<std::string> ReadLines(const std::filesystem::path& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Log lines of set/reset calls on `gpu`: "set 1410" / "reset" (result code dropped when 0).
inline std::vector<std::string> ClockCalls(const std::filesystem::path& log, int gpu) {
  std::vector<std::string> calls;
  for (const std::string& line : ReadLines(log)) {
    std::istringstream in(line);
    std::string op;
    unsigned int index = 0;
    in >> op >> index;
    if (static_cast<int>(index) != gpu) continue;
    if (op == "set") {
      unsigned int min_mhz = 0, max_mhz = 0;
      std::string arrow;
      int code = 0;
      in >> min_mhz >> max_mhz >> arrow >> code;
      calls.push_back("set " + std::to_string(max_mhz) +
                      (code != 0 ? " -> " + std::to_string(code) : ""));
    } else if (op == "reset") {
      std::string arrow;
      int code = 0;
      in >> arrow >> code;
      calls.push_back(code != 0 ? "reset -> " + std::to_string(code) : "reset");
    }
  }
  return calls;
}

}  // namespace kareus::runtime::testing
