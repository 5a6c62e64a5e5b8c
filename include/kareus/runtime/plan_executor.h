// SPDX-License-Identifier: Apache-2.0
// Applies one pipeline stage's part of a plan (plan.json) in a training loop, through the hooks
// Zeus/Megatron users know: on_step_begin/end and on_instruction_begin/end("forward"|"backward")
// (reference/perseus-lowtime-zeus.md §B1, kareus-official.md §5.2). Each instruction begin
// checks the loop against the plan's order, asks the controller for the instruction's clock and
// exposes the instruction's comm-kernel knobs to the model code.
//
// Interleaved 1F1B: the loop may pass the model chunk it runs (Megatron-LM's model_chunk_id /
// vp_stage in forward_step_helper and backward_step_helper), which is then checked too; without
// it the executor follows the plan's order, chunks included. Data parallelism: the last
// backward of each chunk carries the gradient reduction's knobs (gradient_sync()), and
// on_gradient_sync_begin/end around Megatron's finalize_model_grads apply the clock of the
// stage's sync tail.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kareus/device/frequency_controller.h"
#include "kareus/plan/plan_file.h"
#include "kareus/runtime/timetable_follower.h"

namespace kareus::runtime {

struct PlanExecutorOptions {
  int stage = 0;  // this rank's pipeline stage (Megatron: pipeline-model-parallel rank)
  // Refuse a plan with a clock outside the GPU's supported range (needs a controller whose
  // GPU lists its clocks); in-range clocks are snapped to the nearest supported one anyway.
  bool check_supported_clocks = true;

  // The first invalid field, its value and the rule; nullopt when valid (the stage is checked
  // against the plan when the executor loads it).
  std::optional<OptionError> Validate() const;
};

// The frontier point chosen for a target iteration time (straggler mode).
struct FrontierChoice {
  int point_index = -1;             // index into FrontierFile::points
  plan::FrontierPoint point;        // its predicted time and energy
  std::filesystem::path plan_path;  // the plan file, joined with the frontier folder
  bool meets_target = true;         // false: every point is slower; the fastest was chosen
};

// Among the points that have a plan file (plan::FrontierPlanPath): the lowest-energy point whose
// time <= target_time_s (ties: the faster one). A target above every time picks the cheapest point
// overall, usually the slowest; a target below every time the fastest point, with meets_target =
// false (Perseus §B3: "min energy with T <= T'"). Throws InputError when no point has a plan file.
FrontierChoice ChooseFrontierPoint(const plan::FrontierFile& frontier, double target_time_s,
                                   const std::filesystem::path& frontier_folder);

// Not thread-safe: call the hooks from the training thread. SwapPlan may come from any thread.
class PlanExecutor {
 public:
  // `controller` may be null: the executor then checks the order and serves the knobs only;
  // otherwise it must outlive the executor.
  // Throws InputError when the stage is not in the plan or a clock is outside the GPU's range.
  PlanExecutor(plan::Plan plan, PlanExecutorOptions options,
               device::FrequencyController* controller = nullptr);
  // Reads and validates plan.json first (InputError on a bad file; no clock is touched).
  PlanExecutor(const std::filesystem::path& plan_path, PlanExecutorOptions options,
               device::FrequencyController* controller = nullptr);

  // Hooks. A mismatch with the plan throws InputError naming the step, the instruction index,
  // what the loop did and what the plan expected; the step is then abandoned (the next
  // instruction starts a new step) and the clocks go back to their default.
  void OnStepBegin();
  void OnStepEnd();  // all the stage's instructions must have run; applies a pending swap
  void OnInstructionBegin(std::string_view kind);  // "forward" | "backward"
  void OnInstructionEnd(std::string_view kind);
  // The same, with the model chunk the loop runs (checked against the plan).
  void OnInstructionBegin(std::string_view kind, int chunk);
  void OnInstructionEnd(std::string_view kind, int chunk);
  // Around the stage's data-parallel gradient sync after its last instruction (Megatron-LM:
  // finalize_model_grads, which waits for the buckets still in flight): applies the plan's
  // clock for the sync tail. A no-op when the plan has no gradient sync (DP = 1). Must come
  // after the step's last instruction and before on_step_end.
  void OnGradientSyncBegin();
  void OnGradientSyncEnd();

  // Where the loop stands. step(): the current (or next) step, 0-based. instruction_index():
  // the running instruction, or the next one between instructions.
  int step() const { return step_; }
  int instruction_index() const { return next_index_ - (in_instruction_ ? 1 : 0); }
  bool in_step() const { return in_step_; }
  bool in_instruction() const { return in_instruction_; }
  bool has_current_instruction() const { return current_index_ >= 0; }
  // The running instruction (or the last one begun); throws Error before the first (and right
  // after a plan swap).
  const plan::PlannedInstruction& current_instruction() const;
  // The comm knobs of `partition_type` in the current instruction; nullopt when the type has
  // none (sequential execution, or a type the plan does not tune: use the library default).
  std::optional<plan::PartitionKnobs> Knobs(std::string_view partition_type) const;
  // The gradient reduction the current instruction launches (the last backward of a chunk):
  // the reduction kernel's SMs and whether its buckets overlap the instruction; nullopt for
  // any other instruction or without data parallelism.
  std::optional<plan::InstructionGradientSync> gradient_sync() const;
  // This stage's sync tail (clock, SMs, prediction); nullopt without data parallelism.
  const std::optional<plan::StageGradientSync>& stage_gradient_sync() const {
    return stage_plan().gradient_sync;
  }
  bool in_gradient_sync() const { return in_gradient_sync_; }

  const plan::Plan& plan() const { return plan_; }
  const plan::PlannedStage& stage_plan() const { return plan_.stages[options_.stage]; }
  int stage() const { return options_.stage; }

  // Replaces the plan at the next step boundary (the end of the running step, or the begin of
  // the next one when called between steps). The new plan must
  // be for the same job: same stage count and microbatch count (InputError otherwise).
  void SwapPlan(plan::Plan plan);
  // Straggler mode: reads frontier_folder/frontier.json, chooses with ChooseFrontierPoint and
  // swaps to that point's plan file at the next step boundary.
  FrontierChoice SwapToFrontier(const std::filesystem::path& frontier_folder, double target_time_s);
  // Power-budget mode: reads frontier_folder/frontier.json and swaps, at the next step
  // boundary, to the fastest point whose average power per GPU fits the budget
  // (ChooseFrontierPointForPower, over this plan's GPUs), or to the lowest-power point with
  // fits = false. Called again with a higher budget it switches back to a faster plan.
  PowerChoice SwapToPowerBudget(const std::filesystem::path& frontier_folder,
                                double budget_w_per_gpu);
  bool swap_pending() const;

  // Timetable mode: at every step begin the executor asks `follower` what the step that begins
  // now should run (iterations done: `first_iteration` plus the steps since this call), swaps
  // to that plan before the step's first instruction, and for a pause waits in OnStepBegin
  // (clock.sleep_until) until the pause ends, then asks again. Executors of one job that share
  // a clock (or, across processes, rank 0's broadcast time) decide alike and move together.
  struct Clock {
    std::function<double()> now;              // unix seconds; default: the system clock
    std::function<void(double)> sleep_until;  // default: sleeps until that unix time
  };
  // Every plan of the timetable is checked here (InputError when one is for another job).
  void FollowTimetable(std::shared_ptr<const TimetableFollower> follower,
                       double first_iteration = 0.0, Clock clock = {});
  void StopFollowingTimetable();
  // The last decision (nullopt before the first step in timetable mode).
  const std::optional<TimetableStep>& timetable_step() const { return timetable_step_; }
  int timetable_swaps() const { return timetable_swaps_; }

 private:
  void Validate(const plan::Plan& plan) const;
  // InputError unless `plan` is for this job (stages, microbatches, schedule, chunks) and valid.
  void CheckSwappable(const plan::Plan& plan) const;
  [[noreturn]] void Mismatch(const std::string& what);
  void ApplyPendingSwap();
  void FollowTimetableStep();  // OnStepBegin's part in timetable mode
  void Begin(schedule::Direction kind, std::optional<int> chunk);
  void End(schedule::Direction kind, std::optional<int> chunk);

  plan::Plan plan_;
  PlanExecutorOptions options_;
  device::FrequencyController* controller_;
  int step_ = 0;
  int next_index_ = 0;  // index of the next instruction to begin within the step
  bool in_step_ = false;
  bool in_instruction_ = false;
  bool in_gradient_sync_ = false;
  int current_index_ = -1;

  mutable std::mutex swap_mutex_;
  std::optional<plan::Plan> pending_;

  std::shared_ptr<const TimetableFollower> follower_;
  Clock clock_;
  double first_iteration_ = 0.0;
  int follow_from_step_ = 0;
  std::filesystem::path timetable_plan_;  // the plan the timetable last swapped to
  std::optional<TimetableStep> timetable_step_;
  int timetable_swaps_ = 0;
};

}  // namespace kareus::runtime
