// SPDX-License-Identifier: Apache-2.0
#include "measure/cuda/cuda_libraries.h"

#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "kareus/common/error.h"

namespace kareus::measure::internal {
namespace {

std::vector<std::string> Candidates(const char* file_env, const std::string& soname) {
  std::vector<std::string> out;
  if (const char* file = std::getenv(file_env); file != nullptr && *file != '\0')
    out.emplace_back(file);
  if (const char* dirs = std::getenv("KAREUS_CUDA_LIBRARY_PATH"); dirs != nullptr) {
    std::string rest = dirs;
    while (!rest.empty()) {
      const size_t colon = rest.find(':');
      const std::string dir = rest.substr(0, colon);
      rest = colon == std::string::npos ? std::string() : rest.substr(colon + 1);
      if (!dir.empty()) out.push_back(dir + "/" + soname);
    }
  }
  out.push_back(soname);
  out.push_back("/usr/local/cuda/lib64/" + soname);
  return out;
}

// dlopen the first candidate that loads; the handle is never closed (libraries stay for the
// process, as CUDA libraries expect).
void* Open(const char* what, const char* file_env, const std::string& soname, std::string* path) {
  std::string tried;
  for (const std::string& candidate : Candidates(file_env, soname)) {
    if (void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      *path = candidate;
      return handle;
    }
    const char* reason = dlerror();
    tried += fmt::format("\n  {}: {}", candidate, reason != nullptr ? reason : "not loadable");
  }
  throw EnvironmentError(
      fmt::format("cannot load {} ({}); set {} to the file or KAREUS_CUDA_LIBRARY_PATH "
                  "to its folder. Tried:{}",
                  what, soname, file_env, tried));
}

template <typename Fn>
void Bind(void* handle, const std::string& path, Fn& slot, const char* name) {
  dlerror();
  void* symbol = dlsym(handle, name);
  if (symbol == nullptr) throw EnvironmentError(fmt::format("{} does not export {}", path, name));
  slot = reinterpret_cast<Fn>(symbol);
}

CublasLtApi LoadCublasLt() {
  CublasLtApi api;
  void* h = Open("cuBLASLt", "KAREUS_CUBLASLT_LIBRARY",
                 fmt::format("libcublasLt.so.{}", CUBLAS_VER_MAJOR), &api.path);
  Bind(h, api.path, api.Create, "cublasLtCreate");
  Bind(h, api.path, api.Destroy, "cublasLtDestroy");
  Bind(h, api.path, api.GetVersion, "cublasLtGetVersion");
  Bind(h, api.path, api.GetStatusString, "cublasLtGetStatusString");
  Bind(h, api.path, api.MatmulDescCreate, "cublasLtMatmulDescCreate");
  Bind(h, api.path, api.MatmulDescDestroy, "cublasLtMatmulDescDestroy");
  Bind(h, api.path, api.MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
  Bind(h, api.path, api.MatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
  Bind(h, api.path, api.MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
  Bind(h, api.path, api.MatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute");
  Bind(h, api.path, api.MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
  Bind(h, api.path, api.MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
  Bind(h, api.path, api.MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
  Bind(h, api.path, api.MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
  Bind(h, api.path, api.Matmul, "cublasLtMatmul");
  api.version = api.GetVersion();
  return api;
}

NcclApi LoadNccl() {
  NcclApi api;
  void* h =
      Open("NCCL", "KAREUS_NCCL_LIBRARY", fmt::format("libnccl.so.{}", NCCL_MAJOR), &api.path);
  Bind(h, api.path, api.GetVersion, "ncclGetVersion");
  Bind(h, api.path, api.GetUniqueId, "ncclGetUniqueId");
  Bind(h, api.path, api.CommInitRankConfig, "ncclCommInitRankConfig");
  Bind(h, api.path, api.CommDestroy, "ncclCommDestroy");
  Bind(h, api.path, api.CommAbort, "ncclCommAbort");
  Bind(h, api.path, api.CommGetAsyncError, "ncclCommGetAsyncError");
  Bind(h, api.path, api.GetErrorString, "ncclGetErrorString");
  Bind(h, api.path, api.AllReduce, "ncclAllReduce");
  Bind(h, api.path, api.AllGather, "ncclAllGather");
  Bind(h, api.path, api.ReduceScatter, "ncclReduceScatter");
  Bind(h, api.path, api.GroupStart, "ncclGroupStart");
  Bind(h, api.path, api.GroupEnd, "ncclGroupEnd");
  if (api.GetVersion(&api.version) != ncclSuccess) api.version = 0;
  // ncclConfig_t.minCTAs/maxCTAs (one communicator per comm-SM count) appeared in NCCL 2.17.
  if (api.version < 21700) {
    throw EnvironmentError(
        fmt::format("{} is NCCL {}: the SM-limited communicators need NCCL 2.17 or newer", api.path,
                    VersionString(api.version)));
  }
  return api;
}

// A library that failed to load is retried on the next call (the error is thrown each time).
template <typename Api>
const Api& LoadOnce(Api (*load)(), std::mutex& mutex, std::unique_ptr<Api>& slot) {
  std::lock_guard<std::mutex> lock(mutex);
  if (!slot) slot = std::make_unique<Api>(load());
  return *slot;
}

}  // namespace

const CublasLtApi& CublasLt() {
  static std::mutex mutex;
  static std::unique_ptr<CublasLtApi> api;
  return LoadOnce(&LoadCublasLt, mutex, api);
}

const NcclApi& Nccl() {
  static std::mutex mutex;
  static std::unique_ptr<NcclApi> api;
  return LoadOnce(&LoadNccl, mutex, api);
}

void CheckCudaDriverLibrary() {
  if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL) != nullptr)
    return;  // kept open, as the runtime will
  const char* reason = dlerror();
  throw EnvironmentError(
      fmt::format("no NVIDIA driver on this machine: cannot load libcuda.so.1 ({}); --backend cuda "
                  "and the device "
                  "check need an NVIDIA GPU and its driver (the emulator backend needs neither)",
                  reason != nullptr ? reason : "not found"));
}

std::string VersionString(long long encoded) {
  if (encoded <= 0) return "unknown";
  // NCCL >= 2.9 and cuBLASLt encode major * 10000 + minor * 100 + patch.
  return fmt::format("{}.{}.{}", encoded / 10000, (encoded / 100) % 100, encoded % 100);
}

}  // namespace kareus::measure::internal
