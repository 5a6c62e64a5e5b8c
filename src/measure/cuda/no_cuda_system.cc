// SPDX-License-Identifier: Apache-2.0
// The device system of a build without CUDA (KAREUS_WITH_CUDA=OFF or no toolkit found).
#include "kareus/common/error.h"
#include "kareus/measure/cuda_backend.h"
#include "measure/cuda/device.h"

namespace kareus::measure {

bool CudaBackendBuilt() { return false; }

namespace internal {

std::unique_ptr<DeviceSystem> OpenCudaSystem() {
  throw EnvironmentError(
      "this kareus was built without CUDA (KAREUS_WITH_CUDA=OFF, or no CUDA toolkit was found at "
      "build time): rebuild with the toolkit installed and -DKAREUS_WITH_CUDA=ON to measure on "
      "GPUs");
}

}  // namespace internal
}  // namespace kareus::measure
