// SPDX-License-Identifier: Apache-2.0
#include "measure/cuda/cuda_ops.h"

#include <cmath>

#include <fmt/format.h>

#include "kareus/common/error.h"
#include "measure/cuda/cuda_libraries.h"
#include "measure/cuda/kernels.h"

namespace kareus::measure::internal {

using kernels::Bf16;

void CudaCheck(cudaError_t code, const char* what, int ordinal) {
  if (code == cudaSuccess) return;
  throw EnvironmentError(fmt::format("CUDA device {}: {} failed: {} ({})", ordinal, what,
                                     cudaGetErrorString(code), static_cast<int>(code)));
}

void LtCheck(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw EnvironmentError(fmt::format("cuBLASLt: {} failed: {} ({})", what,
                                     CublasLt().GetStatusString(status), static_cast<int>(status)));
}

// --- GEMM plans ------------------------------------------------------------------------------

GemmPlan::GemmPlan(cublasLtHandle_t handle, const GemmShape& s) : shape_(s) {
  const CublasLtApi& lt = CublasLt();
  LtCheck(lt.MatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const int32_t ta = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  LtCheck(lt.MatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "TRANSA");
  LtCheck(lt.MatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "TRANSB");
  // Stored shapes: op(A) is m x k, op(B) is k x n.
  Layout(&a_, s.ta ? s.k : s.m, s.ta ? s.m : s.k, s.lda, s.stride_a);
  Layout(&b_, s.tb ? s.n : s.k, s.tb ? s.k : s.n, s.ldb, s.stride_b);
  Layout(&c_, s.m, s.n, s.ldc, s.stride_c);
  cublasLtMatmulPreference_t pref = nullptr;
  LtCheck(lt.MatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t workspace = kWorkspaceBytes;
  LtCheck(lt.MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                          &workspace, sizeof workspace),
          "MAX_WORKSPACE_BYTES");
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t status =
      lt.MatmulAlgoGetHeuristic(handle, desc_, a_, b_, c_, c_, pref, 1, &result, &returned);
  lt.MatmulPreferenceDestroy(pref);
  LtCheck(status, "cublasLtMatmulAlgoGetHeuristic");
  if (returned < 1) {
    throw EnvironmentError(fmt::format(
        "cuBLASLt has no bf16 algorithm for a {}x{}x{} GEMM (batch {})", s.m, s.n, s.k, s.batch));
  }
  algo_ = result.algo;
}

GemmPlan::~GemmPlan() {
  const CublasLtApi& lt = CublasLt();
  if (a_) lt.MatrixLayoutDestroy(a_);
  if (b_) lt.MatrixLayoutDestroy(b_);
  if (c_) lt.MatrixLayoutDestroy(c_);
  if (desc_) lt.MatmulDescDestroy(desc_);
}

void GemmPlan::Run(cublasLtHandle_t handle, const void* a, const void* b, void* c, void* workspace,
                   cudaStream_t stream) const {
  const float beta = 0.0f;
  LtCheck(CublasLt().Matmul(handle, desc_, &shape_.alpha, a, a_, b, b_, &beta, c, c_, c, c_, &algo_,
                            workspace, kWorkspaceBytes, stream),
          "cublasLtMatmul");
}

void GemmPlan::Layout(cublasLtMatrixLayout_t* layout, int64_t rows, int64_t cols, int64_t ld,
                      int64_t stride) {
  const CublasLtApi& lt = CublasLt();
  LtCheck(lt.MatrixLayoutCreate(layout, CUDA_R_16BF, static_cast<uint64_t>(rows),
                                static_cast<uint64_t>(cols), ld),
          "cublasLtMatrixLayoutCreate");
  if (shape_.batch > 1) {
    LtCheck(lt.MatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &shape_.batch,
                                        sizeof shape_.batch),
            "BATCH_COUNT");
    LtCheck(lt.MatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                        &stride, sizeof stride),
            "STRIDED_BATCH_OFFSET");
  }
}

std::vector<size_t> TensorBytes(const KernelSpec& k) {
  const size_t e = 2;  // bf16
  switch (k.kind) {
    case KernelKind::kGemm:
      return {e * k.m * k.k, e * k.n * k.k, e * k.m * k.n};  // X (m x k), W (n x k), Y (m x n)
    case KernelKind::kAttention: {
      const AttentionShape& a = k.attention;
      const size_t q = e * a.batch * a.heads * a.q_len * a.head_dim;
      const size_t kv = e * a.batch * a.kv_heads * a.kv_len * a.head_dim;
      const size_t s = e * a.batch * a.heads * a.q_len * a.kv_len;
      if (!a.backward) return {q, kv, kv, s, q};  // Q K V S O
      return {q, kv, kv, q, s, s, q, kv, kv};     // Q K V dO P dS dQ dK dV
    }
    case KernelKind::kMemory: {
      const size_t n = static_cast<size_t>(k.rows * k.cols);
      const size_t t = e * n, row = e * static_cast<size_t>(k.cols);
      switch (k.pattern) {
        case MemoryPattern::kCopy:
          return {t, t};
        case MemoryPattern::kRmsNorm:
          return {t, row, t};
        case MemoryPattern::kRmsNormBackward:
          return {t, row, t, t};
        case MemoryPattern::kRope:
          return {t};
        case MemoryPattern::kSwiglu:
          return {t, t, t};
        case MemoryPattern::kSwigluBackward:
          return {t, t, t, t, t};
        case MemoryPattern::kBiasDropoutAdd:
          return {t, t, t, n};
        case MemoryPattern::kDropoutAddBackward:
          return {t, n, t};
        case MemoryPattern::kAdd:
          return {t, t, t};
      }
    }
  }
  return {};
}

std::vector<GemmShape> GemmsOf(const KernelSpec& k) {
  if (k.kind == KernelKind::kGemm) {
    // Y (m x n) = X W^T as in a linear layer: column-major Y^T (n x m) = op_T(W^T) X^T.
    return {GemmShape{
        .ta = true, .tb = false, .m = k.n, .n = k.m, .k = k.k, .lda = k.k, .ldb = k.k, .ldc = k.n}};
  }
  if (k.kind != KernelKind::kAttention) return {};
  const AttentionShape& a = k.attention;
  const int32_t batch = static_cast<int32_t>(a.batch * a.kv_heads);  // (sequence, KV group) pairs
  const int64_t rows = (a.heads / a.kv_heads) * a.q_len;             // query rows of one group
  const int64_t kv = a.kv_len, d = a.head_dim;
  const int64_t sq = rows * d, skv = kv * d, ss = rows * kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  // S (rows x kv) = Q K^T: column-major S^T (kv x rows) = op_T(K^T) Q^T.
  const GemmShape qk{.ta = true,
                     .tb = false,
                     .m = kv,
                     .n = rows,
                     .k = d,
                     .lda = d,
                     .ldb = d,
                     .ldc = kv,
                     .batch = batch,
                     .stride_a = skv,
                     .stride_b = sq,
                     .stride_c = ss,
                     .alpha = scale};
  // O (rows x d) = P V: O^T (d x rows) = V^T P^T.
  const GemmShape pv{.ta = false,
                     .tb = false,
                     .m = d,
                     .n = rows,
                     .k = kv,
                     .lda = d,
                     .ldb = kv,
                     .ldc = d,
                     .batch = batch,
                     .stride_a = skv,
                     .stride_b = ss,
                     .stride_c = sq};
  if (!a.backward) return {qk, pv};
  // dV (kv x d) = P^T dO: dV^T (d x kv) = dO^T op_T(P^T).
  const GemmShape dv{.ta = false,
                     .tb = true,
                     .m = d,
                     .n = kv,
                     .k = rows,
                     .lda = d,
                     .ldb = kv,
                     .ldc = d,
                     .batch = batch,
                     .stride_a = sq,
                     .stride_b = ss,
                     .stride_c = skv};
  // dP (rows x kv) = dO V^T: dP^T (kv x rows) = op_T(V^T) dO^T (the shape of Q K^T, unscaled).
  GemmShape dp = qk;
  dp.alpha = 1.0f;
  // dQ (rows x d) = dS K: dQ^T = K^T dS^T (the shape of P V, scaled).
  GemmShape dq = pv;
  dq.alpha = scale;
  // dK (kv x d) = dS^T Q: dK^T (d x kv) = Q^T op_T(dS^T) (the shape of dV, scaled).
  GemmShape dk = dv;
  dk.alpha = scale;
  return {qk, dv, dp, dq, dk};
}

std::unique_ptr<PreparedKernel> PrepareKernel(const KernelSpec& spec, cublasLtHandle_t handle) {
  if (spec.kind == KernelKind::kAttention && spec.attention.kv_len % 8 != 0) {
    throw EnvironmentError(
        fmt::format("{}: the cuda backend needs a sequence length that is a multiple of 8, not {}",
                    spec.name, spec.attention.kv_len));
  }
  if (spec.kind == KernelKind::kMemory && spec.cols % 8 != 0) {
    throw EnvironmentError(
        fmt::format("{}: the cuda backend's {} kernel needs rows of a multiple of 8 elements, "
                    "not {}",
                    spec.name, ToString(spec.pattern), spec.cols));
  }
  if (spec.kind == KernelKind::kMemory && spec.pattern == MemoryPattern::kRope &&
      spec.cols % 16 != 0) {
    throw EnvironmentError(
        fmt::format("{}: the cuda backend's RoPE kernel needs a head size that is a multiple "
                    "of 16, not {}",
                    spec.name, spec.cols));
  }
  auto p = std::make_unique<PreparedKernel>();
  p->spec = spec;
  size_t offset = 0;
  for (size_t bytes : TensorBytes(spec)) {
    p->offsets.push_back(offset);
    offset += AlignUp(bytes);
  }
  p->bytes = offset;
  for (const GemmShape& shape : GemmsOf(spec))
    p->gemms.push_back(std::make_unique<GemmPlan>(handle, shape));
  return p;
}

void LaunchKernel(const PreparedKernel& p, void* arena, cublasLtHandle_t lt, void* workspace,
                  uint64_t dropout_seed, cudaStream_t stream, int ordinal) {
  char* base = static_cast<char*>(arena);
  auto t = [&](size_t i) { return reinterpret_cast<Bf16*>(base + p.offsets[i]); };
  auto mask = [&](size_t i) { return reinterpret_cast<uint8_t*>(base + p.offsets[i]); };
  const KernelSpec& k = p.spec;
  const int64_t n = k.rows * k.cols;
  cudaError_t code = cudaSuccess;
  switch (k.kind) {
    case KernelKind::kGemm:
      p.gemms[0]->Run(lt, t(1), t(0), t(2), workspace, stream);  // Y^T = op_T(W^T) X^T
      return;
    case KernelKind::kAttention: {
      const AttentionShape& a = k.attention;
      const int64_t rows = a.batch * a.heads * a.q_len;
      if (!a.backward) {                                           // Q K V S O
        p.gemms[0]->Run(lt, t(1), t(0), t(3), workspace, stream);  // S = Q K^T / sqrt(d)
        CudaCheck(kernels::CausalSoftmax(t(3), rows, a.kv_len, a.q_len, stream), "causal softmax",
                  ordinal);
        p.gemms[1]->Run(lt, t(2), t(3), t(4), workspace, stream);  // O = P V
        return;
      }
      // Q K V dO P dS dQ dK dV: recompute P, then dV, dP, dS, dQ, dK (five GEMMs).
      p.gemms[0]->Run(lt, t(1), t(0), t(4), workspace, stream);  // S = Q K^T / sqrt(d)
      CudaCheck(kernels::CausalSoftmax(t(4), rows, a.kv_len, a.q_len, stream), "causal softmax",
                ordinal);
      p.gemms[1]->Run(lt, t(3), t(4), t(8), workspace, stream);  // dV = P^T dO
      p.gemms[2]->Run(lt, t(2), t(3), t(5), workspace, stream);  // dP = dO V^T
      CudaCheck(kernels::SoftmaxBackward(t(4), t(5), rows, a.kv_len, stream), "softmax backward",
                ordinal);
      p.gemms[3]->Run(lt, t(1), t(5), t(6), workspace, stream);  // dQ = dS K / sqrt(d)
      p.gemms[4]->Run(lt, t(0), t(5), t(7), workspace, stream);  // dK = dS^T Q / sqrt(d)
      return;
    }
    case KernelKind::kMemory:
      switch (k.pattern) {
        case MemoryPattern::kCopy:
          code = kernels::Copy(t(0), t(1), n, stream);
          break;
        case MemoryPattern::kRmsNorm:
          code = kernels::RmsNorm(t(0), t(1), t(2), k.rows, k.cols, stream);
          break;
        case MemoryPattern::kRmsNormBackward:
          code = kernels::RmsNormBackward(t(0), t(1), t(2), t(3), k.rows, k.cols, stream);
          break;
        case MemoryPattern::kRope:
          code = kernels::Rope(t(0), k.rows, k.cols, stream);
          break;
        case MemoryPattern::kSwiglu:
          code = kernels::Swiglu(t(0), t(1), t(2), n, stream);
          break;
        case MemoryPattern::kSwigluBackward:
          code = kernels::SwigluBackward(t(0), t(1), t(2), t(3), t(4), n, stream);
          break;
        case MemoryPattern::kBiasDropoutAdd:
          code = kernels::DropoutAdd(t(0), t(1), t(2), mask(3), n, dropout_seed, stream);
          break;
        case MemoryPattern::kDropoutAddBackward:
          code = kernels::DropoutBackward(t(0), mask(1), t(2), n, stream);
          break;
        case MemoryPattern::kAdd:
          code = kernels::Add(t(0), t(1), t(2), n, stream);
          break;
      }
      if (code != cudaSuccess) {
        throw EnvironmentError(
            fmt::format("CUDA device {}: kernel {} ({}, {} x {}) failed to launch: {}", ordinal,
                        k.name, ToString(k.pattern), k.rows, k.cols, cudaGetErrorString(code)));
      }
      return;
  }
}

}  // namespace kareus::measure::internal
