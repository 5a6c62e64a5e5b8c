// SPDX-License-Identifier: Apache-2.0
// Per-layer kernel sequences of Megatron-Core's GPT layer on one TP/CP shard (bf16), following
// the op order of the published runtime (reference/kareus-official.md §1.2).
#include <algorithm>
#include <cmath>

#include "kareus/common/error.h"
#include "kareus/workload/ops.h"
#include "workload/shapes.h"

namespace kareus::workload {

const char* ToString(OpKind kind) {
  switch (kind) {
    case OpKind::kGemm:
      return "gemm";
    case OpKind::kAttention:
      return "attention";
    case OpKind::kMemory:
      return "memory";
    case OpKind::kCollective:
      return "collective";
  }
  return "?";
}

const char* ToString(SlotGroup group) {
  switch (group) {
    case SlotGroup::kNorm:
      return "norm";
    case SlotGroup::kLinear:
      return "linear";
    case SlotGroup::kRope:
      return "rope";
    case SlotGroup::kAttn:
      return "attn";
    case SlotGroup::kActivation:
      return "activation";
    case SlotGroup::kNone:
      return "none";
  }
  return "?";
}

const char* ToString(CollectiveType type) {
  switch (type) {
    case CollectiveType::kAllReduce:
      return "all_reduce";
    case CollectiveType::kAllGather:
      return "all_gather";
    case CollectiveType::kReduceScatter:
      return "reduce_scatter";
    case CollectiveType::kP2P:
      return "p2p";
  }
  return "?";
}

Json Op::ToJson() const {
  Json j{{"name", name}, {"module", module}, {"kind", workload::ToString(kind)}};
  if (kind == OpKind::kCollective) {
    j["type"] = workload::ToString(collective);
    j["bytes"] = bytes;
    j["group_size"] = group_size;
    j["tensors"] = tensors;
  } else {
    j["group"] = workload::ToString(group);
    j["flops"] = flops;
    j["bytes"] = bytes;
    j["tiles"] = tiles;
    if (kind == OpKind::kGemm) j["shape"] = {m, n, k};
  }
  return j;
}

Op GemmOp(std::string name, int64_t m, int64_t n, int64_t k) {
  std::string module = name;
  return internal::Gemm(std::move(name), std::move(module), m, n, k);
}

Op MemoryOp(std::string name, double bytes) {
  std::string module = name;
  return internal::Memory(std::move(name), std::move(module), SlotGroup::kNone, bytes, 0.0);
}

namespace internal {

Op Gemm(std::string name, std::string module, int64_t m, int64_t n, int64_t k) {
  Op op;
  op.name = std::move(name);
  op.module = std::move(module);
  op.kind = OpKind::kGemm;
  op.group = SlotGroup::kLinear;
  op.m = m;
  op.n = n;
  op.k = k;
  op.flops = 2.0 * double(m) * double(n) * double(k);
  op.bytes = kBf16Bytes * (double(m) * k + double(k) * n + double(m) * n);
  // cuBLAS/CUTLASS BF16 kernels for large GEMMs on Ampere/Hopper use 128x256 CTA tiles, one CTA
  // per SM; the tile count sets the waves (DESIGN.md §5).
  op.tiles = CeilDiv(m, kGemmTileM) * CeilDiv(n, kGemmTileN);
  return op;
}

Op Memory(std::string name, std::string module, SlotGroup group, double bytes,
          double flops_per_byte) {
  Op op;
  op.name = std::move(name);
  op.module = std::move(module);
  op.kind = OpKind::kMemory;
  op.group = group;
  op.bytes = bytes;
  op.flops = bytes * flops_per_byte;
  // Elementwise kernels launch far more blocks than SMs; only bandwidth matters.
  op.tiles = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(bytes / kMemoryBytesPerBlock)));
  return op;
}

Op Collective(std::string name, CollectiveType type, double bytes, int group_size, int tensors) {
  Op op;
  op.name = name;
  op.module = std::move(name);
  op.kind = OpKind::kCollective;
  op.collective = type;
  op.bytes = bytes;
  op.group_size = group_size;
  op.tensors = tensors;
  return op;
}

Shard::Shard(const Workload& w, int batch_in)
    : batch(batch_in),
      seq_local(w.sequence_length / w.parallelism.cp),
      seq_full(w.sequence_length),
      tokens(int64_t{batch_in} * (w.sequence_length / w.parallelism.cp)),
      hidden(w.model.hidden),
      heads(w.model.heads / w.parallelism.tp),
      groups(w.model.kv_groups / w.parallelism.tp),
      head_dim(w.model.head_dim),
      ffn(w.model.ffn / w.parallelism.tp),
      vocab(PaddedVocab(w.model.vocab, w.parallelism.tp) / w.parallelism.tp),
      tp(w.parallelism.tp),
      cp(w.parallelism.cp),
      qk_norm(w.model.qk_norm) {}

int64_t PaddedVocab(int64_t vocab, int tp) {
  // Megatron pads the vocabulary to a multiple of make-vocab-size-divisible-by (128) x TP.
  const int64_t multiple = 128 * int64_t{tp};
  return CeilDiv(vocab, multiple) * multiple;
}

// Flash attention (causal). With CP, a rank's S/CP queries attend on average to half of the
// S keys thanks to Megatron's load-balanced chunking, so FLOPs = 4 b h_local d (S/CP) S / 2.
Op Attention(const Shard& s, bool backward) {
  Op op;
  op.module = "core_attention";
  op.name = backward ? "core_attention.bwd" : "core_attention";
  op.kind = OpKind::kAttention;
  op.group = SlotGroup::kAttn;
  const double fwd_flops =
      4.0 * s.batch * s.heads * s.head_dim * double(s.seq_local) * double(s.seq_full) * 0.5;
  // FlashAttention's backward runs five matmuls against the forward's two (Dao 2023): 2.5x.
  op.flops = backward ? 2.5 * fwd_flops : fwd_flops;
  const double q = double(s.tokens) * s.heads * s.head_dim;
  const double kv = double(s.batch) * s.seq_full * s.groups * s.head_dim;
  op.bytes = kBf16Bytes * (backward ? (4.0 * q + 4.0 * kv) : (2.0 * q + 2.0 * kv));
  op.tiles = int64_t{s.batch} * s.heads * CeilDiv(s.seq_local, kAttentionTileQ);
  return op;
}

}  // namespace internal

using internal::Attention;
using internal::Collective;
using internal::Gemm;
using internal::kBf16Bytes;
using internal::kElementwiseFlopsPerByte;
using internal::kNormFlopsPerByte;
using internal::kRopeFlopsPerByte;
using internal::Memory;
using internal::Shard;

std::vector<Op> LayerForwardOps(const Workload& workload, int batch) {
  const Shard s(workload, batch);
  const double th = double(s.tokens) * s.hidden;  // elements of one [T, H] activation
  const int64_t qkv_out = (s.heads + 2 * s.groups) * s.head_dim;
  const int64_t qk_out = (s.heads + s.groups) * s.head_dim;
  std::vector<Op> ops;
  // Bytes of memory-bound kernels: reads + writes of bf16 tensors (+1-byte dropout masks).
  ops.push_back(Memory("input_layernorm", "input_layernorm", SlotGroup::kNorm, kBf16Bytes * 2 * th,
                       kNormFlopsPerByte));
  ops.push_back(Gemm("linear_qkv", "linear_qkv", s.tokens, qkv_out, s.hidden));
  double post_bytes = kBf16Bytes * 2.0 * s.tokens * qkv_out;
  if (s.qk_norm) post_bytes += kBf16Bytes * 2.0 * s.tokens * qk_out;
  ops.push_back(Memory("qkv_post", "qkv_post", SlotGroup::kRope, post_bytes, kNormFlopsPerByte));
  ops.push_back(Memory("rotary", "rotary", SlotGroup::kRope, kBf16Bytes * 2.0 * s.tokens * qk_out,
                       kRopeFlopsPerByte));
  if (s.cp > 1) {
    // All-gather of K and V into full-length buffers [S, b, G/TP, d] (kareus-official.md §1.5).
    const double gathered = kBf16Bytes * double(s.batch) * s.seq_full * s.groups * s.head_dim;
    ops.push_back(
        Collective("cp_all_gather_kv", CollectiveType::kAllGather, 2 * gathered, s.cp, 2));
  }
  ops.push_back(Attention(s, /*backward=*/false));
  ops.push_back(Gemm("linear_proj", "linear_proj", s.tokens, s.hidden, s.heads * s.head_dim));
  if (s.tp > 1) {
    ops.push_back(
        Collective("tp_all_reduce", CollectiveType::kAllReduce, kBf16Bytes * th, s.tp, 1));
  }
  ops.push_back(Memory("self_attn_bda", "self_attn_bda", SlotGroup::kNorm, kBf16Bytes * 3 * th + th,
                       kElementwiseFlopsPerByte));
  ops.push_back(Memory("pre_mlp_layernorm", "pre_mlp_layernorm", SlotGroup::kNorm,
                       kBf16Bytes * 2 * th, kNormFlopsPerByte));
  ops.push_back(Gemm("linear_fc1", "linear_fc1", s.tokens, 2 * s.ffn, s.hidden));
  ops.push_back(Memory("activation", "activation", SlotGroup::kActivation,
                       kBf16Bytes * 3.0 * s.tokens * s.ffn, kElementwiseFlopsPerByte));
  ops.push_back(Gemm("linear_fc2", "linear_fc2", s.tokens, s.hidden, s.ffn));
  if (s.tp > 1) {
    ops.push_back(
        Collective("tp_all_reduce", CollectiveType::kAllReduce, kBf16Bytes * th, s.tp, 1));
  }
  ops.push_back(Memory("mlp_bda", "mlp_bda", SlotGroup::kNorm, kBf16Bytes * 3 * th + th,
                       kElementwiseFlopsPerByte));
  return ops;
}

std::vector<Op> LayerBackwardOps(const Workload& workload, int batch) {
  const Shard s(workload, batch);
  const double th = double(s.tokens) * s.hidden;
  const int64_t qkv_out = (s.heads + 2 * s.groups) * s.head_dim;
  const int64_t qk_out = (s.heads + s.groups) * s.head_dim;
  std::vector<Op> ops;
  // Backward of Y[T x N] = X[T x K] W[K x N]: dgrad dX = dY W^T (T x K, inner N) and
  // wgrad dW = X^T dY (K x N, inner T); one module, two kernels, one launch slot.
  auto linear_backward = [&](const std::string& module, int64_t n_out, int64_t k_in) {
    ops.push_back(Gemm(module + ".dgrad", module, s.tokens, k_in, n_out));
    ops.push_back(Gemm(module + ".wgrad", module, k_in, n_out, s.tokens));
  };
  auto all_reduce = [&]() {
    if (s.tp > 1) {
      ops.push_back(
          Collective("tp_all_reduce", CollectiveType::kAllReduce, kBf16Bytes * th, s.tp, 1));
    }
  };
  ops.push_back(Memory("mlp_bda.bwd", "mlp_bda", SlotGroup::kNorm, kBf16Bytes * 2 * th + th,
                       kElementwiseFlopsPerByte));
  linear_backward("linear_fc2", s.hidden, s.ffn);
  ops.push_back(Memory("activation.bwd", "activation", SlotGroup::kActivation,
                       kBf16Bytes * 5.0 * s.tokens * s.ffn, kElementwiseFlopsPerByte));
  linear_backward("linear_fc1", 2 * s.ffn, s.hidden);
  all_reduce();
  ops.push_back(Memory("pre_mlp_layernorm.bwd", "pre_mlp_layernorm", SlotGroup::kNorm,
                       kBf16Bytes * 3 * th, kNormFlopsPerByte));
  ops.push_back(Memory("mlp_residual_fork.bwd", "mlp_residual_fork", SlotGroup::kNorm,
                       kBf16Bytes * 3 * th, kElementwiseFlopsPerByte));
  ops.push_back(Memory("self_attn_bda.bwd", "self_attn_bda", SlotGroup::kNorm,
                       kBf16Bytes * 2 * th + th, kElementwiseFlopsPerByte));
  linear_backward("linear_proj", s.hidden, s.heads * s.head_dim);
  const double gathered = kBf16Bytes * double(s.batch) * s.seq_full * s.groups * s.head_dim;
  if (s.cp > 1) {
    // One persistent K/V buffer per nanobatch is reused by every layer, so backward re-gathers
    // this layer's K/V (kareus-official.md §1.5, §8.3).
    ops.push_back(
        Collective("cp_all_gather_kv", CollectiveType::kAllGather, 2 * gathered, s.cp, 2));
  }
  ops.push_back(Attention(s, /*backward=*/true));
  if (s.cp > 1) {
    ops.push_back(
        Collective("cp_reduce_scatter_kv", CollectiveType::kReduceScatter, 2 * gathered, s.cp, 2));
  }
  ops.push_back(Memory("rotary.bwd", "rotary", SlotGroup::kRope,
                       kBf16Bytes * 2.0 * s.tokens * qk_out, kRopeFlopsPerByte));
  double post_bytes = kBf16Bytes * 2.0 * s.tokens * qkv_out;
  if (s.qk_norm) post_bytes += kBf16Bytes * 3.0 * s.tokens * qk_out;
  ops.push_back(
      Memory("qkv_post.bwd", "qkv_post", SlotGroup::kRope, post_bytes, kNormFlopsPerByte));
  linear_backward("linear_qkv", qkv_out, s.hidden);
  all_reduce();
  ops.push_back(Memory("input_layernorm.bwd", "input_layernorm", SlotGroup::kNorm,
                       kBf16Bytes * 3 * th, kNormFlopsPerByte));
  ops.push_back(Memory("attn_residual_fork.bwd", "attn_residual_fork", SlotGroup::kNorm,
                       kBf16Bytes * 3 * th, kElementwiseFlopsPerByte));
  return ops;
}

}  // namespace kareus::workload
