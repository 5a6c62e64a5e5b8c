// SPDX-License-Identifier: Apache-2.0
// The node classes of a pipeline DAG: the DAG nodes that share one list of options. The one
// layout the solver (pipeline::Problem's lists), plan assembly (plan::PlanProblem) and method
// evaluation (methods::MethodResult's evaluations) all index by:
//   kForward / kBackward   every forward / backward of one (stage, chunk) unit
//   kLastBackward          the stage's last instruction when it reduces gradients (kOverlapped)
//   kGradientSync          one of the stage's SyncNodesPerStage() sync nodes
// Class ids: 2 per unit (forward, backward; unit = stage * chunks + chunk), then one last
// backward per stage, then the sync nodes ([stage * K + chunk]).
#pragma once
#include <cstddef>
#include <vector>

#include "kareus/schedule/schedule.h"

namespace kareus::schedule {

// Gradient-sync nodes per stage: 0 (kNone), 1 (kAtEnd) or num_chunks (kOverlapped).
int SyncNodesPerStage(GradientSync gradient_sync, int num_chunks);

enum class NodeClassKind { kForward, kBackward, kLastBackward, kGradientSync };

struct NodeClass {
  NodeClassKind kind = NodeClassKind::kForward;
  int stage = 0;
  int chunk = 0;  // the unit's chunk (kForward/kBackward), the sync's chunk; 0 for kLastBackward
  // Position in the class kind's own list: the unit (stage * chunks + chunk) for kForward and
  // kBackward, the stage for kLastBackward, stage * K + chunk for kGradientSync.
  int index = 0;
  bool operator==(const NodeClass&) const = default;
};

class NodeClasses {
 public:
  NodeClasses(int num_stages, int num_chunks, GradientSync gradient_sync);
  explicit NodeClasses(const Dag& dag);

  int NumStages() const { return num_stages_; }
  int NumChunks() const { return num_chunks_; }
  int NumUnits() const { return num_stages_ * num_chunks_; }
  int SyncNodesPerStage() const { return syncs_; }
  int Count() const { return 2 * NumUnits() + num_stages_ + num_stages_ * syncs_; }

  // The class id of DAG node `node` (`dag` has this table's shape).
  int Of(const Dag& dag, int node) const;
  NodeClass Get(int cls) const;
  int StageOf(int cls) const { return Get(cls).stage; }

  // Class ids by what they hold.
  int ForwardClass(int unit) const { return 2 * unit; }
  int BackwardClass(int unit) const { return 2 * unit + 1; }
  int LastBackwardClass(int stage) const { return 2 * NumUnits() + stage; }
  int SyncClass(int stage, int chunk) const {
    return 2 * NumUnits() + num_stages_ + stage * syncs_ + chunk;
  }

  // The list of class `c` among the four per-kind lists (forward/backward by unit, last
  // backward by stage, syncs by stage * K + chunk).
  template <typename List>
  static const List& Select(const NodeClass& c, const std::vector<List>& forward,
                            const std::vector<List>& backward,
                            const std::vector<List>& last_backward,
                            const std::vector<List>& gradient_sync) {
    const std::size_t i = static_cast<std::size_t>(c.index);
    switch (c.kind) {
      case NodeClassKind::kForward:
        return forward[i];
      case NodeClassKind::kBackward:
        return backward[i];
      case NodeClassKind::kLastBackward:
        return last_backward[i];
      case NodeClassKind::kGradientSync:
        break;
    }
    return gradient_sync[i];
  }

 private:
  int num_stages_ = 0;
  int num_chunks_ = 1;
  int syncs_ = 0;
};

}  // namespace kareus::schedule
