// SPDX-License-Identifier: Apache-2.0
// Search space, surrogates, the acquisition fast path and batch selection.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "kareus/common/error.h"
#include "kareus/mobo/acquisition.h"
#include "kareus/mobo/search_space.h"
#include "kareus/mobo/surrogate.h"
#include "kareus/pareto/pareto.h"
#include "measure/synthetic_backend.h"
#include "mobo/hv_fast.h"

namespace kareus::mobo {
namespace {

SearchSpace SyntheticSpace(int slots = 3) {
  return SearchSpace::For(testing::SyntheticGpu(), testing::SyntheticPartition("fwd_mlp", slots),
                          false);
}

TEST(SearchSpace, PublishedGridIndexRoundTripAndEncoding) {
  const SearchSpace space = SyntheticSpace();
  ASSERT_EQ(space.clocks_mhz().size(), 18u);  // 1410..900 by 30
  EXPECT_EQ(space.clocks_mhz().front(), 1410);
  EXPECT_EQ(space.clocks_mhz().back(), 900);
  EXPECT_EQ(space.Size(), 18 * 10 * 3);
  std::set<std::string> seen;
  for (int64_t i = 0; i < space.Size(); ++i) {
    const measure::PartitionKnobs k = space.At(i);
    EXPECT_EQ(space.IndexOf(k), i);
    EXPECT_EQ(k.freq_mhz, space.clocks_mhz()[space.ClockIndex(i)]);
    seen.insert(std::to_string(k.freq_mhz) + "/" + std::to_string(k.sms) + "/" + k.slot);
    const std::vector<double> x = space.Encode(i);
    ASSERT_EQ(static_cast<int>(x.size()), space.Dimensions());
    for (double v : x) EXPECT_TRUE(v >= 0.0 && v <= 1.0);
    EXPECT_DOUBLE_EQ(x[2] + x[3] + x[4], 1.0);  // one-hot slot
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), space.Size());
  EXPECT_EQ(space.IndexOf({.freq_mhz = 1405, .sms = 3, .slot = "norm_0"}), -1);
  EXPECT_EQ(space.IndexOf({.freq_mhz = 1410, .sms = 3, .slot = "attn_9"}), -1);
}

TEST(SearchSpace, FullGridAndFixedPartitions) {
  const auto gpu = testing::SyntheticGpu();
  const SearchSpace full = SearchSpace::For(gpu, testing::SyntheticPartition("a", 2), true);
  EXPECT_EQ(full.clocks_mhz().size(), gpu.clock.Supported().size());
  EXPECT_GT(full.clocks_mhz().size(), 18u);
  const SearchSpace fixed =
      SearchSpace::For(gpu, testing::SyntheticPartition("trail", 1, /*tunable=*/false), false);
  EXPECT_EQ(fixed.Size(), 18);
  EXPECT_EQ(fixed.At(0).sms, 20);
  EXPECT_EQ(fixed.At(0).slot, "norm_0");
}

TEST(HvFast, MatchesTheParetoLibrary) {
  Rng rng(11);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<pareto::Point> points;
    const int n = 1 + trial % 15;
    for (int i = 0; i < n; ++i) points.push_back({.time_s = u(rng), .energy_j = u(rng)});
    const pareto::Point reference{.time_s = 1.05, .energy_j = 1.05};
    const std::vector<pareto::Point> front = pareto::Filter(points);
    for (int c = 0; c < 10; ++c) {
      const pareto::Point p{.time_s = 1.1 * u(rng), .energy_j = 1.1 * u(rng)};
      EXPECT_NEAR(internal::FrontHvi(front, p, reference),
                  pareto::HypervolumeImprovement(front, p, reference), 1e-12);
      std::vector<pareto::Point> inserted = front;
      internal::InsertIntoFront(&inserted, p);
      EXPECT_TRUE(pareto::IsFront(inserted));
      EXPECT_NEAR(pareto::Hypervolume(inserted, reference),
                  pareto::Hypervolume(front, reference) +
                      pareto::HypervolumeImprovement(front, p, reference),
                  1e-12);
    }
  }
}

struct Data {
  std::vector<std::vector<double>> x;
  std::vector<double> time_s, dynamic_j;
  std::vector<int64_t> indices;
};

// A pseudo-random 1/every of the space (or, with `every` < 0, the complement of 1/-every).
Data Sample(const SearchSpace& space, const workload::PartitionType& type, int every) {
  Data d;
  for (int64_t i = 0; i < space.Size(); ++i) {
    const bool in = DeriveSeed(77, static_cast<uint64_t>(i)) % std::abs(every) == 0;
    if (in != (every > 0)) continue;
    const auto s = testing::SyntheticBackend::Truth(type, space.At(i));
    d.x.push_back(space.Encode(i));
    d.time_s.push_back(s.time_s);
    d.dynamic_j.push_back(s.dynamic_energy_j);
    d.indices.push_back(i);
  }
  return d;
}

class SurrogateTest : public ::testing::TestWithParam<SurrogateKind> {};

TEST_P(SurrogateTest, LearnsTheSyntheticSpaceAndIsDeterministic) {
  const auto type = testing::SyntheticPartition("fwd_mlp", 3);
  const SearchSpace space = SearchSpace::For(testing::SyntheticGpu(), type, false);
  const Data train = Sample(space, type, 5);
  const Data test = Sample(space, type, -5);
  auto a = MakeSurrogate(GetParam(), {.seed = 5});
  auto b = MakeSurrogate(GetParam(), {.seed = 5});
  a->Fit(train.x, train.time_s, train.dynamic_j);
  b->Fit(train.x, train.time_s, train.dynamic_j);
  const Predictions pa = a->Predict(test.x);
  const Predictions pb = b->Predict(test.x);
  ASSERT_EQ(pa.time_s.size(), test.x.size());
  double time_err = 0.0, energy_err = 0.0;
  for (std::size_t i = 0; i < test.x.size(); ++i) {
    EXPECT_EQ(pa.time_s[i], pb.time_s[i]);  // same seed, same model
    EXPECT_EQ(pa.dynamic_energy_std_j[i], pb.dynamic_energy_std_j[i]);
    EXPECT_GE(pa.time_std_s[i], 0.0);
    EXPECT_GE(pa.dynamic_energy_std_j[i], 0.0);
    time_err += std::abs(pa.time_s[i] / test.time_s[i] - 1.0);
    energy_err += std::abs(pa.dynamic_energy_j[i] / test.dynamic_j[i] - 1.0);
  }
  // A fifth of the space predicts the rest within a few percent on average.
  EXPECT_LT(time_err / test.x.size(), 0.05);
  EXPECT_LT(energy_err / test.x.size(), 0.05);
}

// The GP's noise floor (SurrogateOptions::gp_min_*_noise: the backend's declared
// repeatability) with a prior that is right up to a constant factor, the profiler's situation
// once the calibrated prior fits: 13 measured configurations read with 0.3 % / 1 % noise,
// eight noise draws. Without the floor some fits explain the readings' noise as structure of
// the residual (their means at the measured configurations follow the readings: in draw 3 to
// within 0.002 %); with the floor at the noise they cannot, so the means, which select the
// frontier, are nearer the truth; where the fit without the floor already smoothed, the floor
// changes little.
TEST(Surrogate, GaussianProcessNoiseFloorDenoisesTheMeasured) {
  const auto type = testing::SyntheticPartition("fwd_mlp", 3);
  const SearchSpace space = SearchSpace::For(testing::SyntheticGpu(), type, false);
  const Data truth = Sample(space, type, 30);
  const SurrogateOptions floor{.seed = 5, .gp_min_time_noise = 0.003, .gp_min_energy_noise = 0.01};
  double sum_free = 0.0, sum_floor = 0.0;
  for (uint64_t draw = 1; draw <= 8; ++draw) {
    TrainingRows rows;
    std::mt19937_64 rng(draw);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (std::size_t i = 0; i < truth.x.size(); ++i) {
      rows.Add(truth.x[i], truth.time_s[i] * (1.0 + 0.003 * normal(rng)),
               truth.dynamic_j[i] * (1.0 + 0.01 * normal(rng)));
    }
    for (std::size_t i = 0; i < truth.x.size(); ++i) {
      rows.AddPrior(1.1 * truth.time_s[i], 0.9 * truth.dynamic_j[i]);
    }
    // RMS relative error of the fit's dynamic-energy means at the measured configurations.
    auto rms = [&](const SurrogateOptions& options) {
      auto gp = MakeSurrogate(SurrogateKind::kGaussianProcess, options);
      gp->Fit(rows);
      const Predictions p = gp->Predict(rows.x, rows.prior_time_s, rows.prior_dynamic_energy_j);
      double sum = 0.0;
      for (std::size_t i = 0; i < truth.x.size(); ++i) {
        sum += std::pow(p.dynamic_energy_j[i] / truth.dynamic_j[i] - 1.0, 2);
      }
      return std::sqrt(sum / static_cast<double>(truth.x.size()));
    };
    const double free = rms({.seed = 5});
    const double floored = rms(floor);
    EXPECT_LE(floored, 1.02 * free) << "draw " << draw;
    sum_free += free;
    sum_floor += floored;
  }
  EXPECT_LT(sum_floor, 0.85 * sum_free);
}

INSTANTIATE_TEST_SUITE_P(Kinds, SurrogateTest,
                         ::testing::Values(SurrogateKind::kXgbEnsemble,
                                           SurrogateKind::kGaussianProcess));

TEST(Surrogate, NamesRoundTripAndUnknownNamesAreInputErrors) {
  for (auto kind : {SurrogateKind::kXgbEnsemble, SurrogateKind::kGaussianProcess}) {
    EXPECT_EQ(SurrogateKindFromString(ToString(kind)), kind);
  }
  for (auto s :
       {Strategy::kPublished, Strategy::kPerClock, Strategy::kBeliever, Strategy::kThompson}) {
    EXPECT_EQ(StrategyFromString(ToString(s)), s);
  }
  EXPECT_THROW(SurrogateKindFromString("forest"), InputError);
  EXPECT_THROW(StrategyFromString("greedy"), InputError);
}

// The synthetic fwd_mlp space the acquisition tests pick from.
SearchSpace AcquisitionSpace() {
  return SearchSpace::For(testing::SyntheticGpu(), testing::SyntheticPartition("fwd_mlp", 3),
                          false);
}

// A GP fitted on 11 measurements of `space`, and the acquisition input over every configuration
// not measured yet; `measured` receives the measured indices.
AcquisitionInput MakeAcquisitionInput(const SearchSpace& space, std::set<int64_t>* measured) {
  const Data train = Sample(space, testing::SyntheticPartition("fwd_mlp", 3), 11);
  auto surrogate = MakeSurrogate(SurrogateKind::kGaussianProcess, {});
  surrogate->Fit(train.x, train.time_s, train.dynamic_j);
  AcquisitionInput input;
  input.space = &space;
  input.static_power_w = 85.0;
  input.measured = train.indices;
  input.measured_time_s = train.time_s;
  input.measured_dynamic_energy_j = train.dynamic_j;
  for (std::size_t i = 0; i < train.time_s.size(); ++i) {
    input.measured_energy_j.push_back(train.dynamic_j[i] + 85.0 * train.time_s[i]);
  }
  std::vector<std::vector<double>> x;
  *measured = std::set<int64_t>(train.indices.begin(), train.indices.end());
  for (int64_t i = 0; i < space.Size(); ++i) {
    if (measured->contains(i)) continue;
    input.candidates.push_back(i);
    x.push_back(space.Encode(i));
  }
  input.predictions = surrogate->Predict(x);
  return input;
}

class AcquisitionTest : public ::testing::TestWithParam<Strategy> {};

TEST_P(AcquisitionTest, PicksDistinctUnmeasuredCandidates) {
  const SearchSpace space = AcquisitionSpace();
  std::set<int64_t> measured;
  AcquisitionInput input = MakeAcquisitionInput(space, &measured);
  for (int k : {1, 5, 16, 32}) {
    const std::vector<Pick> picks = SelectBatch(GetParam(), input, k);
    ASSERT_EQ(static_cast<int>(picks.size()), k);
    std::set<int64_t> unique;
    for (const Pick& p : picks) {
      EXPECT_FALSE(measured.contains(p.index));
      EXPECT_TRUE(p.index >= 0 && p.index < space.Size());
      unique.insert(p.index);
    }
    EXPECT_EQ(unique.size(), picks.size());
    // Deterministic.
    const std::vector<Pick> again = SelectBatch(GetParam(), input, k);
    for (std::size_t i = 0; i < picks.size(); ++i) EXPECT_EQ(picks[i].index, again[i].index);
  }
  // Asking for more than exists returns every candidate once.
  const std::vector<Pick> all =
      SelectBatch(GetParam(), input, static_cast<int>(input.candidates.size()) + 5);
  EXPECT_EQ(all.size(), input.candidates.size());
}

// A trusted prior (AcquisitionInput::trusted_prior): any strategy picks along the predicted
// frontier (front_hvi) after exactly the knob-neighbour picks it is given.
TEST(Acquisition, TrustedPriorPicksAlongThePredictedFrontier) {
  const SearchSpace space = AcquisitionSpace();
  std::set<int64_t> measured;
  AcquisitionInput input = MakeAcquisitionInput(space, &measured);
  input.trusted_prior = true;
  for (int explore : {0, 2}) {
    input.exploration_picks = explore;
    for (Strategy strategy : {Strategy::kPerClock, Strategy::kPublished}) {
      const std::vector<Pick> picks = SelectBatch(strategy, input, 6);
      ASSERT_EQ(picks.size(), 6u);
      for (int j = 0; j < 6; ++j) {
        EXPECT_EQ(picks[j].reason, j < explore ? PickReason::kNeighbour : PickReason::kFrontHvi)
            << "explore " << explore << " pick " << j;
      }
    }
  }
  // The first frontier pick is the candidate whose predicted point adds the most hypervolume
  // to the measured front under the strict reference: it is not dominated by the measured front.
  input.exploration_picks = 0;
  const Pick first = SelectBatch(Strategy::kPerClock, input, 1)[0];
  const auto found = std::find(input.candidates.begin(), input.candidates.end(), first.index);
  const std::size_t c = static_cast<std::size_t>(found - input.candidates.begin());
  const double t = input.predictions.time_s[c];
  const double e = input.predictions.dynamic_energy_j[c] + 85.0 * t;
  for (std::size_t i = 0; i < input.measured.size(); ++i) {
    EXPECT_FALSE(input.measured_time_s[i] <= t && input.measured_energy_j[i] <= e) << i;
  }
}

// With the surrogate's means at the measured configurations (AcquisitionInput::
// measured_predictions), the trusted-prior front is made of them rather than the readings: a
// candidate the surrogate predicts equal to a measured configuration (an equivalent knob
// setting, or the same point seen through noise) adds nothing and is not picked, while
// against the readings it is the best pick.
TEST(Acquisition, TrustedPriorFrontIsTheSurrogatesMeansAtTheMeasured) {
  const SearchSpace space = AcquisitionSpace();
  std::set<int64_t> measured;
  AcquisitionInput input = MakeAcquisitionInput(space, &measured);
  input.trusted_prior = true;
  input.exploration_picks = 0;
  const int64_t first = SelectBatch(Strategy::kPerClock, input, 1)[0].index;
  const auto found = std::find(input.candidates.begin(), input.candidates.end(), first);
  const std::size_t c = static_cast<std::size_t>(found - input.candidates.begin());
  // The means at the measured: the readings, except that the first one is predicted exactly
  // where the surrogate predicts the readings' best pick.
  input.measured_predictions.time_s = input.measured_time_s;
  input.measured_predictions.dynamic_energy_j = input.measured_dynamic_energy_j;
  input.measured_predictions.time_s[0] = input.predictions.time_s[c];
  input.measured_predictions.dynamic_energy_j[0] = input.predictions.dynamic_energy_j[c];
  const std::vector<Pick> picks = SelectBatch(Strategy::kPerClock, input, 4);
  ASSERT_EQ(picks.size(), 4u);
  for (const Pick& p : picks) {
    EXPECT_NE(p.index, first);
    EXPECT_EQ(p.reason, PickReason::kFrontHvi);
  }
}

// AcquisitionInput::fastest_at_clocks: before any strategy (the trusted-prior frontier
// included), each listed clock's candidate with the smallest predicted time is taken
// (clock_fastest), unless a measured configuration at that clock is predicted at least as fast.
TEST(Acquisition, FastestAtAListedClockComesFirst) {
  const SearchSpace space = AcquisitionSpace();
  std::set<int64_t> measured;
  AcquisitionInput input = MakeAcquisitionInput(space, &measured);
  // The top clock (index 0), emptied of measurements: its fastest candidate by prediction.
  const int top = 0;
  AcquisitionInput at_top = input;
  at_top.measured.clear();
  at_top.measured_time_s.clear();
  at_top.measured_energy_j.clear();
  at_top.measured_dynamic_energy_j.clear();
  for (std::size_t i = 0; i < input.measured.size(); ++i) {
    if (space.ClockIndex(input.measured[i]) == top) continue;
    at_top.measured.push_back(input.measured[i]);
    at_top.measured_time_s.push_back(input.measured_time_s[i]);
    at_top.measured_energy_j.push_back(input.measured_energy_j[i]);
    at_top.measured_dynamic_energy_j.push_back(input.measured_dynamic_energy_j[i]);
  }
  ASSERT_FALSE(at_top.measured.empty());
  std::size_t fastest = input.candidates.size();
  for (std::size_t c = 0; c < input.candidates.size(); ++c) {
    if (space.ClockIndex(input.candidates[c]) != top) continue;
    if (fastest == input.candidates.size() ||
        input.predictions.time_s[c] < input.predictions.time_s[fastest]) {
      fastest = c;
    }
  }
  ASSERT_LT(fastest, input.candidates.size());
  at_top.fastest_at_clocks = {top};
  for (bool trusted : {false, true}) {
    at_top.trusted_prior = trusted;
    at_top.exploration_picks = trusted ? 1 : -1;
    for (Strategy strategy : {Strategy::kPerClock, Strategy::kPublished, Strategy::kBeliever}) {
      const std::vector<Pick> picks = SelectBatch(strategy, at_top, 4);
      ASSERT_EQ(picks.size(), 4u);
      EXPECT_EQ(picks[0].index, input.candidates[fastest]) << ToString(strategy);
      EXPECT_EQ(picks[0].reason, PickReason::kClockFastest) << ToString(strategy);
      for (std::size_t j = 1; j < picks.size(); ++j) {
        EXPECT_NE(picks[j].reason, PickReason::kClockFastest) << ToString(strategy);
      }
    }
  }
  // Not listed: no such pick.
  at_top.trusted_prior = false;
  at_top.exploration_picks = -1;
  at_top.fastest_at_clocks.clear();
  for (const Pick& p : SelectBatch(Strategy::kPerClock, at_top, 4)) {
    EXPECT_NE(p.reason, PickReason::kClockFastest);
  }
  // A measured configuration at that clock predicted as fast as the fastest candidate: none.
  // (Another configuration of that clock, read as fast as the fastest candidate's prediction.)
  std::size_t other = 0;
  while (other == fastest || space.ClockIndex(at_top.candidates[other]) != top) ++other;
  AcquisitionInput covered = at_top;
  covered.fastest_at_clocks = {top};
  covered.measured.push_back(at_top.candidates[other]);
  covered.measured_time_s.push_back(at_top.predictions.time_s[fastest]);
  covered.measured_dynamic_energy_j.push_back(at_top.predictions.dynamic_energy_j[fastest]);
  covered.measured_energy_j.push_back(at_top.predictions.dynamic_energy_j[fastest] +
                                      85.0 * at_top.predictions.time_s[fastest]);
  covered.candidates.clear();
  covered.predictions = {};
  for (std::size_t c = 0; c < at_top.candidates.size(); ++c) {
    if (c == other) continue;
    covered.candidates.push_back(at_top.candidates[c]);
    covered.predictions.time_s.push_back(at_top.predictions.time_s[c]);
    covered.predictions.time_std_s.push_back(at_top.predictions.time_std_s[c]);
    covered.predictions.dynamic_energy_j.push_back(at_top.predictions.dynamic_energy_j[c]);
    covered.predictions.dynamic_energy_std_j.push_back(at_top.predictions.dynamic_energy_std_j[c]);
  }
  for (const Pick& p : SelectBatch(Strategy::kPerClock, covered, 4)) {
    EXPECT_NE(p.reason, PickReason::kClockFastest);
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, AcquisitionTest,
                         ::testing::Values(Strategy::kPublished, Strategy::kPerClock,
                                           Strategy::kBeliever, Strategy::kThompson));

}  // namespace
}  // namespace kareus::mobo
