// SPDX-License-Identifier: Apache-2.0
// The optimizer loop on the synthetic backend: determinism, budgets, coverage, the oracle
// comparison, and resuming from the store after a SIGKILL without measuring anything twice.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <numeric>
#include <optional>
#include <random>
#include <set>

#include "kareus/common/error.h"
#include "kareus/measure/store.h"
#include "kareus/mobo/profiler.h"
#include "measure/synthetic_backend.h"

namespace kareus::mobo {
namespace {

namespace fs = std::filesystem;

workload::WorkloadModel SyntheticModel() {
  return testing::SyntheticModel({testing::SyntheticPartition("fwd_attn", 4),
                                  testing::SyntheticPartition("bwd_mlp", 3),
                                  testing::SyntheticPartition("fwd_trail", 1, false)});
}

ProfileOptions SmallOptions() {
  ProfileOptions options;
  options.budget = 40;
  options.batch_size = 8;
  return options;
}

void ExpectSameFrontiers(const ProfileResult& a, const ProfileResult& b) {
  ASSERT_EQ(a.partitions.size(), b.partitions.size());
  for (std::size_t t = 0; t < a.partitions.size(); ++t) {
    const PartitionResult& x = a.partitions[t];
    const PartitionResult& y = b.partitions[t];
    ASSERT_EQ(x.evaluations.size(), y.evaluations.size()) << x.type;
    for (std::size_t i = 0; i < x.evaluations.size(); ++i) {
      EXPECT_EQ(x.evaluations[i].index, y.evaluations[i].index) << x.type << " #" << i;
      EXPECT_EQ(x.evaluations[i].sample.energy_j, y.evaluations[i].sample.energy_j);
    }
    ASSERT_EQ(x.frontier.size(), y.frontier.size()) << x.type;
    for (std::size_t i = 0; i < x.frontier.size(); ++i) {
      EXPECT_EQ(x.frontier[i].knobs.freq_mhz, y.frontier[i].knobs.freq_mhz);
      EXPECT_EQ(x.frontier[i].knobs.sms, y.frontier[i].knobs.sms);
      EXPECT_EQ(x.frontier[i].knobs.slot, y.frontier[i].knobs.slot);
      EXPECT_EQ(x.frontier[i].time_s, y.frontier[i].time_s);
      EXPECT_EQ(x.frontier[i].energy_j, y.frontier[i].energy_j);
    }
    ASSERT_EQ(x.clock_frontiers.size(), y.clock_frontiers.size());
    for (std::size_t c = 0; c < x.clock_frontiers.size(); ++c) {
      EXPECT_EQ(x.clock_frontiers[c].points.size(), y.clock_frontiers[c].points.size());
    }
    EXPECT_EQ(x.hypervolume, y.hypervolume);
  }
}

class ProfilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kareus-profiler-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  workload::WorkloadModel model_ = SyntheticModel();
};

TEST_F(ProfilerTest, SameSeedSameResultAndInvariants) {
  testing::SyntheticBackend b1(3), b2(3);
  const ProfileResult a = ProfileWorkload(model_, SmallOptions(), b1, {.seed = 3, .quiet = true});
  const ProfileResult b = ProfileWorkload(model_, SmallOptions(), b2, {.seed = 3, .quiet = true});
  ExpectSameFrontiers(a, b);
  EXPECT_EQ(DumpJson(a.ToJson(true)), DumpJson(b.ToJson(true)));

  for (const PartitionResult& r : a.partitions) {
    const int64_t expected = r.tunable ? 40 : 18;  // a fixed type is measured at every clock
    EXPECT_EQ(static_cast<int64_t>(r.evaluations.size()), expected) << r.type;
    std::set<int64_t> distinct;
    std::set<int> clocks;
    for (const Evaluation& e : r.evaluations) {
      distinct.insert(e.index);
      clocks.insert(e.knobs.freq_mhz);
    }
    EXPECT_EQ(distinct.size(), r.evaluations.size()) << "measured twice in " << r.type;
    EXPECT_EQ(clocks.size(), 18u) << "every clock gets coverage in " << r.type;
    // The frontier is a Pareto front of the (estimated) values, and every clock has one.
    for (std::size_t i = 1; i < r.frontier.size(); ++i) {
      EXPECT_LT(r.frontier[i - 1].time_s, r.frontier[i].time_s);
      EXPECT_GT(r.frontier[i - 1].energy_j, r.frontier[i].energy_j);
    }
    ASSERT_EQ(r.clock_frontiers.size(), 18u);
    for (const ClockFrontier& cf : r.clock_frontiers) {
      EXPECT_FALSE(cf.points.empty()) << r.type << " @ " << cf.freq_mhz;
      for (const FrontierPoint& p : cf.points) EXPECT_EQ(p.knobs.freq_mhz, cf.freq_mhz);
    }
    EXPECT_GT(r.gpu_seconds, 0.0);
    EXPECT_EQ(r.measured, expected);
    EXPECT_EQ(r.reused, 0);
  }
  EXPECT_EQ(a.measurements_taken, 40 + 40 + 18);

  testing::SyntheticBackend other(4);
  const ProfileResult c =
      ProfileWorkload(model_, SmallOptions(), other, {.seed = 4, .quiet = true});
  EXPECT_NE(DumpJson(a.ToJson(true)), DumpJson(c.ToJson(true)));
}

// The step interface: types advanced in a random interleaving, each batch's units measured in
// a random order and its samples recorded in a random order, give ProfileWorkload's summary.
TEST_F(ProfilerTest, InterleavedTypesAndShuffledSamplesGiveTheSameSummary) {
  for (int unit_size : {0, 3}) {
    ProfileOptions options = SmallOptions();
    options.unit_size = unit_size;
    testing::SyntheticBackend plain(3);
    const ProfileResult expected =
        ProfileWorkload(model_, options, plain, {.seed = 3, .quiet = true});

    testing::SyntheticBackend meta(3), measuring(3);
    WorkloadProfiler profiler(model_, options, meta, {.seed = 3, .quiet = true});
    std::mt19937 rng(11);
    std::vector<int> open(profiler.Types().size());
    std::iota(open.begin(), open.end(), 0);
    int64_t units = 0;
    while (!open.empty()) {
      const std::size_t pick = std::uniform_int_distribution<std::size_t>(0, open.size() - 1)(rng);
      const int t = open[pick];
      std::optional<MeasurementBatch> batch = profiler.NextBatch(t);
      if (!batch) {
        EXPECT_TRUE(profiler.Complete(t));
        open.erase(open.begin() + static_cast<std::ptrdiff_t>(pick));
        continue;
      }
      ASSERT_FALSE(batch->units.empty());
      std::size_t covered = 0;
      std::vector<std::pair<std::size_t, measure::Sample>> samples;
      for (const auto& [begin, end] : batch->units) {
        if (unit_size > 0) {
          EXPECT_LE(end - begin, static_cast<std::size_t>(unit_size));
        }
        covered += end - begin;
        const std::vector<measure::PartitionKnobs> unit(batch->knobs.begin() + begin,
                                                        batch->knobs.begin() + end);
        measuring.MeasureBatch(
            *profiler.Types()[t], unit,
            [&](std::size_t j, const measure::Sample& s) { samples.emplace_back(begin + j, s); });
        ++units;
      }
      EXPECT_EQ(covered, batch->knobs.size());
      std::shuffle(samples.begin(), samples.end(), rng);
      for (const auto& [index, sample] : samples) profiler.Record(t, index, sample);
    }
    const ProfileResult interleaved = profiler.Finish();
    EXPECT_EQ(DumpJson(interleaved.ToJson(true)), DumpJson(expected.ToJson(true))) << unit_size;
    EXPECT_EQ(meta.Measurements(), 0);
    EXPECT_EQ(measuring.Measurements(), expected.measurements_taken);
    int64_t batches = 0;
    for (const auto& r : expected.partitions) batches += r.batches;
    if (unit_size == 0) {
      EXPECT_EQ(units, batches);
    } else {
      EXPECT_GT(units, batches);
    }
  }
}

TEST_F(ProfilerTest, OracleComparisonBeatsRandomOnTheSyntheticSpace) {
  testing::SyntheticBackend backend(5);
  ProfileOptions options = SmallOptions();
  options.oracle = true;
  options.partitions = {"bwd_mlp", "fwd_trail"};
  const ProfileResult s = ProfileWorkload(model_, options, backend, {.seed = 5, .quiet = true});
  ASSERT_EQ(s.partitions.size(), 2u);
  const PartitionResult& r = s.partitions[0];
  ASSERT_TRUE(r.oracle.has_value());
  EXPECT_GT(r.oracle->oracle_hypervolume, 0.0);
  EXPECT_LE(r.oracle->hv_ratio, 1.0 + 1e-12);  // nothing beats the exhaustive frontier
  EXPECT_LE(r.oracle->random_hv_ratio, 1.0 + 1e-12);
  EXPECT_GT(r.oracle->hv_ratio, 0.95);
  EXPECT_GT(r.oracle->hv_ratio, r.oracle->random_hv_ratio);
  EXPECT_FALSE(s.partitions[1].oracle.has_value());  // fixed knobs: nothing was searched
  // The baselines do not count as profiling cost.
  EXPECT_EQ(s.measurements_taken, 40 + 18);
  const Json doc = s.ToJson();
  EXPECT_EQ(doc["format"], "kareus-profile");
  EXPECT_TRUE(doc["partitions"][0].contains("hv_ratio"));
  EXPECT_TRUE(doc["partitions"][0].contains("random_hv_ratio"));
  EXPECT_TRUE(doc["partitions"][0].contains("oracle_hypervolume"));
  EXPECT_TRUE(doc["partitions"][0]["frontier"][0].contains("knobs"));
}

TEST_F(ProfilerTest, EveryStrategyAndSurrogateRunsWithinBudget) {
  for (auto surrogate : {SurrogateKind::kGaussianProcess, SurrogateKind::kXgbEnsemble}) {
    for (auto strategy :
         {Strategy::kPublished, Strategy::kPerClock, Strategy::kBeliever, Strategy::kThompson}) {
      testing::SyntheticBackend backend(1);
      ProfileOptions options = SmallOptions();
      options.budget = 24;
      options.surrogate = surrogate;
      options.strategy = strategy;
      options.partitions = {"fwd_attn"};
      const ProfileResult s = ProfileWorkload(model_, options, backend, {.seed = 1, .quiet = true});
      EXPECT_EQ(s.partitions[0].evaluations.size(), 24u);
      EXPECT_EQ(s.surrogate, ToString(surrogate));
      EXPECT_EQ(s.strategy, ToString(strategy));
    }
  }
}

// A fraction budget is floored at min_budget evaluations per tunable type and at one per
// profiled clock (at most the whole space; min_budget 0: no floor); an explicit budget is not;
// the share reported per type is the share measured.
TEST_F(ProfilerTest, FractionBudgetsHaveAFloor) {
  auto profile = [&](const ProfileOptions& o) {
    testing::SyntheticBackend backend(1);
    return ProfileWorkload(model_, o, backend, {.seed = 1, .quiet = true}).partitions[0];
  };
  ProfileOptions options;
  options.budget_fraction = 0.01;  // 8 of the 720 configurations of fwd_attn
  options.partitions = {"fwd_attn"};
  const PartitionResult floored = profile(options);
  EXPECT_EQ(floored.evaluations.size(), 18u);  // one per profiled clock: 18 > kMinBudget
  EXPECT_EQ(floored.budget, 18);
  options.min_budget = 5;  // the clock floor holds below it
  EXPECT_EQ(profile(options).budget, 18);
  options.budget_fraction = 0.03;  // 22 of 720: above both floors
  options.min_budget = 20;
  EXPECT_EQ(profile(options).budget, 22);
  options.min_budget = 30;
  EXPECT_EQ(profile(options).budget, 30);
  options.budget_fraction = 0.01;
  options.min_budget = 0;
  EXPECT_EQ(profile(options).evaluations.size(), 8u);
  ProfileOptions fixed = SmallOptions();
  fixed.budget = 7;
  fixed.partitions = {"fwd_attn"};
  EXPECT_EQ(profile(fixed).evaluations.size(), 7u);
  ProfileOptions tiny;
  tiny.budget_fraction = 0.01;
  tiny.min_budget = 1000;
  tiny.partitions = {"fwd_trail"};  // not tunable: its 18 clocks, floor or not
  EXPECT_EQ(profile(tiny).evaluations.size(), 18u);
  ProfileOptions negative;
  negative.min_budget = -1;
  const std::optional<OptionError> error = negative.Validate();
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->field, "min_budget");
}

TEST_F(ProfilerTest, InvalidBudgetsAndNamesAreInputErrorsBeforeAnyMeasurement) {
  const fs::path store = dir_ / "store.db";
  auto run = [&](ProfileOptions options) {
    testing::SyntheticBackend backend(1);
    options.store = store;
    try {
      ProfileWorkload(model_, options, backend, {.seed = 1, .quiet = true});
    } catch (...) {
      EXPECT_EQ(backend.Measurements(), 0);
      throw;
    }
  };
  ProfileOptions below = SmallOptions();
  below.budget = 3;  // the automatic initial design has 6 configurations
  EXPECT_THROW(run(below), InputError);
  ProfileOptions above = SmallOptions();
  above.budget = 18 * 10 * 4 + 1;
  EXPECT_THROW(run(above), InputError);
  ProfileOptions initial = SmallOptions();
  initial.initial_design = 50;  // more than the budget of 40
  EXPECT_THROW(run(initial), InputError);
  ProfileOptions fraction;
  fraction.budget_fraction = 1.5;
  EXPECT_THROW(run(fraction), InputError);
  ProfileOptions unknown = SmallOptions();
  unknown.partitions = {"fwd_nothing"};
  EXPECT_THROW(run(unknown), InputError);
  EXPECT_FALSE(fs::exists(store));  // validation happens before the store is created
  try {
    run(below);
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("initial design"), std::string::npos) << e.what();
  }
}

TEST_F(ProfilerTest, StoreFromAnotherWorkloadIsRefusedAndKept) {
  const fs::path store = dir_ / "store.db";
  ProfileOptions options = SmallOptions();
  options.store = store;
  options.partitions = {"fwd_trail"};
  testing::SyntheticBackend backend(1);
  ProfileWorkload(model_, options, backend, {.seed = 1, .quiet = true});
  const measure::StoreIdentity identity{.gpu = "SYNTH-GPU",
                                        .workload_signature = model_.workload.Signature(),
                                        .backend = backend.Description()};
  EXPECT_EQ(measure::MeasurementStore::Open(store, identity)->Count(), 18);

  workload::WorkloadModel other = model_;
  other.workload.sequence_length = 8192;  // another workload: another signature
  ASSERT_NE(other.workload.Signature(), model_.workload.Signature());
  testing::SyntheticBackend fresh(1);
  EXPECT_THROW(ProfileWorkload(other, options, fresh, {.seed = 1, .quiet = true}),
               EnvironmentError);
  EXPECT_EQ(fresh.Measurements(), 0);
  EXPECT_EQ(measure::MeasurementStore::Open(store, identity)->Count(), 18);
}

TEST_F(ProfilerTest, RerunWithTheStoreMeasuresNothing) {
  const fs::path store = dir_ / "store.db";
  ProfileOptions options = SmallOptions();
  options.store = store;
  testing::SyntheticBackend first(2), second(2);
  const ProfileResult a = ProfileWorkload(model_, options, first, {.seed = 2, .quiet = true});
  const ProfileResult b = ProfileWorkload(model_, options, second, {.seed = 2, .quiet = true});
  EXPECT_EQ(second.Measurements(), 0);
  EXPECT_EQ(b.measurements_taken, 0);
  EXPECT_EQ(b.measurements_reused, 40 + 40 + 18);
  ExpectSameFrontiers(a, b);
}

// A run killed with SIGKILL in the middle (no destructor, no flush) and restarted ends with the
// frontiers of an uninterrupted run, and no configuration is measured twice.
TEST_F(ProfilerTest, KilledRunResumesWithoutMeasuringTwice) {
  const fs::path store = dir_ / "store.db";
  ProfileOptions options = SmallOptions();
  options.store = store;
  constexpr int64_t kKillAt = 53;  // inside the second partition type's batches
  const int64_t total = 40 + 40 + 18;

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    testing::SyntheticBackend backend(9);
    backend.before_measure = [](int64_t taken) {
      if (taken == kKillAt) std::raise(SIGKILL);
    };
    ProfileWorkload(model_, options, backend, {.seed = 9, .quiet = true});
    _exit(0);  // not reached
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child was expected to die";
  EXPECT_EQ(WTERMSIG(status), SIGKILL);

  testing::SyntheticBackend counting(9);
  const measure::StoreIdentity identity{.gpu = "SYNTH-GPU",
                                        .workload_signature = model_.workload.Signature(),
                                        .backend = counting.Description()};
  const int64_t committed = measure::MeasurementStore::Open(store, identity)->Count();
  EXPECT_EQ(committed, kKillAt);  // every measurement before the kill was committed

  const ProfileResult resumed =
      ProfileWorkload(model_, options, counting, {.seed = 9, .quiet = true});
  EXPECT_EQ(counting.Measurements(), total - committed);  // nothing measured twice
  EXPECT_EQ(resumed.measurements_reused, committed);
  EXPECT_EQ(measure::MeasurementStore::Open(store, identity)->Count(), total);

  testing::SyntheticBackend clean(9);
  ProfileOptions no_store = SmallOptions();
  const ProfileResult uninterrupted =
      ProfileWorkload(model_, no_store, clean, {.seed = 9, .quiet = true});
  ExpectSameFrontiers(uninterrupted, resumed);
}

}  // namespace
}  // namespace kareus::mobo
