// SPDX-License-Identifier: Apache-2.0
// A fake libnvidia-ml for the runtime tests: exports the NVML functions Kareus uses (same names
// and C ABI), keeps per-GPU state in memory and appends one line per call to a log file, so a
// test (or the parent of a killed child process) can check exactly which calls happened.
//
// Environment, read at nvmlInit_v2:
//   FAKE_NVML_DEVICES=N          number of GPUs (default 2; 0 makes the device count 0)
//   FAKE_NVML_INIT_RETURN=code   nvmlInit_v2 fails with this code
//   FAKE_NVML_SET_RETURN=code    nvmlDeviceSetGpuLockedClocks returns this (4 = no permission)
//   FAKE_NVML_ENERGY_RETURN=code nvmlDeviceGetTotalEnergyConsumption returns this (3 = n/a)
//   FAKE_NVML_POWER_MW=mw        nvmlDeviceGetPowerUsage (default 250000)
//   FAKE_NVML_CALL_DELAY_US=us   every call that takes the library's lock holds it this long, as
//                                NVML holds its own lock across a driver call (default 0)
// Read at every call: FAKE_NVML_LOG=path (no log when unset). Lines look like
//   "set 0 1410 1410 -> 0", "reset 0 -> 0", "energy 1 -> 0", "init -> 0".
// Control functions (fake_nvml.h) override the environment at run time.
#include "runtime/fake_nvml.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAKE_EXPORT __attribute__((visibility("default")))
#define MAX_DEVICES 16

typedef struct FakeDevice {
  unsigned int index;
  unsigned long long energy_mj;
  unsigned int locked_mhz;  // 0 = default clocks
} FakeDevice;

static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
static FakeDevice g_devices[MAX_DEVICES];
static unsigned int g_device_count = 2;
static int g_set_return = 0;
static int g_energy_return = 0;
static unsigned int g_power_mw = 250000;
static int g_initialized = 0;
static unsigned int g_call_delay_us = 0;

// Takes the library's lock and holds it for the configured delay (a real NVML call holds its
// lock across a driver ioctl of some milliseconds).
static void Lock(void) {
  pthread_mutex_lock(&g_mutex);
  if (g_call_delay_us > 0) usleep(g_call_delay_us);
}

static const unsigned int kMemoryClocks[] = {2619, 1593};  // H100 SXM-like
enum { kMinGraphicsMhz = 210, kMaxGraphicsMhz = 1980, kGraphicsStepMhz = 15 };

static int EnvInt(const char* name, int fallback) {
  const char* value = getenv(name);
  return (value != NULL && *value != '\0') ? atoi(value) : fallback;
}

// One write(2) per line with O_APPEND: lines from threads and forked children never interleave,
// and nothing is lost in a stdio buffer when the process dies by a signal.
static void Log(const char* line) {
  const char* path = getenv("FAKE_NVML_LOG");
  if (path == NULL || *path == '\0') return;
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  size_t length = strlen(line);
  ssize_t written = write(fd, line, length);
  (void)written;
  close(fd);
}

static int DeviceOf(void* device, FakeDevice** out) {
  FakeDevice* fake = (FakeDevice*)device;
  if (fake < g_devices || fake >= g_devices + g_device_count) return 2;  // INVALID_ARGUMENT
  *out = fake;
  return 0;
}

FAKE_EXPORT int nvmlInit_v2(void) {
  int code = EnvInt("FAKE_NVML_INIT_RETURN", 0);
  char line[64];
  snprintf(line, sizeof line, "init -> %d\n", code);
  Log(line);
  if (code != 0) return code;
  pthread_mutex_lock(&g_mutex);
  if (!g_initialized) {
    int count = EnvInt("FAKE_NVML_DEVICES", 2);
    g_device_count = count < 0 ? 0 : (count > MAX_DEVICES ? MAX_DEVICES : (unsigned int)count);
    g_set_return = EnvInt("FAKE_NVML_SET_RETURN", 0);
    g_energy_return = EnvInt("FAKE_NVML_ENERGY_RETURN", 0);
    g_power_mw = (unsigned int)EnvInt("FAKE_NVML_POWER_MW", 250000);
    g_call_delay_us = (unsigned int)EnvInt("FAKE_NVML_CALL_DELAY_US", 0);
    for (unsigned int i = 0; i < MAX_DEVICES; ++i) {
      g_devices[i].index = i;
      g_devices[i].energy_mj = 1000000ULL * (i + 1);
      g_devices[i].locked_mhz = 0;
    }
  }
  ++g_initialized;
  pthread_mutex_unlock(&g_mutex);
  return 0;
}

FAKE_EXPORT int nvmlShutdown(void) {
  pthread_mutex_lock(&g_mutex);
  if (g_initialized > 0) --g_initialized;
  pthread_mutex_unlock(&g_mutex);
  Log("shutdown -> 0\n");
  return 0;
}

FAKE_EXPORT int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (count == NULL) return 2;
  *count = g_device_count;
  return 0;
}

FAKE_EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (device == NULL || index >= g_device_count) return 2;
  *device = &g_devices[index];
  return 0;
}

FAKE_EXPORT int nvmlDeviceGetSupportedMemoryClocks(void* device, unsigned int* count,
                                                   unsigned int* clocks) {
  FakeDevice* fake = NULL;
  if (DeviceOf(device, &fake) != 0 || count == NULL) return 2;
  const unsigned int n = sizeof kMemoryClocks / sizeof kMemoryClocks[0];
  if (*count < n) {
    *count = n;
    return 7;  // INSUFFICIENT_SIZE
  }
  memcpy(clocks, kMemoryClocks, sizeof kMemoryClocks);
  *count = n;
  return 0;
}

FAKE_EXPORT int nvmlDeviceGetSupportedGraphicsClocks(void* device, unsigned int memory_mhz,
                                                     unsigned int* count, unsigned int* clocks) {
  FakeDevice* fake = NULL;
  if (DeviceOf(device, &fake) != 0 || count == NULL) return 2;
  if (memory_mhz != kMemoryClocks[0] && memory_mhz != kMemoryClocks[1]) return 6;  // NOT_FOUND
  const unsigned int n = (kMaxGraphicsMhz - kMinGraphicsMhz) / kGraphicsStepMhz + 1;
  if (*count < n) {
    *count = n;
    return 7;
  }
  for (unsigned int i = 0; i < n; ++i) clocks[i] = kMaxGraphicsMhz - i * kGraphicsStepMhz;
  *count = n;
  return 0;
}

FAKE_EXPORT int nvmlDeviceSetGpuLockedClocks(void* device, unsigned int min_mhz,
                                             unsigned int max_mhz) {
  FakeDevice* fake = NULL;
  int code = DeviceOf(device, &fake);
  Lock();
  if (code == 0) code = g_set_return;
  if (code == 0 && (min_mhz > max_mhz || max_mhz > kMaxGraphicsMhz)) code = 2;
  if (code == 0) fake->locked_mhz = max_mhz;
  pthread_mutex_unlock(&g_mutex);
  char line[96];
  snprintf(line, sizeof line, "set %u %u %u -> %d\n", fake != NULL ? fake->index : 99u, min_mhz,
           max_mhz, code);
  Log(line);
  return code;
}

FAKE_EXPORT int nvmlDeviceResetGpuLockedClocks(void* device) {
  FakeDevice* fake = NULL;
  int code = DeviceOf(device, &fake);
  Lock();
  if (code == 0 && g_set_return == 4) code = 4;  // no privilege: reset is refused as well
  if (code == 0) fake->locked_mhz = 0;
  pthread_mutex_unlock(&g_mutex);
  char line[64];
  snprintf(line, sizeof line, "reset %u -> %d\n", fake != NULL ? fake->index : 99u, code);
  Log(line);
  return code;
}

FAKE_EXPORT int nvmlDeviceGetTotalEnergyConsumption(void* device, unsigned long long* energy) {
  FakeDevice* fake = NULL;
  int code = DeviceOf(device, &fake);
  Lock();
  if (code == 0) code = g_energy_return;
  if (code == 0 && energy != NULL) *energy = fake->energy_mj;
  pthread_mutex_unlock(&g_mutex);
  return code;
}

FAKE_EXPORT int nvmlDeviceGetPowerUsage(void* device, unsigned int* power_mw) {
  FakeDevice* fake = NULL;
  if (DeviceOf(device, &fake) != 0 || power_mw == NULL) return 2;
  pthread_mutex_lock(&g_mutex);
  *power_mw = g_power_mw;
  pthread_mutex_unlock(&g_mutex);
  return 0;
}

FAKE_EXPORT int nvmlDeviceGetClockInfo(void* device, int type, unsigned int* clock_mhz) {
  FakeDevice* fake = NULL;
  if (DeviceOf(device, &fake) != 0 || clock_mhz == NULL) return 2;
  pthread_mutex_lock(&g_mutex);
  if (type == 2) {
    *clock_mhz = kMemoryClocks[0];
  } else {
    *clock_mhz = fake->locked_mhz != 0 ? fake->locked_mhz : kMaxGraphicsMhz;
  }
  pthread_mutex_unlock(&g_mutex);
  return 0;
}

FAKE_EXPORT const char* nvmlErrorString(int result) {
  switch (result) {
    case 0:
      return "Success";
    case 1:
      return "Uninitialized";
    case 2:
      return "Invalid Argument";
    case 3:
      return "Not Supported";
    case 4:
      return "Insufficient Permissions";
    case 6:
      return "Not Found";
    case 7:
      return "Insufficient Size";
    case 9:
      return "Driver Not Loaded";
    case 15:
      return "GPU is lost";
    default:
      return "Unknown Error";
  }
}

// Control functions for the tests.
FAKE_EXPORT void fake_nvml_set_energy_mj(unsigned int gpu, unsigned long long energy_mj) {
  pthread_mutex_lock(&g_mutex);
  if (gpu < MAX_DEVICES) g_devices[gpu].energy_mj = energy_mj;
  pthread_mutex_unlock(&g_mutex);
}

FAKE_EXPORT void fake_nvml_set_return(const char* function, int code) {
  pthread_mutex_lock(&g_mutex);
  if (strcmp(function, "set") == 0) g_set_return = code;
  if (strcmp(function, "energy") == 0) g_energy_return = code;
  pthread_mutex_unlock(&g_mutex);
}

FAKE_EXPORT void fake_nvml_set_power_mw(unsigned int power_mw) {
  pthread_mutex_lock(&g_mutex);
  g_power_mw = power_mw;
  pthread_mutex_unlock(&g_mutex);
}

FAKE_EXPORT unsigned int fake_nvml_locked_mhz(unsigned int gpu) {
  pthread_mutex_lock(&g_mutex);
  unsigned int mhz = gpu < MAX_DEVICES ? g_devices[gpu].locked_mhz : 0;
  pthread_mutex_unlock(&g_mutex);
  return mhz;
}

// Optional queries (Nvml::DeviceName and the others): what the device check and the CUDA
// measurement backend read. Only the older name of the clock-reasons query is exported, so the
// runtime's fallback to it is what the tests exercise.
FAKE_EXPORT int nvmlDeviceGetName(void* device, char* name, unsigned int length) {
  FakeDevice* fake = NULL;
  if (DeviceOf(device, &fake) != 0 || name == NULL) return 2;
  if (length < 16) return 7;
  snprintf(name, length, "Fake H100 %u", fake->index);
  return 0;
}

FAKE_EXPORT int nvmlDeviceGetUUID(void* device, char* uuid, unsigned int length) {
  FakeDevice* fake = NULL;
  if (DeviceOf(device, &fake) != 0 || uuid == NULL) return 2;
  if (length < 41) return 7;
  snprintf(uuid, length, "GPU-00000000-0000-0000-0000-%012u", fake->index);
  return 0;
}

FAKE_EXPORT int nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  if (version == NULL || length < 8) return 7;
  snprintf(version, length, "999.99.99");
  return 0;
}

FAKE_EXPORT int nvmlDeviceGetPowerManagementLimit(void* device, unsigned int* limit_mw) {
  FakeDevice* fake = NULL;
  if (DeviceOf(device, &fake) != 0 || limit_mw == NULL) return 2;
  *limit_mw = 700000;
  return 0;
}

FAKE_EXPORT int nvmlDeviceGetEnforcedPowerLimit(void* device, unsigned int* limit_mw) {
  FakeDevice* fake = NULL;
  if (DeviceOf(device, &fake) != 0 || limit_mw == NULL) return 2;
  *limit_mw = 650000;
  return 0;
}

FAKE_EXPORT int nvmlDeviceGetMaxClockInfo(void* device, int type, unsigned int* clock_mhz) {
  FakeDevice* fake = NULL;
  if (DeviceOf(device, &fake) != 0 || clock_mhz == NULL) return 2;
  *clock_mhz = type == 2 ? kMemoryClocks[0] : kMaxGraphicsMhz;
  return 0;
}

FAKE_EXPORT int nvmlDeviceGetCurrentClocksThrottleReasons(void* device,
                                                          unsigned long long* reasons) {
  FakeDevice* fake = NULL;
  if (DeviceOf(device, &fake) != 0 || reasons == NULL) return 2;
  pthread_mutex_lock(&g_mutex);
  *reasons = fake->locked_mhz != 0 ? 0x2ULL : 0x1ULL;  // application clocks when locked, else idle
  pthread_mutex_unlock(&g_mutex);
  return 0;
}
