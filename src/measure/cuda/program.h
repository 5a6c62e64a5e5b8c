// SPDX-License-Identifier: Apache-2.0
// From the workload model to device programs: the kernel each op becomes (with the workload's
// shapes), and the two-stream programs of a partition, a whole instruction and the fixed work,
// reproducing the emulator's execution model (docs/ARCHITECTURE.md §4): compute ops in order on
// the compute stream; the other nanobatch's collective on the communication stream, started
// with the compute op at its launch slot (an event recorded just before that op's launch, which
// the communication stream waits for); the partition ends when both are done (the compute
// stream waits for the collective's end before the next partition).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kareus/measure/backend.h"
#include "kareus/measure/types.h"
#include "kareus/workload/ops.h"
#include "kareus/workload/workload.h"
#include "measure/cuda/device.h"

namespace kareus::measure::internal {

// The kernel of a compute op with the workload's shapes. GEMMs take the op's m, n, k; attention
// takes heads, groups and head size of the shard and the batch the op's FLOPs imply; memory-bound
// ops move the op's bytes in the pattern of their module (RMSNorm, RoPE, SwiGLU, dropout-add, a
// copy for layout changes). KAREUS_CHECKs that the op is a compute op of `workload`.
KernelSpec ResolveKernel(const workload::Op& op, const workload::Workload& workload);
std::vector<KernelSpec> ResolveKernels(const std::vector<workload::Op>& ops,
                                       const workload::Workload& workload);

// The collective of an op (KAREUS_CHECKs kind == kCollective and not P2P).
CollectiveSpec ResolveCollective(const workload::Op& op);

// TP collectives (all-reduce) run in the tensor group, CP ones (all-gather, reduce-scatter) in
// the context group.
GroupKind GroupOf(workload::CollectiveType type);

// How the ranks of a measurement form groups: rank r is TP rank r % tp of the tensor group
// r / tp and CP rank r / tp of the context group r % tp.
struct RankLayout {
  int tp = 1;
  int cp = 1;
  int Ranks() const { return tp * cp; }
  int GroupIndex(GroupKind kind, int rank) const {
    return kind == GroupKind::kTensor ? rank / tp : rank % tp;
  }
  int GroupSize(GroupKind kind) const { return kind == GroupKind::kTensor ? tp : cp; }
  int RankInGroup(GroupKind kind, int rank) const {
    return kind == GroupKind::kTensor ? rank % tp : rank / tp;
  }
};
// A partition's measurement occupies its collective's group alone.
RankLayout PartitionLayout(const workload::PartitionType& partition);
// An instruction or its fixed work occupies one stage replica (TP x CP).
RankLayout InstructionLayout(const workload::WorkloadModel& model);

// The communicator of a (group, CTAs) pair on this rank (it must exist).
using CommHandleOf = std::function<int(const CommKey&)>;

// Builds one program from partitions and sequential kernels.
class ProgramBuilder {
 public:
  explicit ProgramBuilder(CommHandleOf comm_of) : comm_of_(std::move(comm_of)) {}

  // One partition occurrence: `compute` on the compute stream; `collective` (if any) on the
  // communication stream with `ctas` CTAs (0: the library default), started with compute op
  // `launch_index`; the partition ends when both are done.
  void AddPartition(const std::vector<KernelSpec>& compute,
                    const std::optional<CollectiveSpec>& collective, int ctas, int launch_index);
  // A collective alone on the communication stream (`ctas` CTAs, 0: the library default),
  // started after and joined before the compute stream's work.
  void AddCollective(const CollectiveSpec& collective, int ctas);
  // Kernels and collectives one after another on the compute stream (collectives on the
  // library-default communicator of their group).
  void AddSequential(const std::vector<workload::Op>& ops, const workload::Workload& workload);

  Program Finish() { return std::move(program_); }

 private:
  int KernelItem(const KernelSpec& spec);
  int CollectiveItem(const CollectiveSpec& spec, int comm);
  void Launch(int stream, int item);
  int Record(int stream);
  void Wait(int stream, int event);

  CommHandleOf comm_of_;
  Program program_;
};

// The communicators a partition measurement needs.
std::vector<CommKey> PartitionComms(const workload::PartitionType& partition,
                                    const PartitionKnobs& knobs);
// One partition with its collective at `knobs` (the clock is not part of the program).
Program PartitionProgram(const workload::PartitionType& partition, const PartitionKnobs& knobs,
                         const workload::Workload& workload, const CommHandleOf& comm_of);
// The partition's compute ops alone (the occurrences that carry no collective).
Program ComputeOnlyProgram(const workload::PartitionType& partition,
                           const workload::Workload& workload);

// One whole instruction, resolved as the emulator resolves it (SimulateInstruction): in
// nanobatched mode every occurrence of the instruction's sequence, each type with its knobs
// (non-tunable types: their fixed knobs; types missing from the knobs: the library default
// communicator at the type's first launch slot), else the sequential kernels of the full
// microbatch; then the non-partition kernels, sequentially.
struct InstructionPlan {
  struct Occurrence {
    int type = 0;
    bool with_collective = true;
    int ctas = 0;
    int launch_index = 0;
  };
  bool nanobatched = true;
  std::vector<Occurrence> occurrences;       // nanobatched
  std::vector<workload::Op> sequential_ops;  // sequential (collectives included)
  std::vector<workload::Op> non_partition_ops;
};
InstructionPlan ResolveInstruction(const workload::WorkloadModel& model,
                                   const InstructionRequest& request);
std::vector<CommKey> InstructionComms(const workload::WorkloadModel& model,
                                      const InstructionPlan& plan);
Program InstructionProgram(const workload::WorkloadModel& model, const InstructionPlan& plan,
                           const CommHandleOf& comm_of);

// The fixed work of an instruction (workload::FixedWorkOps), sequentially.
std::vector<CommKey> SequentialComms(const std::vector<workload::Op>& ops);
Program SequentialProgram(const std::vector<workload::Op>& ops, const workload::Workload& workload,
                          const CommHandleOf& comm_of);

}  // namespace kareus::measure::internal
