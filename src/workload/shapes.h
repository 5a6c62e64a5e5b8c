// SPDX-License-Identifier: Apache-2.0
// Shapes of one TP/CP shard and the kernel builders shared by the op sequences.
#pragma once

#include <cstdint>
#include <string>

#include "kareus/workload/ops.h"

namespace kareus::workload::internal {

inline constexpr double kBf16Bytes = 2.0;
inline constexpr int64_t kGemmTileM = 128;
inline constexpr int64_t kGemmTileN = 256;
inline constexpr int64_t kAttentionTileQ = 128;  // FlashAttention-2 query block
inline constexpr double kMemoryBytesPerBlock = 65536.0;
// Arithmetic of memory-bound kernels, per byte moved (RMSNorm: square, sum, rsqrt, scale; RoPE:
// two multiply-adds per element; elementwise add/dropout/SwiGLU: a few per element).
inline constexpr double kNormFlopsPerByte = 2.0;
inline constexpr double kRopeFlopsPerByte = 1.5;
inline constexpr double kElementwiseFlopsPerByte = 1.0;

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t PaddedVocab(int64_t vocab, int tp);

struct Shard {
  Shard(const Workload& w, int batch);
  int batch;          // sequences
  int64_t seq_local;  // S / CP
  int64_t seq_full;   // S
  int64_t tokens;     // batch x S / CP
  int64_t hidden;
  int64_t heads;   // per TP rank
  int64_t groups;  // KV groups per TP rank
  int64_t head_dim;
  int64_t ffn;    // per TP rank
  int64_t vocab;  // padded vocabulary per TP rank
  int tp;
  int cp;
  bool qk_norm;
};

Op Gemm(std::string name, std::string module, int64_t m, int64_t n, int64_t k);
Op Memory(std::string name, std::string module, SlotGroup group, double bytes,
          double flops_per_byte);
Op Collective(std::string name, CollectiveType type, double bytes, int group_size, int tensors);
Op Attention(const Shard& s, bool backward);

}  // namespace kareus::workload::internal
