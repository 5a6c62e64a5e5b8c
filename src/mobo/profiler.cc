// SPDX-License-Identifier: Apache-2.0
#include "kareus/mobo/profiler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>

#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/common/progress.h"
#include "kareus/measure/store.h"
#include "kareus/mobo/search_space.h"
#include "mobo/baselines.h"
#include "mobo/hv_fast.h"

namespace kareus::mobo {
namespace internal {
namespace {

// The smallest automatic initial design: enough points for a first surrogate fit over the
// three knobs; coverage of every clock then comes from the per-clock acquisition.
constexpr int kMinInitialDesign = 6;
// With a prior the initial design is staged (TypeState::Initial, SecondStage): the first
// kCheckDesign points of the no-prior Latin hypercube, then, when the prior calibrated to them
// agrees with them, the interior points of the prior's design (PriorDesign with kPriorDesign
// clock quantiles: knob variations around its optimum), else the rest of the no-prior design.
constexpr int kPriorDesign = 4;
constexpr int kCheckDesign = 2;
// A prior agrees with the measurements (the design check) and is trusted (the frontier
// acquisition, with at least kTrustedPriorRows measurements and the surrogate keeping it) when,
// calibrated, the RMS of log(measured / predicted) over time and dynamic energy, each target
// centred, is within kTrustedPriorLogRms: a few times the 0.3 % / 1 % measurement noise, far
// below what a wrong model leaves (a mirrored or shuffled one: 0.1-1).
constexpr double kTrustedPriorLogRms = 0.03;
constexpr std::size_t kTrustedPriorRows = 4;
constexpr double kTrustedExplorationShare = 0.125;

struct Plan {
  const workload::PartitionType* type = nullptr;
  SearchSpace space;
  int64_t budget = 0;
  int initial = 0;
  int batch = 0;
  // What the design and batches are without a prior (a prior's design falls back to them).
  int no_prior_initial = 0;
  int no_prior_batch = 0;
};

}  // namespace
}  // namespace internal

const char* ToString(PriorDesignOutcome outcome) {
  switch (outcome) {
    case PriorDesignOutcome::kNone:
      return "";
    case PriorDesignOutcome::kPrior:
      return "prior";
    case PriorDesignOutcome::kFallback:
      return "fallback";
    case PriorDesignOutcome::kRefuted:
      return "refuted";
  }
  return "";
}

double ProfileOptions::BudgetFraction() const {
  if (budget_fraction > 0.0) return budget_fraction;
  return prior ? kBudgetFractionWithPrior : kBudgetFraction;
}

std::optional<OptionError> ProfileOptions::Validate() const {
  if (budget < 0)
    return OptionError{"budget", Describe(budget), "must be >= 0 (0: budget_fraction)"};
  if (!(budget_fraction == 0.0 || (budget_fraction > 0.0 && budget_fraction <= 1.0))) {
    return OptionError{"budget_fraction", Describe(budget_fraction),
                       "must be in (0, 1], or 0 (automatic)"};
  }
  if (initial_design < 0 || initial_design == 1) {
    return OptionError{"initial_design", Describe(initial_design),
                       "must be 0 (auto) or at least 2"};
  }
  if (!(initial_fraction > 0.0 && initial_fraction <= 1.0)) {
    return OptionError{"initial_fraction", Describe(initial_fraction), "must be in (0, 1]"};
  }
  if (batch_size < 0)
    return OptionError{"batch_size", Describe(batch_size), "must be >= 0 (0: auto)"};
  if (unit_size < 0)
    return OptionError{"unit_size", Describe(unit_size), "must be >= 0 (0: whole batch)"};
  if (min_budget < 0) return OptionError{"min_budget", Describe(min_budget), "must be >= 0"};
  if (related_max_rows < 1) {
    return OptionError{"related_max_rows", Describe(related_max_rows), "must be >= 1"};
  }
  return std::nullopt;
}

namespace internal {
namespace {

// Validates the budget of one type before anything is measured.
Plan PlanType(const workload::PartitionType& type, const hw::GpuSpec& gpu,
              const ProfileOptions& options) {
  Plan plan{.type = &type, .space = SearchSpace::For(gpu, type, options.full_grid)};
  const int64_t size = plan.space.Size();
  if (!type.tunable) {  // fixed knobs: every clock, no search
    plan.budget = size;
    plan.initial = static_cast<int>(size);
    plan.batch = 0;
    return plan;
  }
  if (options.budget > 0) {
    plan.budget = options.budget;
  } else {
    plan.budget = static_cast<int64_t>(std::ceil(options.BudgetFraction() * size - 1e-9));
    // The floor: min_budget, and (unless it is 0) one measurement per profiled clock.
    const auto clocks = static_cast<int64_t>(plan.space.clocks_mhz().size());
    const int64_t floor = options.min_budget > 0 ? std::max(options.min_budget, clocks) : 0;
    plan.budget = std::min(size, std::max(plan.budget, floor));
  }
  if (plan.budget > size) {
    ThrowInput("budget", std::to_string(plan.budget),
               "exceeds the search space of partition " + type.name + " (" + std::to_string(size) +
                   " configurations)");
  }
  if (options.initial_design > 0) {
    plan.initial = options.initial_design;
  } else if (options.prior) {
    // The prior's design (PriorDesign): a few configurations where the model expects the
    // frontier, spread over the clocks; the surrogate's batches do the rest.
    plan.initial = kPriorDesign;
  } else {
    plan.initial = std::max<int>(
        kMinInitialDesign, static_cast<int>(std::lround(options.initial_fraction * plan.budget)));
  }
  if (plan.budget < plan.initial) {
    ThrowInput("budget", std::to_string(plan.budget),
               "below the initial design of partition " + type.name + " (" +
                   std::to_string(plan.initial) + " configurations)");
  }
  // About eight batches: sample efficiency grows with the number of model updates, while a
  // real GPU pays a process and communicator start per batch (§3.7).
  auto batch_for = [&](int initial) {
    if (options.batch_size > 0) return options.batch_size;
    return static_cast<int>(std::max<int64_t>(3, (plan.budget - initial + 7) / 8));
  };
  plan.batch = batch_for(plan.initial);
  plan.no_prior_initial = static_cast<int>(std::min<int64_t>(
      plan.budget, std::max<int>(kMinInitialDesign, static_cast<int>(std::lround(
                                                        options.initial_fraction * plan.budget)))));
  plan.no_prior_batch = batch_for(plan.no_prior_initial);
  return plan;
}

// The index of the highest clock of `space` (clocks_mhz() in any order).
int TopClockIndex(const SearchSpace& space) {
  const std::vector<int>& clocks = space.clocks_mhz();
  return static_cast<int>(std::max_element(clocks.begin(), clocks.end()) - clocks.begin());
}

// Latin-hypercube initial design on the discrete levels: for each knob, point j takes level
// floor((pi(j) + u) m / n) of its m levels (pi a random permutation, u uniform), so every knob's
// levels are covered as evenly as n allows and the knobs are paired at random. A duplicate is
// moved to the nearest free configuration of its clock.
std::vector<int64_t> InitialDesign(const SearchSpace& space, int count, Rng& rng) {
  const int levels[3] = {static_cast<int>(space.clocks_mhz().size()),
                         static_cast<int>(space.sms().size()),
                         static_cast<int>(space.slots().size())};
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<std::vector<int>> level(3, std::vector<int>(count));
  for (int d = 0; d < 3; ++d) {
    std::vector<int> perm(count);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int j = 0; j < count; ++j) {
      level[d][j] =
          std::min(levels[d] - 1, static_cast<int>((perm[j] + unit(rng)) * levels[d] / count));
    }
  }
  const int64_t per_clock = static_cast<int64_t>(levels[1]) * levels[2];
  std::set<int64_t> chosen;
  std::vector<int64_t> design;
  for (int j = 0; j < count; ++j) {
    int64_t index =
        level[0][j] * per_clock + static_cast<int64_t>(level[1][j]) * levels[2] + level[2][j];
    for (int64_t step = 0; chosen.contains(index) && step < space.Size(); ++step) {
      index = (index + 1) % space.Size();  // next configuration (same clock first)
    }
    chosen.insert(index);
    design.push_back(index);
  }
  return design;
}

// One partition type's profiling as explicit steps (WorkloadProfiler): the initial design,
// then per batch a surrogate fit and a pick, each batch's missing configurations measured by
// whoever the caller chooses, then the denoised frontiers. Every decision depends only on the
// type's own seed and its own measurements, so types may advance in any interleaving.
class TypeState {
 public:
  TypeState(const Plan& plan, const ProfileOptions& options, const measure::Backend& backend,
            measure::MeasurementStore* store, uint64_t seed, TypeKnowledge knowledge,
            const workload::WorkloadModel& model)
      : plan_(plan),
        options_(options),
        backend_(backend),
        store_(store),
        seed_(seed),
        gpus_(measure::PartitionGpus(*plan.type)),
        knowledge_(std::move(knowledge)),
        model_(model) {
    result_.type = plan_.type->name;
    result_.tunable = plan_.type->tunable;
    result_.space_size = plan_.space.Size();
    result_.budget = plan_.budget;
    result_.initial_design = plan_.initial;
    result_.batch_size = plan_.batch;
    batch_size_ = plan_.batch;
    measured_.assign(plan_.space.Size(), false);
    result_.has_prior = !knowledge_.prior.empty();
  }

  const TypeKnowledge& knowledge() const { return knowledge_; }

  bool complete() const { return complete_; }
  bool in_flight() const { return !missing_.empty() && pending_ > 0; }
  const PartitionResult& result() const { return result_; }
  PartitionResult& result() { return result_; }

  // The next batch that needs measuring (store hits are read here), or nullopt when done.
  std::optional<MeasurementBatch> NextBatch(int type_index) {
    KAREUS_CHECK(pending_ == 0) << plan_.type->name
                                << ": the previous batch is still being measured";
    while (!complete_) {
      std::vector<int64_t> indices;
      std::vector<std::string> reasons;
      if (!started_) {
        started_ = true;
        Rng rng(DeriveSeed(seed_, HashString("initial-design")));
        if (!plan_.type->tunable) {
          indices.resize(plan_.space.Size());
          std::iota(indices.begin(), indices.end(), 0);
        } else {
          indices = Initial(rng);
          result_.initial_design = static_cast<int>(indices.size());
        }
        reasons.assign(indices.size(), plan_.type->tunable ? "initial" : "exhaustive");
        if (plan_.type->tunable) {
          surrogate_ = MakeSurrogate(
              options_.surrogate,
              SurrogateOptionsFor(options_, backend_, DeriveSeed(seed_, HashString("surrogate"))));
        }
      } else if (second_stage_) {
        second_stage_ = false;
        indices = SecondStage();
        recheck_ = result_.prior_design == PriorDesignOutcome::kPrior && !indices.empty();
        if (indices.empty()) continue;
        reasons.assign(indices.size(), "initial");
        ++batch_;
      } else if (recheck_) {
        recheck_ = false;
        indices = Recheck();
        if (indices.empty()) continue;
        reasons.assign(indices.size(), "initial");
        ++batch_;
      } else if (!PickBatch(&indices, &reasons)) {
        Finalize();
        break;
      }
      for (int64_t index : indices) measured_[index] = true;
      if (Evaluate(indices, reasons)) {
        MeasurementBatch batch{.type = type_index, .number = batch_, .knobs = {}, .units = {}};
        for (std::size_t i : missing_) batch.knobs.push_back(result_.evaluations[i].knobs);
        const std::size_t unit = options_.unit_size > 0
                                     ? static_cast<std::size_t>(options_.unit_size)
                                     : batch.knobs.size();
        for (std::size_t b = 0; b < batch.knobs.size(); b += unit) {
          batch.units.push_back({b, std::min(batch.knobs.size(), b + unit)});
        }
        units_issued_ += static_cast<int64_t>(batch.units.size());
        return batch;
      }
      BatchComplete();  // everything came from the store
    }
    return std::nullopt;
  }

  // A sample of the batch in flight (`index` into its knobs), committed to the store at once.
  void Record(std::size_t index, const measure::Sample& sample, Progress& progress,
              const std::string& label, double per_eval_s) {
    KAREUS_CHECK(index < missing_.size() && pending_ > 0)
        << plan_.type->name << ": sample " << index << " outside the batch in flight";
    Evaluation& e = result_.evaluations[missing_[index]];
    KAREUS_CHECK(!recorded_[index])
        << plan_.type->name << ": sample " << index << " recorded twice";
    recorded_[index] = true;
    if (store_ != nullptr) store_->Insert(plan_.type->name, e.knobs, sample);
    e.sample = sample;
    ++result_.measured;
    --pending_;
    ShowProgress(progress, label, per_eval_s);
    if (pending_ == 0) BatchComplete();
  }

  void ShowProgress(Progress& progress, const std::string& label, double per_eval_s) const {
    if (!progress.active()) return;
    const int64_t done = result_.measured + result_.reused;
    const double left_s = static_cast<double>(result_.budget - done) * per_eval_s;
    char line[256];
    std::snprintf(line, sizeof(line),
                  "%s %-12s batch %d  %lld/%lld measured  best HV %.4g  GPU time left ~%.1f min",
                  label.c_str(), plan_.type->name.c_str(), batch_, static_cast<long long>(done),
                  static_cast<long long>(result_.budget),
                  result_.hypervolume_trace.empty() ? 0.0 : result_.hypervolume_trace.back(),
                  left_s / 60.0);
    progress.Update(line);
  }

 private:
  // The tunable type's initial design: with a prior and no --initial the first stage of a
  // prior's design (the first kCheckDesign points of the Latin hypercube the no-prior design
  // measures; SecondStage follows), else Latin-hypercube points (topped up when the space has
  // fewer clocks than points).
  std::vector<int64_t> Initial(Rng& rng) {
    std::vector<int64_t> initial;
    if (!knowledge_.prior.empty() && options_.initial_design == 0 &&
        plan_.no_prior_initial > kCheckDesign) {
      no_prior_design_ = InitialDesign(plan_.space, plan_.no_prior_initial, rng);
      initial.assign(no_prior_design_.begin(), no_prior_design_.begin() + kCheckDesign);
      second_stage_ = true;
      return initial;
    }
    if (static_cast<int>(initial.size()) < plan_.initial) {
      std::set<int64_t> have(initial.begin(), initial.end());
      for (int64_t i : InitialDesign(plan_.space, plan_.initial, rng)) {
        if (static_cast<int>(initial.size()) >= plan_.initial) break;
        if (have.insert(i).second) initial.push_back(i);
      }
    }
    return initial;
  }

  // The second stage of a prior's design: the prior calibrated to the first stage's
  // measurements; when it agrees with them (PriorLogRms within kTrustedPriorLogRms) the
  // interior points of its design (PriorDesign: knob variations around its optimum at the
  // interior clock quantiles), else the rest of the no-prior design and its batch size: with
  // the prior's weight dropped by the surrogate fit, the profile is then the no-prior one.
  std::vector<int64_t> SecondStage() {
    Calibrate();
    std::vector<int64_t> next;
    result_.prior_design_log_rms = PriorLogRms();
    if (result_.prior_design_log_rms <= kTrustedPriorLogRms) {
      result_.prior_design = PriorDesignOutcome::kPrior;
      const int last_clock = static_cast<int>(plan_.space.clocks_mhz().size()) - 1;
      for (int64_t i :
           PriorDesign(plan_.space, knowledge_.prior, backend_.StaticPowerW(), kPriorDesign)) {
        const int clock = plan_.space.ClockIndex(i);
        if (clock != 0 && clock != last_clock && !measured_[i]) next.push_back(i);
      }
    } else {
      result_.prior_design = PriorDesignOutcome::kFallback;
      next = RestOfNoPriorDesign();
    }
    return WithinBudget(std::move(next));
  }

  // The design check again once the prior's design is measured: 2 points cannot refute a
  // model that 4 calibrated scales can bend to fit them (a shuffled one), the 4 or more
  // measured now can. When the calibrated prior no longer agrees with them (PriorLogRms above
  // kTrustedPriorLogRms) the design is "refuted": the rest of the no-prior design and its
  // batch size follow, as after a failed first check, so that the profile continues as the
  // no-prior one with the prior's design points on top. Empty when the prior still agrees.
  std::vector<int64_t> Recheck() {
    Calibrate();
    result_.prior_recheck_log_rms = PriorLogRms();
    if (result_.prior_recheck_log_rms <= kTrustedPriorLogRms) return {};
    result_.prior_design = PriorDesignOutcome::kRefuted;
    return WithinBudget(RestOfNoPriorDesign());
  }

  // The no-prior design's points after the first stage's that are not measured yet; the batch
  // size becomes the no-prior one.
  std::vector<int64_t> RestOfNoPriorDesign() {
    std::vector<int64_t> next;
    for (std::size_t i = kCheckDesign; i < no_prior_design_.size(); ++i) {
      if (!measured_[no_prior_design_[i]]) next.push_back(no_prior_design_[i]);
    }
    batch_size_ = plan_.no_prior_batch;
    result_.batch_size = batch_size_;
    return next;
  }

  // A design stage's points cut to the budget left, counted in the initial design.
  std::vector<int64_t> WithinBudget(std::vector<int64_t> next) {
    const int64_t left = plan_.budget - static_cast<int64_t>(result_.evaluations.size());
    if (static_cast<int64_t>(next.size()) > left) next.resize(static_cast<std::size_t>(left));
    result_.initial_design += static_cast<int>(next.size());
    return next;
  }

  // Fits the surrogate on every measurement and picks the next batch; false when the type is
  // done (budget spent, space exhausted, or not tunable).
  bool PickBatch(std::vector<int64_t>* indices, std::vector<std::string>* reasons) {
    if (!plan_.type->tunable || static_cast<int64_t>(result_.evaluations.size()) >= plan_.budget) {
      return false;
    }
    AcquisitionInput input;
    input.space = &plan_.space;
    input.static_power_w = backend_.StaticPowerW();
    std::vector<measure::Sample> samples;
    for (const Evaluation& e : result_.evaluations) {
      input.measured.push_back(e.index);
      input.measured_time_s.push_back(e.sample.time_s);
      input.measured_energy_j.push_back(e.sample.energy_j);
      input.measured_dynamic_energy_j.push_back(e.sample.dynamic_energy_j);
      samples.push_back(e.sample);
    }
    Calibrate();
    surrogate_->Fit(knowledge_.Rows(plan_.space, input.measured, samples));
    if (Knows()) {
      PriorUse use = WithCalibration(surrogate_->Use());
      input.trusted_prior = options_.prior_front && TrustsPrior(use);
      if (input.trusted_prior) input.exploration_picks = TrustedExploration();
      use.trusted = input.trusted_prior;
      result_.prior_uses.push_back(std::move(use));
    }
    for (int64_t i = 0; i < plan_.space.Size(); ++i) {
      if (!measured_[i]) input.candidates.push_back(i);
    }
    if (input.candidates.empty()) return false;
    // The surrogate's inputs at configurations of the space: encodings and prior values.
    struct Inputs {
      std::vector<std::vector<double>> x;
      std::vector<double> prior_t, prior_e;
    };
    const auto inputs_at = [&](const std::vector<int64_t>& configurations) {
      Inputs in;
      for (int64_t i : configurations) {
        in.x.push_back(plan_.space.Encode(i));
        AddPrior(i, &in.prior_t, &in.prior_e);
      }
      return in;
    };
    const Inputs candidates = inputs_at(input.candidates);
    input.predictions = surrogate_->Predict(candidates.x, candidates.prior_t, candidates.prior_e);
    const int k = static_cast<int>(std::min<int64_t>(
        batch_size_, plan_.budget - static_cast<int64_t>(result_.evaluations.size())));
    // The last batch measures the configuration predicted fastest at the top clock, unless a
    // measured one there is predicted as fast (AcquisitionInput::fastest_at_clocks):
    // composition offers an instruction at a clock only where every type it runs has a
    // measurement, and its fastest plan runs each type's fastest configuration at the top clock.
    // Last, when the surrogate knows most, and so that the pick does not steer the search
    // (the knob-neighbour exploration would try the new front pair's neighbours at the top
    // clock).
    if (k >= plan_.budget - static_cast<int64_t>(result_.evaluations.size())) {
      input.fastest_at_clocks = {TopClockIndex(plan_.space)};
    }
    if (input.trusted_prior || !input.fastest_at_clocks.empty()) {
      const Inputs measured = inputs_at(input.measured);
      input.measured_predictions =
          surrogate_->Predict(measured.x, measured.prior_t, measured.prior_e);
    }
    if (options_.strategy == Strategy::kThompson) {
      DrawSamples(*surrogate_, candidates.x, candidates.prior_t, candidates.prior_e, k, batch_ + 1,
                  &input);
    }
    const std::vector<Pick> picks = SelectBatch(options_.strategy, input, k);
    KAREUS_CHECK(!picks.empty());
    ++batch_;
    for (const Pick& p : picks) {
      indices->push_back(p.index);
      reasons->push_back(ToString(p.reason));
    }
    return true;
  }

  // Thompson sampling: joint draws at the candidates that could be on the frontier (optimistic
  // point, mean - 2 std, improves the measured front), at most kMaxSampled of them by that
  // improvement; one draw per pick.
  void DrawSamples(const Surrogate& surrogate, const std::vector<std::vector<double>>& x,
                   const std::vector<double>& prior_t, const std::vector<double>& prior_e, int k,
                   int batch, AcquisitionInput* input) const {
    constexpr std::size_t kMaxSampled = 300;
    const Predictions& p = input->predictions;
    std::vector<pareto::Point> measured;
    for (std::size_t i = 0; i < input->measured.size(); ++i) {
      measured.push_back(
          {.time_s = input->measured_time_s[i], .energy_j = input->measured_energy_j[i]});
    }
    const std::vector<pareto::Point> front = pareto::Filter(measured);
    double t_max = 0.0, e_max = 0.0;
    for (const pareto::Point& q : measured) {
      t_max = std::max(t_max, q.time_s);
      e_max = std::max(e_max, q.energy_j);
    }
    const pareto::Point reference{.time_s = 1.1 * t_max, .energy_j = 1.1 * e_max};
    std::vector<std::pair<double, std::size_t>> scored;
    for (std::size_t c = 0; c < input->candidates.size(); ++c) {
      const double t = std::max(0.5 * p.time_s[c], p.time_s[c] - 2.0 * p.time_std_s[c]);
      const double e = std::max(0.5 * p.dynamic_energy_j[c],
                                p.dynamic_energy_j[c] - 2.0 * p.dynamic_energy_std_j[c]);
      const double hvi =
          FrontHvi(front, {.time_s = t, .energy_j = e + input->static_power_w * t}, reference);
      if (hvi > 0.0) scored.push_back({-hvi, c});
    }
    std::sort(scored.begin(), scored.end());
    if (scored.size() > kMaxSampled) scored.resize(kMaxSampled);
    std::vector<std::vector<double>> sx;
    std::vector<double> st, se;
    for (const auto& [score, c] : scored) {
      input->sampled.push_back(c);
      sx.push_back(x[c]);
      if (!prior_t.empty()) {
        st.push_back(prior_t[c]);
        se.push_back(prior_e[c]);
      }
    }
    if (sx.empty()) return;
    input->samples =
        surrogate.Sample(sx, st, se, k, DeriveSeed(seed_, 0x75 + static_cast<uint64_t>(batch)));
  }

  // Fits the prior model's physical scales to every measurement so far and, when they moved,
  // predicts the space again with them (the surrogate then learns what is left).
  void Calibrate() {
    if (knowledge_.prior.empty() || !options_.prior_calibrate || !options_.prior.make_calibrated) {
      return;
    }
    std::vector<measure::PartitionKnobs> knobs;
    std::vector<measure::Sample> samples;
    for (const Evaluation& e : result_.evaluations) {
      knobs.push_back(e.knobs);
      samples.push_back(e.sample);
    }
    const CalibrationResult c = CalibratePrior(options_.prior, model_, *plan_.type, knobs, samples,
                                               calibration_.calibration);
    const bool moved = c.calibration.ToString() != calibration_.calibration.ToString();
    calibration_ = c;
    calibrated_ = true;
    if (moved) {
      const std::unique_ptr<measure::Backend> prior =
          options_.prior.make_calibrated(model_, calibration_.calibration);
      knowledge_.prior = PredictSpace(*prior, *plan_.type, plan_.space);
      CalibrateRelatedPrior(options_.prior, calibration_.calibration, &knowledge_.related);
    }
  }

  // A trusted prior's knob-neighbour picks in the next batch: kTrustedExplorationShare of
  // the configurations acquired after the initial design, this batch's included, less those
  // already explored (the untrusted strategies explore a quarter of every batch, at least one:
  // with 9-15 measurements of a 180-configuration space that alone costs a third of the budget).
  int TrustedExploration() const {
    int64_t acquired = 0, explored = 0;
    for (const Evaluation& e : result_.evaluations) {
      if (e.reason != "initial") ++acquired;
      if (e.reason == ToString(PickReason::kNeighbour)) ++explored;
    }
    acquired += std::min<int64_t>(batch_size_,
                                  plan_.budget - static_cast<int64_t>(result_.evaluations.size()));
    const auto due =
        static_cast<int64_t>(std::floor(kTrustedExplorationShare * static_cast<double>(acquired)));
    return static_cast<int>(std::max<int64_t>(0, due - explored));
  }

  // Whether the (calibrated) prior is trusted: at least kTrustedPriorRows measurements, the
  // surrogate keeping the prior (both weights at least a half), PriorLogRms within
  // kTrustedPriorLogRms.
  bool TrustsPrior(const PriorUse& use) const {
    if (knowledge_.prior.empty() || result_.evaluations.size() < kTrustedPriorRows) return false;
    if (use.time_weight < 0.5 || use.energy_weight < 0.5) return false;
    return PriorLogRms() <= kTrustedPriorLogRms;
  }

  // The RMS of log(measured / prior) at the measured configurations over time and dynamic
  // energy, each target centred (a constant offset is the surrogate's); infinite without a
  // prior or measurements.
  double PriorLogRms() const {
    if (knowledge_.prior.empty() || result_.evaluations.empty()) {
      return std::numeric_limits<double>::infinity();
    }
    std::vector<double> log_t, log_e;
    for (const Evaluation& e : result_.evaluations) {
      log_t.push_back(std::log(std::max(e.sample.time_s, 1e-30) /
                               std::max(knowledge_.prior.time_s[e.index], 1e-30)));
      log_e.push_back(std::log(std::max(e.sample.dynamic_energy_j, 1e-30) /
                               std::max(knowledge_.prior.dynamic_energy_j[e.index], 1e-30)));
    }
    double sum = 0.0;
    for (const std::vector<double>* r : {&log_t, &log_e}) {
      const double mean =
          std::accumulate(r->begin(), r->end(), 0.0) / static_cast<double>(r->size());
      for (double v : *r) sum += (v - mean) * (v - mean);
    }
    return std::sqrt(sum / static_cast<double>(log_t.size() + log_e.size()));
  }

  PriorUse WithCalibration(PriorUse use) const {
    if (!calibrated_) return use;
    use.calibration = calibration_.calibration.ToString();
    use.calibration_log_rms_before = calibration_.log_rms_before;
    use.calibration_log_rms_after = calibration_.log_rms_after;
    return use;
  }

  bool Knows() const { return !knowledge_.prior.empty() || !knowledge_.related.empty(); }

  // The prior mean at space index `i`, appended (nothing without a prior).
  void AddPrior(int64_t i, std::vector<double>* time_s, std::vector<double>* energy_j) const {
    if (knowledge_.prior.empty()) return;
    time_s->push_back(knowledge_.prior.time_s[i]);
    energy_j->push_back(knowledge_.prior.dynamic_energy_j[i]);
  }

  // Appends the batch's evaluations, reading what the store has. Evaluation order is the pick
  // order either way, so a resumed run is indistinguishable from an uninterrupted one. True
  // when something is left to measure.
  bool Evaluate(const std::vector<int64_t>& indices, const std::vector<std::string>& reasons) {
    const std::size_t first = result_.evaluations.size();
    missing_.clear();
    for (std::size_t i = 0; i < indices.size(); ++i) {
      Evaluation e;
      e.index = indices[i];
      e.knobs = plan_.space.At(indices[i]);
      e.batch = batch_;
      e.reason = reasons[i];
      if (store_ != nullptr) {
        if (auto stored = store_->Find(plan_.type->name, e.knobs)) {
          e.sample = *stored;
          e.sample.gpus = gpus_;
          e.from_store = true;
          ++result_.reused;
        }
      }
      if (!e.from_store) missing_.push_back(first + i);
      result_.evaluations.push_back(std::move(e));
    }
    if (store_ != nullptr && !missing_.empty()) {  // refused here if it cannot keep them
      store_->RefuseToMeasure(plan_.type->name, result_.evaluations[missing_.front()].knobs,
                              missing_.size(), indices.size());
    }
    pending_ = missing_.size();
    recorded_.assign(missing_.size(), false);
    return pending_ > 0;
  }

  void BatchComplete() {
    missing_.clear();
    result_.hypervolume_trace.push_back(MeasuredHypervolume());
  }

  double MeasuredHypervolume() const {
    std::vector<pareto::Point> points;
    double t_max = 0, e_max = 0;
    for (const Evaluation& e : result_.evaluations) {
      points.push_back({.time_s = e.sample.time_s, .energy_j = e.sample.energy_j});
      t_max = std::max(t_max, e.sample.time_s);
      e_max = std::max(e_max, e.sample.energy_j);
    }
    return pareto::Hypervolume(points, {.time_s = 1.1 * t_max, .energy_j = 1.1 * e_max});
  }

  // Costs, the final (denoising) surrogate and the frontiers.
  void Finalize() {
    complete_ = true;
    surrogate_.reset();
    // Measured in this run: every sample taken plus each unit's overhead, summed in evaluation
    // order from the samples' own costs, so it does not depend on who measured or when.
    const double overhead_gpu_s = backend_.BatchOverheadSeconds() * gpus_;
    result_.gpu_seconds = static_cast<double>(units_issued_) * overhead_gpu_s;
    for (const Evaluation& e : result_.evaluations) {
      if (!e.from_store) result_.gpu_seconds += e.sample.GpuSeconds();
    }
    // What the result costs whether or not the store served some of it: every unit's overhead
    // and every measurement, on the GPUs of the collective's group.
    std::map<int, int64_t> batch_sizes;
    result_.cost_gpu_seconds = 0.0;
    for (const Evaluation& e : result_.evaluations) {
      ++batch_sizes[e.batch];
      result_.cost_gpu_seconds += e.sample.GpuSeconds();
    }
    result_.batches = static_cast<int>(batch_sizes.size());
    int64_t units = 0;
    for (const auto& [batch, size] : batch_sizes) {
      units += options_.unit_size > 0 ? (size + options_.unit_size - 1) / options_.unit_size : 1;
    }
    result_.cost_gpu_seconds += static_cast<double>(units) * overhead_gpu_s;
    result_.hypervolume = result_.hypervolume_trace.back();
    {
      std::vector<int64_t> indices;
      std::vector<measure::Sample> samples;
      for (const Evaluation& e : result_.evaluations) {
        indices.push_back(e.index);
        samples.push_back(e.sample);
      }
      PriorUse use;
      const bool denoise = options_.denoise && plan_.type->tunable && indices.size() >= 3;
      if (denoise) Calibrate();
      const std::vector<measure::Sample> estimates = Estimates(
          plan_.space, indices, samples, options_.surrogate, denoise, backend_.StaticPowerW(),
          SurrogateOptionsFor(options_, backend_, DeriveSeed(seed_, HashString("final-surrogate"))),
          knowledge_, &use);
      if (denoise && Knows()) result_.prior_uses.push_back(WithCalibration(use));
      for (std::size_t i = 0; i < estimates.size(); ++i)
        result_.evaluations[i].estimate = estimates[i];
    }
    BuildFrontiers();
  }

  void BuildFrontiers() {
    auto point = [&](const Evaluation& e) {
      return FrontierPoint{.knobs = e.knobs,
                           .time_s = e.estimate.time_s,
                           .energy_j = e.estimate.energy_j,
                           .dynamic_energy_j = e.estimate.dynamic_energy_j,
                           .measured_time_s = e.sample.time_s,
                           .measured_energy_j = e.sample.energy_j};
    };
    std::vector<pareto::Point> all;
    std::map<int, std::vector<pareto::Point>> by_clock;
    for (std::size_t i = 0; i < result_.evaluations.size(); ++i) {
      const Evaluation& e = result_.evaluations[i];
      const pareto::Point p{.time_s = e.estimate.time_s,
                            .energy_j = e.estimate.energy_j,
                            .payload = static_cast<int64_t>(i)};
      all.push_back(p);
      by_clock[e.knobs.freq_mhz].push_back(p);
    }
    for (const pareto::Point& p : pareto::Filter(all)) {
      result_.frontier.push_back(point(result_.evaluations[p.payload]));
    }
    for (int clock : plan_.space.clocks_mhz()) {
      ClockFrontier cf;
      cf.freq_mhz = clock;
      for (const pareto::Point& p : pareto::Filter(by_clock[clock])) {
        cf.points.push_back(point(result_.evaluations[p.payload]));
      }
      result_.clock_frontiers.push_back(std::move(cf));
    }
  }

  const Plan& plan_;
  const ProfileOptions& options_;
  const measure::Backend& backend_;
  measure::MeasurementStore* store_;
  uint64_t seed_;
  int gpus_;
  TypeKnowledge knowledge_;  // the prior mean (calibrated) and related workloads' rows
  const workload::WorkloadModel& model_;
  CalibrationResult calibration_;  // the prior's latest calibration to this type
  bool calibrated_ = false;
  PartitionResult result_;
  std::unique_ptr<Surrogate> surrogate_;
  std::vector<bool> measured_;        // picked (space index), measured or in flight
  std::vector<std::size_t> missing_;  // evaluations of the batch in flight to be measured
  std::vector<bool> recorded_;        // per missing_ entry
  std::size_t pending_ = 0;           // samples of the batch in flight not yet recorded
  int batch_ = 0;                     // number of the current batch (0: initial design)
  int64_t units_issued_ = 0;          // backend batches handed out in this run
  bool started_ = false;
  bool second_stage_ = false;             // a prior's design has its second stage to come
  bool recheck_ = false;                  // ... and then its re-check (Recheck)
  std::vector<int64_t> no_prior_design_;  // with a prior's design: the no-prior one
  int batch_size_ = 0;                    // the plan's, or the no-prior one after a fallback
  bool complete_ = false;
};

Json KnobsJson(const measure::PartitionKnobs& knobs) {
  return Json{{"freq_mhz", knobs.freq_mhz}, {"sms", knobs.sms}, {"slot", knobs.slot}};
}

Json PointJson(const FrontierPoint& p) {
  return Json{{"knobs", KnobsJson(p.knobs)},
              {"time_s", p.time_s},
              {"energy_j", p.energy_j},
              {"dynamic_energy_j", p.dynamic_energy_j},
              {"measured_time_s", p.measured_time_s},
              {"measured_energy_j", p.measured_energy_j}};
}

// Whether `model` reads what `backend`'s noise-free twin reads: the same description and the
// GPU figures a model's predictions rest on.
bool SameModel(measure::Backend& model, measure::Backend& backend) {
  const std::unique_ptr<measure::Backend> twin = backend.NoiseFreeTwin();
  if (!twin || twin->Description() != model.Description()) return false;
  const hw::GpuSpec& a = model.Gpu();
  const hw::GpuSpec& b = twin->Gpu();
  bool same_curve = a.voltage_curve.size() == b.voltage_curve.size();
  for (std::size_t i = 0; same_curve && i < a.voltage_curve.size(); ++i) {
    same_curve = a.voltage_curve[i].freq_mhz == b.voltage_curve[i].freq_mhz &&
                 a.voltage_curve[i].volts == b.voltage_curve[i].volts;
  }
  return same_curve && a.name == b.name && a.sm_count == b.sm_count &&
         a.power.dynamic_max_w == b.power.dynamic_max_w && a.power.static_w == b.power.static_w &&
         a.power.cap_w == b.power.cap_w && a.power.memory_w == b.power.memory_w &&
         a.gemm_efficiency == b.gemm_efficiency &&
         a.attention_efficiency == b.attention_efficiency &&
         a.hbm_bandwidth_gbps == b.hbm_bandwidth_gbps &&
         a.interconnect.bus_bandwidth_gbps == b.interconnect.bus_bandwidth_gbps &&
         a.interconnect.channel_bandwidth_gbps == b.interconnect.channel_bandwidth_gbps;
}

std::string PriorNote(const ProfileOptions& options, bool measuring_model) {
  if (!options.prior) return "no prior: the surrogates start from the measurements alone";
  if (measuring_model) {
    return "the prior is the measuring backend's own noise-free model, i.e. the truth up to "
           "measurement noise: results with it (small budgets in particular) are flattering, "
           "they hold largely by construction here; the mismatched-prior benchmark "
           "(bench/profile_prior.py, a perturbed GPU model as the prior) is the measure of the "
           "method";
  }
  return "the prior is a model distinct from the measuring backend: its physical scales are "
         "calibrated to each type's measurements (when it has them), the surrogates learn the "
         "residual between the measurements and it, and its weight per target (0 drops it)";
}

// What the last fit (the one the frontier was selected with) made of the prior, and every fit.
Json PriorJson(const std::vector<PriorUse>& uses) {
  Json fits = Json::array();
  for (const PriorUse& u : uses) {
    Json fit{
        {"time_weight", u.time_weight}, {"energy_weight", u.energy_weight}, {"trusted", u.trusted}};
    if (!u.related_similarity.empty()) fit["related_similarity"] = u.related_similarity;
    if (!u.calibration.empty()) fit["calibration"] = u.calibration;
    fits.push_back(std::move(fit));
  }
  const PriorUse& last = uses.back();
  Json out{{"time_weight", last.time_weight},
           {"energy_weight", last.energy_weight},
           {"held_out_log_error",
            {{"time", last.held_out.time}, {"dynamic_energy", last.held_out.dynamic_energy}}},
           {"fits", fits}};
  if (!last.calibration.empty()) {
    out["calibration"] = Json{{"perturbation", last.calibration},
                              {"log_rms_before", last.calibration_log_rms_before},
                              {"log_rms_after", last.calibration_log_rms_after}};
  }
  return out;
}

}  // namespace
}  // namespace internal

struct WorkloadProfiler::State {
  const workload::WorkloadModel* model = nullptr;
  ProfileOptions options;
  measure::Backend* backend = nullptr;
  Context context;
  std::vector<const workload::PartitionType*> types;
  std::vector<internal::Plan> plans;
  std::unique_ptr<measure::Backend> oracle;
  std::unique_ptr<measure::Backend> prior_model;  // predictions only (never counted)
  std::vector<RelatedWorkload> related;           // transfer: read once, read-only
  std::unique_ptr<measure::MeasurementStore> store;
  std::vector<std::unique_ptr<internal::TypeState>> states;
  std::vector<std::string> labels;
  std::unique_ptr<Progress> progress;
  int64_t measured = 0;         // samples recorded (progress estimate)
  double measured_gpu_s = 0.0;  // their cost
  bool finished = false;
};

WorkloadProfiler::WorkloadProfiler(const workload::WorkloadModel& model,
                                   const ProfileOptions& options, measure::Backend& backend,
                                   const Context& context)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.model = &model;
  s.options = options;
  s.backend = &backend;
  s.context = context;
  // Validate everything before the first measurement: options, names, budgets, the store.
  ThrowIfInvalid(options.Validate());
  if (options.partitions.empty()) {
    for (const auto& type : model.partition_types) s.types.push_back(&type);
  } else {
    for (const std::string& name : options.partitions) {
      auto it = std::find_if(model.partition_types.begin(), model.partition_types.end(),
                             [&](const workload::PartitionType& t) { return t.name == name; });
      if (it == model.partition_types.end()) {
        std::vector<std::string> valid;
        for (const auto& t : model.partition_types) valid.push_back(t.name);
        ThrowInput("partition", name,
                   "not a partition type of this workload (valid: " +
                       (valid.empty() ? std::string("none") : JoinNames(valid)) + ")");
      }
      s.types.push_back(&*it);
    }
  }
  for (const auto* type : s.types)
    s.plans.push_back(internal::PlanType(*type, backend.Gpu(), s.options));
  if (options.oracle) {
    s.oracle = backend.NoiseFreeTwin();
    if (!s.oracle) {
      ThrowInput("oracle", backend.Description(),
                 "the exhaustive oracle needs a backend with noise-free values (the emulator)");
    }
  }
  if (options.prior) {
    s.prior_model = options.prior.make(model);
    KAREUS_CHECK(s.prior_model != nullptr) << "the prior's model factory returned nothing";
  }
  for (const std::filesystem::path& path : options.related_stores) {
    s.related.push_back(LoadRelatedWorkload(path, model, backend.Description()));
  }
  if (!options.store.empty()) {
    s.store = measure::MeasurementStore::Open(
        options.store,
        {.gpu = backend.Gpu().name,
         .workload_signature = model.workload.Signature(),
         .backend = backend.Description()},
        {.damaged = options.remeasure_damaged ? measure::StoreOptions::DamagedRows::kSetAside
                                              : measure::StoreOptions::DamagedRows::kFail});
  }
  for (std::size_t i = 0; i < s.plans.size(); ++i) {
    const uint64_t seed = DeriveSeed(context.seed, HashString(s.plans[i].type->name.c_str()));
    TypeKnowledge knowledge;
    if (s.plans[i].type->tunable) {
      if (s.prior_model) {
        knowledge.prior = PredictSpace(*s.prior_model, *s.plans[i].type, s.plans[i].space);
      }
      knowledge.related =
          RelatedRowsFor(s.related, *s.plans[i].type, s.plans[i].space, options.prior,
                         options.related_max_rows, DeriveSeed(seed, HashString("related")));
    }
    s.states.push_back(std::make_unique<internal::TypeState>(
        s.plans[i], s.options, backend, s.store.get(), seed, std::move(knowledge), model));
    s.labels.push_back("[" + std::to_string(i + 1) + "/" + std::to_string(s.plans.size()) + "]");
  }
  s.progress = std::make_unique<Progress>(!context.quiet);
}

WorkloadProfiler::~WorkloadProfiler() = default;

const std::vector<const workload::PartitionType*>& WorkloadProfiler::Types() const {
  return state_->types;
}

std::optional<MeasurementBatch> WorkloadProfiler::NextBatch(int type) {
  KAREUS_CHECK(type >= 0 && type < static_cast<int>(state_->states.size())) << "type " << type;
  return state_->states[type]->NextBatch(type);
}

void WorkloadProfiler::Record(int type, std::size_t index, const measure::Sample& sample) {
  KAREUS_CHECK(type >= 0 && type < static_cast<int>(state_->states.size())) << "type " << type;
  State& s = *state_;
  ++s.measured;
  s.measured_gpu_s += sample.GpuSeconds();
  const double per_eval_s = s.measured_gpu_s / static_cast<double>(s.measured);
  s.states[type]->Record(index, sample, *s.progress, s.labels[type], per_eval_s);
}

bool WorkloadProfiler::Complete(int type) const {
  KAREUS_CHECK(type >= 0 && type < static_cast<int>(state_->states.size())) << "type " << type;
  return state_->states[type]->complete();
}

ProfileSummary WorkloadProfiler::Finish() {
  State& s = *state_;
  KAREUS_CHECK(!s.finished) << "WorkloadProfiler::Finish called twice";
  s.finished = true;
  ProfileSummary summary;
  summary.gpu = s.backend->Gpu().name;
  summary.workload_signature = s.model->workload.Signature();
  summary.backend = s.backend->Description();
  summary.surrogate = ToString(s.options.surrogate);
  summary.strategy = ToString(s.options.strategy);
  if (s.options.prior) summary.prior = s.options.prior.description;
  summary.prior_is_measuring_model =
      s.prior_model && internal::SameModel(*s.prior_model, *s.backend);
  summary.prior_note = internal::PriorNote(s.options, summary.prior_is_measuring_model);
  for (const RelatedWorkload& r : s.related) summary.related.push_back(r.workload_signature);
  summary.seed = s.context.seed;
  for (std::size_t i = 0; i < s.states.size(); ++i) {
    KAREUS_CHECK(s.states[i]->complete()) << s.plans[i].type->name << " is not profiled yet";
    PartitionResult result = std::move(s.states[i]->result());
    summary.measurements_taken += result.measured;
    summary.measurements_reused += result.reused;
    if (s.oracle && result.tunable) {  // a fixed type is measured exhaustively: nothing to compare
      const uint64_t seed = DeriveSeed(s.context.seed, HashString(s.plans[i].type->name.c_str()));
      const uint64_t random_seed = DeriveSeed(seed, HashString("random-search"));
      result.oracle =
          internal::CompareWithOracle(s.plans[i].space, *s.plans[i].type, result, *s.backend,
                                      *s.oracle, s.options, random_seed, s.states[i]->knowledge());
    }
    summary.partitions.push_back(std::move(result));
  }
  s.progress->Finish();
  // The random baseline's measurements are not the profile's: count the optimizer's only.
  for (const auto& r : summary.partitions) {
    summary.gpu_seconds += r.gpu_seconds;
    summary.cost_gpu_seconds += r.cost_gpu_seconds;
  }
  return summary;
}

ProfileSummary ProfileWorkload(const workload::WorkloadModel& model, const ProfileOptions& options,
                               measure::Backend& backend, const Context& context) {
  WorkloadProfiler profiler(model, options, backend, context);
  for (int t = 0; t < static_cast<int>(profiler.Types().size()); ++t) {
    const workload::PartitionType& type = *profiler.Types()[t];
    while (std::optional<MeasurementBatch> batch = profiler.NextBatch(t)) {
      for (const auto& [begin, end] : batch->units) {
        const std::vector<measure::PartitionKnobs> unit(batch->knobs.begin() + begin,
                                                        batch->knobs.begin() + end);
        backend.MeasureBatch(type, unit, [&](std::size_t j, const measure::Sample& sample) {
          profiler.Record(t, begin + j, sample);
        });
      }
    }
  }
  return profiler.Finish();
}

Json ProfileSummary::ToJson(bool with_evaluations) const {
  Json doc;
  doc["format"] = "kareus-profile";
  doc["version"] = 1;
  doc["gpu"] = gpu;
  doc["workload_signature"] = workload_signature;
  doc["backend"] = backend;
  doc["surrogate"] = surrogate;
  doc["strategy"] = strategy;
  doc["prior"] = prior;
  doc["prior_is_measuring_model"] = prior_is_measuring_model;
  doc["prior_note"] = prior_note;
  doc["related_workloads"] = related;
  doc["seed"] = seed;
  doc["gpu_seconds"] = gpu_seconds;
  doc["gpu_hours"] = gpu_seconds / 3600.0;
  doc["cost_gpu_hours"] = cost_gpu_seconds / 3600.0;
  doc["gpu_hours_basis"] = kGpuHoursBasis;
  doc["measurements_taken"] = measurements_taken;
  doc["measurements_reused"] = measurements_reused;
  Json types = Json::array();
  for (const PartitionResult& r : partitions) {
    Json t;
    t["type"] = r.type;
    t["tunable"] = r.tunable;
    t["space_size"] = r.space_size;
    t["evaluations"] = static_cast<int64_t>(r.evaluations.size());
    t["budget_fraction"] =
        static_cast<double>(r.evaluations.size()) / static_cast<double>(r.space_size);
    t["measured"] = r.measured;
    t["reused"] = r.reused;
    t["gpu_seconds"] = r.gpu_seconds;
    t["cost_gpu_seconds"] = r.cost_gpu_seconds;
    t["batches"] = r.batches;
    t["initial_design"] = r.initial_design;
    if (r.prior_design != PriorDesignOutcome::kNone) t["prior_design"] = ToString(r.prior_design);
    if (std::isfinite(r.prior_design_log_rms)) t["prior_design_log_rms"] = r.prior_design_log_rms;
    if (std::isfinite(r.prior_recheck_log_rms))
      t["prior_recheck_log_rms"] = r.prior_recheck_log_rms;
    t["hypervolume"] = r.hypervolume;
    t["hypervolume_trace"] = r.hypervolume_trace;
    if (!r.prior_uses.empty()) t["prior"] = internal::PriorJson(r.prior_uses);
    Json front = Json::array();
    for (const FrontierPoint& p : r.frontier) front.push_back(internal::PointJson(p));
    t["frontier"] = front;
    Json clocks = Json::array();
    for (const ClockFrontier& cf : r.clock_frontiers) {
      Json points = Json::array();
      for (const FrontierPoint& p : cf.points) points.push_back(internal::PointJson(p));
      clocks.push_back(Json{{"freq_mhz", cf.freq_mhz}, {"points", points}});
    }
    t["clock_frontiers"] = clocks;
    if (r.oracle) {
      t["oracle_hypervolume"] = r.oracle->oracle_hypervolume;
      t["oracle_reference"] =
          Json{{"time_s", r.oracle->reference.time_s}, {"energy_j", r.oracle->reference.energy_j}};
      t["measured_hypervolume_noise_free"] = r.oracle->hypervolume;
      t["hv_ratio"] = r.oracle->hv_ratio;
      t["random_hv_ratio"] = r.oracle->random_hv_ratio;
      t["space_reference"] = Json{{"time_s", r.oracle->space_reference.time_s},
                                  {"energy_j", r.oracle->space_reference.energy_j}};
      t["space_ref_hv_ratio"] = r.oracle->space_ref_hv_ratio;
      t["random_space_ref_hv_ratio"] = r.oracle->random_space_ref_hv_ratio;
      t["clock_hv_ratio"] = r.oracle->clock_hv_ratio;
      t["random_clock_hv_ratio"] = r.oracle->random_clock_hv_ratio;
    }
    if (with_evaluations) {
      Json evals = Json::array();
      for (const Evaluation& e : r.evaluations) {
        evals.push_back(Json{{"knobs", internal::KnobsJson(e.knobs)},
                             {"time_s", e.sample.time_s},
                             {"energy_j", e.sample.energy_j},
                             {"dynamic_energy_j", e.sample.dynamic_energy_j},
                             {"estimated_time_s", e.estimate.time_s},
                             {"estimated_energy_j", e.estimate.energy_j},
                             {"batch", e.batch},
                             {"reason", e.reason},
                             {"from_store", e.from_store}});
      }
      t["evaluated"] = evals;
    }
    types.push_back(std::move(t));
  }
  doc["partitions"] = types;
  return doc;
}

}  // namespace kareus::mobo
