// SPDX-License-Identifier: Apache-2.0
// Memory-bound kernels of a transformer layer and the attention softmax, bf16 in HBM, fp32 in
// registers, 16-byte vector loads and stores (see kernels.h).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "measure/cuda/kernels.h"

namespace kareus::measure::internal::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1 << 16;  // grid-stride beyond this
constexpr float kKeep = 0.9f;        // dropout keep probability

using bf16 = __nv_bfloat16;

__host__ __device__ inline uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

__device__ inline float Unit(uint64_t h) {  // [-1, 1)
  return static_cast<float>(h >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

struct Pack {
  float v[8];
};

__device__ inline Pack Load(const Bf16* p) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const bf16* e = reinterpret_cast<const bf16*>(&raw);
  Pack out;
#pragma unroll
  for (int k = 0; k < 8; ++k) out.v[k] = __bfloat162float(e[k]);
  return out;
}

__device__ inline void Store(Bf16* p, const Pack& in) {
  uint4 raw;
  bf16* e = reinterpret_cast<bf16*>(&raw);
#pragma unroll
  for (int k = 0; k < 8; ++k) e[k] = __float2bfloat16(in.v[k]);
  *reinterpret_cast<uint4*>(p) = raw;
}

__device__ inline float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ inline float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide reduction (kThreads threads); every thread gets the result.
template <bool kMax>
__device__ inline float BlockReduce(float v) {
  __shared__ float partial[kThreads / 32];
  __shared__ float result;
  v = kMax ? WarpMax(v) : WarpSum(v);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < kThreads / 32 ? partial[lane] : (kMax ? -INFINITY : 0.0f);
    w = kMax ? WarpMax(w) : WarpSum(w);
    if (lane == 0) result = w;
  }
  __syncthreads();
  const float out = result;
  __syncthreads();  // partial/result are reused by the next reduction
  return out;
}

int Blocks(int64_t work) {
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

bool Aligned(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

#define KAREUS_GRID_STRIDE(i, n)                                                         \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__global__ void FillUniformKernel(Bf16* data, int64_t packs, uint64_t seed, float scale) {
  KAREUS_GRID_STRIDE(p, packs) {
    Pack out;
#pragma unroll
    for (int k = 0; k < 8; ++k) out.v[k] = scale * Unit(Mix(seed ^ Mix(p * 8 + k)));
    Store(data + p * 8, out);
  }
}

__global__ void FillMaskKernel(uint8_t* data, int64_t count, uint64_t seed) {
  KAREUS_GRID_STRIDE(i, count) {
    data[i] = (Mix(seed ^ Mix(i)) >> 40) < static_cast<uint64_t>(kKeep * 16777216.0f);
  }
}

__global__ void RmsNormKernel(const Bf16* x, const Bf16* w, Bf16* y, int64_t cols) {
  const int64_t packs = cols / 8;
  const Bf16* xr = x + blockIdx.x * cols;
  float sum = 0.0f;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack a = Load(xr + p * 8);
#pragma unroll
    for (int k = 0; k < 8; ++k) sum += a.v[k] * a.v[k];
  }
  const float r = rsqrtf(BlockReduce<false>(sum) / static_cast<float>(cols) + 1e-5f);
  Bf16* yr = y + blockIdx.x * cols;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    Pack a = Load(xr + p * 8);
    const Pack g = Load(w + p * 8);
#pragma unroll
    for (int k = 0; k < 8; ++k) a.v[k] = a.v[k] * r * g.v[k];
    Store(yr + p * 8, a);
  }
}

__global__ void RmsNormBackwardKernel(const Bf16* x, const Bf16* w, const Bf16* dy, Bf16* dx,
                                      int64_t cols) {
  const int64_t packs = cols / 8;
  const int64_t row = blockIdx.x * cols;
  float sum_sq = 0.0f, sum_dot = 0.0f;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack a = Load(x + row + p * 8), d = Load(dy + row + p * 8), g = Load(w + p * 8);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      sum_sq += a.v[k] * a.v[k];
      sum_dot += g.v[k] * d.v[k] * a.v[k];
    }
  }
  const float n = static_cast<float>(cols);
  const float r = rsqrtf(BlockReduce<false>(sum_sq) / n + 1e-5f);
  const float c = BlockReduce<false>(sum_dot) * r * r * r / n;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack a = Load(x + row + p * 8), d = Load(dy + row + p * 8), g = Load(w + p * 8);
    Pack out;
#pragma unroll
    for (int k = 0; k < 8; ++k) out.v[k] = r * g.v[k] * d.v[k] - a.v[k] * c;
    Store(dx + row + p * 8, out);
  }
}

// One thread per (row, 8 consecutive pairs of the first half).
__global__ void RopeKernel(Bf16* x, int64_t rows, int64_t head_dim) {
  const int64_t half_packs = head_dim / 16;
  KAREUS_GRID_STRIDE(t, rows * half_packs) {
    const int64_t row = t / half_packs, i0 = (t % half_packs) * 8;
    Bf16* lo = x + row * head_dim + i0;
    Bf16* hi = lo + head_dim / 2;
    Pack a = Load(lo), b = Load(hi);
    const float position = static_cast<float>(row % 8192);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float inv_freq =
          exp2f(-13.287712f * 2.0f * static_cast<float>(i0 + k) / static_cast<float>(head_dim));
      float s, c;
      __sincosf(position * inv_freq, &s, &c);
      const float u = a.v[k], v = b.v[k];
      a.v[k] = u * c - v * s;
      b.v[k] = v * c + u * s;
    }
    Store(lo, a);
    Store(hi, b);
  }
}

__device__ inline float Sigmoid(float g) { return 1.0f / (1.0f + __expf(-g)); }

__global__ void SwigluKernel(const Bf16* gate, const Bf16* up, Bf16* y, int64_t packs) {
  KAREUS_GRID_STRIDE(p, packs) {
    const Pack g = Load(gate + p * 8), u = Load(up + p * 8);
    Pack out;
#pragma unroll
    for (int k = 0; k < 8; ++k) out.v[k] = g.v[k] * Sigmoid(g.v[k]) * u.v[k];
    Store(y + p * 8, out);
  }
}

__global__ void SwigluBackwardKernel(const Bf16* dy, const Bf16* gate, const Bf16* up, Bf16* dgate,
                                     Bf16* dup, int64_t packs) {
  KAREUS_GRID_STRIDE(p, packs) {
    const Pack d = Load(dy + p * 8), g = Load(gate + p * 8), u = Load(up + p * 8);
    Pack dg, du;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float s = Sigmoid(g.v[k]);
      du.v[k] = d.v[k] * g.v[k] * s;
      dg.v[k] = d.v[k] * u.v[k] * s * (1.0f + g.v[k] * (1.0f - s));
    }
    Store(dgate + p * 8, dg);
    Store(dup + p * 8, du);
  }
}

__global__ void DropoutAddKernel(const Bf16* x, const Bf16* residual, Bf16* y, uint8_t* mask,
                                 int64_t packs, uint64_t seed) {
  KAREUS_GRID_STRIDE(p, packs) {
    const Pack a = Load(x + p * 8), r = Load(residual + p * 8);
    Pack out;
    uint2 m;
    uint8_t* mb = reinterpret_cast<uint8_t*>(&m);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const bool keep =
          (Mix(seed ^ Mix(p * 8 + k)) >> 40) < static_cast<uint64_t>(kKeep * 16777216.0f);
      mb[k] = keep;
      out.v[k] = r.v[k] + (keep ? a.v[k] / kKeep : 0.0f);
    }
    Store(y + p * 8, out);
    *reinterpret_cast<uint2*>(mask + p * 8) = m;
  }
}

__global__ void DropoutBackwardKernel(const Bf16* dy, const uint8_t* mask, Bf16* dx,
                                      int64_t packs) {
  KAREUS_GRID_STRIDE(p, packs) {
    const Pack d = Load(dy + p * 8);
    const uint2 m = *reinterpret_cast<const uint2*>(mask + p * 8);
    const uint8_t* mb = reinterpret_cast<const uint8_t*>(&m);
    Pack out;
#pragma unroll
    for (int k = 0; k < 8; ++k) out.v[k] = mb[k] ? d.v[k] / kKeep : 0.0f;
    Store(dx + p * 8, out);
  }
}

__global__ void AddKernel(const Bf16* a, const Bf16* b, Bf16* y, int64_t packs) {
  KAREUS_GRID_STRIDE(p, packs) {
    Pack x = Load(a + p * 8);
    const Pack z = Load(b + p * 8);
#pragma unroll
    for (int k = 0; k < 8; ++k) x.v[k] += z.v[k];
    Store(y + p * 8, x);
  }
}

__global__ void CopyKernel(const Bf16* x, Bf16* y, int64_t packs) {
  KAREUS_GRID_STRIDE(p, packs) {
    *reinterpret_cast<uint4*>(y + p * 8) = *reinterpret_cast<const uint4*>(x + p * 8);
  }
}

__global__ void CausalSoftmaxKernel(Bf16* scores, int64_t cols, int64_t q_len) {
  const int64_t packs = cols / 8;
  const int64_t query = blockIdx.x % q_len;
  const int64_t limit = ((2 * query + 1) * cols) / (2 * q_len);  // last visible key
  Bf16* row = scores + blockIdx.x * cols;
  float m = -INFINITY;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack a = Load(row + p * 8);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if (p * 8 + k <= limit) m = fmaxf(m, a.v[k]);
    }
  }
  m = BlockReduce<true>(m);
  float sum = 0.0f;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack a = Load(row + p * 8);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if (p * 8 + k <= limit) sum += __expf(a.v[k] - m);
    }
  }
  const float inv = 1.0f / BlockReduce<false>(sum);
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    Pack a = Load(row + p * 8);
#pragma unroll
    for (int k = 0; k < 8; ++k) a.v[k] = p * 8 + k <= limit ? __expf(a.v[k] - m) * inv : 0.0f;
    Store(row + p * 8, a);
  }
}

__global__ void SoftmaxBackwardKernel(const Bf16* p_all, Bf16* dp_all, int64_t cols) {
  const int64_t packs = cols / 8;
  const Bf16* p = p_all + blockIdx.x * cols;
  Bf16* dp = dp_all + blockIdx.x * cols;
  float dot = 0.0f;
  for (int64_t q = threadIdx.x; q < packs; q += blockDim.x) {
    const Pack a = Load(p + q * 8), d = Load(dp + q * 8);
#pragma unroll
    for (int k = 0; k < 8; ++k) dot += a.v[k] * d.v[k];
  }
  dot = BlockReduce<false>(dot);
  for (int64_t q = threadIdx.x; q < packs; q += blockDim.x) {
    const Pack a = Load(p + q * 8);
    Pack d = Load(dp + q * 8);
#pragma unroll
    for (int k = 0; k < 8; ++k) d.v[k] = a.v[k] * (d.v[k] - dot);
    Store(dp + q * 8, d);
  }
}

// Row kernels use one block per row; grids beyond 2^31 - 1 rows are not needed here.
bool RowsOk(int64_t rows, int64_t cols) {
  return rows >= 1 && rows < (int64_t{1} << 31) && cols >= 8 && cols % 8 == 0;
}
bool CountOk(int64_t n) { return n >= 8 && n % 8 == 0; }

}  // namespace

cudaError_t FillUniform(Bf16* data, int64_t count, uint64_t seed, float scale,
                        cudaStream_t stream) {
  if (!CountOk(count) || !Aligned(data)) return cudaErrorInvalidValue;
  FillUniformKernel<<<Blocks(count / 8), kThreads, 0, stream>>>(data, count / 8, Mix(seed), scale);
  return cudaGetLastError();
}

cudaError_t FillMask(uint8_t* data, int64_t count, uint64_t seed, cudaStream_t stream) {
  if (count < 1) return cudaErrorInvalidValue;
  FillMaskKernel<<<Blocks(count), kThreads, 0, stream>>>(data, count, Mix(seed));
  return cudaGetLastError();
}

cudaError_t RmsNorm(const Bf16* x, const Bf16* w, Bf16* y, int64_t rows, int64_t cols,
                    cudaStream_t stream) {
  if (!RowsOk(rows, cols) || !Aligned(x) || !Aligned(w) || !Aligned(y))
    return cudaErrorInvalidValue;
  RmsNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, w, y, cols);
  return cudaGetLastError();
}

cudaError_t RmsNormBackward(const Bf16* x, const Bf16* w, const Bf16* dy, Bf16* dx, int64_t rows,
                            int64_t cols, cudaStream_t stream) {
  if (!RowsOk(rows, cols) || !Aligned(x) || !Aligned(w) || !Aligned(dy) || !Aligned(dx))
    return cudaErrorInvalidValue;
  RmsNormBackwardKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, w, dy, dx, cols);
  return cudaGetLastError();
}

cudaError_t Rope(Bf16* x, int64_t rows, int64_t head_dim, cudaStream_t stream) {
  if (rows < 1 || head_dim < 16 || head_dim % 16 != 0 || !Aligned(x)) return cudaErrorInvalidValue;
  RopeKernel<<<Blocks(rows * (head_dim / 16)), kThreads, 0, stream>>>(x, rows, head_dim);
  return cudaGetLastError();
}

cudaError_t Swiglu(const Bf16* gate, const Bf16* up, Bf16* y, int64_t n, cudaStream_t stream) {
  if (!CountOk(n) || !Aligned(gate) || !Aligned(up) || !Aligned(y)) return cudaErrorInvalidValue;
  SwigluKernel<<<Blocks(n / 8), kThreads, 0, stream>>>(gate, up, y, n / 8);
  return cudaGetLastError();
}

cudaError_t SwigluBackward(const Bf16* dy, const Bf16* gate, const Bf16* up, Bf16* dgate, Bf16* dup,
                           int64_t n, cudaStream_t stream) {
  if (!CountOk(n) || !Aligned(dy) || !Aligned(gate) || !Aligned(up) || !Aligned(dgate) ||
      !Aligned(dup)) {
    return cudaErrorInvalidValue;
  }
  SwigluBackwardKernel<<<Blocks(n / 8), kThreads, 0, stream>>>(dy, gate, up, dgate, dup, n / 8);
  return cudaGetLastError();
}

cudaError_t DropoutAdd(const Bf16* x, const Bf16* residual, Bf16* y, uint8_t* mask, int64_t n,
                       uint64_t seed, cudaStream_t stream) {
  if (!CountOk(n) || !Aligned(x) || !Aligned(residual) || !Aligned(y) || !Aligned(mask))
    return cudaErrorInvalidValue;
  DropoutAddKernel<<<Blocks(n / 8), kThreads, 0, stream>>>(x, residual, y, mask, n / 8, Mix(seed));
  return cudaGetLastError();
}

cudaError_t DropoutBackward(const Bf16* dy, const uint8_t* mask, Bf16* dx, int64_t n,
                            cudaStream_t stream) {
  if (!CountOk(n) || !Aligned(dy) || !Aligned(mask) || !Aligned(dx)) return cudaErrorInvalidValue;
  DropoutBackwardKernel<<<Blocks(n / 8), kThreads, 0, stream>>>(dy, mask, dx, n / 8);
  return cudaGetLastError();
}

cudaError_t Add(const Bf16* a, const Bf16* b, Bf16* y, int64_t n, cudaStream_t stream) {
  if (!CountOk(n) || !Aligned(a) || !Aligned(b) || !Aligned(y)) return cudaErrorInvalidValue;
  AddKernel<<<Blocks(n / 8), kThreads, 0, stream>>>(a, b, y, n / 8);
  return cudaGetLastError();
}

cudaError_t Copy(const Bf16* x, Bf16* y, int64_t n, cudaStream_t stream) {
  if (!CountOk(n) || !Aligned(x) || !Aligned(y)) return cudaErrorInvalidValue;
  CopyKernel<<<Blocks(n / 8), kThreads, 0, stream>>>(x, y, n / 8);
  return cudaGetLastError();
}

cudaError_t CausalSoftmax(Bf16* scores, int64_t rows, int64_t cols, int64_t q_len,
                          cudaStream_t stream) {
  if (!RowsOk(rows, cols) || q_len < 1 || !Aligned(scores)) return cudaErrorInvalidValue;
  CausalSoftmaxKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(scores, cols, q_len);
  return cudaGetLastError();
}

cudaError_t SoftmaxBackward(const Bf16* p, Bf16* dp, int64_t rows, int64_t cols,
                            cudaStream_t stream) {
  if (!RowsOk(rows, cols) || !Aligned(p) || !Aligned(dp)) return cudaErrorInvalidValue;
  SoftmaxBackwardKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(p, dp, cols);
  return cudaGetLastError();
}

}  // namespace kareus::measure::internal::kernels
