// SPDX-License-Identifier: Apache-2.0
// A lower bound of the least iteration energy at a deadline, tighter than the convex (LP)
// relaxation the solver traces: Lagrangian relaxation of the CROSS-STAGE edges only (a
// multiplier mu_e >= 0 prices S_from + t_from + p2p - S_to), each stage's chain of instructions
// solved EXACTLY by a dynamic program over its finish times on a grid, inside the windows every
// plan meeting the deadline respects (a node starts no earlier than the longest all-fastest
// path into it and ends no later than the deadline minus the longest all-fastest path out of
// it). The windows are what make it tighter than the LP: a chain without them is a knapsack
// that almost never binds, and the bound would equal the LP's.
// Valid on the grid: durations, earliest starts and latest finishes are rounded DOWN to the
// grid, so a real plan's schedule with its starts rounded down stays feasible there, and the
// start terms lose at most resolution * |c_v| for every node whose net start coefficient c_v is
// negative (subtracted). Exact up to floating-point rounding (1e-9 of a grid step).
// The multipliers start at the LP's duals (MinEnergyLpEdgeDuals: then the bound is at least the
// LP's, less the rounding) and are raised by subgradient steps; every value is a valid bound
// and the best is kept. A certifier for the solver's fastest point (tests only).
#pragma once

#include <optional>
#include <vector>

#include "kareus/pipeline/solver.h"

namespace kareus::pipeline::testing {

struct StageBoundOptions {
  double resolution_s = 1e-4;  // time grid of the stage programs (rounded so the bound holds)
  int iterations = 20;         // subgradient steps on the multipliers
  double upper_bound_j = 0.0;  // energy of a known plan within the deadline (Polyak's target)
  // Starting multipliers, one per DAG edge (only cross-stage edges are used; e.g. the LP's
  // duals, MinEnergyLpEdgeDuals); empty = all zero.
  std::vector<double> multipliers = {};
};

struct StageBound {
  double energy_j = 0.0;        // the best bound: <= every plan's energy with time <= deadline
  double start_energy_j = 0.0;  // the bound at the starting multipliers
  int iterations = 0;
};

// nullopt when the DAG's same-stage edges do not form chains (a node with two same-stage
// predecessors or successors) or no plan meets the deadline.
std::optional<StageBound> StageLagrangianBound(const Problem& problem, const schedule::Dag& dag,
                                               double deadline_s, double p_static_w,
                                               const StageBoundOptions& options);

}  // namespace kareus::pipeline::testing
