// SPDX-License-Identifier: Apache-2.0
#include "mobo/type_state.h"

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
#include "kareus/measure/store.h"
#include "kareus/mobo/search_space.h"
#include "mobo/baselines.h"
#include "mobo/hv_fast.h"

namespace kareus::mobo::internal {
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

}  // namespace

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

TypeState::TypeState(const Plan& plan, const ProfileOptions& options,
                     const measure::Backend& backend, measure::MeasurementStore* store,
                     uint64_t seed, TypeKnowledge knowledge, const workload::WorkloadModel& model)
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

const char* ToString(TypePhase phase) {
  switch (phase) {
    case TypePhase::kStart:
      return "start";
    case TypePhase::kSecondStage:
      return "second_stage";
    case TypePhase::kRecheck:
      return "recheck";
    case TypePhase::kAcquire:
      return "acquire";
    case TypePhase::kComplete:
      return "complete";
  }
  return "";
}

std::optional<MeasurementBatch> TypeState::NextBatch(int type_index) {
  KAREUS_CHECK(pending_ == 0) << plan_.type->name << ": the previous batch is still being measured";
  while (phase_ != TypePhase::kComplete) {
    const std::optional<Picks> picks = Step();
    if (!picks) continue;  // nothing picked in that phase: the next one
    for (int64_t index : picks->indices) measured_[index] = true;
    if (Evaluate(picks->indices, picks->reasons)) return IssueBatch(type_index);
    BatchComplete();  // everything came from the store
  }
  return std::nullopt;
}

std::optional<TypeState::Picks> TypeState::Step() {
  switch (phase_) {
    case TypePhase::kStart:
      return StartStep();
    case TypePhase::kSecondStage:
      return SecondStageStep();
    case TypePhase::kRecheck:
      return RecheckStep();
    case TypePhase::kAcquire:
      return AcquireStep();
    case TypePhase::kComplete:
      break;
  }
  return std::nullopt;
}

std::optional<TypeState::Picks> TypeState::StartStep() {
  Picks picks;
  Rng rng(DeriveSeed(seed_, HashString("initial-design")));
  if (!plan_.type->tunable) {
    picks.indices.resize(plan_.space.Size());
    std::iota(picks.indices.begin(), picks.indices.end(), 0);
  } else {
    picks.indices = Initial(rng);
    result_.initial_design = static_cast<int>(picks.indices.size());
  }
  picks.reasons.assign(picks.indices.size(), plan_.type->tunable ? "initial" : "exhaustive");
  if (plan_.type->tunable) {
    surrogate_ = MakeSurrogate(
        options_.surrogate,
        SurrogateOptionsFor(options_, backend_, DeriveSeed(seed_, HashString("surrogate"))));
  }
  phase_ = StagedDesign() ? TypePhase::kSecondStage : TypePhase::kAcquire;
  return picks;
}

std::optional<TypeState::Picks> TypeState::SecondStageStep() {
  std::vector<int64_t> indices = SecondStage();
  phase_ = result_.prior_design == PriorDesignOutcome::kPrior && !indices.empty()
               ? TypePhase::kRecheck
               : TypePhase::kAcquire;
  return DesignStage(std::move(indices));
}

std::optional<TypeState::Picks> TypeState::RecheckStep() {
  std::vector<int64_t> indices = Recheck();
  phase_ = TypePhase::kAcquire;
  return DesignStage(std::move(indices));
}

std::optional<TypeState::Picks> TypeState::AcquireStep() {
  Picks picks;
  if (PickBatch(&picks.indices, &picks.reasons)) return picks;
  Finalize();
  phase_ = TypePhase::kComplete;
  return std::nullopt;
}

std::optional<TypeState::Picks> TypeState::DesignStage(std::vector<int64_t> indices) {
  if (indices.empty()) return std::nullopt;
  Picks picks{.indices = std::move(indices), .reasons = {}};
  picks.reasons.assign(picks.indices.size(), "initial");
  ++batch_;
  return picks;
}

MeasurementBatch TypeState::IssueBatch(int type_index) {
  MeasurementBatch batch{.type = type_index, .number = batch_, .knobs = {}, .units = {}};
  for (std::size_t i : missing_) batch.knobs.push_back(result_.evaluations[i].knobs);
  const std::size_t unit =
      options_.unit_size > 0 ? static_cast<std::size_t>(options_.unit_size) : batch.knobs.size();
  for (std::size_t b = 0; b < batch.knobs.size(); b += unit) {
    batch.units.push_back({b, std::min(batch.knobs.size(), b + unit)});
  }
  units_issued_ += static_cast<int64_t>(batch.units.size());
  return batch;
}

void TypeState::Record(std::size_t index, const measure::Sample& sample, Progress& progress,
                       const std::string& label, double per_eval_s) {
  KAREUS_CHECK(index < missing_.size() && pending_ > 0)
      << plan_.type->name << ": sample " << index << " outside the batch in flight";
  Evaluation& e = result_.evaluations[missing_[index]];
  KAREUS_CHECK(!recorded_[index]) << plan_.type->name << ": sample " << index << " recorded twice";
  recorded_[index] = true;
  if (store_ != nullptr) store_->Insert(plan_.type->name, e.knobs, sample);
  e.sample = sample;
  ++result_.measured;
  --pending_;
  ShowProgress(progress, label, per_eval_s);
  if (pending_ == 0) BatchComplete();
}

void TypeState::ShowProgress(Progress& progress, const std::string& label,
                             double per_eval_s) const {
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

bool TypeState::StagedDesign() const {
  return plan_.type->tunable && !knowledge_.prior.empty() && options_.initial_design == 0 &&
         plan_.no_prior_initial > kCheckDesign;
}

std::vector<int64_t> TypeState::Initial(Rng& rng) {
  std::vector<int64_t> initial;
  if (StagedDesign()) {
    no_prior_design_ = InitialDesign(plan_.space, plan_.no_prior_initial, rng);
    initial.assign(no_prior_design_.begin(), no_prior_design_.begin() + kCheckDesign);
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

std::vector<int64_t> TypeState::SecondStage() {
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

std::vector<int64_t> TypeState::Recheck() {
  Calibrate();
  result_.prior_recheck_log_rms = PriorLogRms();
  if (result_.prior_recheck_log_rms <= kTrustedPriorLogRms) return {};
  result_.prior_design = PriorDesignOutcome::kRefuted;
  return WithinBudget(RestOfNoPriorDesign());
}

std::vector<int64_t> TypeState::RestOfNoPriorDesign() {
  std::vector<int64_t> next;
  for (std::size_t i = kCheckDesign; i < no_prior_design_.size(); ++i) {
    if (!measured_[no_prior_design_[i]]) next.push_back(no_prior_design_[i]);
  }
  batch_size_ = plan_.no_prior_batch;
  result_.batch_size = batch_size_;
  return next;
}

std::vector<int64_t> TypeState::WithinBudget(std::vector<int64_t> next) {
  const int64_t left = plan_.budget - static_cast<int64_t>(result_.evaluations.size());
  if (static_cast<int64_t>(next.size()) > left) next.resize(static_cast<std::size_t>(left));
  result_.initial_design += static_cast<int>(next.size());
  return next;
}

bool TypeState::PickBatch(std::vector<int64_t>* indices, std::vector<std::string>* reasons) {
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

void TypeState::DrawSamples(const Surrogate& surrogate, const std::vector<std::vector<double>>& x,
                            const std::vector<double>& prior_t, const std::vector<double>& prior_e,
                            int k, int batch, AcquisitionInput* input) const {
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

void TypeState::Calibrate() {
  if (knowledge_.prior.empty() || !options_.prior_calibrate || !options_.prior.make_calibrated) {
    return;
  }
  std::vector<measure::PartitionKnobs> knobs;
  std::vector<measure::Sample> samples;
  for (const Evaluation& e : result_.evaluations) {
    knobs.push_back(e.knobs);
    samples.push_back(e.sample);
  }
  const CalibrationResult c =
      CalibratePrior(options_.prior, model_, *plan_.type, knobs, samples, calibration_.calibration);
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

int TypeState::TrustedExploration() const {
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

bool TypeState::TrustsPrior(const PriorUse& use) const {
  if (knowledge_.prior.empty() || result_.evaluations.size() < kTrustedPriorRows) return false;
  if (use.time_weight < 0.5 || use.energy_weight < 0.5) return false;
  return PriorLogRms() <= kTrustedPriorLogRms;
}

double TypeState::PriorLogRms() const {
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
    const double mean = std::accumulate(r->begin(), r->end(), 0.0) / static_cast<double>(r->size());
    for (double v : *r) sum += (v - mean) * (v - mean);
  }
  return std::sqrt(sum / static_cast<double>(log_t.size() + log_e.size()));
}

PriorUse TypeState::WithCalibration(PriorUse use) const {
  if (!calibrated_) return use;
  use.calibration = calibration_.calibration.ToString();
  use.calibration_log_rms_before = calibration_.log_rms_before;
  use.calibration_log_rms_after = calibration_.log_rms_after;
  return use;
}

void TypeState::AddPrior(int64_t i, std::vector<double>* time_s,
                         std::vector<double>* energy_j) const {
  if (knowledge_.prior.empty()) return;
  time_s->push_back(knowledge_.prior.time_s[i]);
  energy_j->push_back(knowledge_.prior.dynamic_energy_j[i]);
}

bool TypeState::Evaluate(const std::vector<int64_t>& indices,
                         const std::vector<std::string>& reasons) {
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

void TypeState::BatchComplete() {
  missing_.clear();
  result_.hypervolume_trace.push_back(MeasuredHypervolume());
}

double TypeState::MeasuredHypervolume() const {
  std::vector<pareto::Point> points;
  double t_max = 0, e_max = 0;
  for (const Evaluation& e : result_.evaluations) {
    points.push_back({.time_s = e.sample.time_s, .energy_j = e.sample.energy_j});
    t_max = std::max(t_max, e.sample.time_s);
    e_max = std::max(e_max, e.sample.energy_j);
  }
  return pareto::Hypervolume(points, {.time_s = 1.1 * t_max, .energy_j = 1.1 * e_max});
}

void TypeState::Finalize() {
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

void TypeState::BuildFrontiers() {
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

}  // namespace kareus::mobo::internal
