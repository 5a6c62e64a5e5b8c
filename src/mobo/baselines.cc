// SPDX-License-Identifier: Apache-2.0
#include "mobo/baselines.h"

#include <algorithm>
#include <numeric>

#include "kareus/common/context.h"
#include "kareus/common/error.h"

namespace kareus::mobo::internal {

std::vector<measure::Sample> Exhaustive(const SearchSpace& space,
                                        const workload::PartitionType& type,
                                        measure::Backend& oracle) {
  KAREUS_CHECK(oracle.NoiseFree());
  std::vector<measure::PartitionKnobs> all;
  all.reserve(space.Size());
  for (int64_t i = 0; i < space.Size(); ++i) all.push_back(space.At(i));
  return oracle.MeasureAll(type, all);
}

std::vector<int64_t> RandomDesign(const SearchSpace& space, int64_t count, uint64_t seed) {
  std::vector<int64_t> order(space.Size());
  std::iota(order.begin(), order.end(), 0);
  Rng rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  order.resize(std::min<int64_t>(count, space.Size()));
  return order;
}

double ReevaluatedHypervolume(const std::vector<int64_t>& indices,
                              const std::vector<measure::Sample>& noisy,
                              const std::vector<measure::Sample>& truth,
                              const pareto::Point& reference) {
  std::vector<pareto::Point> measured;
  for (std::size_t i = 0; i < indices.size(); ++i) {
    measured.push_back(
        {.time_s = noisy[i].time_s, .energy_j = noisy[i].energy_j, .payload = indices[i]});
  }
  std::vector<pareto::Point> exact;
  for (const pareto::Point& p : pareto::Filter(std::move(measured))) {
    const measure::Sample& t = truth[p.payload];
    exact.push_back({.time_s = t.time_s, .energy_j = t.energy_j});
  }
  return pareto::Hypervolume(exact, reference);
}

pareto::Point ComparisonReference(const std::vector<pareto::Point>& front) {
  KAREUS_CHECK(!front.empty());
  double t_lo = front.front().time_s, t_hi = front.back().time_s;
  double e_lo = front.back().energy_j, e_hi = front.front().energy_j;
  const double t_range = std::max(t_hi - t_lo, 0.01 * t_hi);
  const double e_range = std::max(e_hi - e_lo, 0.01 * e_hi);
  return {.time_s = t_hi + 0.1 * t_range, .energy_j = e_hi + 0.1 * e_range};
}

SurrogateOptions SurrogateOptionsFor(const ProfileOptions& options, const measure::Backend& backend,
                                     uint64_t seed) {
  const measure::ReadingNoise noise = backend.DeclaredNoise();
  return {.seed = seed,
          .learn_prior_weight = options.prior_check,
          .gp_min_time_noise = noise.time,
          .gp_min_energy_noise = noise.energy};
}

std::vector<measure::Sample> Estimates(const SearchSpace& space,
                                       const std::vector<int64_t>& indices,
                                       const std::vector<measure::Sample>& samples,
                                       SurrogateKind kind, bool denoise, double static_power_w,
                                       const SurrogateOptions& surrogate_options,
                                       const TypeKnowledge& knowledge, PriorUse* use) {
  if (!denoise || indices.size() < 3) return samples;
  const TrainingRows rows = knowledge.Rows(space, indices, samples);
  auto surrogate = MakeSurrogate(kind, surrogate_options);
  surrogate->Fit(rows);
  if (use != nullptr) *use = surrogate->Use();
  // The target's rows come first: predict at them.
  const std::size_t n = indices.size();
  const std::vector<std::vector<double>> x(rows.x.begin(), rows.x.begin() + n);
  const std::vector<double> prior_t =
      rows.has_prior()
          ? std::vector<double>(rows.prior_time_s.begin(), rows.prior_time_s.begin() + n)
          : std::vector<double>();
  const std::vector<double> prior_e =
      rows.has_prior() ? std::vector<double>(rows.prior_dynamic_energy_j.begin(),
                                             rows.prior_dynamic_energy_j.begin() + n)
                       : std::vector<double>();
  const Predictions p = surrogate->Predict(x, prior_t, prior_e);
  std::vector<measure::Sample> out = samples;
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i].time_s = p.time_s[i];
    out[i].dynamic_energy_j = p.dynamic_energy_j[i];
    out[i].static_energy_j = static_power_w * p.time_s[i];
    out[i].energy_j = out[i].dynamic_energy_j + out[i].static_energy_j;
  }
  return out;
}

OracleComparison CompareWithOracle(const SearchSpace& space, const workload::PartitionType& type,
                                   const PartitionResult& result, measure::Backend& noisy,
                                   measure::Backend& oracle, const ProfileOptions& options,
                                   uint64_t random_seed, const TypeKnowledge& knowledge) {
  const std::vector<measure::Sample> truth = Exhaustive(space, type, oracle);
  auto front_of = [&](int clock) {  // clock < 0: all clocks
    std::vector<pareto::Point> points;
    for (int64_t i = 0; i < space.Size(); ++i) {
      if (clock >= 0 && space.ClockIndex(i) != clock) continue;
      points.push_back({.time_s = truth[i].time_s, .energy_j = truth[i].energy_j});
    }
    return pareto::Filter(std::move(points));
  };

  std::vector<int64_t> opt_indices;
  std::vector<measure::Sample> opt_samples;
  for (const Evaluation& e : result.evaluations) {
    opt_indices.push_back(e.index);
    opt_samples.push_back(e.estimate);
  }
  const std::vector<int64_t> random_indices =
      RandomDesign(space, static_cast<int64_t>(result.evaluations.size()), random_seed);
  std::vector<measure::PartitionKnobs> random_knobs;
  for (int64_t i : random_indices) random_knobs.push_back(space.At(i));
  // Random search gets the same frontier extraction as the optimizer.
  const std::vector<measure::Sample> random_samples =
      Estimates(space, random_indices, noisy.MeasureAll(type, random_knobs), options.surrogate,
                options.denoise && type.tunable, noisy.StaticPowerW(),
                SurrogateOptionsFor(options, noisy, random_seed), knowledge);

  OracleComparison out;
  const std::vector<pareto::Point> oracle_front = front_of(-1);
  out.reference = ComparisonReference(oracle_front);
  out.oracle_hypervolume = pareto::Hypervolume(oracle_front, out.reference);
  out.hypervolume = ReevaluatedHypervolume(opt_indices, opt_samples, truth, out.reference);
  out.hv_ratio = out.hypervolume / out.oracle_hypervolume;
  out.random_hv_ratio =
      ReevaluatedHypervolume(random_indices, random_samples, truth, out.reference) /
      out.oracle_hypervolume;
  for (const measure::Sample& t : truth) {
    out.space_reference.time_s = std::max(out.space_reference.time_s, 1.1 * t.time_s);
    out.space_reference.energy_j = std::max(out.space_reference.energy_j, 1.1 * t.energy_j);
  }
  const double oracle_space = pareto::Hypervolume(oracle_front, out.space_reference);
  out.space_ref_hv_ratio =
      ReevaluatedHypervolume(opt_indices, opt_samples, truth, out.space_reference) / oracle_space;
  out.random_space_ref_hv_ratio =
      ReevaluatedHypervolume(random_indices, random_samples, truth, out.space_reference) /
      oracle_space;

  // Per clock: the same comparison restricted to each clock's configurations.
  const int clocks = static_cast<int>(space.clocks_mhz().size());
  double opt_sum = 0.0, random_sum = 0.0;
  for (int c = 0; c < clocks; ++c) {
    const std::vector<pareto::Point> front = front_of(c);
    const pareto::Point reference = ComparisonReference(front);
    const double best = pareto::Hypervolume(front, reference);
    auto at_clock = [&](const std::vector<int64_t>& indices,
                        const std::vector<measure::Sample>& samples) {
      std::vector<int64_t> ci;
      std::vector<measure::Sample> cs;
      for (std::size_t i = 0; i < indices.size(); ++i) {
        if (space.ClockIndex(indices[i]) != c) continue;
        ci.push_back(indices[i]);
        cs.push_back(samples[i]);
      }
      return best > 0 ? ReevaluatedHypervolume(ci, cs, truth, reference) / best : 1.0;
    };
    opt_sum += at_clock(opt_indices, opt_samples);
    random_sum += at_clock(random_indices, random_samples);
  }
  out.clock_hv_ratio = opt_sum / clocks;
  out.random_clock_hv_ratio = random_sum / clocks;
  return out;
}

}  // namespace kareus::mobo::internal
