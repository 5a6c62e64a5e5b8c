// SPDX-License-Identifier: Apache-2.0
#include "kareus/runtime/plan_executor.h"

#include <chrono>
#include <limits>
#include <thread>

#include <fmt/format.h>

#include "kareus/plan/check.h"

namespace kareus::runtime {
namespace {

std::string Describe(const plan::PlannedInstruction& instruction) {
  if (instruction.chunk == 0) {
    return fmt::format("{} (microbatch {})", schedule::ToString(instruction.kind),
                       instruction.microbatch);
  }
  return fmt::format("{} (microbatch {}, chunk {})", schedule::ToString(instruction.kind),
                     instruction.microbatch, instruction.chunk);
}

schedule::Direction ParseKind(std::string_view kind) {
  return schedule::DirectionFromString(std::string(kind));
}

// "backward" or "backward (chunk 1)": what the loop said it began.
std::string Began(schedule::Direction kind, std::optional<int> chunk) {
  if (!chunk) return schedule::ToString(kind);
  return fmt::format("{} (chunk {})", schedule::ToString(kind), *chunk);
}

}  // namespace

FrontierChoice ChooseFrontierPoint(const plan::FrontierFile& frontier, double target_time_s,
                                   const std::filesystem::path& frontier_folder) {
  FrontierChoice best;
  int fastest = -1;
  for (int i = 0; i < static_cast<int>(frontier.points.size()); ++i) {
    const plan::FrontierPoint& point = frontier.points[i];
    if (plan::FrontierPlanPath(point).empty()) continue;
    if (fastest < 0 || point.time_s < frontier.points[fastest].time_s) fastest = i;
    if (point.time_s > target_time_s) continue;
    const bool better = best.point_index < 0 || point.energy_j < best.point.energy_j ||
                        (point.energy_j == best.point.energy_j && point.time_s < best.point.time_s);
    if (better) {
      best.point_index = i;
      best.point = point;
    }
  }
  if (fastest < 0) {
    ThrowInput("frontier.points", fmt::format("{} points", frontier.points.size()),
               "no point has a plan file (plan_path or plan_index); nothing to swap to");
  }
  if (best.point_index < 0) {  // the target is faster than any plan: run as fast as we can
    best.point_index = fastest;
    best.point = frontier.points[fastest];
    best.meets_target = false;
  }
  best.plan_path = frontier_folder / plan::FrontierPlanPath(best.point);
  return best;
}

std::optional<OptionError> PlanExecutorOptions::Validate() const {
  if (stage < 0) return OptionError{"stage", std::to_string(stage), "must be >= 0"};
  return std::nullopt;
}

PlanExecutor::PlanExecutor(plan::Plan plan, PlanExecutorOptions options,
                           device::FrequencyController* controller)
    : options_(options), controller_(controller) {
  ThrowIfInvalid(options_.Validate());
  if (options_.stage < 0 || options_.stage >= static_cast<int>(plan.stages.size())) {
    ThrowInput("stage", std::to_string(options_.stage),
               fmt::format("this rank's pipeline stage must be in 0..{} (the plan has {} stages)",
                           static_cast<int>(plan.stages.size()) - 1, plan.stages.size()));
  }
  Validate(plan);
  plan_ = std::move(plan);
}

PlanExecutor::PlanExecutor(const std::filesystem::path& plan_path, PlanExecutorOptions options,
                           device::FrequencyController* controller) try
    : PlanExecutor(plan::ReadPlanFile(plan_path), options, controller) {
} catch (const InputError& e) {
  // ReadPlanFile names the file already; the stage and clock checks do not.
  const std::string message = e.what();
  if (message.rfind(plan_path.string(), 0) == 0) throw;
  throw InputError(plan_path.string() + ": " + message);
}

// The plan check every reader applies (plan/check.h; without presets on this machine, what
// needs them is skipped), then what the runtime adds: the clocks must be ones this GPU can run.
void PlanExecutor::Validate(const plan::Plan& plan) const {
  plan::CheckPlan(plan, {.require_presets = false});
  if (controller_ == nullptr || !options_.check_supported_clocks) return;
  const std::vector<int>& supported = controller_->supported_clocks_mhz();
  if (supported.empty()) return;
  const int max_mhz = supported.front();
  const int min_mhz = supported.back();
  const plan::PlannedStage& stage = plan.stages[options_.stage];
  auto check = [&](int freq_mhz, const std::string& field) {
    if (freq_mhz > max_mhz || freq_mhz < min_mhz) {
      ThrowInput(field, std::to_string(freq_mhz),
                 fmt::format("outside the clocks GPU {} supports ({}..{} MHz); was the plan "
                             "made for another GPU?",
                             controller_->gpu(), min_mhz, max_mhz));
    }
  };
  for (size_t i = 0; i < stage.instructions.size(); ++i) {
    check(stage.instructions[i].freq_mhz,
          fmt::format("stages[{}].instructions[{}].freq_mhz", options_.stage, i));
  }
  if (stage.gradient_sync) {
    check(stage.gradient_sync->freq_mhz,
          fmt::format("stages[{}].gradient_sync.freq_mhz", options_.stage));
  }
}

void PlanExecutor::Mismatch(const std::string& what) {
  const int step = step_;
  const int index = next_index_;
  // Abandon the step: the next instruction starts a fresh one, and the clocks go back to the
  // default rather than following a plan that no longer describes the loop.
  ++step_;
  next_index_ = 0;
  in_step_ = false;
  in_instruction_ = false;
  in_gradient_sync_ = false;
  if (controller_ != nullptr) controller_->RequestReset();
  throw InputError(fmt::format("plan order mismatch on stage {} at step {}, instruction {}: {}",
                               options_.stage, step, index, what));
}

void PlanExecutor::OnStepBegin() {
  if (in_instruction_) {
    Mismatch(fmt::format("on_step_begin came while {} was running",
                         Describe(stage_plan().instructions[current_index_])));
  }
  if (in_step_ && next_index_ > 0) {
    Mismatch(fmt::format("on_step_begin came after {} of {} instructions; missing on_step_end?",
                         next_index_, stage_plan().instructions.size()));
  }
  if (!in_step_) {
    FollowTimetableStep();
    ApplyPendingSwap();
  }
  in_step_ = true;
}

void PlanExecutor::OnStepEnd() {
  const auto& instructions = stage_plan().instructions;
  if (in_gradient_sync_)
    Mismatch("on_step_end came during the gradient sync (missing on_gradient_sync_end)");
  if (in_instruction_) {
    Mismatch(fmt::format("on_step_end came while {} was running",
                         Describe(instructions[current_index_])));
  }
  if (next_index_ != static_cast<int>(instructions.size())) {
    Mismatch(fmt::format("the step ended after {} of {} instructions; the plan expects {} next",
                         next_index_, instructions.size(), Describe(instructions[next_index_])));
  }
  ++step_;
  next_index_ = 0;
  in_step_ = false;
  ApplyPendingSwap();
}

void PlanExecutor::OnInstructionBegin(std::string_view kind) {
  Begin(ParseKind(kind), std::nullopt);
}
void PlanExecutor::OnInstructionBegin(std::string_view kind, int chunk) {
  Begin(ParseKind(kind), chunk);
}
void PlanExecutor::OnInstructionEnd(std::string_view kind) { End(ParseKind(kind), std::nullopt); }
void PlanExecutor::OnInstructionEnd(std::string_view kind, int chunk) {
  End(ParseKind(kind), chunk);
}

void PlanExecutor::Begin(schedule::Direction got, std::optional<int> chunk) {
  if (in_instruction_) {
    Mismatch(fmt::format("{} began while {} was still running (missing on_instruction_end)",
                         Began(got, chunk), Describe(stage_plan().instructions[current_index_])));
  }
  if (in_gradient_sync_) {
    Mismatch(
        fmt::format("{} began during the gradient sync (missing on_gradient_sync_end, or "
                    "on_step_end?)",
                    Began(got, chunk)));
  }
  // Zeus's on_step_begin is a no-op, so its users may not call it: the first instruction after
  // a step end opens the next step (and installs a pending plan swap, so take references into
  // the plan only after this).
  if (!in_step_) OnStepBegin();
  const auto& instructions = stage_plan().instructions;
  if (next_index_ >= static_cast<int>(instructions.size())) {
    Mismatch(
        fmt::format("the loop began {} but the plan has only {} instructions per step for "
                    "this stage (missing on_step_end, or a plan for fewer microbatches?)",
                    Began(got, chunk), instructions.size()));
  }
  const plan::PlannedInstruction& expected = instructions[next_index_];
  if (got != expected.kind || (chunk && *chunk != expected.chunk)) {
    Mismatch(
        fmt::format("the training loop began {}, the plan expects {} (is the plan for this "
                    "stage, pipeline size, number of microbatches{}?)",
                    Began(got, chunk), Describe(expected),
                    plan_.virtual_stages > 1 ? " and virtual stages" : ""));
  }
  current_index_ = next_index_;
  ++next_index_;
  in_instruction_ = true;
  if (controller_ != nullptr) controller_->RequestClock(expected.freq_mhz);
}

void PlanExecutor::End(schedule::Direction got, std::optional<int> chunk) {
  if (!in_instruction_) {
    Mismatch(
        fmt::format("on_instruction_end({}) came with no instruction running", Began(got, chunk)));
  }
  const plan::PlannedInstruction& running = stage_plan().instructions[current_index_];
  if (got != running.kind || (chunk && *chunk != running.chunk)) {
    Mismatch(fmt::format("on_instruction_end({}) came while {} was running", Began(got, chunk),
                         Describe(running)));
  }
  in_instruction_ = false;
}

void PlanExecutor::OnGradientSyncBegin() {
  if (in_instruction_) {
    Mismatch(fmt::format("on_gradient_sync_begin came while {} was running",
                         Describe(stage_plan().instructions[current_index_])));
  }
  if (in_gradient_sync_)
    Mismatch("on_gradient_sync_begin came twice (missing on_gradient_sync_end)");
  const auto& instructions = stage_plan().instructions;
  if (next_index_ != static_cast<int>(instructions.size())) {
    Mismatch(
        fmt::format("on_gradient_sync_begin came after {} of {} instructions; the gradient "
                    "sync follows the step's last instruction",
                    next_index_, instructions.size()));
  }
  in_gradient_sync_ = true;
  const auto& sync = stage_plan().gradient_sync;
  if (sync && controller_ != nullptr) controller_->RequestClock(sync->freq_mhz);
}

void PlanExecutor::OnGradientSyncEnd() {
  if (!in_gradient_sync_) Mismatch("on_gradient_sync_end came without on_gradient_sync_begin");
  in_gradient_sync_ = false;
}

std::optional<plan::InstructionGradientSync> PlanExecutor::gradient_sync() const {
  if (current_index_ < 0) return std::nullopt;
  return current_instruction().gradient_sync;
}

const plan::PlannedInstruction& PlanExecutor::current_instruction() const {
  if (current_index_ < 0) throw Error("no instruction has begun yet");
  return stage_plan().instructions[current_index_];
}

std::optional<plan::PartitionKnobs> PlanExecutor::Knobs(std::string_view partition_type) const {
  if (current_index_ < 0) return std::nullopt;
  for (const plan::PartitionKnobs& knobs : current_instruction().partitions) {
    if (knobs.type == partition_type) return knobs;
  }
  return std::nullopt;
}

void PlanExecutor::SwapPlan(plan::Plan plan) {
  CheckSwappable(plan);
  {
    std::lock_guard<std::mutex> lock(swap_mutex_);
    pending_ = std::move(plan);
  }
  // Applied by the training thread at its next step boundary (OnStepEnd, or the next step's
  // begin), so the plan never changes under a running hook.
}

void PlanExecutor::CheckSwappable(const plan::Plan& plan) const {
  if (plan.stages.size() != plan_.stages.size() ||
      plan.num_microbatches != plan_.num_microbatches || plan.schedule != plan_.schedule ||
      plan.virtual_stages != plan_.virtual_stages) {
    ThrowInput(
        "plan",
        fmt::format("{} stages x {} microbatches ({}, {} chunks)", plan.stages.size(),
                    plan.num_microbatches, schedule::ToString(plan.schedule), plan.virtual_stages),
        fmt::format("a swapped-in plan must be for the same job ({} stages x {} "
                    "microbatches, {}, {} chunks)",
                    plan_.stages.size(), plan_.num_microbatches, schedule::ToString(plan_.schedule),
                    plan_.virtual_stages));
  }
  Validate(plan);
}

FrontierChoice PlanExecutor::SwapToFrontier(const std::filesystem::path& frontier_folder,
                                            double target_time_s) {
  const plan::FrontierFile frontier = plan::ReadFrontierFile(frontier_folder / "frontier.json");
  FrontierChoice choice = ChooseFrontierPoint(frontier, target_time_s, frontier_folder);
  SwapPlan(plan::ReadPlanFile(choice.plan_path));
  return choice;
}

PowerChoice PlanExecutor::SwapToPowerBudget(const std::filesystem::path& frontier_folder,
                                            double budget_w_per_gpu) {
  const plan::FrontierFile frontier = plan::ReadFrontierFile(frontier_folder / "frontier.json");
  PowerChoice choice = ChooseFrontierPointForPower(frontier, budget_w_per_gpu, plan::JobGpus(plan_),
                                                   frontier_folder);
  SwapPlan(plan::ReadPlanFile(choice.plan_path));
  return choice;
}

void PlanExecutor::FollowTimetable(std::shared_ptr<const TimetableFollower> follower,
                                   double first_iteration, Clock clock) {
  if (follower == nullptr) throw Error("FollowTimetable: no timetable");
  if (!(first_iteration >= 0)) {
    ThrowInput("first_iteration", fmt::format("{}", first_iteration), "must be >= 0");
  }
  if (!clock.now) {
    clock.now = [] {
      return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
          .count();
    };
  }
  if (!clock.sleep_until) {
    clock.sleep_until = [](double until) {
      std::this_thread::sleep_until(std::chrono::system_clock::time_point(
          std::chrono::duration_cast<std::chrono::system_clock::duration>(
              std::chrono::duration<double>(until))));
    };
  }
  // Every plan of the timetable must be one this job can swap to: refused now, not at the
  // step that would need it.
  for (const plan::SchedulePlan& p : follower->problem().plans) {
    CheckSwappable(follower->PlanAt(follower->folder() / p.name));
  }
  follower_ = std::move(follower);
  clock_ = std::move(clock);
  first_iteration_ = first_iteration;
  follow_from_step_ = step_ + (in_step_ ? 1 : 0);
  timetable_plan_.clear();
  timetable_step_.reset();
}

void PlanExecutor::StopFollowingTimetable() {
  follower_.reset();
  timetable_step_.reset();
}

void PlanExecutor::FollowTimetableStep() {
  if (follower_ == nullptr) return;
  const double done = first_iteration_ + (step_ - follow_from_step_);
  // A pause ends at its interval's end and the next decision is taken then; a clock that does
  // not move on (a test's, misused) would spin here.
  for (int round = 0; round < 100000; ++round) {
    TimetableStep decision = follower_->Decide(clock_.now(), done);
    const bool pause = decision.pause_until > 0 && !decision.done;
    const double until = decision.pause_until;
    const std::filesystem::path chosen = decision.plan;
    timetable_step_ = std::move(decision);
    if (pause) {
      clock_.sleep_until(until);
      continue;
    }
    if (!chosen.empty() && chosen != timetable_plan_) {
      SwapPlan(follower_->PlanAt(chosen));
      timetable_plan_ = chosen;
      ++timetable_swaps_;
    }
    return;
  }
  throw Error("timetable: the clock did not move past a pause (100000 decisions at one step)");
}

bool PlanExecutor::swap_pending() const {
  std::lock_guard<std::mutex> lock(swap_mutex_);
  return pending_.has_value();
}

void PlanExecutor::ApplyPendingSwap() {
  std::lock_guard<std::mutex> lock(swap_mutex_);
  if (!pending_) return;
  plan_ = std::move(*pending_);
  pending_.reset();
  current_index_ = -1;
}

}  // namespace kareus::runtime
