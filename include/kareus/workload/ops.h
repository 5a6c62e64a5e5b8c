// SPDX-License-Identifier: Apache-2.0
// The per-layer kernel sequence of a transformer layer, exact for one TP/CP shard, and the
// partitions the optimizer tunes (reference/kareus-official.md §1, DESIGN.md §4).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kareus/common/json.h"
#include "kareus/schedule/schedule.h"
#include "kareus/workload/workload.h"

namespace kareus::workload {

enum class OpKind { kGemm, kAttention, kMemory, kCollective };
const char* ToString(OpKind kind);

// Launch-slot groups of the published runtime (partition_base.py::_build_overlap_slots).
// norm/rope/activation are memory-bound; consecutive ops of one such group share a slot.
enum class SlotGroup { kNorm, kLinear, kRope, kAttn, kActivation, kNone };
const char* ToString(SlotGroup group);

enum class CollectiveType { kAllReduce, kAllGather, kReduceScatter, kP2P };
const char* ToString(CollectiveType type);  // "all_reduce", "all_gather", "reduce_scatter", "p2p"

// One kernel. For compute kernels: FLOPs, HBM bytes and thread-block tiles; for a collective:
// its type, buffer bytes and group size. Backward GEMMs of one module (dgrad, wgrad) are separate
// kernels of the same module; slots are per module.
struct Op {
  std::string name;    // kernel, e.g. "linear_fc1.dgrad"
  std::string module;  // module it belongs to, e.g. "linear_fc1"
  OpKind kind = OpKind::kMemory;
  SlotGroup group = SlotGroup::kNone;
  double flops = 0.0;  // floating-point operations (multiply-add = 2)
  double bytes = 0.0;  // HBM bytes read + written (for a collective: the full buffer, all tensors)
  int64_t tiles = 0;   // thread blocks of the kernel (GEMM: 128x256 output tiles)
  // GEMM shape (kind == kGemm): C[m x n] += A[m x k] B[k x n]
  int64_t m = 0, n = 0, k = 0;
  // Collective fields (kind == kCollective).
  CollectiveType collective = CollectiveType::kAllReduce;
  int group_size = 1;
  int tensors = 1;  // buffers moved by one launch (K and V: 2)

  Json ToJson() const;
};

// A standalone bf16 GEMM C[m x n] = A[m x k] B[k x n] and a memory-bound elementwise kernel
// moving `bytes`, shaped as the workload's own kernels (tiles, FLOPs, bytes): what a replay of a
// microbenchmark (data/validation's power probe) runs on the emulator.
Op GemmOp(std::string name, int64_t m, int64_t n, int64_t k);
Op MemoryOp(std::string name, double bytes);

// A named launch point: the collective starts when compute op `op_index` starts.
struct Slot {
  std::string name;  // "norm_0", "linear_1", ...
  int op_index = 0;  // index into the partition's compute ops
};

// A partition type: the compute of one nanobatch overlapped with the other nanobatch's
// collective. Shapes are identical for every layer and stage, so one type serves them all.
struct PartitionType {
  std::string name;  // "fwd_attn", "bwd_qkv_rs", "fwd_trail", ...
  schedule::Direction direction = schedule::Direction::kForward;
  std::vector<Op> compute_ops;            // one nanobatch (microbatch/2 sequences)
  Op collective;                          // kind == kCollective
  std::vector<Slot> slots;                // every slot of the compute ops, in order
  std::vector<std::string> launch_slots;  // the legal launch slots (the searched ones)
  std::vector<int> sm_choices;            // legal comm SM counts
  bool tunable = true;                    // trailing partitions run with fixed knobs
  int fixed_sms = 20;  // knobs of a non-tunable partition (published trail config)
  std::string fixed_slot = "norm_0";

  int SlotIndex(const std::string& slot) const;  // op index, or -1 if unknown
  int64_t SpaceSize(int clocks) const {          // clocks x SMs x launch slots
    return static_cast<int64_t>(clocks) * static_cast<int64_t>(sm_choices.size()) *
           static_cast<int64_t>(launch_slots.size());
  }
  double ComputeFlops() const;
  Json ToJson() const;
};

// How often a partition type occurs in one instruction. `without_collective` of those
// occurrences have no collective to hide (the first NB0 partition of a block, the last NB1
// one): they run the compute ops alone.
struct PartitionUse {
  int type = 0;  // index into WorkloadModel::partition_types
  int count = 0;
  int without_collective = 0;
};

// One forward or backward pipeline instruction of a stage.
struct InstructionModel {
  schedule::Direction direction = schedule::Direction::kForward;
  // Nanobatched execution: the partitions in execution order (indices into partition_types),
  // with a flag telling whether that occurrence carries its collective.
  struct Step {
    int type = 0;
    bool has_collective = true;
  };
  std::vector<Step> sequence;
  std::vector<PartitionUse> uses;  // the same, aggregated per type
  // Sequential (non-nanobatched) execution: the kernels of the full microbatch in order,
  // collectives included (they run after the compute that produces their input).
  std::vector<Op> sequential_ops;
  // Work outside the transformer block, run sequentially on the full microbatch (embedding,
  // final norm + output GEMM + loss, and their backward), collectives included.
  std::vector<Op> non_partition_ops;
  // Activation (forward) or gradient (backward) sent to the neighbouring stage after the
  // instruction; bytes == 0 when there is no neighbour in that direction.
  Op p2p_send;
  double flops = 0.0;  // all compute kernels of the instruction, full microbatch
};

// One bucket of the data-parallel gradient reduction (Megatron-Core DDP): the all-reduce
// (reduce-scatter with the distributed optimizer) of a group of parameters' gradients over the
// DP x CP replicas, launched once the backward has produced all of them.
struct GradientBucket {
  Op collective;            // kCollective; bytes = parameters x reduce bytes, group = DP x CP
  double parameters = 0.0;  // parameters of this GPU's shard in the bucket
  int ready_after = 0;      // complete when kernel `ready_after` of BackwardKernelOrder has ended
};

// The model of one (stage, chunk) unit: with interleaved 1F1B every stage holds several model
// chunks (virtual stages), each with its own layers and instructions; otherwise chunk 0 only.
struct StageModel {
  int stage = 0;
  int chunk = 0;
  int layers = 0;
  int gpus = 1;  // TP x CP x DP
  InstructionModel forward;
  InstructionModel backward;
  // The unit's gradient buckets in launch order (the backward completes the last layers'
  // gradients first); empty without data-parallel gradients.
  std::vector<GradientBucket> gradient_buckets;
};

// How the gradient reduction runs (all stages alike).
struct GradientSyncModel {
  bool enabled = false;  // DP x CP > 1
  int group_size = 1;    // DP x CP replicas reducing each gradient
  // The group spans nodes of kGpusPerNode GPUs (TP x CP x DP > 8): the ring's slowest links are
  // the inter-node network (the GPU preset's inter_node_* figures); else NVLink.
  bool inter_node = false;
  CollectiveType collective = CollectiveType::kAllReduce;
  bool overlap = true;
  double bucket_parameters = 0.0;
  std::vector<int> sm_choices;  // SMs the planner may give the reduction kernel
};

inline constexpr int kGpusPerNode = 8;  // HGX/DGX nodes (p4d, p5)

struct WorkloadModel {
  Workload workload;
  bool nanobatching = true;                    // false when the microbatch cannot be split in two
  std::vector<PartitionType> partition_types;  // empty when !nanobatching
  // One entry per (stage, chunk) unit, stage-major: index stage * chunks + chunk (with one
  // chunk per stage, index = stage).
  std::vector<StageModel> stages;
  int num_stages = 1;  // pipeline stages (PP)
  int num_chunks = 1;  // model chunks per stage (virtual_stages)
  GradientSyncModel gradient_sync;

  const PartitionType& Type(const std::string& name) const;  // KAREUS_CHECKs that it exists
  // The unit of (stage, chunk); KAREUS_CHECKs the range.
  const StageModel& Unit(int stage, int chunk) const;
  const InstructionModel& Instruction(int stage, schedule::Direction direction) const;  // chunk 0
  const InstructionModel& Instruction(int stage, int chunk, schedule::Direction direction) const;
  double IterationFlops() const;  // all GPUs of one pipeline replica x dp, one iteration
  Json ToJson() const;            // the `kareus partitions --json` document
};

// Per-layer kernel sequences for `batch` sequences on one TP/CP shard.
std::vector<Op> LayerForwardOps(const Workload& workload, int batch);
std::vector<Op> LayerBackwardOps(const Workload& workload, int batch);

// Whether a kernel of the work outside the transformer block (non_partition_ops) runs before
// the block: the embedding in forward; the loss, output layer and final norm in backward.
bool RunsBeforeBlock(const Op& op, schedule::Direction direction);

// Builds the whole model: op sequences, collectives, partitions and their counts per stage.
WorkloadModel BuildWorkloadModel(const Workload& workload);

// The fixed work of one instruction in nanobatched execution: the kernels outside the
// transformer block (non_partition_ops) followed by the compute of every partition occurrence
// that carries no collective, run back to back. Empty when there is none.
std::vector<Op> FixedWorkOps(const WorkloadModel& model, int stage, schedule::Direction direction);
std::vector<Op> FixedWorkOps(const WorkloadModel& model, int stage, int chunk,
                             schedule::Direction direction);

// The backward of (stage, chunk) in sequential execution in the order the GPU runs it: the
// loss and output layer (last unit), then per layer, last layer first, its recomputed forward
// (full recompute) and its backward kernels, then the embedding (first unit). The same kernels
// as sequential_ops + non_partition_ops; gradient buckets refer to positions in it.
std::vector<Op> BackwardKernelOrder(const WorkloadModel& model, int stage, int chunk);

// Where the buckets are reduced (schedule::GradientSync of the DAG):
//   overlap: the stage's last instruction (the last backward of chunk 0) reduces the buckets it
//     completes before it ends during it or right after it (LastBackwardBuckets); the sync
//     node of (stage, 0), the tail, the buckets complete only when it ends; the sync node of
//     (stage, c > 0) every bucket of chunk c, after the chunk's last backward, on the
//     communication stream while the stage's later instructions compute;
//   no overlap: nothing with the backwards; the one sync node of the stage, after its last
//     instruction, every bucket of every chunk (Megatron-LM reduces them in
//     finalize_model_grads).
// Empty without data-parallel gradients.
std::vector<GradientBucket> LastBackwardBuckets(const WorkloadModel& model, int stage);
std::vector<GradientBucket> GradientSyncBuckets(const WorkloadModel& model, int stage, int chunk);

}  // namespace kareus::workload
