// SPDX-License-Identifier: Apache-2.0
#include "kareus/plan/compose.h"

#include <cmath>
#include <string>

#include "kareus/common/error.h"
#include "kareus/pareto/pareto.h"

namespace kareus::plan {
namespace {

void CheckValue(const std::string& field, double value) {
  if (!std::isfinite(value) || value < 0.0)
    ThrowInput(field, Describe(value), "must be finite and >= 0");
}

// A partial composition: a point in (time, effective energy) and the chosen point per type.
struct Partial {
  pareto::Point point;
  std::vector<int> choice;
};

}  // namespace

std::optional<OptionError> ComposeOptions::Validate() const {
  if (!(p_static_w >= 0.0) || !std::isfinite(p_static_w)) {
    return OptionError{"p_static_w", Describe(p_static_w), "must be a finite number >= 0 (W)"};
  }
  if (!(epsilon >= 0.0) || !std::isfinite(epsilon)) {
    return OptionError{"epsilon", Describe(epsilon), "must be a finite number >= 0"};
  }
  return std::nullopt;
}

ComposeResult ComposeInstruction(const std::vector<ClockInput>& clocks,
                                 const ComposeOptions& options) {
  ThrowIfInvalid(options.Validate());
  if (clocks.empty()) ThrowInput("clocks", "[]", "an instruction needs at least one clock");
  const double p = options.p_static_w;
  auto effective = [p](double time_s, double energy_j) { return energy_j - p * time_s; };
  ComposeResult result;
  std::vector<InstructionOption> candidates;
  for (const ClockInput& clock : clocks) {
    const std::string where = "clock " + std::to_string(clock.freq_mhz) + " MHz";
    if (clock.freq_mhz <= 0) ThrowInput("freq_mhz", Describe(clock.freq_mhz), "must be > 0");
    CheckValue(where + " nonpartition_time_s", clock.nonpartition_time_s);
    CheckValue(where + " nonpartition_energy_j", clock.nonpartition_energy_j);
    ++result.summary.clocks;
    if (!clock.partitions.empty()) {
      std::vector<Partial> partial{
          {{.time_s = clock.nonpartition_time_s,
            .energy_j = effective(clock.nonpartition_time_s, clock.nonpartition_energy_j)},
           {}}};
      for (const PartitionTypeInput& type : clock.partitions) {
        const std::string field = where + " partition " + type.type;
        if (type.count < 1) ThrowInput(field + " count", Describe(type.count), "must be >= 1");
        if (type.frontier.empty()) ThrowInput(field + " frontier", "[]", "must not be empty");
        // One knob setting for all copies: the type contributes count x one point.
        std::vector<pareto::Point> scaled;
        for (std::size_t i = 0; i < type.frontier.size(); ++i) {
          const PartitionPoint& q = type.frontier[i];
          CheckValue(field + " time_s", q.time_s);
          CheckValue(field + " energy_j", q.energy_j);
          if (q.sms < 1) ThrowInput(field + " sms", Describe(q.sms), "must be >= 1");
          scaled.push_back({.time_s = type.count * q.time_s,
                            .energy_j = type.count * effective(q.time_s, q.energy_j),
                            .payload = static_cast<int64_t>(i)});
        }
        scaled = pareto::Filter(std::move(scaled));
        std::vector<pareto::Point> left;
        for (const Partial& part : partial) left.push_back(part.point);
        const pareto::SumResult sum =
            pareto::MinPlusSum(left, scaled, {.epsilon = options.epsilon});
        std::vector<Partial> next;
        for (std::size_t k = 0; k < sum.points.size(); ++k) {
          const auto [i, j] = sum.sources[k];
          Partial part{sum.points[k], partial[i].choice};
          part.choice.push_back(static_cast<int>(scaled[j].payload));
          next.push_back(std::move(part));
        }
        partial = std::move(next);
      }
      for (const Partial& part : partial) {
        InstructionOption option{.time_s = part.point.time_s,
                                 .energy_j = part.point.energy_j + p * part.point.time_s,
                                 .freq_mhz = clock.freq_mhz,
                                 .mode = ExecutionMode::kNanobatched};
        for (std::size_t t = 0; t < clock.partitions.size(); ++t) {
          const PartitionPoint& q = clock.partitions[t].frontier[part.choice[t]];
          option.partitions.push_back(
              {.type = clock.partitions[t].type, .sms = q.sms, .slot = q.slot});
        }
        candidates.push_back(std::move(option));
      }
    }
    if (clock.has_sequential) {
      CheckValue(where + " sequential_time_s", clock.sequential_time_s);
      CheckValue(where + " sequential_energy_j", clock.sequential_energy_j);
      candidates.push_back({.time_s = clock.sequential_time_s,
                            .energy_j = clock.sequential_energy_j,
                            .freq_mhz = clock.freq_mhz,
                            .mode = ExecutionMode::kSequential});
    }
  }
  if (candidates.empty()) {
    ThrowInput("clocks", Describe(clocks.size()) + " clocks",
               "need partitions or a sequential run at one clock at least");
  }
  result.summary.candidates = static_cast<int>(candidates.size());
  std::vector<pareto::Point> points;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    points.push_back({.time_s = candidates[i].time_s,
                      .energy_j = effective(candidates[i].time_s, candidates[i].energy_j),
                      .payload = static_cast<int64_t>(i)});
  }
  for (const pareto::Point& kept : pareto::Filter(std::move(points))) {
    result.options.push_back(candidates[static_cast<std::size_t>(kept.payload)]);
  }
  result.summary.options = static_cast<int>(result.options.size());
  return result;
}

}  // namespace kareus::plan
