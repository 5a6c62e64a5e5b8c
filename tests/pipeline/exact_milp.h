// SPDX-License-Identifier: Apache-2.0
// The exact least iteration energy at a deadline, as a mixed-integer program solved by GLPK's
// branch and cut (an independent reference for the solver's frontier).
#pragma once

#include <map>
#include <optional>
#include <vector>

#include "kareus/pipeline/solver.h"

namespace kareus::pipeline::testing {

struct MilpAnswer {
  bool optimal = false;     // GLPK proved optimality (else: time limit or infeasible)
  double energy_j = 0.0;    // least total energy (all GPUs, static included) with time <= deadline
  std::vector<int> choice;  // an optimal plan: per DAG node, its option index
};

// min  sum_v sum_j x_vj * gpus_v * (E_vj - P t_vj) + P * GPUs * C
// s.t. sum_j x_vj = 1; S_w >= S_v + sum_j t_vj x_vj (+ p2p on cross-stage edges);
//      C >= S_v + sum_j t_vj x_vj; C <= deadline; x binary, S, C >= 0.
// `fixed`: node -> option index forced (e.g. instructions pinned at T_min); `time_limit_s` caps
// GLPK's search.
MilpAnswer MinEnergyMilp(const Problem& problem, const schedule::Dag& dag, double deadline_s,
                         double p_static_w, const std::map<int, int>& fixed = {},
                         double time_limit_s = 60.0);

// The same program's LINEAR relaxation (x in [0, 1], GLPK's simplex): per instruction the
// convex hull of its options, i.e. the convex relaxation the solver traces. nullopt when the
// simplex finds no optimum.
std::optional<double> MinEnergyLp(const Problem& problem, const schedule::Dag& dag,
                                  double deadline_s, double p_static_w);

// The linear relaxation's optimal dual values of the precedence rows, one per DAG edge (in
// dag.edges' order, >= 0: the energy saved per second the edge's lag were shorter); empty when
// the simplex finds no optimum. Starting multipliers for a Lagrangian bound.
std::vector<double> MinEnergyLpEdgeDuals(const Problem& problem, const schedule::Dag& dag,
                                         double deadline_s, double p_static_w);

}  // namespace kareus::pipeline::testing
