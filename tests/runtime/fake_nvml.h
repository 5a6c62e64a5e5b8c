// SPDX-License-Identifier: Apache-2.0
// Control functions of the fake NVML (fake_nvml.c). Tests reach them with dlopen + dlsym on the
// same library path the runtime loads (dlopen returns the already-loaded copy).
#ifndef KAREUS_TESTS_RUNTIME_FAKE_NVML_H_
#define KAREUS_TESTS_RUNTIME_FAKE_NVML_H_

#ifdef __cplusplus
extern "C" {
#endif

// Sets GPU `gpu`'s total energy counter (millijoules).
void fake_nvml_set_energy_mj(unsigned int gpu, unsigned long long energy_mj);
// Makes "set" (nvmlDeviceSetGpuLockedClocks) or "energy" (the energy counter) return `code`.
void fake_nvml_set_return(const char* function, int code);
void fake_nvml_set_power_mw(unsigned int power_mw);
// The clock currently locked on `gpu` (0: default clocks).
unsigned int fake_nvml_locked_mhz(unsigned int gpu);

typedef void (*FakeNvmlSetEnergyFn)(unsigned int, unsigned long long);
typedef void (*FakeNvmlSetReturnFn)(const char*, int);
typedef void (*FakeNvmlSetPowerFn)(unsigned int);
typedef unsigned int (*FakeNvmlLockedFn)(unsigned int);

#ifdef __cplusplus
}
#endif

#endif  // KAREUS_TESTS_RUNTIME_FAKE_NVML_H_
