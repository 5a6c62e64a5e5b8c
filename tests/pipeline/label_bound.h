// SPDX-License-Identifier: Apache-2.0
// The least iteration energy at a deadline, exactly (on a fine time grid) or proven at least a
// threshold: a label-setting dynamic program over a topological order of the DAG, pruned by the
// stage-wise Lagrangian bound of what is left (tests only; a certifier for the solver's fastest
// point, stronger than the stage-wise Lagrangian bound alone, stage_bound.h).
//
// The program it solves is the GRID RELAXATION of the real one: every duration, the P2P time and
// the deadline rounded DOWN to the grid (resolution_s), integer start times. It is a relaxation:
// a real plan's schedule with its start times rounded down to the grid stays feasible there with
// the same options (floor(S + t) >= floor(S) + floor(t)), at the same energy. So its least energy
// is a lower bound of the real least energy (up to floating-point rounding of 1e-9 of a grid step
// in the roundings).
//
// The search: nodes in order of their all-fastest earliest start; a label is the options of the
// nodes processed so far, scheduled as early as possible; it keeps the finish times of the
// processed nodes with an unprocessed successor (the frontier) and the energy so far. A label is
// dropped when a node finishes after its latest finish (the deadline minus the longest all-fastest
// path after it: no completion meets the deadline), when another label with no more energy
// finishes every frontier node no later (every completion of it completes the other at no more
// energy), or when its energy plus a lower bound of what is left reaches the threshold. The bound
// of what is left: the Lagrangian relaxation of the cross-stage edges among the unprocessed nodes
// and from the frontier (multipliers fixed, e.g. the LP's duals), each stage's remaining chain
// solved exactly by a dynamic program over its start times, from the label's finish of the
// stage's last processed node; every term a relaxed edge adds is <= 0 for a feasible completion.
// When every label is dropped the least energy is at least the threshold; otherwise the cheapest
// complete label is the grid program's exact least energy.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kareus/pipeline/solver.h"

namespace kareus::pipeline::testing {

struct LabelBoundOptions {
  double resolution_s = 1e-6;  // the grid of the relaxation
  double threshold_j = 0.0;    // labels whose bound reaches it are dropped (> 0)
  // Multipliers of the pruning bound, one per DAG edge (only cross-stage edges are used; e.g. the
  // LP's duals, MinEnergyLpEdgeDuals); empty = all zero (each stage's chain alone).
  std::vector<double> multipliers = {};
  int64_t max_labels = 50'000'000;  // labels created, all layers; past it: nullopt (gave up)
};

struct LabelBound {
  // <= every real plan's energy with time <= deadline: min(threshold, the grid program's least).
  double energy_j = 0.0;
  bool below_threshold = false;  // the grid program has a plan under the threshold: energy_j is
                                 // its exact least energy and `choice` that plan
  std::vector<int> choice = {};  // per DAG node: index into its class's options (OptionsOf)
  double root_bound_j = 0.0;     // the Lagrangian bound of the whole program (nothing processed)
  int64_t labels_created = 0;    // labels that passed the deadline and bound checks
  int64_t labels_max = 0;        // most labels kept after one node
};

// nullopt when the DAG's same-stage edges do not form chains, no plan meets the deadline, or the
// search created more than max_labels labels.
std::optional<LabelBound> LabelSettingBound(const Problem& problem, const schedule::Dag& dag,
                                            double deadline_s, double p_static_w,
                                            const LabelBoundOptions& options);

}  // namespace kareus::pipeline::testing
