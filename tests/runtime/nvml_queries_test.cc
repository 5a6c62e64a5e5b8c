// SPDX-License-Identifier: Apache-2.0
// The optional NVML queries (name, UUID, driver, power limits, maximum clock, clock event
// reasons, temperature) against the fake NVML, and their absence reported as "function not
// found" rather than a failure to open NVML.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "kareus/device/nvml.h"

namespace kareus::device {
namespace {

TEST(NvmlQueries, ReadWhatTheDriverExports) {
  auto nvml = Nvml::Open({.library_path = KAREUS_FAKE_NVML_PATH});
  std::string name, uuid, driver;
  ASSERT_EQ(nvml->DeviceName(1, &name), NvmlStatus::kSuccess);
  EXPECT_EQ(name, "Fake H100 1");
  ASSERT_EQ(nvml->DeviceUuid(0, &uuid), NvmlStatus::kSuccess);
  EXPECT_EQ(uuid.rfind("GPU-", 0), 0u);
  ASSERT_EQ(nvml->DriverVersion(&driver), NvmlStatus::kSuccess);
  EXPECT_EQ(driver, "999.99.99");
  double management = 0.0, enforced = 0.0;
  ASSERT_EQ(nvml->PowerManagementLimitW(0, &management), NvmlStatus::kSuccess);
  ASSERT_EQ(nvml->EnforcedPowerLimitW(0, &enforced), NvmlStatus::kSuccess);
  EXPECT_DOUBLE_EQ(management, 700.0);
  EXPECT_DOUBLE_EQ(enforced, 650.0);
  int max_sm = 0;
  ASSERT_EQ(nvml->MaxClockMhz(0, ClockType::kSm, &max_sm), NvmlStatus::kSuccess);
  EXPECT_EQ(max_sm, 1980);
  // The fake exports only the pre-R535 name: the runtime falls back to it.
  uint64_t reasons = 0;
  ASSERT_EQ(nvml->ClockEventReasons(0, &reasons), NvmlStatus::kSuccess);
  EXPECT_EQ(reasons, 0x1u);
  ASSERT_EQ(nvml->SetGpuLockedClocks(0, 1410, 1410), NvmlStatus::kSuccess);
  ASSERT_EQ(nvml->ClockEventReasons(0, &reasons), NvmlStatus::kSuccess);
  EXPECT_EQ(reasons, 0x2u);
  ASSERT_EQ(nvml->ResetGpuLockedClocks(0), NvmlStatus::kSuccess);
  int celsius = -1;
  EXPECT_EQ(nvml->TemperatureC(0, &celsius), NvmlStatus::kFunctionNotFound);  // not exported
  EXPECT_EQ(celsius, -1);
  EXPECT_THROW(nvml->DeviceName(7, &name), EnvironmentError);
}

TEST(NvmlOptions, APathWithANulByteOrAFolderIsRefusedBeforeDlopen) {
  EXPECT_FALSE(NvmlOptions{}.Validate().has_value());
  EXPECT_FALSE(NvmlOptions{.library_path = KAREUS_FAKE_NVML_PATH}.Validate().has_value());
  const NvmlOptions nul{.library_path = std::string("libnvidia-ml.so.1\0x", 19)};
  ASSERT_TRUE(nul.Validate().has_value());
  EXPECT_EQ(nul.Validate()->Message(),
            "library_path = libnvidia-ml.so.1\\x00x: must not hold a NUL byte");
  const NvmlOptions folder{.library_path = "/"};
  EXPECT_EQ(folder.Validate()->field, "library_path");
  EXPECT_THROW(Nvml::Open(folder), InputError);
}

// The list queries (NVML's two-call protocol, one helper in nvml.cc): the whole list, and an
// NVML error reported with the function's name and NVML's code.
TEST(NvmlQueries, SupportedClockLists) {
  auto nvml = Nvml::Open({.library_path = KAREUS_FAKE_NVML_PATH});
  EXPECT_EQ(nvml->SupportedMemoryClocksMhz(0), (std::vector<int>{2619, 1593}));
  const std::vector<int> graphics = nvml->SupportedGraphicsClocksMhz(0, 2619);
  ASSERT_EQ(graphics.size(), (1980u - 210u) / 15u + 1u);
  EXPECT_EQ(graphics.front(), 1980);
  EXPECT_EQ(graphics.back(), 210);
  try {
    nvml->SupportedGraphicsClocksMhz(0, 1234);  // not a memory clock of the fake: NOT_FOUND
    ADD_FAILURE() << "no error";
  } catch (const NvmlError& e) {
    EXPECT_EQ(e.code(), 6);
    EXPECT_NE(std::string(e.what()).find("nvmlDeviceGetSupportedGraphicsClocks: "),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kareus::device
