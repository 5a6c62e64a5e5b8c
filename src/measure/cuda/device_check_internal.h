// SPDX-License-Identifier: Apache-2.0
// The device check with its machine injected (tests run it on the fake device layer and the
// fake NVML).
#pragma once

#include <functional>
#include <memory>

#include "kareus/common/json.h"
#include "kareus/device/nvml.h"
#include "kareus/measure/device_check.h"
#include "measure/cuda/device.h"

namespace kareus::measure::internal {

struct DeviceCheckEnv {
  std::function<std::unique_ptr<DeviceSystem>()> open_system;
  std::function<std::shared_ptr<device::Nvml>()> open_nvml;
};

Json RunDeviceCheck(const DeviceCheckOptions& options, const DeviceCheckEnv& env);

}  // namespace kareus::measure::internal
