// SPDX-License-Identifier: Apache-2.0
#include "kareus/schedule/node_classes.h"

#include <algorithm>

namespace kareus::schedule {

int SyncNodesPerStage(GradientSync gradient_sync, int num_chunks) {
  switch (gradient_sync) {
    case GradientSync::kNone:
      return 0;
    case GradientSync::kAtEnd:
      return 1;
    case GradientSync::kOverlapped:
      return num_chunks;
  }
  return 0;
}

NodeClasses::NodeClasses(int num_stages, int num_chunks, GradientSync gradient_sync)
    : num_stages_(num_stages),
      num_chunks_(std::max(num_chunks, 1)),
      syncs_(schedule::SyncNodesPerStage(gradient_sync, std::max(num_chunks, 1))) {}

NodeClasses::NodeClasses(const Dag& dag)
    : NodeClasses(dag.num_stages, dag.num_chunks, dag.gradient_sync) {}

int NodeClasses::Of(const Dag& dag, int node) const {
  const DagNode& n = dag.nodes[static_cast<std::size_t>(node)];
  if (n.node == NodeKind::kGradientSync) return SyncClass(n.stage, n.chunk);
  if (dag.LaunchesGradientSync(node)) return LastBackwardClass(n.stage);
  const int unit = n.stage * num_chunks_ + n.chunk;
  return n.kind == Direction::kForward ? ForwardClass(unit) : BackwardClass(unit);
}

NodeClass NodeClasses::Get(int cls) const {
  const int units = NumUnits();
  if (cls >= 2 * units + num_stages_) {
    const int index = cls - 2 * units - num_stages_;
    const int per_stage = std::max(syncs_, 1);
    return {.kind = NodeClassKind::kGradientSync,
            .stage = index / per_stage,
            .chunk = index % per_stage,
            .index = index};
  }
  if (cls >= 2 * units) {
    const int stage = cls - 2 * units;
    return {.kind = NodeClassKind::kLastBackward, .stage = stage, .chunk = 0, .index = stage};
  }
  const int unit = cls / 2;
  return {.kind = cls % 2 == 0 ? NodeClassKind::kForward : NodeClassKind::kBackward,
          .stage = unit / num_chunks_,
          .chunk = unit % num_chunks_,
          .index = unit};
}

}  // namespace kareus::schedule
