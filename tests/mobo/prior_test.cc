// SPDX-License-Identifier: Apache-2.0
// The model-informed prior (issue 18) on the synthetic backend: a prior that is the truth up to
// noise helps at a small budget (by construction), a badly wrong prior (inverted clock trend,
// shuffled predictions) is detected from the residuals and does not hurt beyond noise, the
// perturbation grammar, and determinism with a prior.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "emulator/test_util.h"
#include "kareus/common/error.h"
#include "kareus/measure/emulator_backend.h"
#include "kareus/mobo/prior.h"
#include "kareus/mobo/profiler.h"
#include "kareus/mobo/search_space.h"
#include "kareus/mobo/surrogate.h"
#include "kareus/workload/workload.h"
#include "measure/synthetic_backend.h"

namespace kareus::mobo {
namespace {

// A partition type of examples/paper/02 (emulator::testing::LlamaCp2Tp4, built once), or
// nullptr when it has none of that name.
const workload::PartitionType* PaperType(const std::string& name) {
  const workload::WorkloadModel& model = emulator::testing::LlamaCp2Tp4();
  const auto it = std::find_if(model.partition_types.begin(), model.partition_types.end(),
                               [&](const workload::PartitionType& t) { return t.name == name; });
  return it == model.partition_types.end() ? nullptr : &*it;
}

workload::WorkloadModel SyntheticModel() {
  return testing::SyntheticModel(
      {testing::SyntheticPartition("fwd_attn", 4), testing::SyntheticPartition("bwd_mlp", 3)});
}

// The synthetic backend's noise-free model, distorted by `perturbation`, as the prior.
PriorModel SyntheticPrior(const ModelPerturbation& perturbation) {
  PriorModel prior;
  prior.description = "synthetic model " + perturbation.ToString();
  prior.make = [perturbation](const workload::WorkloadModel&) {
    return DistortModel(std::make_unique<testing::SyntheticBackend>(0, true), perturbation);
  };
  return prior;
}

// 5 % of the 720- and 540-configuration spaces, with the oracle comparison.
ProfileOptions SmallBudget() {
  ProfileOptions options;
  options.budget_fraction = 0.05;
  options.oracle = true;
  return options;
}

struct Outcome {
  std::vector<double> hv_ratio;           // per type
  std::vector<PriorUse> last_use;         // per type: the fit the frontier was selected with
  std::vector<int> initial_design;        // per type
  std::vector<std::string> prior_design;  // per type: "prior", "fallback" or "" (no prior)
  std::vector<bool> ever_trusted;  // per type: some fit trusted the prior (frontier acquisition)
  std::string json;
};

Outcome Profile(const ProfileOptions& options, uint64_t seed) {
  testing::SyntheticBackend backend(seed);
  const ProfileResult s =
      ProfileWorkload(SyntheticModel(), options, backend, {.seed = seed, .quiet = true});
  Outcome out;
  for (const PartitionResult& r : s.partitions) {
    out.hv_ratio.push_back(r.oracle->hv_ratio);
    out.last_use.push_back(r.prior_uses.empty() ? PriorUse{} : r.prior_uses.back());
    out.initial_design.push_back(static_cast<int>(r.initial_design));
    out.prior_design.push_back(ToString(r.prior_design));
    bool trusted = false;
    for (const PriorUse& u : r.prior_uses) trusted = trusted || u.trusted;
    out.ever_trusted.push_back(trusted);
  }
  out.json = DumpJson(s.ToJson(true));
  return out;
}

TEST(ModelPerturbation, RoundTripsAndNamesTheInvalidField) {
  EXPECT_TRUE(ParsePerturbation("none").IsIdentity());
  const ModelPerturbation p = ParsePerturbation(
      "dynamic_power=1.25,voltage_shift_mhz=100,collective_bandwidth=0.7,compute_efficiency=0.85");
  EXPECT_EQ(p.dynamic_power, 1.25);
  EXPECT_EQ(p.voltage_shift_mhz, 100);
  EXPECT_EQ(ParsePerturbation(p.ToString()).ToString(), p.ToString());
  EXPECT_TRUE(ParsePerturbation("invert_clock_trend=1").invert_clock_trend);
  for (const char* bad : {"dynamic_power=0", "voltage=3", "shuffle", "compute_efficiency=x"}) {
    try {
      ParsePerturbation(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("prior perturbation"), std::string::npos) << e.what();
    }
  }
  hw::GpuSpec gpu = testing::SyntheticGpu();
  gpu.power.dynamic_max_w = 200.0;
  gpu.voltage_curve = {{.freq_mhz = 900, .volts = 0.7}, {.freq_mhz = 1410, .volts = 1.0}};
  const hw::GpuSpec perturbed = PerturbGpu(gpu, p);
  EXPECT_EQ(perturbed.power.dynamic_max_w, 250.0);
  EXPECT_EQ(perturbed.voltage_curve[0].freq_mhz, 1000);
}

TEST(PriorDesign, OneLowestEnergyConfigurationPerClockQuantile) {
  const SearchSpace space({1410, 1200, 1000, 900}, {4, 8}, {"a"});
  PriorMean prior;
  for (int64_t i = 0; i < space.Size(); ++i) {
    prior.time_s.push_back(1.0);
    prior.dynamic_energy_j.push_back(i % 2 == 0 ? 2.0 : 1.0);  // 8 SMs is cheaper everywhere
  }
  const std::vector<int64_t> design = PriorDesign(space, prior, 0.0, 2);
  ASSERT_EQ(design.size(), 2u);
  EXPECT_EQ(space.At(design[0]).freq_mhz, 1410);
  EXPECT_EQ(space.At(design[1]).freq_mhz, 900);
  for (int64_t i : design) EXPECT_EQ(space.At(i).sms, 8);
}

// The exact prior is the truth up to noise: it helps by construction. The test pins that the
// residual fit uses it (weights near 1), that the design check passes it and the frontier
// acquisition trusts it (the other side of the harmful-prior test), and that small budgets do
// at least as well.
TEST(Prior, ExactPriorIsUsedAndHelpsAtFivePercent) {
  ProfileOptions with = SmallBudget();
  with.prior = SyntheticPrior({});
  for (uint64_t seed : {1, 2}) {
    const Outcome none = Profile(SmallBudget(), seed);
    const Outcome exact = Profile(with, seed);
    for (std::size_t t = 0; t < exact.hv_ratio.size(); ++t) {
      EXPECT_GT(exact.last_use[t].time_weight, 0.8) << "type " << t;
      EXPECT_GT(exact.last_use[t].energy_weight, 0.8) << "type " << t;
      EXPECT_EQ(exact.prior_design[t], "prior") << "seed " << seed << " type " << t;
      EXPECT_TRUE(exact.ever_trusted[t]) << "seed " << seed << " type " << t;
      EXPECT_GE(exact.hv_ratio[t], none.hv_ratio[t] - 0.005) << "seed " << seed << " type " << t;
      EXPECT_GT(exact.hv_ratio[t], 0.97) << "seed " << seed << " type " << t;
    }
  }
}

// A badly wrong prior: every clock trend inverted, or each configuration answered with another
// one's prediction. Detected: the design check after the first two measurements falls back to
// the no-prior design, and no fit trusts the prior (no frontier acquisition along it); the
// shuffled prior is also dropped by the surrogate (weight 0, the no-prior fit); the inverted
// one keeps the SM and slot structure and its clock trend is one additive term of the kernel,
// so its weight may stay. The result is no worse than no prior beyond noise. With the weight
// check off (weight fixed at 1) the weights say the prior was used as is.
TEST(Prior, HarmfulPriorIsDetectedAndDoesNotHurt) {
  for (const char* text : {"invert_clock_trend=1", "shuffle=1"}) {
    const bool shuffled = std::string(text) == "shuffle=1";
    ProfileOptions wrong = SmallBudget();
    wrong.prior = SyntheticPrior(ParsePerturbation(text));
    // Noise here is the seed-to-seed spread of one type at 5 % (0.93..0.998 without a prior).
    double sum_none = 0.0, sum_bad = 0.0;
    std::vector<double> worst_none(2, 1.0), worst_bad(2, 1.0);
    for (uint64_t seed : {1, 2, 3}) {
      const Outcome none = Profile(SmallBudget(), seed);
      const Outcome bad = Profile(wrong, seed);
      for (std::size_t t = 0; t < bad.hv_ratio.size(); ++t) {
        sum_none += none.hv_ratio[t];
        sum_bad += bad.hv_ratio[t];
        worst_none[t] = std::min(worst_none[t], none.hv_ratio[t]);
        worst_bad[t] = std::min(worst_bad[t], bad.hv_ratio[t]);
        const PriorUse& use = bad.last_use[t];
        EXPECT_EQ(bad.prior_design[t], "fallback") << text << " seed " << seed << " type " << t;
        EXPECT_FALSE(bad.ever_trusted[t]) << text << " seed " << seed << " type " << t;
        if (shuffled) {
          EXPECT_EQ(use.time_weight, 0.0) << text << " seed " << seed << " type " << t;
          EXPECT_EQ(use.energy_weight, 0.0) << text << " seed " << seed << " type " << t;
        }
      }
    }
    // Per type, the worst seed, and over seeds and types, the mean: no worse than without a
    // prior beyond noise.
    for (std::size_t t = 0; t < worst_bad.size(); ++t) {
      EXPECT_GE(worst_bad[t], worst_none[t] - 0.01) << text << " type " << t;
    }
    EXPECT_GE(sum_bad / 6.0, sum_none / 6.0 - 0.01) << text;
    ProfileOptions unchecked = wrong;
    unchecked.prior_check = false;
    const Outcome forced = Profile(unchecked, 1);
    for (const PriorUse& use : forced.last_use) {
      EXPECT_EQ(use.time_weight, 1.0) << text;
      EXPECT_EQ(use.energy_weight, 1.0) << text;
    }
  }
}

// A harmful prior that two points cannot refute: with 4 calibrated scales a shuffled model
// can be bent to fit the first two measurements (on configuration 02's fwd_mlp, seed 2, its
// calibrated log RMS there is about 0.008, under the 0.03 of the design check), and its
// design then went ahead: 0.74 against 0.98 without a prior. Once the prior's design points
// are measured the re-check refutes it (above 0.03) and the rest of the no-prior design
// follows, so that the profile continues as the no-prior one with the prior's design points on
// top. The mismatched priors of the benchmark are never refuted (bench/profile_prior.py:
// re-check log RMS at most 0.024 over 1320 runs); the exact prior's test above pins "prior".
TEST(Prior, ShuffledPriorPassingTheFirstCheckIsRefutedOnceItsDesignIsMeasured) {
  const workload::WorkloadModel& model = emulator::testing::LlamaCp2Tp4();
  ProfileOptions options;
  options.budget_fraction = 0.05;
  options.partitions = {"fwd_mlp"};
  int refuted = 0;
  for (uint64_t seed : {1, 2, 3}) {
    auto run = [&](PriorModel prior) {
      options.prior = std::move(prior);
      measure::EmulatorBackendOptions backend_options;
      backend_options.seed = seed;
      const std::unique_ptr<measure::Backend> backend =
          measure::MakeEmulatorBackend(model.workload.gpu, backend_options);
      return ProfileWorkload(model, options, *backend, {.seed = seed, .quiet = true}).partitions[0];
    };
    const PartitionResult none = run({});
    const PartitionResult bad = run(EmulatorPrior(ParsePerturbation("shuffle=1")));
    EXPECT_NE(bad.prior_design, PriorDesignOutcome::kPrior) << "seed " << seed;  // never kept
    if (bad.prior_design != PriorDesignOutcome::kRefuted) continue;
    ++refuted;
    EXPECT_LE(bad.prior_design_log_rms, 0.03) << "seed " << seed;
    EXPECT_GT(bad.prior_recheck_log_rms, 0.03) << "seed " << seed;
    // Every point of the no-prior design is measured, as part of the design.
    ASSERT_GT(bad.initial_design, none.initial_design) << "seed " << seed;
    const auto first = bad.evaluations.begin();
    for (int i = 0; i < none.initial_design; ++i) {
      EXPECT_NE(
          std::find_if(first, first + bad.initial_design,
                       [&](const Evaluation& e) { return e.knobs == none.evaluations[i].knobs; }),
          first + bad.initial_design)
          << "seed " << seed << ": no-prior design point " << i << " not measured";
    }
  }
  EXPECT_GE(refuted, 1) << "no seed passed the first check: the test no longer covers the re-check";
}

TEST(Prior, SameSeedSameResultAndSummarySaysSo) {
  ProfileOptions options = SmallBudget();
  options.prior = SyntheticPrior(ParsePerturbation("invert_clock_trend=1"));
  const Outcome a = Profile(options, 7);
  const Outcome b = Profile(options, 7);
  EXPECT_EQ(a.json, b.json);
  const Json doc = Json::parse(a.json);
  EXPECT_EQ(doc["prior"], "synthetic model invert_clock_trend=1");
  EXPECT_FALSE(doc["prior_is_measuring_model"].get<bool>());
  EXPECT_TRUE(doc["partitions"][0].contains("prior"));
  EXPECT_TRUE(doc["partitions"][0]["prior"].contains("time_weight"));
  // The inverted prior fails the design check: the initial design is then the no-prior one.
  const Outcome none = Profile(SmallBudget(), 7);
  EXPECT_EQ(a.initial_design, none.initial_design);
  for (const std::string& design : a.prior_design) EXPECT_EQ(design, "fallback");
}

// "Fit physics, not points": the emulator's model of a paper workload's GPU preset, perturbed
// as in the benchmark (dynamic power x1.25, voltage curve +100 MHz, collective bandwidth x0.7,
// compute efficiency x0.85), calibrated to nine noise-free readings of the unperturbed preset
// recovers the inverse perturbation (x0.8, -100 MHz, x1.43, x1.18) and its log error falls
// below a tenth; the unperturbed model stays where it is. (The calibrated scales span this
// perturbation, so recovery is the check of the fit itself, not of the method's robustness:
// that is bench/profile_prior.py's.)
TEST(Prior, CalibrationRecoversAKnownPerturbation) {
  const workload::WorkloadModel& model = emulator::testing::LlamaCp2Tp4();
  const workload::PartitionType* type = PaperType("fwd_qkv_ag");
  ASSERT_NE(type, nullptr);
  const SearchSpace space = SearchSpace::For(model.workload.gpu, *type, false);
  measure::EmulatorBackendOptions truth_options;
  truth_options.measurement.noise_free = true;
  const std::unique_ptr<measure::Backend> truth =
      measure::MakeEmulatorBackend(model.workload.gpu, truth_options);
  std::vector<measure::PartitionKnobs> knobs;
  for (int j = 0; j < 9; ++j) knobs.push_back(space.At(j * space.Size() / 9 + j % 4));
  const std::vector<measure::Sample> readings = truth->MeasureAll(*type, knobs);

  const PriorModel wrong = EmulatorPrior(ParsePerturbation(
      "dynamic_power=1.25,voltage_shift_mhz=100,collective_bandwidth=0.7,compute_efficiency=0.85"));
  const CalibrationResult c = CalibratePrior(wrong, model, *type, knobs, readings, {});
  EXPECT_NEAR(c.calibration.dynamic_power, 0.8, 0.04) << c.calibration.ToString();
  EXPECT_NEAR(c.calibration.voltage_shift_mhz, -100, 20) << c.calibration.ToString();
  EXPECT_NEAR(c.calibration.collective_bandwidth, 1.0 / 0.7, 0.1) << c.calibration.ToString();
  EXPECT_NEAR(c.calibration.compute_efficiency, 1.0 / 0.85, 0.05) << c.calibration.ToString();
  EXPECT_GT(c.log_rms_before, 0.1);
  EXPECT_LT(c.log_rms_after, 0.1 * c.log_rms_before);

  const CalibrationResult same =
      CalibratePrior(EmulatorPrior({}), model, *type, knobs, readings, {});
  EXPECT_LT(same.log_rms_before, 1e-9);
  EXPECT_NEAR(same.calibration.dynamic_power, 1.0, 1e-3) << same.calibration.ToString();
  EXPECT_EQ(same.calibration.voltage_shift_mhz, 0) << same.calibration.ToString();
  // A model without physical parameters is not calibrated.
  const CalibrationResult none =
      CalibratePrior(SyntheticPrior({}), model, *type, knobs, readings, {});
  EXPECT_TRUE(none.calibration.IsIdentity());
  EXPECT_EQ(none.model_evaluations, 0);
}

// The automatic budget (budget_fraction 0): kBudgetFractionWithPrior (5 %) of each tunable
// type's space with a prior, kBudgetFraction (15 %) without, floored at kMinBudget and at one
// measurement per profiled clock.
TEST(Prior, AutomaticBudgetIsFivePercentWithAPrior) {
  ProfileOptions options;
  options.partitions = {"fwd_attn"};  // 720 configurations
  testing::SyntheticBackend a(1), b(1);
  const ProfileResult none =
      ProfileWorkload(SyntheticModel(), options, a, {.seed = 1, .quiet = true});
  options.prior = SyntheticPrior({});
  EXPECT_DOUBLE_EQ(options.BudgetFraction(), 0.05);
  const ProfileResult with =
      ProfileWorkload(SyntheticModel(), options, b, {.seed = 1, .quiet = true});
  EXPECT_EQ(none.partitions[0].evaluations.size(), 108u);  // 15 %
  EXPECT_EQ(with.partitions[0].evaluations.size(), 36u);   // 5 %
}

// Composition offers an instruction at a clock only where every partition type it runs has a
// measurement, and its fastest plan runs each type's fastest configuration at the top clock.
// At 5 % of each space (18 measurements of a 180- or 360-configuration cp2 type for 18 clocks) the
// acquisition serves the types' global fronts and used to leave the top clock of several types
// unmeasured (on this configuration: bwd_a_ag, bwd_a_rs, bwd_o_ar, fwd_qkv_ar), so that the
// backward instruction composed at 1230 MHz at best. Every tunable type now has a measurement
// at 1410 MHz within noise of the fastest configuration there (the noise-free truth), with a
// mismatched prior and without one.
TEST(Prior, EveryTypeIsMeasuredAtItsFastestConfigurationAtTheTopClock) {
  const workload::WorkloadModel& model = emulator::testing::LlamaCp2Tp4();
  measure::EmulatorBackendOptions truth_options;
  truth_options.measurement.noise_free = true;
  const std::unique_ptr<measure::Backend> truth =
      measure::MakeEmulatorBackend(model.workload.gpu, truth_options);
  ProfileOptions options;
  options.budget_fraction = 0.05;
  options.partitions = {"bwd_a_ag", "bwd_a_rs", "bwd_o_ar", "fwd_qkv_ar", "fwd_ao_ar"};
  for (const bool with_prior : {true, false}) {
    if (with_prior) {
      options.prior = EmulatorPrior(
          ParsePerturbation("dynamic_power=1.25,voltage_shift_mhz=100,collective_bandwidth=0.7,"
                            "compute_efficiency=0.85"));
    } else {
      options.prior = {};
    }
    const std::unique_ptr<measure::Backend> backend =
        measure::MakeEmulatorBackend(model.workload.gpu, {});
    const ProfileResult s = ProfileWorkload(model, options, *backend, {.seed = 1, .quiet = true});
    for (const PartitionResult& r : s.partitions) {
      const workload::PartitionType* type = PaperType(r.type);
      ASSERT_NE(type, nullptr);
      const SearchSpace space = SearchSpace::For(model.workload.gpu, *type, false);
      const int top = *std::max_element(space.clocks_mhz().begin(), space.clocks_mhz().end());
      std::vector<measure::PartitionKnobs> all, measured;
      for (int64_t i = 0; i < space.Size(); ++i) {
        if (space.At(i).freq_mhz == top) all.push_back(space.At(i));
      }
      for (const Evaluation& e : r.evaluations) {
        if (e.knobs.freq_mhz == top) measured.push_back(e.knobs);
      }
      EXPECT_FALSE(measured.empty()) << r.type << (with_prior ? " prior" : " no prior");
      if (measured.empty() || !with_prior)
        continue;  // the surrogate alone may not know which one is fastest
      auto fastest = [&](const std::vector<measure::PartitionKnobs>& knobs) {
        double best = std::numeric_limits<double>::infinity();
        for (const measure::Sample& x : truth->MeasureAll(*type, knobs))
          best = std::min(best, x.time_s);
        return best;
      };
      EXPECT_LE(fastest(measured), 1.005 * fastest(all))
          << r.type << (with_prior ? " prior" : " no prior");
    }
  }
}

// Transfer with a calibrated prior: the related rows' prior is predicted again with the
// target's calibration (the same GPU's physical scales). A related workload (02) read through
// the benchmark's P1-perturbed model, calibrated by P1's exact inverse, predicts what the
// unperturbed emulator reads; before, it was off by the perturbation. Rows without a prior
// stay without one.
TEST(Prior, RelatedRowsTakeTheTargetsCalibration) {
  const workload::WorkloadModel& model = emulator::testing::LlamaCp2Tp4();
  const workload::PartitionType* type = PaperType("bwd_o_ar");
  ASSERT_NE(type, nullptr);
  const SearchSpace space = SearchSpace::For(model.workload.gpu, *type, false);
  RelatedRows rows;
  rows.model = &model;
  rows.type = type;
  for (int j = 0; j < 8; ++j) rows.knobs.push_back(space.At(j * space.Size() / 8 + j % 3));
  const PriorModel wrong = EmulatorPrior(ParsePerturbation(
      "dynamic_power=1.25,voltage_shift_mhz=100,collective_bandwidth=0.7,compute_efficiency=0.85"));
  for (const measure::Sample& s : wrong.make(model)->MeasureAll(*type, rows.knobs)) {
    rows.prior_time_s.push_back(s.time_s);
    rows.prior_dynamic_energy_j.push_back(s.dynamic_energy_j);
  }
  RelatedRows without_prior = rows;
  without_prior.prior_time_s.clear();
  without_prior.prior_dynamic_energy_j.clear();
  std::vector<RelatedRows> related = {rows, without_prior};

  measure::EmulatorBackendOptions truth_options;
  truth_options.measurement.noise_free = true;
  const std::vector<measure::Sample> truth =
      measure::MakeEmulatorBackend(model.workload.gpu, truth_options)
          ->MeasureAll(*type, rows.knobs);
  double before = 0.0;
  for (std::size_t i = 0; i < truth.size(); ++i) {
    before = std::max(before,
                      std::abs(rows.prior_dynamic_energy_j[i] / truth[i].dynamic_energy_j - 1.0));
  }
  EXPECT_GT(before, 0.1);

  ModelPerturbation inverse;
  inverse.dynamic_power = 0.8;
  inverse.voltage_shift_mhz = -100;
  inverse.collective_bandwidth = 1.0 / 0.7;
  inverse.compute_efficiency = 1.0 / 0.85;
  CalibrateRelatedPrior(wrong, inverse, &related);
  ASSERT_EQ(related[0].prior_time_s.size(), truth.size());
  for (std::size_t i = 0; i < truth.size(); ++i) {
    EXPECT_NEAR(related[0].prior_time_s[i] / truth[i].time_s, 1.0, 1e-6) << i;
    EXPECT_NEAR(related[0].prior_dynamic_energy_j[i] / truth[i].dynamic_energy_j, 1.0, 1e-6) << i;
  }
  EXPECT_TRUE(related[1].prior_time_s.empty());
}

// Both surrogates on 60 noise-free configurations of a synthetic type: with the truth as the
// prior they rest on it (weight 1); with the prior values shuffled across rows (no information,
// all roughness) they drop it (weight 0).
class SurrogatePriorTest : public ::testing::TestWithParam<SurrogateKind> {};

TEST_P(SurrogatePriorTest, KeepsATruePriorAndDropsAShuffledOne) {
  const workload::PartitionType type = testing::SyntheticPartition("fwd_attn", 4);
  const SearchSpace space = SearchSpace::For(testing::SyntheticGpu(), type, false);
  TrainingRows exact, shuffled;
  std::vector<measure::Sample> truth;
  for (int64_t i = 0; i < space.Size(); i += space.Size() / 60) {
    truth.push_back(testing::SyntheticBackend::Truth(type, space.At(i)));
    exact.Add(space.Encode(i), truth.back().time_s, truth.back().dynamic_energy_j);
    shuffled.Add(space.Encode(i), truth.back().time_s, truth.back().dynamic_energy_j);
  }
  const std::size_t n = truth.size();
  for (std::size_t i = 0; i < n; ++i) {
    exact.AddPrior(truth[i].time_s, truth[i].dynamic_energy_j);
    const measure::Sample& other = truth[(i * 37 + 11) % n];  // 37 is prime to n
    shuffled.AddPrior(other.time_s, other.dynamic_energy_j);
  }
  const auto fit = [&](const TrainingRows& rows) {
    const std::unique_ptr<Surrogate> s = MakeSurrogate(GetParam(), {.seed = 3});
    s->Fit(rows);
    return s->Use();
  };
  const PriorUse kept = fit(exact);
  EXPECT_GT(kept.time_weight, 0.8);
  EXPECT_GT(kept.energy_weight, 0.8);
  const PriorUse dropped = fit(shuffled);
  EXPECT_EQ(dropped.time_weight, 0.0);
  EXPECT_EQ(dropped.energy_weight, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Kinds, SurrogatePriorTest,
                         ::testing::Values(SurrogateKind::kGaussianProcess,
                                           SurrogateKind::kXgbEnsemble));

}  // namespace
}  // namespace kareus::mobo
