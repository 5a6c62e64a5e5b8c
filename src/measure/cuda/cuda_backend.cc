// SPDX-License-Identifier: Apache-2.0
// The public entry points of the CUDA backend: a GpuBackend on the CUDA device system.
#include "kareus/measure/cuda_backend.h"

#include <fmt/format.h>

#include "measure/cuda/gpu_backend.h"

namespace kareus::measure {

void CheckCudaBackendAvailable(const CudaBackendOptions& options) {
  ThrowIfInvalid(options.Validate());
  const std::unique_ptr<internal::DeviceSystem> system = internal::OpenCudaSystem();
  const int count = system->DeviceCount();
  for (int ordinal : options.devices) {
    if (ordinal >= count) {
      throw EnvironmentError(fmt::format("devices = {}: this machine has {} CUDA device(s) (0..{})",
                                         ordinal, count, count - 1));
    }
  }
}

std::unique_ptr<Backend> MakeCudaBackend(const workload::WorkloadModel& model,
                                         const CudaBackendOptions& options) {
  ThrowIfInvalid(options.Validate());
  return std::make_unique<internal::GpuBackend>(model, options, internal::OpenCudaSystem());
}

BackendFactory CudaBackendFactory(const CudaBackendOptions& options) {
  ThrowIfInvalid(options.Validate());
  return [options](const workload::WorkloadModel& model, uint64_t /*seed*/) {
    return MakeCudaBackend(model, options);
  };
}

}  // namespace kareus::measure
