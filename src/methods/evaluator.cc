// SPDX-License-Identifier: Apache-2.0
#include "kareus/methods/evaluator.h"

#include "kareus/common/error.h"

namespace kareus::methods {

const char* ToString(EvaluationMode mode) {
  switch (mode) {
    case EvaluationMode::kAuto:
      return "auto";
    case EvaluationMode::kNoiseFree:
      return "noise-free";
    case EvaluationMode::kMeasured:
      return "measured";
    case EvaluationMode::kNone:
      return "none";
  }
  return "?";
}

EvaluationMode EvaluationModeFromString(const std::string& text) {
  for (EvaluationMode mode : {EvaluationMode::kAuto, EvaluationMode::kNoiseFree,
                              EvaluationMode::kMeasured, EvaluationMode::kNone}) {
    if (text == ToString(mode)) return mode;
  }
  ThrowInput("evaluation", text, "must be auto, noise-free, measured or none");
}

namespace internal {
namespace {

// Runs instructions on a backend: the noise-free twin (exact re-run) or the backend itself.
class BackendEvaluator final : public Evaluator {
 public:
  BackendEvaluator(measure::Backend& backend, std::unique_ptr<measure::Backend> twin)
      : twin_(std::move(twin)), backend_(twin_ ? *twin_ : backend) {}

  std::string Description() const override {
    return (twin_ ? "noise-free re-run on " : "measured runs on ") + backend_.Description();
  }
  bool Evaluates() const override { return true; }
  std::vector<measure::Sample> EvaluateInstructions(
      const workload::WorkloadModel& model,
      const std::vector<measure::InstructionRequest>& batch) override {
    return backend_.MeasureAll(model, batch);
  }
  std::vector<measure::Sample> EvaluateGradientSync(
      const workload::WorkloadModel& model,
      const std::vector<measure::GradientSyncRequest>& batch) override {
    return backend_.MeasureAll(model, batch);
  }
  double GpuSeconds() const override { return backend_.GpuSeconds(); }

 private:
  std::unique_ptr<measure::Backend> twin_;
  measure::Backend& backend_;
};

class NoEvaluator final : public Evaluator {
 public:
  std::string Description() const override { return "not evaluated: the planner's predictions"; }
  bool Evaluates() const override { return false; }
  std::vector<measure::Sample> EvaluateInstructions(
      const workload::WorkloadModel&, const std::vector<measure::InstructionRequest>&) override {
    KAREUS_CHECK(false) << "EvaluateInstructions on the 'not evaluated' evaluator";
    return {};
  }
  std::vector<measure::Sample> EvaluateGradientSync(
      const workload::WorkloadModel&, const std::vector<measure::GradientSyncRequest>&) override {
    KAREUS_CHECK(false) << "EvaluateGradientSync on the 'not evaluated' evaluator";
    return {};
  }
  double GpuSeconds() const override { return 0.0; }
};

}  // namespace
}  // namespace internal

std::unique_ptr<Evaluator> MakeEvaluator(measure::Backend& backend, EvaluationMode mode) {
  switch (mode) {
    case EvaluationMode::kNone:
      return std::make_unique<internal::NoEvaluator>();
    case EvaluationMode::kMeasured:
      return std::make_unique<internal::BackendEvaluator>(backend, nullptr);
    case EvaluationMode::kNoiseFree: {
      auto twin = backend.NoiseFreeTwin();
      if (!twin) {
        ThrowInput(
            "evaluation", "noise-free",
            "backend " + backend.Description() + " has no noise-free twin (use measured or none)");
      }
      return std::make_unique<internal::BackendEvaluator>(backend, std::move(twin));
    }
    case EvaluationMode::kAuto:
      return std::make_unique<internal::BackendEvaluator>(backend, backend.NoiseFreeTwin());
  }
  KAREUS_CHECK(false) << "unknown evaluation mode";
  return nullptr;
}

}  // namespace kareus::methods
