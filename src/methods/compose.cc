// SPDX-License-Identifier: Apache-2.0
#include "methods/compose.h"

#include <algorithm>
#include <cmath>

#include "kareus/common/error.h"

namespace kareus::methods::internal {

using schedule::Direction;

std::vector<TypeSamples> SamplesFromProfile(const mobo::ProfileResult& profile) {
  std::vector<TypeSamples> out;
  for (const auto& p : profile.partitions) {
    TypeSamples t{.type = p.type, .points = {}, .freq_mhz = {}};
    // The profiler's denoised estimate at each measured configuration (its final surrogate's
    // mean): selecting fronts on raw noisy readings keeps lucky draws (measured: median
    // hv_ratio 0.987 raw vs 0.998 denoised, docs/ARCHITECTURE.md §5).
    for (const auto& e : p.evaluations) {
      t.points.push_back({.time_s = e.estimate.time_s,
                          .energy_j = e.estimate.energy_j,
                          .sms = e.knobs.sms,
                          .slot = e.knobs.slot});
      t.freq_mhz.push_back(e.knobs.freq_mhz);
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<TypeSamples> ExhaustiveSamples(const workload::WorkloadModel& model,
                                           const std::vector<int>& clocks,
                                           measure::Backend& backend) {
  std::vector<TypeSamples> out;
  for (const auto& type : model.partition_types) {
    const std::vector<int> sms = type.tunable ? type.sm_choices : std::vector<int>{type.fixed_sms};
    const std::vector<std::string> slots =
        type.tunable ? type.launch_slots : std::vector<std::string>{type.fixed_slot};
    std::vector<measure::PartitionKnobs> batch;
    for (int f : clocks) {
      for (int s : sms) {
        for (const std::string& slot : slots)
          batch.push_back({.freq_mhz = f, .sms = s, .slot = slot});
      }
    }
    const std::vector<measure::Sample> samples = backend.MeasureAll(type, batch);
    TypeSamples t{.type = type.name, .points = {}, .freq_mhz = {}};
    for (std::size_t i = 0; i < batch.size(); ++i) {
      t.points.push_back({.time_s = samples[i].time_s,
                          .energy_j = samples[i].energy_j,
                          .sms = batch[i].sms,
                          .slot = batch[i].slot});
      t.freq_mhz.push_back(batch[i].freq_mhz);
    }
    out.push_back(std::move(t));
  }
  return out;
}

FixedWork MeasureFixedWork(const workload::WorkloadModel& model, const std::vector<int>& units,
                           const std::vector<int>& clocks, measure::Backend& backend) {
  FixedWork out;
  for (int f : clocks) {
    out.forward[f].assign(model.stages.size(), {0.0, 0.0});
    out.backward[f].assign(model.stages.size(), {0.0, 0.0});
  }
  for (int u : units) {
    const auto& unit = model.stages[static_cast<std::size_t>(u)];
    std::vector<measure::FixedWorkRequest> batch;
    for (int f : clocks) {
      for (Direction d : {Direction::kForward, Direction::kBackward}) {
        if (!workload::FixedWorkOps(model, unit.stage, unit.chunk, d).empty()) {
          batch.push_back(
              {.stage = unit.stage, .direction = d, .freq_mhz = f, .chunk = unit.chunk});
        }
      }
    }
    const std::vector<measure::Sample> samples = backend.MeasureAll(model, batch);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      auto& table = batch[i].direction == Direction::kForward ? out.forward : out.backward;
      table[batch[i].freq_mhz][static_cast<std::size_t>(u)] = {samples[i].time_s,
                                                               samples[i].energy_j};
    }
    out.measurements += static_cast<int64_t>(batch.size());
  }
  return out;
}

bool SweepScreen::IsAnchor(int freq_mhz) const {
  const auto [before, after] = Neighbours(freq_mhz);
  return before == freq_mhz && after == freq_mhz;
}

std::pair<int, int> SweepScreen::Neighbours(int freq_mhz) const {
  const auto it = std::find(clocks.begin(), clocks.end(), freq_mhz);
  KAREUS_CHECK(it != clocks.end()) << freq_mhz << " MHz is not a planning clock";
  const std::size_t i = static_cast<std::size_t>(it - clocks.begin());
  const std::size_t step = static_cast<std::size_t>(std::max(1, stride));
  const std::size_t last = clocks.size() - 1;
  if (i % step == 0 || i == last) return {freq_mhz, freq_mhz};
  const std::size_t before = i - i % step;
  return {clocks[before], clocks[std::min(before + step, last)]};
}

bool NearFront(double time_s, double effective_energy_j,
               const std::vector<std::pair<double, double>>& others, double margin) {
  const double t_tol = std::abs(time_s) * margin;
  const double e_tol = std::abs(effective_energy_j) * margin;
  for (const auto& [t, e] : others) {
    const bool no_worse = t <= time_s + t_tol && e <= effective_energy_j + e_tol;
    const bool better = t < time_s - t_tol || e < effective_energy_j - e_tol;
    if (no_worse && better) return false;
  }
  return true;
}

std::vector<plan::ClockInput> ClockInputs(
    const workload::WorkloadModel& model, int unit, Direction direction,
    const std::vector<TypeSamples>& samples, const FixedWork& fixed, const std::vector<int>& clocks,
    const std::map<int, std::pair<double, double>>& sequential) {
  const auto& stage_model = model.stages[static_cast<std::size_t>(unit)];
  const auto& ins = direction == Direction::kForward ? stage_model.forward : stage_model.backward;
  const std::size_t stage = static_cast<std::size_t>(unit);
  std::vector<plan::ClockInput> out;
  for (int f : clocks) {
    plan::ClockInput clock{.freq_mhz = f};
    const auto& work =
        (direction == Direction::kForward ? fixed.forward : fixed.backward).at(f)[stage];
    clock.nonpartition_time_s = work.first;
    clock.nonpartition_energy_j = work.second;
    if (const auto it = sequential.find(f); it != sequential.end()) {
      clock.has_sequential = true;
      clock.sequential_time_s = it->second.first;
      clock.sequential_energy_j = it->second.second;
    }
    bool complete = model.nanobatching;
    for (const auto& use : ins.uses) {
      const int with = use.count - use.without_collective;
      if (with == 0 || !complete) continue;
      const std::string& name = model.partition_types[use.type].name;
      plan::PartitionTypeInput input{.type = name, .count = with, .frontier = {}};
      for (const auto& t : samples) {
        if (t.type != name) continue;
        for (size_t i = 0; i < t.points.size(); ++i) {
          if (t.freq_mhz[i] == f) input.frontier.push_back(t.points[i]);
        }
      }
      if (input.frontier.empty()) {
        complete = false;
      } else {
        clock.partitions.push_back(std::move(input));
      }
    }
    if (!complete) clock.partitions.clear();
    if (complete || clock.has_sequential) out.push_back(std::move(clock));
  }
  return out;
}

}  // namespace kareus::methods::internal
