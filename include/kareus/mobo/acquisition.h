// SPDX-License-Identifier: Apache-2.0
// Batch acquisition: which unmeasured configurations to measure next, from surrogate
// predictions. Exact 2-D hypervolume improvement on normalized objectives; the published
// four-pass split (reference/kareus-official.md §3.4-3.5) and Kareus's per-clock variant.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kareus/mobo/search_space.h"
#include "kareus/mobo/surrogate.h"

namespace kareus::mobo {

enum class Strategy {
  // Published: 40 % total-energy HVI, 20 % dynamic-energy HVI, 20 % fastest predicted, rest
  // most uncertain (raw std_E + std_T), backfill by max HVI. Top-k per pass, no batch update.
  kPublished,
  // Kareus default: composition uses every clock's (time, energy) frontier, so a share of the
  // batch tries untried (SMs, slot) neighbours of front points, a share goes to per-clock HVI
  // (relative units per clock, round robin over clocks ranked by
  // their best improvement), a share to global HVI, the rest to relative uncertainty. Each
  // pick is added to its front as if measured at its prediction ("kriging believer") so a
  // batch does not pile onto one spot.
  kPerClock,
  // Global total-energy HVI with the believer update and an uncertainty share, no per-clock
  // pass: isolates what the per-clock pass adds.
  kBeliever,
  // Thompson sampling (TSEMO, Bradford et al. 2018, with exact HVI): each pick maximizes the
  // total-energy HVI of one joint posterior draw over the measured front plus the earlier
  // picks at their drawn values, so the batch explores where the surrogate is unsure whether
  // a configuration is on the frontier, in proportion to that chance.
  kThompson,
};
const char* ToString(Strategy strategy);
Strategy StrategyFromString(const std::string& text);  // InputError lists the names

// What the acquisition sees: the measured configurations and the predictions for the rest.
struct AcquisitionInput {
  const SearchSpace* space = nullptr;
  std::vector<int64_t> measured;                  // space indices
  std::vector<double> measured_time_s;            // per measured
  std::vector<double> measured_energy_j;          // total
  std::vector<double> measured_dynamic_energy_j;  // total - P_static x time
  std::vector<int64_t> candidates;                // unmeasured space indices
  Predictions predictions;                        // per candidate (time, dynamic energy)
  double static_power_w = 0.0;                    // derives predicted total energy
  // Thompson: joint posterior draws (Surrogate::Sample) at the candidates of positions
  // `sampled` (into `candidates`); without draws the strategy falls back to the believer.
  std::vector<std::size_t> sampled;
  std::vector<Predictions> samples;
  // Set by the profiler when the (calibrated) prior fits the measurements so far
  // (ProfileOptions::prior_front): every strategy then picks along the predicted frontier,
  // judged with the comparison's strict reference, after `exploration_picks` knob-neighbour
  // picks (-1: a quarter of the batch, at least one).
  bool trusted_prior = false;
  int exploration_picks = -1;
  // The surrogate's means at the measured configurations (per measured; empty: the readings).
  // With a trusted prior the front to improve is made of these, so that a candidate the
  // surrogate predicts equal to a measured configuration (an equivalent knob setting, or the
  // same point seen through measurement noise) adds nothing.
  Predictions measured_predictions;
  // Clock indices (into space->clocks_mhz()) whose fastest configuration must be measured,
  // before any strategy picks: composition offers an instruction at a clock only where every
  // partition type it runs has a measurement, and its fastest option there is made of each
  // type's fastest configuration at that clock. Per listed clock the candidate predicted
  // fastest there is taken (reason clock_fastest), unless a measured configuration at that
  // clock is predicted (measured_predictions when given, else as read) at least as fast.
  std::vector<int> fastest_at_clocks;
};

// Why a configuration was picked (the published JSONL flags, §3.1).
enum class PickReason {
  kTotalHvi,
  kDynamicHvi,
  kFastest,
  kUncertain,
  kClockHvi,
  kBackfill,
  kNeighbour,     // an untried (SMs, slot) pair next to a front point's
  kThompson,      // best HVI under a posterior draw
  kFrontHvi,      // a trusted prior: HVI of the predicted front, strict reference
  kClockFastest,  // the predicted fastest configuration at a clock composition relies on
};
const char* ToString(PickReason reason);

struct Pick {
  int64_t index = 0;  // space index
  PickReason reason = PickReason::kBackfill;
};

// Picks min(batch_size, candidates) distinct candidates. Deterministic.
std::vector<Pick> SelectBatch(Strategy strategy, const AcquisitionInput& input, int batch_size);

}  // namespace kareus::mobo
