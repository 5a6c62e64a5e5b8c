// SPDX-License-Identifier: Apache-2.0
// The CUDA kernels of the real-GPU backend (kernels.cu): the memory-bound ops of a transformer
// layer and the softmax of the unfused attention, on bf16 tensors. Host-callable launchers,
// asynchronous on `stream`; each returns the launch's error (cudaSuccess when queued).
// Element counts and row lengths must be multiples of 8 (16-byte vectors), pointers 16-byte
// aligned; a launcher returns cudaErrorInvalidValue otherwise.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace kareus::measure::internal::kernels {

using Bf16 = uint16_t;  // bf16 bits (the device code reads them as __nv_bfloat16)

// Uniform values in [-scale, scale) from a counter hash of (seed, index).
cudaError_t FillUniform(Bf16* data, int64_t count, uint64_t seed, float scale, cudaStream_t stream);
// Dropout masks: bytes that are 1 with probability 0.9, from (seed, index).
cudaError_t FillMask(uint8_t* data, int64_t count, uint64_t seed, cudaStream_t stream);

// y = x / sqrt(mean(x^2) + eps) * w, over `rows` rows of `cols` elements.
cudaError_t RmsNorm(const Bf16* x, const Bf16* w, Bf16* y, int64_t rows, int64_t cols,
                    cudaStream_t stream);
// dx of RmsNorm from x, w and dy.
cudaError_t RmsNormBackward(const Bf16* x, const Bf16* w, const Bf16* dy, Bf16* dx, int64_t rows,
                            int64_t cols, cudaStream_t stream);
// Rotary embedding in place: each row of `head_dim` elements rotates the pairs (i, i + d/2) by
// position x 10000^(-2i/d), the row's position being row % 8192.
cudaError_t Rope(Bf16* x, int64_t rows, int64_t head_dim, cudaStream_t stream);
// y = silu(gate) * up, and its backward (dgate, dup from dy, gate, up).
cudaError_t Swiglu(const Bf16* gate, const Bf16* up, Bf16* y, int64_t n, cudaStream_t stream);
cudaError_t SwigluBackward(const Bf16* dy, const Bf16* gate, const Bf16* up, Bf16* dgate, Bf16* dup,
                           int64_t n, cudaStream_t stream);
// y = residual + x * mask / 0.9 with a fresh mask from `seed` (written), and its backward.
cudaError_t DropoutAdd(const Bf16* x, const Bf16* residual, Bf16* y, uint8_t* mask, int64_t n,
                       uint64_t seed, cudaStream_t stream);
cudaError_t DropoutBackward(const Bf16* dy, const uint8_t* mask, Bf16* dx, int64_t n,
                            cudaStream_t stream);
// y = a + b; y = x.
cudaError_t Add(const Bf16* a, const Bf16* b, Bf16* y, int64_t n, cudaStream_t stream);
cudaError_t Copy(const Bf16* x, Bf16* y, int64_t n, cudaStream_t stream);

// Causal softmax in place over `rows` rows of `cols` scores (already scaled). Rows come in blocks
// of q_len queries; query i of a block sits at key position floor((i + 0.5) cols / q_len) and
// attends to keys at or before it (masked scores become 0).
cudaError_t CausalSoftmax(Bf16* scores, int64_t rows, int64_t cols, int64_t q_len,
                          cudaStream_t stream);
// Softmax backward in place: dp <- p * (dp - sum_j p_j dp_j), per row.
cudaError_t SoftmaxBackward(const Bf16* p, Bf16* dp, int64_t rows, int64_t cols,
                            cudaStream_t stream);

}  // namespace kareus::measure::internal::kernels
