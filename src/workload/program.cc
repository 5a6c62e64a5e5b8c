// SPDX-License-Identifier: Apache-2.0
// The executor's program: the kernel lists and partition occurrences of BuildWorkloadModel,
// kept per occurrence with each kernel's layer (program.h).
#include "kareus/workload/program.h"

#include <algorithm>

#include "kareus/common/error.h"
#include "workload/segments.h"

namespace kareus::workload {

using schedule::Direction;

namespace {

// A unit's kernels of one direction, layer after layer, each with its layer. The backward runs
// the layers from the last to the first.
struct LayerKernels {
  std::vector<Op> ops;
  std::vector<int> layers;
};

int LayerOfPosition(int position, int layers, Direction direction) {
  return direction == Direction::kForward ? position : layers - 1 - position;
}

LayerKernels Concatenate(const std::vector<Op>& layer_ops, int layers, Direction direction) {
  LayerKernels out;
  for (int position = 0; position < layers; ++position) {
    out.ops.insert(out.ops.end(), layer_ops.begin(), layer_ops.end());
    out.layers.insert(out.layers.end(), layer_ops.size(),
                      LayerOfPosition(position, layers, direction));
  }
  return out;
}

void AppendSequential(const LayerKernels& kernels, std::vector<ProgramOp>& out) {
  for (size_t i = 0; i < kernels.ops.size(); ++i) {
    ProgramOp op{.op = kernels.ops[i], .layer = kernels.layers[i], .after = {}};
    if (op.op.kind == OpKind::kCollective && i > 0) op.after = kernels.ops[i - 1].name;
    out.push_back(std::move(op));
  }
}

// The launch index of each of the type's slots in an occurrence. The planner measures and
// emulates a type on its steady-state kernels; an occurrence of the block's first layer lacks
// the previous layer's leading kernels (its kernels are the type's last ones), so a slot's
// kernel is the type's index less what the occurrence lacks, or the occurrence's first kernel
// when the slot's kernel is one of those it lacks.
std::vector<Slot> OccurrenceSlots(const PartitionType& type, const internal::Occurrence& o) {
  const size_t n = o.compute.size(), total = type.compute_ops.size();
  KAREUS_CHECK(n <= total) << "occurrence of " << type.name << " has more kernels than its type";
  const size_t missing = total - n;
  for (size_t i = 0; i < n; ++i) {
    KAREUS_CHECK(o.compute[i].name == type.compute_ops[missing + i].name)
        << "occurrence of " << type.name << " is not the end of its type's kernels";
  }
  std::vector<Slot> slots;
  for (const Slot& slot : type.slots) {
    slots.push_back(
        {.name = slot.name, .op_index = std::max(0, slot.op_index - static_cast<int>(missing))});
  }
  return slots;
}

void AppendPartitions(const WorkloadModel& model, const std::vector<Op>& layer_ops, int layers,
                      Direction direction, bool cp, std::vector<ProgramPartition>& out) {
  for (const internal::Occurrence& o : internal::Occurrences(layer_ops, layers, direction, cp)) {
    ProgramPartition p{.type = o.key,
                       .direction = direction,
                       .nanobatch = o.nanobatch,
                       .compute = {},
                       .slots = OccurrenceSlots(model.Type(o.key), o),
                       .collective = std::nullopt};
    for (size_t i = 0; i < o.compute.size(); ++i) {
      p.compute.push_back({.op = o.compute[i],
                           .layer = LayerOfPosition(o.positions[i], layers, direction),
                           .after = {}});
    }
    if (o.collective) {
      p.collective = ProgramOp{.op = *o.collective,
                               .layer = LayerOfPosition(o.collective_position, layers, direction),
                               .after = o.collective_after};
    }
    out.push_back(std::move(p));
  }
}

Json OpsJson(const std::vector<ProgramOp>& ops) {
  Json out = Json::array();
  for (const ProgramOp& op : ops) out.push_back(op.ToJson());
  return out;
}

}  // namespace

Json ProgramOp::ToJson() const {
  Json j = op.ToJson();
  j["layer"] = layer;
  if (op.kind == OpKind::kCollective) j["after"] = after;
  return j;
}

Json ProgramPartition::ToJson() const {
  Json slot_indices = Json::object();
  for (const Slot& slot : slots) slot_indices[slot.name] = slot.op_index;
  return Json{
      {"type", type},           {"direction", schedule::ToString(direction)},
      {"nanobatch", nanobatch}, {"compute", OpsJson(compute)},
      {"slots", slot_indices},  {"collective", collective ? collective->ToJson() : Json(nullptr)}};
}

Json InstructionProgram::ToJson() const {
  Json partitions_json = Json::array();
  for (const ProgramPartition& p : partitions) partitions_json.push_back(p.ToJson());
  return Json{{"kind", schedule::ToString(direction)},
              {"before_block", OpsJson(before_block)},
              {"sequential", OpsJson(sequential)},
              {"partitions", partitions_json},
              {"after_block", OpsJson(after_block)}};
}

Json UnitProgram::ToJson() const {
  return Json{{"stage", stage},
              {"chunk", chunk},
              {"layers", layers},
              {"first_layer", first_layer},
              {"forward", forward.ToJson()},
              {"backward", backward.ToJson()}};
}

std::vector<UnitProgram> BuildProgram(const WorkloadModel& model) {
  const Workload& w = model.workload;
  const bool cp = w.parallelism.cp > 1;
  const bool recompute = w.recompute == Recompute::kFull;
  const std::vector<Op> fwd_full = LayerForwardOps(w, w.microbatch_size);
  const std::vector<Op> bwd_full = LayerBackwardOps(w, w.microbatch_size);
  std::vector<Op> fwd_nano, bwd_nano;
  if (model.nanobatching) {
    fwd_nano = LayerForwardOps(w, w.microbatch_size / 2);
    bwd_nano = LayerBackwardOps(w, w.microbatch_size / 2);
  }
  // Megatron-LM's model order: chunk 0 of every stage, then chunk 1 of every stage, ...
  auto first_layer_of = [&](int stage, int chunk) {
    int first = 0;
    for (int c = 0; c < model.num_chunks; ++c) {
      for (int s = 0; s < model.num_stages; ++s) {
        if (c * model.num_stages + s >= chunk * model.num_stages + stage) return first;
        first += model.Unit(s, c).layers;
      }
    }
    return first;
  };
  std::vector<UnitProgram> units;
  for (const StageModel& unit : model.stages) {
    UnitProgram p{.stage = unit.stage,
                  .chunk = unit.chunk,
                  .layers = unit.layers,
                  .first_layer = first_layer_of(unit.stage, unit.chunk),
                  .forward = {},
                  .backward = {}};
    for (Direction d : {Direction::kForward, Direction::kBackward}) {
      InstructionProgram& ins = d == Direction::kForward ? p.forward : p.backward;
      const InstructionModel& planned = d == Direction::kForward ? unit.forward : unit.backward;
      ins.direction = d;
      for (const Op& op : planned.non_partition_ops) {
        std::vector<ProgramOp>& list = RunsBeforeBlock(op, d) ? ins.before_block : ins.after_block;
        list.push_back({.op = op, .layer = -1, .after = {}});
        if (op.kind == OpKind::kCollective && list.size() > 1) {
          list.back().after = list[list.size() - 2].op.name;
        }
      }
      // A backward with full recompute re-runs the block's forward first (as the planner's
      // sequential_ops and partition sequence do).
      std::vector<Direction> parts;
      if (d == Direction::kForward || recompute) parts.push_back(Direction::kForward);
      if (d == Direction::kBackward) parts.push_back(Direction::kBackward);
      for (Direction part : parts) {
        const bool forward = part == Direction::kForward;
        AppendSequential(Concatenate(forward ? fwd_full : bwd_full, unit.layers, part),
                         ins.sequential);
        if (model.nanobatching) {
          AppendPartitions(model, forward ? fwd_nano : bwd_nano, unit.layers, part, cp,
                           ins.partitions);
        }
      }
      KAREUS_CHECK(ins.sequential.size() == planned.sequential_ops.size())
          << "program and model disagree on the sequential kernels of stage " << unit.stage;
      KAREUS_CHECK(ins.partitions.size() == planned.sequence.size())
          << "program and model disagree on the partitions of stage " << unit.stage;
    }
    units.push_back(std::move(p));
  }
  return units;
}

Json PartitionsJson(const WorkloadModel& model, bool with_program) {
  Json out = model.ToJson();
  if (with_program) {
    Json units = Json::array();
    for (const UnitProgram& unit : BuildProgram(model)) units.push_back(unit.ToJson());
    out["program"] = std::move(units);
  }
  return out;
}

}  // namespace kareus::workload
