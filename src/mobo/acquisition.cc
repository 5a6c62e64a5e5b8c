// SPDX-License-Identifier: Apache-2.0
#include "kareus/mobo/acquisition.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kareus/common/error.h"
#include "kareus/pareto/pareto.h"
#include "mobo/hv_fast.h"

namespace kareus::mobo {
namespace internal {

double FrontHvi(const std::vector<pareto::Point>& front, const pareto::Point& p,
                const pareto::Point& reference) {
  if (!(p.time_s < reference.time_s && p.energy_j < reference.energy_j)) return 0.0;
  // Integrate over t in [p.t, ref.t] the gap between the front's attained energy level L(t)
  // (lowest energy of the points with time <= t, else the reference) and p's energy.
  double level = reference.energy_j;
  std::size_t i = 0;
  for (; i < front.size() && front[i].time_s <= p.time_s; ++i) level = front[i].energy_j;
  if (level <= p.energy_j) return 0.0;
  double area = 0.0, t = p.time_s;
  for (; i < front.size(); ++i) {
    area += (front[i].time_s - t) * (level - p.energy_j);
    t = front[i].time_s;
    level = std::min(level, front[i].energy_j);
    if (level <= p.energy_j) return area;
  }
  return area + (reference.time_s - t) * (level - p.energy_j);
}

void InsertIntoFront(std::vector<pareto::Point>* front, const pareto::Point& p) {
  for (const pareto::Point& q : *front) {
    if (q.time_s <= p.time_s && q.energy_j <= p.energy_j) return;
  }
  std::vector<pareto::Point> kept;
  kept.reserve(front->size() + 1);
  for (const pareto::Point& q : *front) {
    if (!(p.time_s <= q.time_s && p.energy_j <= q.energy_j)) kept.push_back(q);
  }
  kept.push_back(p);
  std::sort(kept.begin(), kept.end(),
            [](const pareto::Point& a, const pareto::Point& b) { return a.time_s < b.time_s; });
  *front = std::move(kept);
}

namespace {

// Min-max normalization from the measured values, reference at 1.1 x the measured maximum
// (published HVContext, §3.4). A zero range becomes 1.
struct Normalizer {
  double t_min = 0, t_range = 1, e_min = 0, e_range = 1;
  pareto::Point reference;
  Normalizer(const std::vector<double>& t, const std::vector<double>& e) {
    const auto [t_lo, t_hi] = std::minmax_element(t.begin(), t.end());
    const auto [e_lo, e_hi] = std::minmax_element(e.begin(), e.end());
    t_min = *t_lo;
    e_min = *e_lo;
    t_range = *t_hi - *t_lo > 0 ? *t_hi - *t_lo : 1.0;
    e_range = *e_hi - *e_lo > 0 ? *e_hi - *e_lo : 1.0;
    reference = Apply(1.1 * *t_hi, 1.1 * *e_hi, -1);
  }
  pareto::Point Apply(double time, double energy, int64_t payload) const {
    return {.time_s = (time - t_min) / t_range,
            .energy_j = (energy - e_min) / e_range,
            .payload = payload};
  }
};

std::vector<pareto::Point> MeasuredFront(const Normalizer& norm, const std::vector<double>& t,
                                         const std::vector<double>& e) {
  std::vector<pareto::Point> points;
  for (std::size_t i = 0; i < t.size(); ++i) {
    points.push_back(norm.Apply(t[i], e[i], static_cast<int64_t>(i)));
  }
  return pareto::Filter(std::move(points));
}

class Selector {
 public:
  Selector(const AcquisitionInput& input, int batch_size)
      : in_(input),
        k_(std::min<int>(batch_size, static_cast<int>(input.candidates.size()))),
        taken_(input.candidates.size(), false) {
    const std::size_t n = input.candidates.size();
    total_energy_.resize(n);
    for (std::size_t c = 0; c < n; ++c) {
      total_energy_[c] = input.predictions.dynamic_energy_j[c] +
                         input.static_power_w * input.predictions.time_s[c];
    }
    TakeClockFastest();
  }
  bool Full() const { return static_cast<int>(picks_.size()) >= k_; }
  int Remaining() const { return k_ - static_cast<int>(picks_.size()); }
  int k() const { return k_; }
  const std::vector<Pick>& picks() const { return picks_; }
  bool Taken(std::size_t c) const { return taken_[c]; }
  void Take(std::size_t c, PickReason reason) {
    KAREUS_CHECK(!taken_[c]);
    taken_[c] = true;
    picks_.push_back({.index = in_.candidates[c], .reason = reason});
  }
  double TotalEnergy(std::size_t c) const { return total_energy_[c]; }

  // Top `count` untaken candidates by score (descending), ties to the lower space index;
  // only positive scores when `positive_only`.
  void TakeTop(const std::vector<double>& score, int count, PickReason reason, bool positive_only) {
    std::vector<std::size_t> order(score.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return score[a] > score[b]; });
    for (std::size_t c : order) {
      if (count <= 0 || Full()) break;
      if (taken_[c] || (positive_only && !(score[c] > 0.0))) continue;
      Take(c, reason);
      --count;
    }
  }

  // Global HVI picks with the believer update: after each pick its predicted point joins the
  // front, so the next pick scores against it.
  void TakeBelieverHvi(const Normalizer& norm, std::vector<pareto::Point> front, int count,
                       PickReason reason) {
    const std::size_t n = in_.candidates.size();
    for (; count > 0 && !Full(); --count) {
      double best = 0.0;
      std::size_t best_c = n;
      for (std::size_t c = 0; c < n; ++c) {
        if (taken_[c]) continue;
        const double hvi = FrontHvi(
            front, norm.Apply(in_.predictions.time_s[c], total_energy_[c], -1), norm.reference);
        if (hvi > best) {
          best = hvi;
          best_c = c;
        }
      }
      if (best_c == n) return;
      Take(best_c, reason);
      InsertIntoFront(&front,
                      norm.Apply(in_.predictions.time_s[best_c], total_energy_[best_c], -1));
    }
  }

  // Relative uncertainty std_t/t + std_E/E (unit-free, so time counts as much as energy; the
  // published raw std_E + std_T lets energy dominate).
  std::vector<double> RelativeUncertainty() const {
    const Predictions& p = in_.predictions;
    std::vector<double> u(in_.candidates.size());
    for (std::size_t c = 0; c < u.size(); ++c) {
      u[c] = p.time_std_s[c] / std::max(p.time_s[c], 1e-30) +
             p.dynamic_energy_std_j[c] / std::max(std::abs(p.dynamic_energy_j[c]), 1e-30);
    }
    return u;
  }

 private:
  // AcquisitionInput::fastest_at_clocks: per listed clock, the candidate predicted fastest
  // there unless a measured configuration there is predicted (or read) at least as fast.
  void TakeClockFastest() {
    const SearchSpace& space = *in_.space;
    const bool denoised = !in_.measured_predictions.time_s.empty();
    for (int clock : in_.fastest_at_clocks) {
      double measured_best = std::numeric_limits<double>::infinity();
      for (std::size_t i = 0; i < in_.measured.size(); ++i) {
        if (space.ClockIndex(in_.measured[i]) != clock) continue;
        measured_best = std::min(
            measured_best, denoised ? in_.measured_predictions.time_s[i] : in_.measured_time_s[i]);
      }
      std::size_t best = in_.candidates.size();
      for (std::size_t c = 0; c < in_.candidates.size(); ++c) {
        if (taken_[c] || space.ClockIndex(in_.candidates[c]) != clock) continue;
        if (best == in_.candidates.size() ||
            in_.predictions.time_s[c] < in_.predictions.time_s[best]) {
          best = c;
        }
      }
      if (Full() || best == in_.candidates.size() ||
          !(in_.predictions.time_s[best] < measured_best)) {
        continue;
      }
      Take(best, PickReason::kClockFastest);
    }
  }

  const AcquisitionInput& in_;
  int k_;
  std::vector<bool> taken_;
  std::vector<Pick> picks_;
  std::vector<double> total_energy_;
};

std::vector<Pick> SelectPublished(const AcquisitionInput& in, int batch_size) {
  Selector s(in, batch_size);
  const std::size_t n = in.candidates.size();
  const Normalizer real(in.measured_time_s, in.measured_energy_j);
  const Normalizer dyn(in.measured_time_s, in.measured_dynamic_energy_j);
  const auto real_front = MeasuredFront(real, in.measured_time_s, in.measured_energy_j);
  const auto dyn_front = MeasuredFront(dyn, in.measured_time_s, in.measured_dynamic_energy_j);
  std::vector<double> hvi_real(n), hvi_dyn(n), neg_time(n), raw_std(n), hvi_max(n);
  for (std::size_t c = 0; c < n; ++c) {
    const double t = in.predictions.time_s[c];
    hvi_real[c] = FrontHvi(real_front, real.Apply(t, s.TotalEnergy(c), -1), real.reference);
    hvi_dyn[c] =
        FrontHvi(dyn_front, dyn.Apply(t, in.predictions.dynamic_energy_j[c], -1), dyn.reference);
    neg_time[c] = -t;
    raw_std[c] = in.predictions.dynamic_energy_std_j[c] + in.predictions.time_std_s[c];
    hvi_max[c] = std::max(hvi_real[c], hvi_dyn[c]);
  }
  const int k = s.k();
  const int n_real = static_cast<int>(std::lround(0.4 * k));
  const int n_dyn = static_cast<int>(std::lround(0.2 * k));
  const int n_time = static_cast<int>(std::lround(0.2 * k));
  s.TakeTop(hvi_real, n_real, PickReason::kTotalHvi, true);
  s.TakeTop(hvi_dyn, n_dyn, PickReason::kDynamicHvi, true);
  s.TakeTop(neg_time, n_time, PickReason::kFastest, false);
  s.TakeTop(raw_std, k - n_real - n_dyn - n_time, PickReason::kUncertain, false);
  s.TakeTop(hvi_max, s.Remaining(), PickReason::kBackfill, false);
  return s.picks();
}

std::vector<Pick> SelectBeliever(const AcquisitionInput& in, int batch_size) {
  Selector s(in, batch_size);
  const Normalizer real(in.measured_time_s, in.measured_energy_j);
  const int n_hvi = static_cast<int>(std::lround(0.75 * s.k()));
  s.TakeBelieverHvi(real, MeasuredFront(real, in.measured_time_s, in.measured_energy_j), n_hvi,
                    PickReason::kTotalHvi);
  s.TakeTop(s.RelativeUncertainty(), s.Remaining(), PickReason::kUncertain, false);
  return s.picks();
}

// The exploration share of a batch of k: 25 %, at least one.
int ExplorationPicks(int k) { return std::max(1, static_cast<int>(std::lround(0.25 * k))); }

// Knob-neighbour exploration, up to `n_explore` picks (`extremes`: then the SM extremes of
// every slot). Clock, SMs and slot act nearly
// separably, so the (SMs, slot) pairs on the per-clock fronts are likely near the best at every
// clock; a pair next to one of them (one SM step, or another slot) that was never measured at
// any clock is tried at that front point's clock. A surrogate that interpolates smoothly over
// SMs (or a prior whose model places the optimum one step off) otherwise never visits a narrow
// optimum between measured SM counts (wave quantization).
void ExploreNeighbours(const AcquisitionInput& in, int n_explore, bool extremes,
                       Selector* selector) {
  Selector& s = *selector;
  const SearchSpace& space = *in.space;
  const std::size_t n = in.candidates.size();
  const int clocks = static_cast<int>(space.clocks_mhz().size());
  {
    const int n_sms = static_cast<int>(space.sms().size());
    const int n_slots = static_cast<int>(space.slots().size());
    std::vector<int> tried(static_cast<std::size_t>(n_sms) * n_slots, 0);
    for (int64_t m : in.measured) ++tried[space.SmIndex(m) * n_slots + space.SlotIndex(m)];
    std::vector<int64_t> position(space.Size(), -1);  // space index -> candidate position
    for (std::size_t c = 0; c < n; ++c) position[in.candidates[c]] = static_cast<int64_t>(c);
    // Score each (SMs, slot) pair by how many per-clock fronts it is on; remember the clock
    // where it is fastest on a front, to try its neighbours there.
    std::vector<int> on_fronts(tried.size(), 0);
    std::vector<int64_t> anchor(tried.size(), -1);
    for (int ci = 0; ci < clocks; ++ci) {
      std::vector<pareto::Point> points;
      for (std::size_t i = 0; i < in.measured.size(); ++i) {
        if (space.ClockIndex(in.measured[i]) != ci) continue;
        points.push_back({.time_s = in.measured_time_s[i],
                          .energy_j = in.measured_energy_j[i],
                          .payload = in.measured[i]});
      }
      for (const pareto::Point& p : pareto::Filter(std::move(points))) {
        const std::size_t pair = space.SmIndex(p.payload) * n_slots + space.SlotIndex(p.payload);
        ++on_fronts[pair];
        if (anchor[pair] < 0) anchor[pair] = p.payload;
      }
    }
    std::vector<std::size_t> pairs;
    for (std::size_t pair = 0; pair < on_fronts.size(); ++pair) {
      if (on_fronts[pair] > 0) pairs.push_back(pair);
    }
    std::stable_sort(pairs.begin(), pairs.end(),
                     [&](std::size_t a, std::size_t b) { return on_fronts[a] > on_fronts[b]; });
    int explored = 0;
    // After the neighbours, the SM extremes of every slot (an isolated optimum at the edge,
    // e.g. a 1-SM gather launched early, has no measured neighbour to lead to it), tried at the
    // clock of the best front pair.
    const std::size_t n_pairs = pairs.size();
    for (std::size_t i = 0; i < n_pairs; ++i) pairs.push_back(pairs[i]);
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      if (explored >= n_explore || s.Full()) break;
      const std::size_t pair = pairs[i];
      const int64_t a = anchor[pair];
      const int sm = space.SmIndex(a), slot = space.SlotIndex(a);
      const int64_t base = a - sm * n_slots - slot;  // the anchor clock's first configuration
      std::vector<std::pair<int, int>> neighbours;
      if (i < n_pairs) {
        neighbours = {{sm - 1, slot}, {sm + 1, slot}};
        for (int l = 0; l < n_slots; ++l) {
          if (l != slot) neighbours.push_back({sm, l});
        }
      } else if (i == n_pairs && extremes) {
        for (int l = 0; l < n_slots; ++l) {
          neighbours.push_back({0, l});
          neighbours.push_back({n_sms - 1, l});
        }
      }
      for (const auto& [nsm, nslot] : neighbours) {
        if (explored >= n_explore || s.Full()) break;
        if (nsm < 0 || nsm >= n_sms || tried[nsm * n_slots + nslot] > 0) continue;
        const int64_t c = position[base + nsm * n_slots + nslot];
        if (c < 0 || s.Taken(static_cast<std::size_t>(c))) continue;
        s.Take(static_cast<std::size_t>(c), PickReason::kNeighbour);
        ++tried[nsm * n_slots + nslot];
        ++explored;
      }
    }
  }
}

std::vector<Pick> SelectPerClock(const AcquisitionInput& in, int batch_size) {
  Selector s(in, batch_size);
  const SearchSpace& space = *in.space;
  const std::size_t n = in.candidates.size();
  const int clocks = static_cast<int>(space.clocks_mhz().size());

  // 0. Knob-neighbour exploration, 25 % (at least one).
  const Normalizer real(in.measured_time_s, in.measured_energy_j);
  ExploreNeighbours(in, ExplorationPicks(s.k()), true, &s);

  // 1. Global HVI share (the overall frontier spans clocks).
  const int n_global = static_cast<int>(std::lround(0.3 * s.k()));
  s.TakeBelieverHvi(real, MeasuredFront(real, in.measured_time_s, in.measured_energy_j), n_global,
                    PickReason::kTotalHvi);

  // 2. Per-clock HVI share. Per clock, objectives are relative to that clock's best measured
  // time and energy, so an improvement of x % counts the same at every clock; the reference is
  // 1.1 x the clock's worst measured values.
  struct ClockState {
    double t_min = std::numeric_limits<double>::infinity();
    double e_min = std::numeric_limits<double>::infinity();
    double t_max = 0, e_max = 0;
    std::vector<pareto::Point> front;
    std::vector<std::size_t> candidates;
  };
  std::vector<ClockState> per_clock(clocks);
  for (std::size_t i = 0; i < in.measured.size(); ++i) {
    ClockState& cs = per_clock[space.ClockIndex(in.measured[i])];
    cs.t_min = std::min(cs.t_min, in.measured_time_s[i]);
    cs.e_min = std::min(cs.e_min, in.measured_energy_j[i]);
    cs.t_max = std::max(cs.t_max, in.measured_time_s[i]);
    cs.e_max = std::max(cs.e_max, in.measured_energy_j[i]);
  }
  for (std::size_t c = 0; c < n; ++c) {
    per_clock[space.ClockIndex(in.candidates[c])].candidates.push_back(c);
  }
  auto relative = [&](const ClockState& cs, double t, double e) {
    return pareto::Point{.time_s = t / cs.t_min, .energy_j = e / cs.e_min, .payload = -1};
  };
  for (int ci = 0; ci < clocks; ++ci) {
    ClockState& cs = per_clock[ci];
    if (!std::isfinite(cs.t_min)) {  // no measurement at this clock: anchor on predictions
      for (std::size_t c : cs.candidates) {
        cs.t_min = std::min(cs.t_min, in.predictions.time_s[c]);
        cs.e_min = std::min(cs.e_min, s.TotalEnergy(c));
        cs.t_max = std::max(cs.t_max, in.predictions.time_s[c]);
        cs.e_max = std::max(cs.e_max, s.TotalEnergy(c));
      }
    }
    std::vector<pareto::Point> points;
    for (std::size_t i = 0; i < in.measured.size(); ++i) {
      if (space.ClockIndex(in.measured[i]) != ci) continue;
      points.push_back(relative(cs, in.measured_time_s[i], in.measured_energy_j[i]));
    }
    cs.front = pareto::Filter(std::move(points));
  }
  const int n_clock = static_cast<int>(std::lround(0.5 * s.k()));
  int taken_clock = 0;
  while (taken_clock < n_clock && !s.Full()) {
    // One round: every clock proposes its best candidate; clocks are served in order of
    // their improvement, at most one pick per clock per round.
    struct Proposal {
      double hvi;
      int clock;
      std::size_t candidate;
    };
    std::vector<Proposal> proposals;
    for (int ci = 0; ci < clocks; ++ci) {
      const ClockState& cs = per_clock[ci];
      if (!std::isfinite(cs.t_min)) continue;
      const pareto::Point reference{.time_s = 1.1 * cs.t_max / cs.t_min,
                                    .energy_j = 1.1 * cs.e_max / cs.e_min};
      double best = 0.0;
      std::size_t best_c = n;
      for (std::size_t c : cs.candidates) {
        if (s.Taken(c)) continue;
        const double hvi =
            FrontHvi(cs.front, relative(cs, in.predictions.time_s[c], s.TotalEnergy(c)), reference);
        if (hvi > best) {
          best = hvi;
          best_c = c;
        }
      }
      if (best_c != n) proposals.push_back({best, ci, best_c});
    }
    if (proposals.empty()) break;
    std::stable_sort(proposals.begin(), proposals.end(),
                     [](const Proposal& a, const Proposal& b) { return a.hvi > b.hvi; });
    for (const Proposal& p : proposals) {
      if (taken_clock >= n_clock || s.Full()) break;
      s.Take(p.candidate, PickReason::kClockHvi);
      ClockState& cs = per_clock[p.clock];
      InsertIntoFront(&cs.front,
                      relative(cs, in.predictions.time_s[p.candidate], s.TotalEnergy(p.candidate)));
      ++taken_clock;
    }
  }

  // 3. The rest: most uncertain, relative units.
  s.TakeTop(s.RelativeUncertainty(), s.Remaining(), PickReason::kUncertain, false);
  return s.picks();
}

// A prior that fits the measurements (AcquisitionInput::trusted_prior): after the knob-neighbour
// exploration (AcquisitionInput::exploration_picks; untried neighbours of front pairs only, not
// the SM extremes: the calibrated model places the optimum), the batch goes to the predicted
// frontier, each pick by its total-energy HVI against the front of the measured configurations
// (at the surrogate's means when given, else as read: a candidate predicted equal to a measured
// configuration then adds nothing, where against a noisy reading it may seem to improve it by
// the noise) plus the earlier picks (believer), with the strict reference the frontier is judged by
// (the predicted front's extremes plus a tenth of its range, as ComparisonReference) rather
// than 1.1 x the measured maximum, so that the ends of the front and the gaps between its clocks
// count as they do in the result; no uncertainty share.
std::vector<Pick> SelectFrontier(const AcquisitionInput& in, int batch_size) {
  Selector s(in, batch_size);
  ExploreNeighbours(in, in.exploration_picks >= 0 ? in.exploration_picks : ExplorationPicks(s.k()),
                    false, &s);
  const std::size_t n = in.candidates.size();
  const bool denoised = !in.measured_predictions.time_s.empty();
  KAREUS_CHECK(!denoised || in.measured_predictions.time_s.size() == in.measured.size());
  std::vector<pareto::Point> measured;
  for (std::size_t i = 0; i < in.measured.size(); ++i) {
    if (denoised) {
      const double t = in.measured_predictions.time_s[i];
      measured.push_back(
          {.time_s = t,
           .energy_j = in.measured_predictions.dynamic_energy_j[i] + in.static_power_w * t});
    } else {
      measured.push_back({.time_s = in.measured_time_s[i], .energy_j = in.measured_energy_j[i]});
    }
  }
  std::vector<pareto::Point> all = measured;
  for (std::size_t c = 0; c < n; ++c) {
    all.push_back({.time_s = in.predictions.time_s[c], .energy_j = s.TotalEnergy(c)});
  }
  const std::vector<pareto::Point> predicted = pareto::Filter(std::move(all));
  const double t_lo = predicted.front().time_s, t_hi = predicted.back().time_s;
  const double e_lo = predicted.back().energy_j, e_hi = predicted.front().energy_j;
  const double t_range = std::max(t_hi - t_lo, 0.01 * t_hi);
  const double e_range = std::max(e_hi - e_lo, 0.01 * e_hi);
  const pareto::Point reference{.time_s = t_hi + 0.1 * t_range, .energy_j = e_hi + 0.1 * e_range};
  std::vector<pareto::Point> front = pareto::Filter(std::move(measured));
  while (!s.Full()) {
    double best = 0.0;
    std::size_t best_c = n;
    for (std::size_t c = 0; c < n; ++c) {
      if (s.Taken(c)) continue;
      const double hvi = FrontHvi(
          front, {.time_s = in.predictions.time_s[c], .energy_j = s.TotalEnergy(c)}, reference);
      if (hvi > best) {
        best = hvi;
        best_c = c;
      }
    }
    if (best_c == n) break;
    s.Take(best_c, PickReason::kFrontHvi);
    InsertIntoFront(&front,
                    {.time_s = in.predictions.time_s[best_c], .energy_j = s.TotalEnergy(best_c)});
  }
  // Nothing improves the predicted front any more: the most uncertain.
  s.TakeTop(s.RelativeUncertainty(), s.Remaining(), PickReason::kUncertain, false);
  return s.picks();
}

std::vector<Pick> SelectThompson(const AcquisitionInput& in, int batch_size) {
  Selector s(in, batch_size);
  const Normalizer real(in.measured_time_s, in.measured_energy_j);
  std::vector<pareto::Point> front = MeasuredFront(real, in.measured_time_s, in.measured_energy_j);
  for (int j = 0; !in.samples.empty() && !s.Full(); ++j) {
    const Predictions& draw = in.samples[static_cast<std::size_t>(j) % in.samples.size()];
    double best = 0.0;
    std::size_t best_k = in.sampled.size();
    for (std::size_t k = 0; k < in.sampled.size(); ++k) {
      if (s.Taken(in.sampled[k])) continue;
      const double t = draw.time_s[k];
      const double hvi =
          FrontHvi(front, real.Apply(t, draw.dynamic_energy_j[k] + in.static_power_w * t, -1),
                   real.reference);
      if (hvi > best) {
        best = hvi;
        best_k = k;
      }
    }
    if (best_k == in.sampled.size()) break;  // no draw improves: the rest by the mean
    s.Take(in.sampled[best_k], PickReason::kThompson);
    const double t = draw.time_s[best_k];
    InsertIntoFront(&front,
                    real.Apply(t, draw.dynamic_energy_j[best_k] + in.static_power_w * t, -1));
  }
  s.TakeBelieverHvi(real, std::move(front), s.Remaining(), PickReason::kTotalHvi);
  s.TakeTop(s.RelativeUncertainty(), s.Remaining(), PickReason::kUncertain, false);
  return s.picks();
}

}  // namespace
}  // namespace internal

const char* ToString(Strategy strategy) {
  switch (strategy) {
    case Strategy::kPublished:
      return "published";
    case Strategy::kPerClock:
      return "per-clock";
    case Strategy::kBeliever:
      return "believer";
    case Strategy::kThompson:
      return "thompson";
  }
  return "?";
}

Strategy StrategyFromString(const std::string& text) {
  if (text == "published") return Strategy::kPublished;
  if (text == "per-clock") return Strategy::kPerClock;
  if (text == "believer") return Strategy::kBeliever;
  if (text == "thompson") return Strategy::kThompson;
  ThrowInput("strategy", text, "must be one of: published, per-clock, believer, thompson");
}

const char* ToString(PickReason reason) {
  switch (reason) {
    case PickReason::kTotalHvi:
      return "total_hvi";
    case PickReason::kDynamicHvi:
      return "dynamic_hvi";
    case PickReason::kFastest:
      return "fastest";
    case PickReason::kUncertain:
      return "uncertain";
    case PickReason::kClockHvi:
      return "clock_hvi";
    case PickReason::kBackfill:
      return "backfill";
    case PickReason::kNeighbour:
      return "neighbour";
    case PickReason::kThompson:
      return "thompson";
    case PickReason::kFrontHvi:
      return "front_hvi";
    case PickReason::kClockFastest:
      return "clock_fastest";
  }
  return "?";
}

std::vector<Pick> SelectBatch(Strategy strategy, const AcquisitionInput& input, int batch_size) {
  KAREUS_CHECK(input.space != nullptr && !input.measured.empty());
  KAREUS_CHECK(input.predictions.time_s.size() == input.candidates.size());
  for (int clock : input.fastest_at_clocks) {
    KAREUS_CHECK(clock >= 0 && clock < static_cast<int>(input.space->clocks_mhz().size()))
        << "clock index " << clock;
  }
  if (input.trusted_prior) return internal::SelectFrontier(input, batch_size);
  switch (strategy) {
    case Strategy::kPublished:
      return internal::SelectPublished(input, batch_size);
    case Strategy::kPerClock:
      return internal::SelectPerClock(input, batch_size);
    case Strategy::kBeliever:
      return internal::SelectBeliever(input, batch_size);
    case Strategy::kThompson:
      return internal::SelectThompson(input, batch_size);
  }
  return {};
}

}  // namespace kareus::mobo
