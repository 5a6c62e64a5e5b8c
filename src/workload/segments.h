// SPDX-License-Identifier: Apache-2.0
// The partition builder's segmentation (reference/kareus-official.md §1.3): a direction's kernel
// list split at its collectives, each segment yielding two partition occurrences (NB0, NB1),
// their keys, and the launch slots of a compute list. Shared by the partition types
// (partitions.cc) and the executor's program (program.cc).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kareus/schedule/schedule.h"
#include "kareus/workload/ops.h"

namespace kareus::workload::internal {

// The compute kernels between two collectives and the collective that ends them. Positions
// are block positions (0 = the first layer of the flat list a direction's kernels were
// concatenated from).
struct Segment {
  std::vector<Op> compute;
  std::vector<int> positions;  // block position of each compute kernel
  std::optional<Op> collective;
  int collective_position = -1;
  std::string collective_after;  // the kernel the collective follows in the flat list
};

// One partition occurrence in execution order: `nanobatch`'s compute of segment `segment`
// overlapping the other nanobatch's collective (NB0 carries the previous segment's, NB1 its
// own segment's; none for the block's first NB0 and last NB1).
struct Occurrence {
  std::string key;
  int nanobatch = 0;
  int segment = 0;
  std::vector<Op> compute;
  std::vector<int> positions;
  std::optional<Op> collective;
  int collective_position = -1;
  std::string collective_after;
};

// Splits a kernel list at its collectives; positions[i] is the block position of ops[i].
std::vector<Segment> SplitAtCollectives(const std::vector<Op>& ops,
                                        const std::vector<int>& positions);

// Slot names of a compute list, as the published runtime builds them.
std::vector<Slot> BuildSlots(const std::vector<Op>& compute);

// One direction's partition occurrences for `layers` layers of `layer_ops`, keyed by the
// published layout when it fits (else generic names from the segment position).
std::vector<Occurrence> Occurrences(const std::vector<Op>& layer_ops, int layers,
                                    schedule::Direction direction, bool cp);

}  // namespace kareus::workload::internal
