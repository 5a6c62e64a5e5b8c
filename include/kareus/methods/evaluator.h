// SPDX-License-Identifier: Apache-2.0
// The evaluation of finished plans, a step of its own after planning: every instruction a
// frontier plan uses is run with the plan's knobs and the pipeline DAG gives the iteration's
// time and energy. On the emulator that is the noise-free re-run of every plan on the emulated
// cluster; on real hardware it is a measured run; where neither is possible the outputs say
// "not evaluated" and carry the planner's predictions — never a silent fallback to another
// source.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kareus/measure/backend.h"

namespace kareus::methods {

enum class EvaluationMode {
  kAuto,       // the backend's noise-free twin when it has one, else measured runs
  kNoiseFree,  // the noise-free twin (InputError when the backend has none)
  kMeasured,   // measured runs through the backend itself
  kNone,       // not evaluated: tables use the planner's predictions and say so
};
const char* ToString(EvaluationMode mode);  // "auto", "noise-free", "measured", "none"
EvaluationMode EvaluationModeFromString(const std::string& text);  // InputError

class Evaluator {
 public:
  virtual ~Evaluator() = default;
  // What the evaluation is, e.g. "noise-free re-run on emulator(v2,noise_free)", or
  // "not evaluated".
  virtual std::string Description() const = 0;
  // False when plans are not evaluated (EvaluateInstructions is then never called).
  virtual bool Evaluates() const = 0;
  // Per request, the instruction run with its knobs (per GPU).
  virtual std::vector<measure::Sample> EvaluateInstructions(
      const workload::WorkloadModel& model,
      const std::vector<measure::InstructionRequest>& batch) = 0;
  // Per request, the gradient-sync work run with its knobs (per GPU).
  virtual std::vector<measure::Sample> EvaluateGradientSync(
      const workload::WorkloadModel& model,
      const std::vector<measure::GradientSyncRequest>& batch) = 0;
  // Cost of the evaluations so far (GPU-seconds, as measure::Backend counts them).
  virtual double GpuSeconds() const = 0;
};

// The evaluator `mode` asks for on `backend` (which must outlive it). InputError when the mode
// cannot be had on this backend (noise-free without a twin).
std::unique_ptr<Evaluator> MakeEvaluator(measure::Backend& backend, EvaluationMode mode);

}  // namespace kareus::methods
