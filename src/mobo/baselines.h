// SPDX-License-Identifier: Apache-2.0
// The baselines that measure the optimizer (DESIGN.md §6): the exhaustive oracle (every
// configuration, noise-free) and random search at the same budget and noise.
#pragma once

#include <cstdint>
#include <vector>

#include "kareus/measure/backend.h"
#include "kareus/mobo/prior.h"
#include "kareus/mobo/profiler.h"
#include "kareus/mobo/search_space.h"

namespace kareus::mobo::internal {

// Every configuration of the space through `oracle` (a noise-free backend), by space index.
std::vector<measure::Sample> Exhaustive(const SearchSpace& space,
                                        const workload::PartitionType& type,
                                        measure::Backend& oracle);

// `count` distinct configurations drawn uniformly without replacement.
std::vector<int64_t> RandomDesign(const SearchSpace& space, int64_t count, uint64_t seed);

// Hypervolume of the noise-free values of the configurations on the frontier of `noisy`
// (the configurations a profiler would keep), against `reference`.
double ReevaluatedHypervolume(const std::vector<int64_t>& indices,
                              const std::vector<measure::Sample>& noisy,
                              const std::vector<measure::Sample>& truth,
                              const pareto::Point& reference);

// The reference of a frontier comparison: nadir + 10 % of the front's range per axis (a
// single-point front uses 1 % of its values).
pareto::Point ComparisonReference(const std::vector<pareto::Point>& front);

// The surrogate options of a profile measured on `backend`: `seed`, the prior's weight learned
// unless `options.prior_check` is false, the GP's noise floors at the backend's declared
// repeatability.
SurrogateOptions SurrogateOptionsFor(const ProfileOptions& options, const measure::Backend& backend,
                                     uint64_t seed);

// The frontier-selection values of measured configurations: the posterior mean of a surrogate
// of `kind` (with `surrogate_options`) fitted on them (denoised; with what `knowledge` holds:
// the prior mean and related workloads' rows), or the readings themselves when `denoise` is
// false. `use`, when given, receives what the fit made of the prior and the related rows.
std::vector<measure::Sample> Estimates(const SearchSpace& space,
                                       const std::vector<int64_t>& indices,
                                       const std::vector<measure::Sample>& samples,
                                       SurrogateKind kind, bool denoise, double static_power_w,
                                       const SurrogateOptions& surrogate_options,
                                       const TypeKnowledge& knowledge, PriorUse* use = nullptr);

// Random search gets the optimizer's frontier extraction, prior included.
OracleComparison CompareWithOracle(const SearchSpace& space, const workload::PartitionType& type,
                                   const PartitionResult& result, measure::Backend& noisy,
                                   measure::Backend& oracle, const ProfileOptions& options,
                                   uint64_t random_seed, const TypeKnowledge& knowledge);

}  // namespace kareus::mobo::internal
