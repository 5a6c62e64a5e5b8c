// SPDX-License-Identifier: Apache-2.0
#include "kareus/device/nvml.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string_view>
#include <system_error>

#include <fmt/format.h>

#include "device/nvml_api.h"
#include "device/signal_guard.h"

namespace kareus::device {

using internal::nvmlDevice_t;
using internal::nvmlReturn_t;

struct Nvml::Impl {
  std::string path;
  void* library = nullptr;
  internal::NvmlInitFn init = nullptr;
  internal::NvmlShutdownFn shutdown = nullptr;
  internal::NvmlDeviceGetCountFn get_count = nullptr;
  internal::NvmlDeviceGetHandleByIndexFn get_handle = nullptr;
  internal::NvmlDeviceGetSupportedMemoryClocksFn memory_clocks = nullptr;
  internal::NvmlDeviceGetSupportedGraphicsClocksFn graphics_clocks = nullptr;
  internal::NvmlDeviceSetGpuLockedClocksFn set_locked = nullptr;
  internal::NvmlDeviceResetGpuLockedClocksFn reset_locked = nullptr;
  internal::NvmlDeviceGetTotalEnergyConsumptionFn total_energy = nullptr;
  internal::NvmlDeviceGetPowerUsageFn power_usage = nullptr;
  internal::NvmlDeviceGetClockInfoFn clock_info = nullptr;
  internal::NvmlErrorStringFn error_string = nullptr;
  // Optional (nullptr when the library lacks them).
  internal::NvmlDeviceGetNameFn device_name = nullptr;
  internal::NvmlDeviceGetUuidFn device_uuid = nullptr;
  internal::NvmlSystemGetDriverVersionFn driver_version = nullptr;
  internal::NvmlDeviceGetPowerLimitFn power_management_limit = nullptr;
  internal::NvmlDeviceGetPowerLimitFn enforced_power_limit = nullptr;
  internal::NvmlDeviceGetMaxClockInfoFn max_clock = nullptr;
  internal::NvmlDeviceGetClocksEventReasonsFn event_reasons = nullptr;
  internal::NvmlDeviceGetTemperatureFn temperature = nullptr;
  std::vector<nvmlDevice_t> devices;
  bool initialized = false;
  uint64_t generation = internal::ForkGeneration();

  ~Impl() {
    if (generation != internal::ForkGeneration()) return;  // a forked child: the parent's session
    if (initialized && shutdown != nullptr) shutdown();
    if (library != nullptr) dlclose(library);
  }

  std::string ErrorText(nvmlReturn_t code) const {
    const char* text = error_string != nullptr ? error_string(code) : nullptr;
    return fmt::format("{} (NVML {})", text != nullptr ? text : "unknown error", code);
  }
};

namespace {

template <typename Fn>
void Bind(Nvml::Impl& impl, Fn& slot, const char* name) {
  dlerror();
  void* symbol = dlsym(impl.library, name);
  if (symbol == nullptr) {
    throw EnvironmentError(
        fmt::format("NVML library {} does not export {}; need a driver with "
                    "NVML API v2 (R450 or newer)",
                    impl.path, name));
  }
  slot = reinterpret_cast<Fn>(symbol);
}

// Binds `name` when the library exports it; leaves `slot` null otherwise.
template <typename Fn>
void BindOptional(Nvml::Impl& impl, Fn& slot, const char* name) {
  dlerror();
  slot = reinterpret_cast<Fn>(dlsym(impl.library, name));
}

// NVML's two-call protocol for a list: ask with room for `initial_size` entries and, when it
// answers "insufficient size", retry once with the size it wants. `query(count, data)` calls
// the NVML function named `function` (for the error message).
template <typename Query>
std::vector<int> QueryList(const Nvml::Impl& impl, const char* function, std::size_t initial_size,
                           Query query) {
  std::vector<unsigned int> values(initial_size);
  for (int attempt = 0; attempt < 2; ++attempt) {
    unsigned int count = static_cast<unsigned int>(values.size());
    const nvmlReturn_t code = query(&count, values.data());
    if (code == static_cast<int>(NvmlStatus::kInsufficientSize)) {
      values.resize(count);
      continue;
    }
    if (code != 0) throw NvmlError(std::string(function) + ": " + impl.ErrorText(code), code);
    values.resize(count);
    return std::vector<int>(values.begin(), values.end());
  }
  throw NvmlError(std::string(function) + ": list size keeps changing", 7);
}

}  // namespace

std::optional<OptionError> NvmlOptions::Validate() const {
  if (library_path.find('\0') != std::string::npos) {
    return OptionError{"library_path", ShownValue(library_path), "must not hold a NUL byte"};
  }
  std::error_code error;
  if (!library_path.empty() && std::filesystem::is_directory(library_path, error)) {
    return OptionError{"library_path", ShownValue(library_path),
                       "names a folder; give the path of libnvidia-ml.so.1"};
  }
  return std::nullopt;
}

std::shared_ptr<Nvml> Nvml::Open(const NvmlOptions& options) {
  ThrowIfInvalid(options.Validate());
  auto impl = std::make_unique<Impl>();
  impl->path = options.library_path;
  if (impl->path.empty()) {
    const char* env = std::getenv("KAREUS_NVML_LIBRARY");
    impl->path = (env != nullptr && *env != '\0') ? env : "libnvidia-ml.so.1";
  }
  impl->library = dlopen(impl->path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (impl->library == nullptr) {
    const char* reason = dlerror();
    throw EnvironmentError(fmt::format(
        "cannot load NVML library {}: {}; install the NVIDIA driver or set KAREUS_NVML_LIBRARY "
        "to the path of libnvidia-ml.so.1",
        impl->path, reason != nullptr ? reason : "unknown reason"));
  }
  Bind(*impl, impl->init, "nvmlInit_v2");
  Bind(*impl, impl->shutdown, "nvmlShutdown");
  Bind(*impl, impl->get_count, "nvmlDeviceGetCount_v2");
  Bind(*impl, impl->get_handle, "nvmlDeviceGetHandleByIndex_v2");
  Bind(*impl, impl->memory_clocks, "nvmlDeviceGetSupportedMemoryClocks");
  Bind(*impl, impl->graphics_clocks, "nvmlDeviceGetSupportedGraphicsClocks");
  Bind(*impl, impl->set_locked, "nvmlDeviceSetGpuLockedClocks");
  Bind(*impl, impl->reset_locked, "nvmlDeviceResetGpuLockedClocks");
  Bind(*impl, impl->total_energy, "nvmlDeviceGetTotalEnergyConsumption");
  Bind(*impl, impl->power_usage, "nvmlDeviceGetPowerUsage");
  Bind(*impl, impl->clock_info, "nvmlDeviceGetClockInfo");
  Bind(*impl, impl->error_string, "nvmlErrorString");
  BindOptional(*impl, impl->device_name, "nvmlDeviceGetName");
  BindOptional(*impl, impl->device_uuid, "nvmlDeviceGetUUID");
  BindOptional(*impl, impl->driver_version, "nvmlSystemGetDriverVersion");
  BindOptional(*impl, impl->power_management_limit, "nvmlDeviceGetPowerManagementLimit");
  BindOptional(*impl, impl->enforced_power_limit, "nvmlDeviceGetEnforcedPowerLimit");
  BindOptional(*impl, impl->max_clock, "nvmlDeviceGetMaxClockInfo");
  BindOptional(*impl, impl->event_reasons, "nvmlDeviceGetCurrentClocksEventReasons");
  if (impl->event_reasons == nullptr) {
    BindOptional(*impl, impl->event_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
  }
  BindOptional(*impl, impl->temperature, "nvmlDeviceGetTemperature");

  if (const nvmlReturn_t code = impl->init(); code != 0) {
    throw NvmlError(fmt::format("nvmlInit_v2 failed in {}: {}; is the NVIDIA driver loaded?",
                                impl->path, impl->ErrorText(code)),
                    code);
  }
  impl->initialized = true;
  unsigned int count = 0;
  if (const nvmlReturn_t code = impl->get_count(&count); code != 0) {
    throw NvmlError("nvmlDeviceGetCount_v2 failed: " + impl->ErrorText(code), code);
  }
  if (count == 0) throw EnvironmentError("NVML found no GPU on this machine (" + impl->path + ")");
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t device = nullptr;
    if (const nvmlReturn_t code = impl->get_handle(i, &device); code != 0) {
      throw NvmlError(
          fmt::format("nvmlDeviceGetHandleByIndex_v2({}) failed: {}", i, impl->ErrorText(code)),
          code);
    }
    impl->devices.push_back(device);
  }
  return std::shared_ptr<Nvml>(new Nvml(std::move(impl)));
}

Nvml::Nvml(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Nvml::~Nvml() = default;

const std::string& Nvml::library_path() const { return impl_->path; }
int Nvml::device_count() const { return static_cast<int>(impl_->devices.size()); }

void Nvml::CheckGpu(int gpu) const {
  if (gpu < 0 || gpu >= device_count()) {
    throw EnvironmentError(
        fmt::format("gpu = {}: no such NVML device; this machine has {} "
                    "(indices 0..{})",
                    gpu, device_count(), device_count() - 1));
  }
}

std::string Nvml::Describe(const char* function, NvmlStatus status) const {
  return fmt::format("{}: {}", function, impl_->ErrorText(static_cast<int>(status)));
}

std::vector<int> Nvml::SupportedMemoryClocksMhz(int gpu) const {
  CheckGpu(gpu);
  return QueryList(*impl_, "nvmlDeviceGetSupportedMemoryClocks", 64,
                   [&](unsigned int* count, unsigned int* clocks) {
                     return impl_->memory_clocks(impl_->devices[gpu], count, clocks);
                   });
}

std::vector<int> Nvml::SupportedGraphicsClocksMhz(int gpu, int memory_clock_mhz) const {
  CheckGpu(gpu);
  return QueryList(*impl_, "nvmlDeviceGetSupportedGraphicsClocks", 512,
                   [&](unsigned int* count, unsigned int* clocks) {
                     return impl_->graphics_clocks(impl_->devices[gpu],
                                                   static_cast<unsigned int>(memory_clock_mhz),
                                                   count, clocks);
                   });
}

int Nvml::ClockMhz(int gpu, ClockType type) const {
  CheckGpu(gpu);
  unsigned int clock = 0;
  const nvmlReturn_t code = impl_->clock_info(impl_->devices[gpu], static_cast<int>(type), &clock);
  if (code != 0) throw NvmlError("nvmlDeviceGetClockInfo: " + impl_->ErrorText(code), code);
  return static_cast<int>(clock);
}

double Nvml::PowerW(int gpu) const {
  CheckGpu(gpu);
  unsigned int power_mw = 0;
  const nvmlReturn_t code = impl_->power_usage(impl_->devices[gpu], &power_mw);
  if (code != 0) throw NvmlError("nvmlDeviceGetPowerUsage: " + impl_->ErrorText(code), code);
  return power_mw / 1000.0;
}

NvmlStatus Nvml::SetGpuLockedClocks(int gpu, int min_mhz, int max_mhz) const {
  CheckGpu(gpu);
  return static_cast<NvmlStatus>(impl_->set_locked(
      impl_->devices[gpu], static_cast<unsigned int>(min_mhz), static_cast<unsigned int>(max_mhz)));
}

NvmlStatus Nvml::ResetGpuLockedClocks(int gpu) const {
  CheckGpu(gpu);
  return static_cast<NvmlStatus>(impl_->reset_locked(impl_->devices[gpu]));
}

NvmlStatus Nvml::TotalEnergyMj(int gpu, uint64_t* energy_mj) const {
  CheckGpu(gpu);
  unsigned long long value = 0;
  const nvmlReturn_t code = impl_->total_energy(impl_->devices[gpu], &value);
  if (code == 0) *energy_mj = value;
  return static_cast<NvmlStatus>(code);
}

namespace {

constexpr NvmlStatus kMissing = NvmlStatus::kFunctionNotFound;

// NVML's string queries: a buffer larger than every NVML_*_BUFFER_SIZE (96 at most).
template <typename Call>
NvmlStatus QueryString(Call call, std::string* out) {
  char buffer[256] = {};
  const int code = call(buffer, static_cast<unsigned int>(sizeof buffer));
  if (code == 0) {
    buffer[sizeof buffer - 1] = '\0';
    *out = buffer;
  }
  return static_cast<NvmlStatus>(code);
}

}  // namespace

NvmlStatus Nvml::DeviceName(int gpu, std::string* name) const {
  CheckGpu(gpu);
  if (impl_->device_name == nullptr) return kMissing;
  nvmlDevice_t device = impl_->devices[gpu];
  auto* fn = impl_->device_name;
  return QueryString([&](char* b, unsigned int n) { return fn(device, b, n); }, name);
}

NvmlStatus Nvml::DeviceUuid(int gpu, std::string* uuid) const {
  CheckGpu(gpu);
  if (impl_->device_uuid == nullptr) return kMissing;
  nvmlDevice_t device = impl_->devices[gpu];
  auto* fn = impl_->device_uuid;
  return QueryString([&](char* b, unsigned int n) { return fn(device, b, n); }, uuid);
}

NvmlStatus Nvml::DriverVersion(std::string* version) const {
  if (impl_->driver_version == nullptr) return kMissing;
  auto* fn = impl_->driver_version;
  return QueryString([&](char* b, unsigned int n) { return fn(b, n); }, version);
}

NvmlStatus Nvml::PowerManagementLimitW(int gpu, double* watts) const {
  CheckGpu(gpu);
  if (impl_->power_management_limit == nullptr) return kMissing;
  unsigned int mw = 0;
  const int code = impl_->power_management_limit(impl_->devices[gpu], &mw);
  if (code == 0) *watts = mw / 1000.0;
  return static_cast<NvmlStatus>(code);
}

NvmlStatus Nvml::EnforcedPowerLimitW(int gpu, double* watts) const {
  CheckGpu(gpu);
  if (impl_->enforced_power_limit == nullptr) return kMissing;
  unsigned int mw = 0;
  const int code = impl_->enforced_power_limit(impl_->devices[gpu], &mw);
  if (code == 0) *watts = mw / 1000.0;
  return static_cast<NvmlStatus>(code);
}

NvmlStatus Nvml::MaxClockMhz(int gpu, ClockType type, int* mhz) const {
  CheckGpu(gpu);
  if (impl_->max_clock == nullptr) return kMissing;
  unsigned int clock = 0;
  const int code = impl_->max_clock(impl_->devices[gpu], static_cast<int>(type), &clock);
  if (code == 0) *mhz = static_cast<int>(clock);
  return static_cast<NvmlStatus>(code);
}

NvmlStatus Nvml::ClockEventReasons(int gpu, uint64_t* reasons) const {
  CheckGpu(gpu);
  if (impl_->event_reasons == nullptr) return kMissing;
  unsigned long long value = 0;
  const int code = impl_->event_reasons(impl_->devices[gpu], &value);
  if (code == 0) *reasons = value;
  return static_cast<NvmlStatus>(code);
}

NvmlStatus Nvml::TemperatureC(int gpu, int* celsius) const {
  CheckGpu(gpu);
  if (impl_->temperature == nullptr) return kMissing;
  unsigned int value = 0;
  const int code = impl_->temperature(impl_->devices[gpu], /*NVML_TEMPERATURE_GPU=*/0, &value);
  if (code == 0) *celsius = static_cast<int>(value);
  return static_cast<NvmlStatus>(code);
}

int NvmlIndexForCudaDevice(int cuda_device) {
  if (cuda_device < 0) {
    throw EnvironmentError(fmt::format("cuda device = {}: must be >= 0", cuda_device));
  }
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  if (env == nullptr) return cuda_device;
  std::vector<int> visible;
  std::string_view rest(env);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string_view entry = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
    while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
    if (entry.empty()) continue;
    int index = 0;
    for (char c : entry) {
      if (c < '0' || c > '9') {
        throw EnvironmentError(fmt::format(
            "CUDA_VISIBLE_DEVICES = {}: entry '{}' is not an index; UUID and MIG entries are not "
            "supported, pass NVML indices instead",
            env, entry));
      }
      index = index * 10 + (c - '0');
    }
    visible.push_back(index);
  }
  if (cuda_device >= static_cast<int>(visible.size())) {
    throw EnvironmentError(fmt::format("cuda device = {}: CUDA_VISIBLE_DEVICES = {} lists only {}",
                                       cuda_device, env, visible.size()));
  }
  return visible[cuda_device];
}

}  // namespace kareus::device
