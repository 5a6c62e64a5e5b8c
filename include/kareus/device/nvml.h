// SPDX-License-Identifier: Apache-2.0
// NVML loaded at run time (dlopen), so Kareus builds and runs its tests without the NVIDIA driver
// or nvml.h: only the handful of functions the runtime uses are declared, by us
// (src/device/nvml_api.h), with NVML's own return codes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kareus/common/error.h"

namespace kareus::device {

// NVML return codes (nvml.h, nvmlReturn_t), the ones the runtime tells apart.
enum class NvmlStatus : int {
  kSuccess = 0,
  kUninitialized = 1,
  kInvalidArgument = 2,
  kNotSupported = 3,
  kNoPermission = 4,
  kAlreadyInitialized = 5,
  kNotFound = 6,
  kInsufficientSize = 7,
  kDriverNotLoaded = 9,
  kLibraryNotFound = 12,
  kFunctionNotFound = 13,
  kGpuIsLost = 15,
  kUnknown = 999,
};

// An NVML call failed. An EnvironmentError: the machine, not the user's input, is at fault.
class NvmlError : public EnvironmentError {
 public:
  NvmlError(const std::string& message, int code) : EnvironmentError(message), code_(code) {}
  int code() const { return code_; }  // the raw nvmlReturn_t

 private:
  int code_;
};

// NVML clock domains (nvmlClockType_t).
enum class ClockType : int { kGraphics = 0, kSm = 1, kMemory = 2, kVideo = 3 };

struct NvmlOptions {
  // Library to dlopen; empty: $KAREUS_NVML_LIBRARY if set, else "libnvidia-ml.so.1".
  std::string library_path;

  // library_path holds no NUL byte (dlopen would read a shorter path) and names no folder;
  // nullopt when valid. Open checks it first.
  std::optional<OptionError> Validate() const;
};

// One initialized NVML session: dlopen + nvmlInit_v2 in Open, nvmlShutdown + dlclose when the
// last owner lets go (not in a child of fork(): the session is the parent's). Shared
// (std::shared_ptr) by the controllers and monitors of a process. GPU indices are NVML indices (see
// NvmlIndexForCudaDevice). Thread-safe: NVML is.
class Nvml {
 public:
  // Throws EnvironmentError naming the library when it cannot be loaded, lacks a function, or
  // NVML cannot initialize (no driver, no device).
  static std::shared_ptr<Nvml> Open(const NvmlOptions& options = {});
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  const std::string& library_path() const;
  int device_count() const;
  // Throws EnvironmentError when `gpu` is not an index in [0, device_count()).
  void CheckGpu(int gpu) const;

  // Queries; throw NvmlError on failure.
  std::vector<int> SupportedMemoryClocksMhz(int gpu) const;  // descending, as NVML lists them
  std::vector<int> SupportedGraphicsClocksMhz(int gpu, int memory_clock_mhz) const;
  int ClockMhz(int gpu, ClockType type) const;
  double PowerW(int gpu) const;  // nvmlDeviceGetPowerUsage (mW -> W)

  // Calls that the runtime treats by status (permission, not supported) rather than throwing.
  NvmlStatus SetGpuLockedClocks(int gpu, int min_mhz, int max_mhz) const;
  NvmlStatus ResetGpuLockedClocks(int gpu) const;
  NvmlStatus TotalEnergyMj(int gpu, uint64_t* energy_mj) const;  // millijoules since load

  // Optional queries (the device check, the CUDA measurement backend): kFunctionNotFound when
  // the driver's NVML does not export the function, else NVML's status; outputs are written
  // only on success. Clock event reasons are nvmlClocksEventReason* bits (idle 0x1, SW power
  // cap 0x4, HW slowdown 0x8, SW thermal 0x20, HW thermal 0x40, power brake 0x80, ...).
  NvmlStatus DeviceName(int gpu, std::string* name) const;  // "NVIDIA H200"
  NvmlStatus DeviceUuid(int gpu, std::string* uuid) const;  // "GPU-1a2b..."
  NvmlStatus DriverVersion(std::string* version) const;     // "580.159.04"
  NvmlStatus PowerManagementLimitW(int gpu, double* watts) const;
  NvmlStatus EnforcedPowerLimitW(int gpu, double* watts) const;
  NvmlStatus MaxClockMhz(int gpu, ClockType type, int* mhz) const;
  NvmlStatus ClockEventReasons(int gpu, uint64_t* reasons) const;
  NvmlStatus TemperatureC(int gpu, int* celsius) const;

  // "nvmlDeviceSetGpuLockedClocks: Insufficient Permissions (NVML 4)".
  std::string Describe(const char* function, NvmlStatus status) const;

  struct Impl;

 private:
  explicit Nvml(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Maps a CUDA device ordinal (as a training process sees it, e.g. LOCAL_RANK) to an NVML index
// through CUDA_VISIBLE_DEVICES, as Zeus does: "2,3" makes CUDA device 1 NVML index 3. Without
// the variable the two are equal. Throws EnvironmentError for UUID/MIG entries (not supported).
int NvmlIndexForCudaDevice(int cuda_device);

}  // namespace kareus::device
