// SPDX-License-Identifier: Apache-2.0
// The plan file (plan.json): what a training job applies at run time. Written by the solver
// (plan/, methods/), read by the runtime (runtime/). This header depends only on common/ and
// the schedule vocabulary so the runtime library stays small.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kareus/common/json.h"
#include "kareus/schedule/schedule.h"

namespace kareus::plan {

// Version 2 added each instruction's model `chunk`, the GPipe and interleaved 1F1B schedules
// (with `virtual_stages`) and the data-parallel gradient sync (optional `gradient_sync` of a
// stage and of the last backward of each chunk); version 1 files (1F1B, no chunks) are still
// read.
inline constexpr const char* kPlanFormat = "kareus.plan/2";
inline constexpr const char* kPlanFormatV1 = "kareus.plan/1";
inline constexpr const char* kFrontierFormat = "kareus.frontier/1";

using schedule::Direction;
using schedule::ExecutionMode;
using schedule::ScheduleKind;

// The comm-kernel knobs of one partition type inside an instruction (identical for every layer
// and both nanobatches of that instruction, as in the published runtime).
struct PartitionKnobs {
  std::string type;  // partition type, e.g. "fwd_attn"
  int sms = 0;       // thread blocks (= SMs) of the comm kernel
  std::string slot;  // launch slot, e.g. "norm_0": the collective starts with this compute op
};

// The data-parallel gradient reduction a launching instruction (the last backward of each
// chunk, microbatch M-1) runs: its buckets reduced during it (overlapped) or right after it, by
// a reduction kernel on `sms` SMs, at the instruction's clock. In Megatron-LM the SMs are the
// DP communicator's NCCL CTAs (nccl_communicator_config_path: min_ctas = max_ctas = sms).
struct InstructionGradientSync {
  int sms = 0;
  bool overlapped = true;
};

// The stage's gradient sync left after its last instruction (the exposed tail): its own clock
// and reduction SMs, and the predicted cost.
struct StageGradientSync {
  int freq_mhz = 0;
  int sms = 0;
  double time_s = 0.0;
  double energy_j = 0.0;  // per GPU
};

struct PlannedInstruction {
  Direction kind = Direction::kForward;
  int chunk = 0;  // model chunk (virtual stage); 0 unless the schedule interleaves chunks
  int microbatch = 0;
  int freq_mhz = 0;  // locked SM clock for the whole instruction
  ExecutionMode mode = ExecutionMode::kSequential;
  std::vector<PartitionKnobs> partitions;  // empty: sequential mode, or nanobatched with the
                                           // library defaults (NCCL, launched at partition start)
  double time_s = 0.0;                     // predicted duration of this instruction
  double energy_j = 0.0;                   // predicted energy per GPU of this instruction
  std::optional<InstructionGradientSync> gradient_sync = std::nullopt;  // launching backwards
};

struct PlannedStage {
  int stage = 0;
  int gpus = 1;                                  // GPUs running this stage (TP x CP x DP)
  std::vector<PlannedInstruction> instructions;  // in execution order (schedule::StageOrder)
  std::optional<StageGradientSync> gradient_sync = std::nullopt;  // DP x CP > 1
};

struct IterationCost {
  double time_s = 0.0;            // iteration time (max over stages)
  double energy_j = 0.0;          // energy of one iteration, summed over all GPUs
  double static_energy_j = 0.0;   // static power x iteration time, summed over all GPUs
  double dynamic_energy_j = 0.0;  // energy_j - static_energy_j
};

struct Plan {
  std::string
      method;     // "megatron", "nanobatching", "perseus", "nanobatching+perseus", "kareus", ...
  Json workload;  // the workload this plan was made for (free-form object)
  ScheduleKind schedule = ScheduleKind::k1F1B;
  int num_microbatches = 0;
  int virtual_stages = 1;  // model chunks per stage (interleaved 1F1B: >= 2)
  IterationCost iteration;
  std::vector<PlannedStage> stages;
};

// What runs at a position of a stage's order (not how): the schedule vocabulary's instruction.
schedule::Instruction Scheduled(const PlannedStage& stage, const PlannedInstruction& instruction);

// The number of the plan's instructions that run nanobatched: two nanobatches, each collective
// overlapping the other nanobatch's compute (Kareus's execution model, kareus.torch).
int NanobatchedInstructions(const Plan& plan);

// The job's GPUs: the sum of its stages' (TP x CP x DP each). What a power per GPU divides by.
int JobGpus(const Plan& plan);

// Why a job that runs every instruction sequentially (stock Megatron-LM, a Zeus/Perseus client)
// should not apply the plan, or nullopt when it may: the plan has nanobatched instructions, so
// its clocks and times assume an execution such a job does not have. `plan_name` is how the
// message names the plan. `kareus export --format zeus` and the Megatron-LM hooks refuse with
// these words unless told to apply the clocks only.
std::optional<std::string> SequentialJobRefusal(const Plan& plan, const std::string& plan_name);

// Serialization. ToJson writes {"format": kPlanFormat, ...}. FromJson validates everything a
// runtime relies on and throws InputError naming the field and the rule: format/version (2, or
// 1), stage numbering 0..S-1, the schedule's shape (schedule::ValidateShape with
// virtual_stages), per stage exactly num_microbatches x virtual_stages forwards and backwards,
// in exactly the schedule::StageOrder of the plan's schedule ("1f1b", "gpipe" or
// "interleaved-1f1b"; version 1: 1f1b only), positive clocks, sms >= 1, known kinds and modes,
// each partition type at most once per instruction; a gradient sync on every stage or none,
// an instruction's only on the last backward of a chunk.
// Fields added by a later writer of the same version are ignored; a missing "mode" reads as
// sequential, missing predictions (time_s, energy_j) as 0.
Json ToJson(const Plan& plan);
Plan PlanFromJson(const Json& json);
void WritePlanFile(const std::filesystem::path& path, const Plan& plan);  // atomic
Plan ReadPlanFile(const std::filesystem::path& path);  // InputError on garbage/truncation

// One point of an iteration time-energy frontier (frontier.json).
struct FrontierPoint {
  double time_s = 0.0;
  double energy_j = 0.0;
  double static_energy_j = 0.0;
  int plan_index = -1;    // index into the list of plans of the solve; -1 if no plan kept
  std::string plan_path;  // plan file of this point, relative to frontier.json's folder
                          // (e.g. "plans/plan_00003.json"); empty when no plan file was written
};

struct FrontierFile {
  std::string method;
  Json workload;
  std::vector<FrontierPoint> points;  // sorted by time, fastest first
  // How the points cover deadlines: "deadline-grid" = the solver realized the least-energy
  // plan it found for every deadline min_time + k * unit_time_s (k = 0, 1, ...) and kept the
  // non-dominated ones, so the plan for a grid deadline T is the cheapest point with
  // time_s <= T; "points" (or empty, older files) = a plain list of points.
  std::string representation = {};
  double unit_time_s = 0.0;  // grid spacing of "deadline-grid"
};

// The plan file of a frontier point, relative to frontier.json's folder: plan_path when set,
// else the writer's naming convention "plans/plan_%05d.json" of plan_index (kareus run); empty
// when the point kept no plan (plan_index -1 and no plan_path).
std::string FrontierPlanPath(const FrontierPoint& point);

Json ToJson(const FrontierFile& frontier);
FrontierFile FrontierFromJson(const Json& json);
void WriteFrontierFile(const std::filesystem::path& path, const FrontierFile& frontier);
FrontierFile ReadFrontierFile(const std::filesystem::path& path);

}  // namespace kareus::plan
