// SPDX-License-Identifier: Apache-2.0
// What an executor runs for each instruction of a stage, kernel by kernel: the same op lists,
// partitions, slots and collectives the planner measures and emulates (ops.h), laid out per
// occurrence with the layer every kernel belongs to. `kareus partitions --program` prints it
// and the Python executor (kareus.torch) reads it, so the partition list has one definition.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kareus/common/json.h"
#include "kareus/schedule/schedule.h"
#include "kareus/workload/ops.h"

namespace kareus::workload {

// One kernel in its place. `layer` is the unit's layer it belongs to (0 = the unit's first
// layer), -1 for the work outside the transformer block. For a collective, `after` names the
// compute kernel it follows in the layer's kernel list (what produced its input, or where a
// re-gather sits), so an executor can tell which tensor it moves.
struct ProgramOp {
  Op op;
  int layer = -1;
  std::string after;  // collectives only

  Json ToJson() const;
};

// One partition occurrence of a nanobatched block, in execution order: `nanobatch`'s compute
// overlapping the other nanobatch's collective of the previous occurrence (none for the
// block's first NB0 and last NB1). `slots`: every slot of the type, at the index of this
// occurrence's kernel where a collective launched at it starts. An occurrence of the block's
// first layer lacks the previous layer's leading kernels (residual add, norm): its kernels are
// the type's last ones, a slot's index is the type's less those it lacks, and a slot on a
// kernel it lacks starts at its first kernel.
struct ProgramPartition {
  std::string type;
  schedule::Direction direction = schedule::Direction::kForward;  // of its compute
  int nanobatch = 0;
  std::vector<ProgramOp> compute;
  std::vector<Slot> slots;
  std::optional<ProgramOp> collective;  // on the other nanobatch's tensor

  Json ToJson() const;
};

// One instruction: the work outside the block that runs before it and after it (full
// microbatch, sequential; forward: embedding before, final norm + output layer + loss after;
// backward: loss + output layer + final norm before, embedding after), and the block itself
// either sequentially (full microbatch, each collective where it is in the kernel list) or as
// partitions (two nanobatches). A backward with full recompute re-runs the forward first:
// forward kernels (or forward partitions) come before the backward ones.
struct InstructionProgram {
  schedule::Direction direction = schedule::Direction::kForward;
  std::vector<ProgramOp> before_block;
  std::vector<ProgramOp> sequential;
  std::vector<ProgramPartition> partitions;  // empty without nanobatching
  std::vector<ProgramOp> after_block;

  Json ToJson() const;
};

struct UnitProgram {
  int stage = 0;
  int chunk = 0;
  int layers = 0;
  int first_layer = 0;  // the model's layer index of the unit's layer 0
  InstructionProgram forward;
  InstructionProgram backward;

  Json ToJson() const;
};

// The program of every (stage, chunk) unit, in WorkloadModel::stages order.
std::vector<UnitProgram> BuildProgram(const WorkloadModel& model);

// The `kareus partitions --json` document (WorkloadModel::ToJson), with every unit's program
// under "program" when `with_program` (`--program`; what kareus.partitions() returns).
Json PartitionsJson(const WorkloadModel& model, bool with_program);

}  // namespace kareus::workload
