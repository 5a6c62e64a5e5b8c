// SPDX-License-Identifier: Apache-2.0
// One compute kernel of a program on a GPU: its tensors in a compute arena, its cuBLASLt plans,
// and its launch (cuda_system.cc prepares and launches; the GPU tests check the results against
// the CPU through the same code).
//
// Layouts (row-major tensors, read by cuBLASLt as their column-major transposes):
// - GEMM op (C[m x n] = A[m x k] B[k x n]): as a linear layer, Y (m x n) = X (m x k) W^T with
//   W (n x k): one "TN" GEMM, Y^T = op_T(W^T) X^T.
// - Attention: Q [batch, kv_heads, heads / kv_heads, q_len, d], K and V [batch, kv_heads, kv_len,
//   d], scores [batch, kv_heads, heads / kv_heads, q_len, kv_len]; each (sequence, KV group) is
//   one batch entry of strided-batched GEMMs whose rows are all query rows of the group (GQA
//   without copies). Forward: S = Q K^T / sqrt(d), P = causal softmax(S), O = P V. Backward: S
//   and P recomputed, dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(P dP)), dQ = dS K / sqrt(d),
//   dK = dS^T Q / sqrt(d).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "measure/cuda/device.h"

namespace kareus::measure::internal {

inline constexpr size_t kArenaAlign = 256;
inline constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // cuBLASLt's recommendation on Hopper

inline size_t AlignUp(size_t bytes) {
  return (bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
}

// Throw EnvironmentError naming the call.
void CudaCheck(cudaError_t code, const char* what, int ordinal);
void LtCheck(cublasStatus_t status, const char* what);

// A column-major cuBLASLt GEMM: C (m x n, ldc) = alpha op(A) op(B), batched with strides
// (elements); op = T reads the stored matrix transposed.
struct GemmShape {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int32_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  float alpha = 1.0f;
};

// A GEMM with its algorithm chosen by cuBLASLt's heuristic (bf16, fp32 accumulation).
class GemmPlan {
 public:
  GemmPlan(cublasLtHandle_t handle, const GemmShape& shape);
  ~GemmPlan();
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;
  void Run(cublasLtHandle_t handle, const void* a, const void* b, void* c, void* workspace,
           cudaStream_t stream) const;

 private:
  void Layout(cublasLtMatrixLayout_t* layout, int64_t rows, int64_t cols, int64_t ld,
              int64_t stride);
  GemmShape shape_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
};

// The bytes of a kernel's tensors, in the order its launch uses them (see the layouts above):
// GEMM X W Y; attention forward Q K V S O; backward Q K V dO P dS dQ dK dV; memory-bound kernels
// their inputs then outputs (RMSNorm: x w y; its backward x w dy dx; RoPE x; SwiGLU gate up y;
// its backward dy gate up dgate dup; dropout-add x residual y mask; its backward dy mask dx;
// add a b y; copy x y).
std::vector<size_t> TensorBytes(const KernelSpec& kernel);
// The GEMMs of a kernel, in launch order (none for memory-bound kernels).
std::vector<GemmShape> GemmsOf(const KernelSpec& kernel);

struct PreparedKernel {
  KernelSpec spec;
  std::vector<size_t> offsets;  // of the tensors in the arena (256-byte aligned)
  size_t bytes = 0;             // arena bytes it needs
  std::vector<std::unique_ptr<GemmPlan>> gemms;
};

// Throws EnvironmentError for shapes the kernels do not support (a sequence length that is not
// a multiple of 8, ...) and when cuBLASLt has no algorithm.
std::unique_ptr<PreparedKernel> PrepareKernel(const KernelSpec& spec, cublasLtHandle_t handle);

// Launches `kernel` on `stream` with its tensors in `arena`.
void LaunchKernel(const PreparedKernel& kernel, void* arena, cublasLtHandle_t handle,
                  void* workspace, uint64_t dropout_seed, cudaStream_t stream, int ordinal);

}  // namespace kareus::measure::internal
