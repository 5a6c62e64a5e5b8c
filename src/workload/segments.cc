// SPDX-License-Identifier: Apache-2.0
// Segmentation and partition keys (reference/kareus-official.md §1.3-1.5, §2.1).
#include "workload/segments.h"

#include <map>

#include "kareus/common/error.h"

namespace kareus::workload::internal {

using schedule::Direction;

namespace {

bool MemoryBound(SlotGroup g) {
  return g == SlotGroup::kNorm || g == SlotGroup::kRope || g == SlotGroup::kActivation;
}

// The published per-layer partition keys (transformer_block._build_partitions) and the launch
// windows of each type's search space (tests/bayesian/partitions/*/bo_search.py).
struct PublishedLayout {
  std::vector<std::string> layer_keys;
  std::string trail_key;
};

std::optional<PublishedLayout> Layout(Direction direction, bool cp) {
  if (direction == Direction::kForward) {
    if (!cp) return PublishedLayout{{"fwd_attn", "fwd_attn", "fwd_mlp", "fwd_mlp"}, "fwd_trail"};
    return PublishedLayout{
        {"fwd_qkv_ar", "fwd_qkv_ag", "fwd_ao_ag", "fwd_ao_ar", "fwd_mlp", "fwd_mlp"}, "fwd_trail"};
  }
  if (!cp) return PublishedLayout{{"bwd_mlp", "bwd_mlp", "bwd_attn", "bwd_attn"}, "bwd_trail"};
  return PublishedLayout{{"bwd_mlp", "bwd_mlp", "bwd_o_ar", "bwd_o_ag", "bwd_a_ag", "bwd_a_rs",
                          "bwd_qkv_rs", "bwd_qkv_ar"},
                         "bwd_trail"};
}

}  // namespace

// Splits a kernel list at its collectives. A collective with no compute before it replaces the
// previous segment's collective (as the published _split_by_communications does).
// `positions[i]`: the block position (layer of the flat list) of ops[i].
std::vector<Segment> SplitAtCollectives(const std::vector<Op>& ops,
                                        const std::vector<int>& positions) {
  KAREUS_CHECK(ops.size() == positions.size());
  std::vector<Segment> segments;
  Segment current;
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    if (op.kind == OpKind::kCollective) {
      Segment& target = current.compute.empty() && !segments.empty() ? segments.back() : current;
      target.collective = op;
      target.collective_position = positions[i];
      target.collective_after = i > 0 ? ops[i - 1].name : std::string();
      if (&target == &current) {
        segments.push_back(std::move(current));
        current = Segment{};
      }
    } else {
      current.compute.push_back(op);
      current.positions.push_back(positions[i]);
    }
  }
  if (!current.compute.empty()) segments.push_back(std::move(current));
  return segments;
}

// Slot names as the published runtime builds them (partition_base.py::_build_overlap_slots):
// linear and attn modules each get a slot; consecutive memory-bound modules of one group share
// the slot of the first. Numbered per group.
std::vector<Slot> BuildSlots(const std::vector<Op>& compute) {
  std::vector<Slot> slots;
  std::map<SlotGroup, int> counters;
  SlotGroup previous_group = SlotGroup::kNone;
  std::string previous_module;
  for (int i = 0; i < static_cast<int>(compute.size()); ++i) {
    const Op& op = compute[i];
    if (i > 0 && op.module == previous_module) continue;  // another kernel of the same module
    const bool merge = i > 0 && MemoryBound(op.group) && op.group == previous_group;
    if (!merge) {
      slots.push_back(
          {.name = std::string(ToString(op.group)) + "_" + std::to_string(counters[op.group]++),
           .op_index = i});
    }
    previous_group = op.group;
    previous_module = op.module;
  }
  return slots;
}

// One direction's partitions for `layers` layers: keys and the (compute, collective) of every
// occurrence, in execution order.
std::vector<Occurrence> Occurrences(const std::vector<Op>& layer_ops, int layers,
                                    Direction direction, bool cp) {
  std::vector<Op> all;
  std::vector<int> positions;
  for (int l = 0; l < layers; ++l) {
    all.insert(all.end(), layer_ops.begin(), layer_ops.end());
    positions.insert(positions.end(), layer_ops.size(), l);
  }
  const std::vector<Segment> segments = SplitAtCollectives(all, positions);
  std::vector<Occurrence> out;
  for (size_t i = 0; i < segments.size(); ++i) {
    // NB0's compute carries the previous segment's collective (on NB1's tensor), NB1's this
    // segment's (on NB0's tensor).
    for (int nanobatch : {0, 1}) {
      const Segment* owner = nanobatch == 0 ? (i > 0 ? &segments[i - 1] : nullptr) : &segments[i];
      const bool carries = owner != nullptr && owner->collective.has_value();
      out.push_back({.key = "",
                     .nanobatch = nanobatch,
                     .segment = static_cast<int>(i),
                     .compute = segments[i].compute,
                     .positions = segments[i].positions,
                     .collective = carries ? owner->collective : std::nullopt,
                     .collective_position = carries ? owner->collective_position : -1,
                     .collective_after = carries ? owner->collective_after : std::string()});
    }
  }
  // Name them: the published layout when it fits, else generic names from segment position.
  const auto layout = Layout(direction, cp);
  const size_t per_layer = layout ? layout->layer_keys.size() : 0;
  const bool fits = layout && out.size() == per_layer * layers + 2;
  const std::string prefix = direction == Direction::kForward ? "fwd" : "bwd";
  const size_t generic_per_layer = layers > 0 ? (out.size() - 2) / layers : 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const bool trail = i + 2 >= out.size();
    if (fits) {
      out[i].key = trail ? layout->trail_key : layout->layer_keys[i % per_layer];
    } else if (trail) {
      out[i].key = prefix + "_trail";
    } else {
      // A position's key names its steady-state collective. The block's first occurrence has
      // none (nothing before it to overlap); in steady state that position overlaps the
      // previous layer's last collective, the one ending this layer's last segment.
      const Op* c = out[i].collective ? &*out[i].collective : nullptr;
      if (!c && generic_per_layer > 0 && out[generic_per_layer - 1].collective) {
        c = &*out[generic_per_layer - 1].collective;
      }
      out[i].key = prefix + "_p" + std::to_string(i % generic_per_layer) +
                   (c ? std::string("_") + ToString(c->collective) : "");
    }
  }
  return out;
}

}  // namespace kareus::workload::internal
