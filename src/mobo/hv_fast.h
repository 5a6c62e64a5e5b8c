// SPDX-License-Identifier: Apache-2.0
// Acquisition fast path: hypervolume improvement of one candidate against an already filtered
// front (sorted by time, energy descending), O(|front|) instead of re-filtering per candidate
// as pareto::HypervolumeImprovement does. Scoring ~1,000 candidates per pick for every pick of
// a batch is the hot loop of the optimizer. Cross-checked against the pareto library in tests.
#pragma once

#include <vector>

#include "kareus/pareto/pareto.h"

namespace kareus::mobo::internal {

// HV(front + p) - HV(front) against `reference`; `front` must satisfy pareto::IsFront and lie
// inside the reference box.
double FrontHvi(const std::vector<pareto::Point>& front, const pareto::Point& p,
                const pareto::Point& reference);

// Inserts p into a filtered front (dropping the points it dominates); no-op when dominated.
void InsertIntoFront(std::vector<pareto::Point>* front, const pareto::Point& p);

}  // namespace kareus::mobo::internal
