// SPDX-License-Identifier: Apache-2.0
#include "measure/cuda/program.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "kareus/common/error.h"

namespace kareus::measure::internal {

const char* ToString(MemoryPattern pattern) {
  switch (pattern) {
    case MemoryPattern::kCopy:
      return "copy";
    case MemoryPattern::kRmsNorm:
      return "rmsnorm";
    case MemoryPattern::kRmsNormBackward:
      return "rmsnorm_bwd";
    case MemoryPattern::kRope:
      return "rope";
    case MemoryPattern::kSwiglu:
      return "swiglu";
    case MemoryPattern::kSwigluBackward:
      return "swiglu_bwd";
    case MemoryPattern::kBiasDropoutAdd:
      return "dropout_add";
    case MemoryPattern::kDropoutAddBackward:
      return "dropout_add_bwd";
    case MemoryPattern::kAdd:
      return "add";
  }
  return "?";
}

double BytesPerElement(MemoryPattern pattern) {
  switch (pattern) {
    case MemoryPattern::kCopy:
      return 4.0;  // read + write bf16
    case MemoryPattern::kRmsNorm:
      return 4.0;  // x in, y out
    case MemoryPattern::kRmsNormBackward:
      return 6.0;  // x, dy in, dx out
    case MemoryPattern::kRope:
      return 4.0;  // in place
    case MemoryPattern::kSwiglu:
      return 6.0;  // gate, up in, y out
    case MemoryPattern::kSwigluBackward:
      return 10.0;  // dy, gate, up in, dgate, dup out
    case MemoryPattern::kBiasDropoutAdd:
      return 7.0;  // x, residual in, y out, 1-byte mask
    case MemoryPattern::kDropoutAddBackward:
      return 5.0;  // dy, mask in, dx out
    case MemoryPattern::kAdd:
      return 6.0;  // a, b in, y out
  }
  return 4.0;
}

bool KernelSpec::SameShape(const KernelSpec& o) const {
  if (kind != o.kind) return false;
  switch (kind) {
    case KernelKind::kGemm:
      return m == o.m && n == o.n && k == o.k;
    case KernelKind::kAttention:
      return attention == o.attention;
    case KernelKind::kMemory:
      return pattern == o.pattern && rows == o.rows && cols == o.cols;
  }
  return false;
}

namespace {

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

MemoryPattern PatternOf(const workload::Op& op, bool backward) {
  const std::string& module = op.module;
  if (EndsWith(module, "layernorm")) {
    return backward ? MemoryPattern::kRmsNormBackward : MemoryPattern::kRmsNorm;
  }
  if (module == "rotary") return MemoryPattern::kRope;
  if (module == "activation")
    return backward ? MemoryPattern::kSwigluBackward : MemoryPattern::kSwiglu;
  if (EndsWith(module, "_bda")) {
    return backward ? MemoryPattern::kDropoutAddBackward : MemoryPattern::kBiasDropoutAdd;
  }
  if (EndsWith(module, "_residual_fork")) return MemoryPattern::kAdd;
  return MemoryPattern::kCopy;  // qkv_post, embedding, loss: bytes moved, no arithmetic to speak of
}

}  // namespace

KernelSpec ResolveKernel(const workload::Op& op, const workload::Workload& w) {
  KernelSpec spec;
  spec.name = op.name;
  spec.bytes = op.bytes;
  const bool backward = EndsWith(op.name, ".bwd");
  switch (op.kind) {
    case workload::OpKind::kGemm:
      KAREUS_CHECK(op.m > 0 && op.n > 0 && op.k > 0) << "GEMM " << op.name << " without a shape";
      spec.kind = KernelKind::kGemm;
      spec.m = op.m;
      spec.n = op.n;
      spec.k = op.k;
      return spec;
    case workload::OpKind::kAttention: {
      spec.kind = KernelKind::kAttention;
      AttentionShape& a = spec.attention;
      a.heads = w.model.heads / w.parallelism.tp;
      a.kv_heads = w.model.kv_groups / w.parallelism.tp;
      a.head_dim = w.model.head_dim;
      a.q_len = w.sequence_length / w.parallelism.cp;
      a.kv_len = w.sequence_length;
      a.backward = backward;
      // workload/ops.cc: forward FLOPs = 4 b h d q kv / 2 (causal), backward 2.5x.
      const double per_sequence = 2.0 * double(a.heads) * double(a.head_dim) * double(a.q_len) *
                                  double(a.kv_len) * (backward ? 2.5 : 1.0);
      const double batch = op.flops / per_sequence;
      a.batch = std::llround(batch);
      KAREUS_CHECK(a.batch >= 1 && std::abs(batch - double(a.batch)) < 1e-6 * batch)
          << "attention " << op.name << ": " << op.flops << " FLOPs is not a whole number of "
          << "sequences of workload " << w.name;
      KAREUS_CHECK(a.kv_heads >= 1 && a.heads % a.kv_heads == 0)
          << "attention " << op.name << ": " << a.heads << " heads in " << a.kv_heads << " groups";
      return spec;
    }
    case workload::OpKind::kMemory: {
      spec.kind = KernelKind::kMemory;
      spec.pattern = PatternOf(op, backward);
      const int64_t elements =
          std::max<int64_t>(8, std::llround(op.bytes / BytesPerElement(spec.pattern)));
      int64_t cols = 0;
      if (spec.pattern == MemoryPattern::kRmsNorm ||
          spec.pattern == MemoryPattern::kRmsNormBackward) {
        cols = w.model.hidden;
      } else if (spec.pattern == MemoryPattern::kRope) {
        cols = w.model.head_dim;
      }
      if (cols > 0) {
        spec.cols = cols;
        spec.rows = std::max<int64_t>(1, (elements + cols - 1) / cols);
      } else {
        spec.rows = 1;
        spec.cols = (elements + 7) / 8 * 8;
      }
      return spec;
    }
    case workload::OpKind::kCollective:
      break;
  }
  KAREUS_CHECK(false) << op.name << " is a collective, not a compute kernel";
  return spec;
}

std::vector<KernelSpec> ResolveKernels(const std::vector<workload::Op>& ops,
                                       const workload::Workload& workload) {
  std::vector<KernelSpec> out;
  out.reserve(ops.size());
  for (const workload::Op& op : ops) out.push_back(ResolveKernel(op, workload));
  return out;
}

CollectiveSpec ResolveCollective(const workload::Op& op) {
  KAREUS_CHECK(op.kind == workload::OpKind::kCollective) << op.name << " is not a collective";
  KAREUS_CHECK(op.collective != workload::CollectiveType::kP2P)
      << op.name << ": P2P transfers between stages are not measured on one stage";
  return CollectiveSpec{.type = op.collective,
                        .bytes = std::llround(op.bytes),
                        .tensors = std::max(1, op.tensors),
                        .group_size = std::max(1, op.group_size)};
}

GroupKind GroupOf(workload::CollectiveType type) {
  return type == workload::CollectiveType::kAllReduce ? GroupKind::kTensor : GroupKind::kContext;
}

RankLayout PartitionLayout(const workload::PartitionType& partition) {
  const int n = std::max(1, partition.collective.group_size);
  if (GroupOf(partition.collective.collective) == GroupKind::kTensor) return {.tp = n, .cp = 1};
  return {.tp = 1, .cp = n};
}

RankLayout InstructionLayout(const workload::WorkloadModel& model) {
  return {.tp = model.workload.parallelism.tp, .cp = model.workload.parallelism.cp};
}

// --- ProgramBuilder -----------------------------------------------------------------------------

int ProgramBuilder::KernelItem(const KernelSpec& spec) {
  for (size_t i = 0; i < program_.items.size(); ++i) {
    const ProgramItem& item = program_.items[i];
    if (item.kernel && item.kernel->SameShape(spec)) return static_cast<int>(i);
  }
  program_.items.push_back(ProgramItem{.kernel = spec, .collective = std::nullopt, .comm = -1});
  return static_cast<int>(program_.items.size()) - 1;
}

int ProgramBuilder::CollectiveItem(const CollectiveSpec& spec, int comm) {
  for (size_t i = 0; i < program_.items.size(); ++i) {
    const ProgramItem& item = program_.items[i];
    if (item.collective && *item.collective == spec && item.comm == comm)
      return static_cast<int>(i);
  }
  program_.items.push_back(ProgramItem{.kernel = std::nullopt, .collective = spec, .comm = comm});
  return static_cast<int>(program_.items.size()) - 1;
}

void ProgramBuilder::Launch(int stream, int item) {
  program_.steps.push_back({.kind = Step::Kind::kLaunch, .stream = stream, .item = item});
}

int ProgramBuilder::Record(int stream) {
  const int event = program_.events++;
  program_.steps.push_back({.kind = Step::Kind::kRecord, .stream = stream, .event = event});
  return event;
}

void ProgramBuilder::Wait(int stream, int event) {
  program_.steps.push_back({.kind = Step::Kind::kWait, .stream = stream, .event = event});
}

void ProgramBuilder::AddPartition(const std::vector<KernelSpec>& compute,
                                  const std::optional<CollectiveSpec>& collective, int ctas,
                                  int launch_index) {
  KAREUS_CHECK(!compute.empty()) << "a partition without compute kernels";
  KAREUS_CHECK(launch_index >= 0 && launch_index < static_cast<int>(compute.size()))
      << "launch index " << launch_index << " of " << compute.size() << " compute kernels";
  int collective_item = -1;
  if (collective) {
    collective_item = CollectiveItem(*collective, comm_of_({GroupOf(collective->type), ctas}));
  }
  for (int i = 0; i < static_cast<int>(compute.size()); ++i) {
    if (collective_item >= 0 && i == launch_index) {
      // The event completes when everything before op i on the compute stream has: the moment
      // op i starts. The communication stream waits for it, then launches the collective.
      const int slot = Record(kComputeStream);
      Wait(kCommStream, slot);
      Launch(kCommStream, collective_item);
    }
    Launch(kComputeStream, KernelItem(compute[static_cast<size_t>(i)]));
  }
  if (collective_item >= 0) {
    const int done = Record(kCommStream);
    Wait(kComputeStream, done);  // the partition ends when both streams are done
  }
}

void ProgramBuilder::AddCollective(const CollectiveSpec& collective, int ctas) {
  const int item = CollectiveItem(collective, comm_of_({GroupOf(collective.type), ctas}));
  Wait(kCommStream, Record(kComputeStream));
  Launch(kCommStream, item);
  Wait(kComputeStream, Record(kCommStream));
}

void ProgramBuilder::AddSequential(const std::vector<workload::Op>& ops,
                                   const workload::Workload& workload) {
  for (const workload::Op& op : ops) {
    if (op.kind == workload::OpKind::kCollective) {
      const CollectiveSpec spec = ResolveCollective(op);
      Launch(kComputeStream, CollectiveItem(spec, comm_of_({GroupOf(spec.type), 0})));
    } else {
      Launch(kComputeStream, KernelItem(ResolveKernel(op, workload)));
    }
  }
}

// --- Partitions ---------------------------------------------------------------------------------

std::vector<CommKey> PartitionComms(const workload::PartitionType& partition,
                                    const PartitionKnobs& knobs) {
  return {CommKey{GroupOf(partition.collective.collective), knobs.sms}};
}

Program PartitionProgram(const workload::PartitionType& partition, const PartitionKnobs& knobs,
                         const workload::Workload& workload, const CommHandleOf& comm_of) {
  const int launch = partition.SlotIndex(knobs.slot);
  KAREUS_CHECK(launch >= 0) << partition.name << ": unknown slot " << knobs.slot;
  ProgramBuilder builder(comm_of);
  builder.AddPartition(ResolveKernels(partition.compute_ops, workload),
                       ResolveCollective(partition.collective), knobs.sms, launch);
  return builder.Finish();
}

Program ComputeOnlyProgram(const workload::PartitionType& partition,
                           const workload::Workload& workload) {
  ProgramBuilder builder([](const CommKey&) -> int {
    KAREUS_CHECK(false) << "a compute-only program has no communicator";
    return -1;
  });
  builder.AddPartition(ResolveKernels(partition.compute_ops, workload), std::nullopt, 0, 0);
  return builder.Finish();
}

// --- Instructions -------------------------------------------------------------------------------

InstructionPlan ResolveInstruction(const workload::WorkloadModel& model,
                                   const InstructionRequest& request) {
  const workload::InstructionModel& instr =
      model.Instruction(request.stage, request.chunk, request.direction);
  InstructionPlan plan;
  plan.nanobatched = request.knobs.mode == schedule::ExecutionMode::kNanobatched &&
                     model.nanobatching && !instr.sequence.empty();
  if (plan.nanobatched) {
    for (const workload::InstructionModel::Step& step : instr.sequence) {
      const workload::PartitionType& type =
          model.partition_types.at(static_cast<size_t>(step.type));
      int ctas = 0;  // the library default
      std::string slot = type.launch_slots.empty() ? std::string() : type.launch_slots.front();
      if (!type.tunable) {
        ctas = type.fixed_sms;
        slot = type.fixed_slot;
      } else if (auto it = request.knobs.partitions.find(type.name);
                 it != request.knobs.partitions.end()) {
        ctas = it->second.sms;
        slot = it->second.slot;
      }
      plan.occurrences.push_back(
          {.type = step.type,
           .with_collective = step.has_collective,
           .ctas = ctas,
           .launch_index = slot.empty() ? 0 : std::max(0, type.SlotIndex(slot))});
    }
  } else {
    plan.sequential_ops = instr.sequential_ops;
  }
  plan.non_partition_ops = instr.non_partition_ops;
  return plan;
}

std::vector<CommKey> SequentialComms(const std::vector<workload::Op>& ops) {
  std::set<CommKey> keys;
  for (const workload::Op& op : ops) {
    if (op.kind == workload::OpKind::kCollective &&
        op.collective != workload::CollectiveType::kP2P) {
      keys.insert({GroupOf(op.collective), 0});
    }
  }
  return {keys.begin(), keys.end()};
}

std::vector<CommKey> InstructionComms(const workload::WorkloadModel& model,
                                      const InstructionPlan& plan) {
  std::set<CommKey> keys;
  for (const InstructionPlan::Occurrence& o : plan.occurrences) {
    if (!o.with_collective) continue;
    const workload::PartitionType& type = model.partition_types.at(static_cast<size_t>(o.type));
    keys.insert({GroupOf(type.collective.collective), o.ctas});
  }
  for (const CommKey& key : SequentialComms(plan.sequential_ops)) keys.insert(key);
  for (const CommKey& key : SequentialComms(plan.non_partition_ops)) keys.insert(key);
  return {keys.begin(), keys.end()};
}

Program InstructionProgram(const workload::WorkloadModel& model, const InstructionPlan& plan,
                           const CommHandleOf& comm_of) {
  ProgramBuilder builder(comm_of);
  std::vector<std::vector<KernelSpec>> kernels(model.partition_types.size());
  for (const InstructionPlan::Occurrence& o : plan.occurrences) {
    const workload::PartitionType& type = model.partition_types.at(static_cast<size_t>(o.type));
    std::vector<KernelSpec>& compute = kernels[static_cast<size_t>(o.type)];
    if (compute.empty()) compute = ResolveKernels(type.compute_ops, model.workload);
    builder.AddPartition(
        compute,
        o.with_collective ? std::optional(ResolveCollective(type.collective)) : std::nullopt,
        o.ctas, o.launch_index);
  }
  builder.AddSequential(plan.sequential_ops, model.workload);
  builder.AddSequential(plan.non_partition_ops, model.workload);
  return builder.Finish();
}

Program SequentialProgram(const std::vector<workload::Op>& ops, const workload::Workload& workload,
                          const CommHandleOf& comm_of) {
  ProgramBuilder builder(comm_of);
  builder.AddSequential(ops, workload);
  return builder.Finish();
}

}  // namespace kareus::measure::internal
