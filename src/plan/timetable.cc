// SPDX-License-Identifier: Apache-2.0
// Timetables over the iteration frontier (kareus/plan/timetable.h): the interval cut and the
// water-filling solver. Times and signal CSVs: timetable_text.cc; timetable.json:
// timetable_json.cc.
#include "kareus/plan/timetable.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "kareus/common/io.h"

namespace kareus::plan {
namespace {

constexpr double kJoulesPerKwh = 3.6e6;

// The lower convex hull of points (n, cost), as vertices sorted by n. `label` is what each
// vertex stands for (a plan index, or -1 for the pause / the finish).
struct Vertex {
  double n = 0.0;
  double cost = 0.0;
  int label = -1;
};

std::vector<Vertex> LowerHull(const std::vector<Vertex>& points) {
  std::vector<std::pair<double, double>> xy;
  for (const Vertex& p : points) xy.emplace_back(p.n, p.cost);
  std::vector<Vertex> hull;
  for (std::size_t i : LowerConvexHull(xy)) hull.push_back(points[i]);
  return hull;
}

bool Fits(const ScheduleProblem& problem, int p, const ScheduleInterval& interval) {
  return problem.plans[p].power_w() / problem.gpus <= interval.power_cap_w * (1.0 + 1e-12);
}

// Interval k's cost curve: held whole (`whole`) or the one the job finishes in.
std::vector<Vertex> CostCurve(const ScheduleProblem& problem, int k, bool whole) {
  const ScheduleInterval& interval = problem.intervals[k];
  const double length = interval.length();
  const double price = interval.signal / kJoulesPerKwh;
  std::vector<Vertex> points;
  if (!whole) {
    points.push_back({0.0, 0.0, -1});  // done at the interval's start
  } else if (problem.allow_pause) {
    points.push_back({0.0, price * length * problem.idle_power_w, -1});
  }
  for (int p = 0; p < static_cast<int>(problem.plans.size()); ++p) {
    if (!Fits(problem, p, interval)) continue;
    points.push_back(
        {length / problem.plans[p].time_s, price * length * problem.plans[p].power_w(), p});
  }
  return LowerHull(std::move(points));
}

// The solution for "finishes in interval m": for each interval k <= m, the iterations it runs;
// nullopt when no such timetable exists.
struct Fill {
  double cost = 0.0;
  std::vector<double> n;  // per interval 0..m
};

std::optional<Fill> FillFinishingIn(const ScheduleProblem& problem,
                                    const std::vector<std::vector<Vertex>>& whole,
                                    const std::vector<std::vector<Vertex>>& last, int m) {
  struct Segment {
    double slope;
    double length;
    int interval;
  };
  std::vector<Segment> segments;
  Fill fill;
  fill.n.assign(m + 1, 0.0);
  double base_n = 0.0;
  for (int k = 0; k <= m; ++k) {
    const std::vector<Vertex>& curve = k < m ? whole[k] : last[k];
    if (curve.empty()) return std::nullopt;  // held whole, no plan fits and no pause
    fill.n[k] = curve.front().n;
    fill.cost += curve.front().cost;
    base_n += curve.front().n;
    for (std::size_t i = 0; i + 1 < curve.size(); ++i) {
      const double dn = curve[i + 1].n - curve[i].n;
      segments.push_back({(curve[i + 1].cost - curve[i].cost) / dn, dn, k});
    }
  }
  double remaining = problem.iterations - base_n;
  // Without pauses the held intervals run at least their slowest plan: finishing in m then
  // takes more than N iterations when N is small (the job finishes earlier instead).
  if (remaining < -1e-9 * std::max(1.0, problem.iterations)) return std::nullopt;
  std::stable_sort(segments.begin(), segments.end(),
                   [](const Segment& a, const Segment& b) { return a.slope < b.slope; });
  for (const Segment& s : segments) {
    if (remaining <= 0.0) break;
    const double take = std::min(s.length, remaining);
    fill.n[s.interval] += take;
    fill.cost += take * s.slope;
    remaining -= take;
  }
  if (remaining > 1e-9 * std::max(1.0, problem.iterations)) return std::nullopt;
  return fill;
}

// A Fenwick tree of (length, cost) over segments in slope order: the cheapest `remaining`
// iterations of the active segments in O(log n).
class FenwickBySlope {
 public:
  explicit FenwickBySlope(std::vector<double> slopes)
      : slopes_(std::move(slopes)),
        length_(slopes_.size() + 1, 0.0),
        cost_(slopes_.size() + 1, 0.0) {
    while ((top_ << 1) <= slopes_.size()) top_ <<= 1;
  }
  void Add(std::size_t i, double length) {  // i: slope rank; length < 0 removes
    total_ += length;
    for (std::size_t j = i + 1; j < length_.size(); j += j & (~j + 1)) {
      length_[j] += length;
      cost_[j] += length * slopes_[i];
    }
  }
  double total() const { return total_; }
  // The cost of the cheapest `remaining` iterations (remaining <= total()).
  double CheapestCost(double remaining) const {
    std::size_t pos = 0;
    double length = 0.0, cost = 0.0;
    for (std::size_t step = top_; step > 0; step >>= 1) {
      const std::size_t next = pos + step;
      if (next < length_.size() && length + length_[next] < remaining) {
        pos = next;
        length += length_[next];
        cost += cost_[next];
      }
    }
    // Segments 0..pos-1 are taken whole; the one at rank pos (if any) in part.
    if (pos < slopes_.size()) cost += (remaining - length) * slopes_[pos];
    return cost;
  }

 private:
  std::vector<double> slopes_;
  std::vector<double> length_, cost_;
  std::size_t top_ = 1;
  double total_ = 0.0;
};

}  // namespace

namespace internal {

std::vector<std::optional<double>> FinishIntervalCosts(const ScheduleProblem& problem,
                                                       bool incremental) {
  const int num = static_cast<int>(problem.intervals.size());
  std::vector<std::vector<Vertex>> whole(num), last(num);
  for (int k = 0; k < num; ++k) {
    whole[k] = CostCurve(problem, k, /*whole=*/true);
    last[k] = CostCurve(problem, k, /*whole=*/false);
  }
  std::vector<std::optional<double>> costs(num);
  if (!incremental) {  // every finish interval filled from scratch: O(K^2 H log(K H))
    for (int m = 0; m < num; ++m) {
      if (auto fill = FillFinishingIn(problem, whole, last, m)) costs[m] = fill->cost;
      if (whole[m].empty()) break;
    }
    return costs;
  }
  // Every hull segment of every interval, both curves, ranked by slope once; moving the finish
  // from m to m + 1 turns interval m's "last" segments off and its "whole" ones on, and adds
  // interval m + 1's "last" ones: O(K H log(K H)) in all.
  struct Segment {
    double slope, length;
  };
  std::vector<Segment> segments;
  std::vector<std::size_t> first_whole(num + 1), first_last(num + 1);
  for (int k = 0; k < num; ++k) {
    for (const auto* curve : {&whole[k], &last[k]}) {
      (curve == &whole[k] ? first_whole : first_last)[k] = segments.size();
      for (std::size_t i = 0; i + 1 < curve->size(); ++i) {
        const double dn = (*curve)[i + 1].n - (*curve)[i].n;
        segments.push_back({((*curve)[i + 1].cost - (*curve)[i].cost) / dn, dn});
      }
    }
  }
  std::vector<std::size_t> order(segments.size()), rank(segments.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return segments[a].slope < segments[b].slope;
  });
  std::vector<double> slopes;
  for (std::size_t r = 0; r < order.size(); ++r) {
    rank[order[r]] = r;
    slopes.push_back(segments[order[r]].slope);
  }
  FenwickBySlope tree(std::move(slopes));
  const auto toggle = [&](const std::vector<Vertex>& curve, std::size_t first, double sign) {
    for (std::size_t i = 0; i + 1 < curve.size(); ++i) {
      tree.Add(rank[first + i], sign * segments[first + i].length);
    }
  };
  const double tolerance = 1e-9 * std::max(1.0, problem.iterations);
  double base_cost = 0.0, base_n = 0.0;  // the held intervals before m at their curves' start
  for (int m = 0; m < num; ++m) {
    if (m > 0) {  // interval m - 1: from finishing to held whole
      toggle(last[m - 1], first_last[m - 1], -1.0);
      toggle(whole[m - 1], first_whole[m - 1], +1.0);
      base_cost += whole[m - 1].front().cost;
      base_n += whole[m - 1].front().n;
    }
    toggle(last[m], first_last[m], +1.0);
    const double remaining = problem.iterations - base_n;  // last[m] starts at (0, 0)
    if (remaining >= -tolerance && remaining <= tree.total() + tolerance) {
      costs[m] =
          base_cost + (remaining > 0 ? tree.CheapestCost(std::min(remaining, tree.total())) : 0.0);
    }
    if (whole[m].empty()) break;
  }
  return costs;
}

}  // namespace internal

namespace {

// Interval k running n iterations on its curve: the two hull vertices around n and the share of
// the interval each gets.
TimetableInterval Realize(const ScheduleProblem& problem, int k, bool whole,
                          const std::vector<Vertex>& curve, double n) {
  TimetableInterval out;
  out.interval = problem.intervals[k];
  const double length = out.interval.length();
  std::size_t i = 0;
  while (i + 1 < curve.size() && curve[i + 1].n < n) ++i;
  const Vertex& a = curve[i];
  const Vertex* b = i + 1 < curve.size() ? &curve[i + 1] : nullptr;
  double share_b = 0.0;
  if (b != nullptr && b->n > a.n) share_b = std::clamp((n - a.n) / (b->n - a.n), 0.0, 1.0);
  const auto add = [&](int label, double share) {
    const double seconds = share * length;
    if (seconds <= 0.0) return;
    if (label < 0) {
      if (whole) out.pause_s += seconds;  // in the last interval: done, nothing drawn
      return;
    }
    const SchedulePlan& plan = problem.plans[label];
    TimetableEntry e;
    e.plan = label;
    e.seconds = seconds;
    e.iterations = seconds / plan.time_s;
    e.energy_j = e.iterations * plan.energy_j;
    e.cost = e.energy_j / kJoulesPerKwh * out.interval.signal;
    out.entries.push_back(e);
  };
  // The slower plan first, then the faster (any order costs the same).
  if (b != nullptr && b->label >= 0 && a.label >= 0 &&
      problem.plans[b->label].time_s > problem.plans[a.label].time_s) {
    add(b->label, share_b);
    add(a.label, 1.0 - share_b);
  } else {
    add(a.label, 1.0 - share_b);
    if (b != nullptr) add(b->label, share_b);
  }
  out.energy_j = out.pause_s * problem.idle_power_w;
  for (const TimetableEntry& e : out.entries) out.energy_j += e.energy_j;
  out.cost = out.energy_j / kJoulesPerKwh * out.interval.signal;
  return out;
}

}  // namespace

std::vector<std::size_t> LowerConvexHull(const std::vector<std::pair<double, double>>& points) {
  std::vector<std::size_t> order(points.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return points[a] != points[b] ? points[a] < points[b] : a < b;
  });
  std::vector<std::size_t> hull;
  for (std::size_t i : order) {
    const auto& p = points[i];
    if (!hull.empty() && points[hull.back()].first == p.first) continue;  // the lower came first
    while (hull.size() >= 2) {
      const auto& a = points[hull[hull.size() - 2]];
      const auto& b = points[hull.back()];
      // b on or above the segment a-p: not a vertex of the lower hull.
      const double cross =
          (b.first - a.first) * (p.second - a.second) - (b.second - a.second) * (p.first - a.first);
      if (cross > 0.0) break;
      hull.pop_back();
    }
    hull.push_back(i);
  }
  return hull;
}

std::vector<std::size_t> BudgetPlanIndices(const std::vector<double>& time_s,
                                           const std::vector<double>& energy_j,
                                           const std::vector<double>& static_energy_j) {
  const std::size_t n = time_s.size();
  if (n == 0) return {};
  std::vector<std::pair<double, double>> points;
  double static_power = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    points.emplace_back(1.0 / time_s[i], energy_j[i] / time_s[i]);
    static_power += static_energy_j[i] / time_s[i] / static_cast<double>(n);
  }
  std::vector<std::size_t> out;
  for (const double origin_power : {static_power, 0.0}) {
    std::vector<std::pair<double, double>> with_origin = points;
    with_origin.emplace_back(0.0, origin_power);
    for (std::size_t v : LowerConvexHull(with_origin)) {
      if (v < n) out.push_back(v);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::optional<OptionError> ScheduleProblem::Validate() const {
  if (plans.empty()) return OptionError{"plans", "0 plans", "need at least one plan with a file"};
  for (std::size_t p = 0; p < plans.size(); ++p) {
    const SchedulePlan& plan = plans[p];
    if (!(plan.time_s > 0) || !std::isfinite(plan.time_s) || !(plan.energy_j > 0) ||
        !std::isfinite(plan.energy_j)) {
      return OptionError{fmt::format("plans[{}]", p), plan.name,
                         fmt::format("time_s = {}, energy_j = {}: both must be finite and > 0",
                                     plan.time_s, plan.energy_j)};
    }
  }
  if (!(idle_power_w >= 0) || !std::isfinite(idle_power_w)) {
    return OptionError{"idle_power_w", fmt::format("{}", idle_power_w), "must be finite and >= 0"};
  }
  if (gpus < 1) return OptionError{"gpus", std::to_string(gpus), "must be >= 1"};
  if (!(iterations > 0) || !std::isfinite(iterations)) {
    return OptionError{"iterations", fmt::format("{}", iterations), "must be > 0"};
  }
  if (intervals.empty()) return OptionError{"intervals", "0", "need at least one interval"};
  for (std::size_t k = 0; k < intervals.size(); ++k) {
    const ScheduleInterval& in = intervals[k];
    if (!(in.end > in.start) || (k > 0 && in.start != intervals[k - 1].end) || !(in.signal >= 0) ||
        !std::isfinite(in.signal) || !(in.power_cap_w > 0)) {
      return OptionError{fmt::format("intervals[{}]", k), FormatUtcTime(in.start),
                         "intervals must be contiguous, of positive length, with a finite "
                         "signal >= 0 and a cap > 0"};
    }
  }
  return std::nullopt;
}

std::vector<ScheduleInterval> MakeIntervals(const Signal& signal, const std::optional<Signal>& caps,
                                            double start, double deadline,
                                            const std::string& signal_field,
                                            const std::string& signal_name) {
  if (start < signal.time.front()) {
    ThrowInput(signal_field, signal_name,
               "starts at " + FormatUtcTime(signal.time.front()) + ", after the job's start " +
                   FormatUtcTime(start));
  }
  if (signal.end < deadline) {
    ThrowInput(signal_field, signal_name,
               "covers up to " + FormatUtcTime(signal.end) + ", before the deadline " +
                   FormatUtcTime(deadline) + ": it must cover the whole horizon");
  }
  std::vector<double> cuts = {start, deadline};
  for (double t : signal.time) {
    if (t > start && t < deadline) cuts.push_back(t);
  }
  if (caps) {
    for (double t : caps->time) {
      if (t > start && t < deadline) cuts.push_back(t);
    }
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  // The value of a step function at t (the last sample at or before t).
  const auto at = [](const Signal& s, double t, double before) {
    const auto it = std::upper_bound(s.time.begin(), s.time.end(), t);
    if (it == s.time.begin()) return before;
    return s.value[static_cast<std::size_t>(it - s.time.begin()) - 1];
  };
  std::vector<ScheduleInterval> intervals;
  for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
    ScheduleInterval in;
    in.start = cuts[i];
    in.end = cuts[i + 1];
    in.signal = at(signal, in.start, signal.value.front());
    if (caps) in.power_cap_w = at(*caps, in.start, std::numeric_limits<double>::infinity());
    intervals.push_back(in);
  }
  return intervals;
}

std::optional<double> EarliestFinish(const ScheduleProblem& problem, double* blocked_at) {
  double remaining = problem.iterations;
  for (const ScheduleInterval& in : problem.intervals) {
    double fastest = 0.0;
    for (int p = 0; p < static_cast<int>(problem.plans.size()); ++p) {
      if (Fits(problem, p, in)) fastest = std::max(fastest, 1.0 / problem.plans[p].time_s);
    }
    if (fastest == 0.0) {
      if (!problem.allow_pause) {
        if (blocked_at != nullptr) *blocked_at = in.start;
        return std::nullopt;
      }
      continue;
    }
    const double possible = fastest * in.length();
    if (possible >= remaining) return in.start + remaining / fastest;
    remaining -= possible;
  }
  // Past the deadline: at the last interval's conditions (the signal ends there).
  const ScheduleInterval& last = problem.intervals.back();
  double fastest = 0.0;
  for (int p = 0; p < static_cast<int>(problem.plans.size()); ++p) {
    if (Fits(problem, p, last)) fastest = std::max(fastest, 1.0 / problem.plans[p].time_s);
  }
  if (fastest == 0.0) {
    if (blocked_at != nullptr) *blocked_at = last.start;
    return std::nullopt;
  }
  return last.end + remaining / fastest;
}

std::optional<ConstantPlanCost> ConstantPlan(const ScheduleProblem& problem, int p) {
  const SchedulePlan& plan = problem.plans[p];
  ConstantPlanCost out;
  out.plan = p;
  // In seconds from the start: unix times carry only ~1e-7 s of precision.
  const double busy = problem.iterations * plan.time_s;
  out.finish = problem.start() + busy;
  if (busy > (problem.deadline() - problem.start()) * (1.0 + 1e-12)) return std::nullopt;
  for (const ScheduleInterval& in : problem.intervals) {
    const double overlap = std::min(in.end - problem.start(), busy) - (in.start - problem.start());
    if (overlap <= 0) break;
    if (!Fits(problem, p, in)) return std::nullopt;
    const double energy = overlap * plan.power_w();
    out.energy_j += energy;
    out.cost += energy / kJoulesPerKwh * in.signal;
  }
  return out;
}

Timetable SolveSchedule(const ScheduleProblem& problem) {
  ThrowIfInvalid(problem.Validate());
  double blocked_at = 0.0;
  const std::optional<double> earliest = EarliestFinish(problem, &blocked_at);
  if (!earliest) {
    double lowest = std::numeric_limits<double>::infinity();
    for (const SchedulePlan& plan : problem.plans)
      lowest = std::min(lowest, plan.power_w() / problem.gpus);
    ThrowInput("--power-cap", "the cap from " + FormatUtcTime(blocked_at),
               fmt::format("is below every plan's power (the lowest is {:.1f} W per GPU) and "
                           "pauses are not allowed (--no-pause), so the job cannot go on there",
                           lowest));
  }
  if (*earliest > problem.deadline() + 1e-6) {
    ThrowInput("--deadline", FormatUtcTime(problem.deadline()),
               fmt::format("too early: {} iterations finish at the earliest at {} (the fastest "
                           "plan each interval's cap allows)",
                           problem.iterations, FormatUtcTime(*earliest)));
  }
  const int num = static_cast<int>(problem.intervals.size());
  std::vector<std::vector<Vertex>> whole(num), last(num);
  for (int k = 0; k < num; ++k) {
    whole[k] = CostCurve(problem, k, /*whole=*/true);
    last[k] = CostCurve(problem, k, /*whole=*/false);
  }
  // The cheapest finish interval (incrementally), then its fill.
  const std::vector<std::optional<double>> costs = internal::FinishIntervalCosts(problem, true);
  int best_m = -1;
  for (int m = 0; m < num; ++m) {
    if (costs[m] && (best_m < 0 || *costs[m] < *costs[best_m])) best_m = m;
  }
  KAREUS_CHECK(best_m >= 0) << "no timetable although the earliest finish is in time";
  const std::optional<Fill> best = FillFinishingIn(problem, whole, last, best_m);
  KAREUS_CHECK(best.has_value()) << "the cheapest finish interval has no fill";
  Timetable out;
  for (int k = 0; k <= best_m; ++k) {
    out.intervals.push_back(
        Realize(problem, k, k < best_m, k < best_m ? whole[k] : last[k], best->n[k]));
  }
  for (const TimetableInterval& in : out.intervals) {
    out.total_cost += in.cost;
    out.total_energy_j += in.energy_j;
    double busy = in.pause_s;
    for (const TimetableEntry& e : in.entries) {
      out.total_iterations += e.iterations;
      busy += e.seconds;
    }
    out.finish = in.interval.start + busy;
  }
  for (int p = 0; p < static_cast<int>(problem.plans.size()); ++p) {
    const auto constant = ConstantPlan(problem, p);
    if (constant && (!out.best_constant || constant->cost < out.best_constant->cost)) {
      out.best_constant = constant;
    }
  }
  return out;
}

}  // namespace kareus::plan
