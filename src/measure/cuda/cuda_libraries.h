// SPDX-License-Identifier: Apache-2.0
// cuBLASLt and NCCL loaded at run time (dlopen), so a binary built with CUDA starts on machines
// without them (and without a GPU); the function types come from the toolkit's own headers.
// Search order for each library: $KAREUS_CUBLASLT_LIBRARY / $KAREUS_NCCL_LIBRARY (a file), the
// folders of $KAREUS_CUDA_LIBRARY_PATH (colon-separated), the dynamic loader's path, then
// /usr/local/cuda/lib64. The driver (libcuda.so.1) is checked the same way before the static
// CUDA runtime first touches it.
#pragma once

#include <string>

#include <cublasLt.h>
#include <nccl.h>

namespace kareus::measure::internal {

struct CublasLtApi {
  std::string path;
  size_t version = 0;  // cublasLtGetVersion(): major*10000 + minor*100 + patch
  decltype(&cublasLtCreate) Create = nullptr;
  decltype(&cublasLtDestroy) Destroy = nullptr;
  decltype(&cublasLtGetVersion) GetVersion = nullptr;
  decltype(&cublasLtGetStatusString) GetStatusString = nullptr;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate = nullptr;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy = nullptr;
  decltype(&cublasLtMatrixLayoutSetAttribute) MatrixLayoutSetAttribute = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic = nullptr;
  decltype(&cublasLtMatmul) Matmul = nullptr;
};

struct NcclApi {
  std::string path;
  int version = 0;  // ncclGetVersion(): major*10000 + minor*100 + patch
  decltype(&ncclGetVersion) GetVersion = nullptr;
  decltype(&ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&ncclCommInitRankConfig) CommInitRankConfig = nullptr;
  decltype(&ncclCommDestroy) CommDestroy = nullptr;
  decltype(&ncclCommAbort) CommAbort = nullptr;
  decltype(&ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&ncclGetErrorString) GetErrorString = nullptr;
  decltype(&ncclAllReduce) AllReduce = nullptr;
  decltype(&ncclAllGather) AllGather = nullptr;
  decltype(&ncclReduceScatter) ReduceScatter = nullptr;
  decltype(&ncclGroupStart) GroupStart = nullptr;
  decltype(&ncclGroupEnd) GroupEnd = nullptr;
};

// Loaded once per process; throw EnvironmentError naming every place searched.
const CublasLtApi& CublasLt();
const NcclApi& Nccl();
// Throws EnvironmentError unless libcuda.so.1 (the NVIDIA driver's CUDA library) loads.
void CheckCudaDriverLibrary();

// "13.0.2" from 130002 (cuBLASLt), "2.28.9" from 22809 (NCCL).
std::string VersionString(long long encoded);

}  // namespace kareus::measure::internal
