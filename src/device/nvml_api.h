// SPDX-License-Identifier: Apache-2.0
// The NVML functions Kareus calls, declared by us with the C ABI of nvml.h (NVML API v2 names,
// as exported by libnvidia-ml.so.1) so nothing depends on the CUDA toolkit. The fake NVML of the
// tests (tests/runtime/fake_nvml.c) exports exactly these.
#pragma once

namespace kareus::device::internal {

using nvmlReturn_t = int;
using nvmlDevice_t = void*;  // opaque struct nvmlDevice_st*

extern "C" {
using NvmlInitFn = nvmlReturn_t (*)();
using NvmlShutdownFn = nvmlReturn_t (*)();
using NvmlDeviceGetCountFn = nvmlReturn_t (*)(unsigned int* count);
using NvmlDeviceGetHandleByIndexFn = nvmlReturn_t (*)(unsigned int index, nvmlDevice_t* device);
using NvmlDeviceGetSupportedMemoryClocksFn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                              unsigned int* count,
                                                              unsigned int* clocks_mhz);
using NvmlDeviceGetSupportedGraphicsClocksFn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                                unsigned int memory_clock_mhz,
                                                                unsigned int* count,
                                                                unsigned int* clocks_mhz);
using NvmlDeviceSetGpuLockedClocksFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int min_mhz,
                                                        unsigned int max_mhz);
using NvmlDeviceResetGpuLockedClocksFn = nvmlReturn_t (*)(nvmlDevice_t device);
using NvmlDeviceGetTotalEnergyConsumptionFn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                               unsigned long long* energy_mj);
using NvmlDeviceGetPowerUsageFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* power_mw);
using NvmlDeviceGetClockInfoFn = nvmlReturn_t (*)(nvmlDevice_t device, int type,
                                                  unsigned int* clock_mhz);
using NvmlErrorStringFn = const char* (*)(nvmlReturn_t result);

// Optional: bound when the library exports them (the device check and the CUDA measurement
// backend read them; older drivers may lack some). The char buffers are NUL-terminated by NVML.
using NvmlDeviceGetNameFn = nvmlReturn_t (*)(nvmlDevice_t device, char* name, unsigned int length);
using NvmlDeviceGetUuidFn = nvmlReturn_t (*)(nvmlDevice_t device, char* uuid, unsigned int length);
using NvmlSystemGetDriverVersionFn = nvmlReturn_t (*)(char* version, unsigned int length);
using NvmlDeviceGetPowerLimitFn = nvmlReturn_t (*)(nvmlDevice_t device, unsigned int* limit_mw);
using NvmlDeviceGetMaxClockInfoFn = nvmlReturn_t (*)(nvmlDevice_t device, int type,
                                                     unsigned int* clock_mhz);
// nvmlDeviceGetCurrentClocksEventReasons (R535+) or the older
// nvmlDeviceGetCurrentClocksThrottleReasons: the same signature and bits.
using NvmlDeviceGetClocksEventReasonsFn = nvmlReturn_t (*)(nvmlDevice_t device,
                                                           unsigned long long* reasons);
using NvmlDeviceGetTemperatureFn = nvmlReturn_t (*)(nvmlDevice_t device, int sensor,
                                                    unsigned int* celsius);
}

}  // namespace kareus::device::internal
