// SPDX-License-Identifier: Apache-2.0
// Perseus/Zeus compatibility (reference/perseus-lowtime-zeus.md §A4, kareus-official.md §4.4,
// §4.6): read the Perseus profile CSV `stage,instruction,frequency,time,energy` (time per
// instruction in s, energy per GPU in J) and solve it (`kareus solve`); write plans as Zeus
// `freqs_pipeline_%05d.py` and Kareus `scheds_pipeline_%05d.py` files (`kareus export`).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kareus/common/error.h"
#include "kareus/plan/plan_file.h"
#include "kareus/plan/solve.h"

namespace kareus::plan {

// Options per stage from a Perseus profile: one sequential option per row (knob = clock).
// Columns are found by name in the header (extra columns are ignored). Throws InputError
// naming the file and line for a malformed row, a stage outside [0, num_stages), an unknown
// instruction, a non-numeric, non-finite or negative value (time must be > 0), and naming the
// stage when a stage has no forward or no backward rows.
// Also refused: more than 1024 stages, times above 1e6 s, energies above 1e12 J, more than
// 100,000 rows per stage and instruction, and text that is not UTF-8.
std::vector<StageOptions> ReadPerseusProfile(const std::filesystem::path& csv, int num_stages);
// The same from the file's text; `file` names it in messages.
std::vector<StageOptions> PerseusProfileFromText(std::string_view csv_text, const std::string& file,
                                                 int num_stages);

struct SolveProfileOptions {
  std::filesystem::path profile;                // Perseus profile CSV
  int num_stages = 0;                           // pipeline stages S
  int num_microbatches = 0;                     // microbatches per iteration M
  double p_static_w = 0.0;                      // static (blocking) power per GPU, W
  double unit_time_s = 1e-3;                    // solver time quantum, s
  int gpus_per_stage = 1;                       // GPUs per stage; the CSV's energies are per GPU
  std::filesystem::path out;                    // output folder (plan.json, frontier.json, plans/)
  std::string method = "perseus";               // written into the plans
  double deadline_s = 0.0;                      // > 0: only the plan for this deadline (plan.json)
  ScheduleKind schedule = ScheduleKind::k1F1B;  // 1F1B or GPipe (a profile has no chunks)

  // The first invalid field (its name here), its value and the rule; nullopt when valid.
  std::optional<OptionError> Validate() const;
};

struct SolveProfileSummary {
  pipeline::Summary solver;
  std::size_t points = 0;
  pipeline::Evaluation fastest;   // max-throughput point
  pipeline::Evaluation cheapest;  // lowest-energy point
  WrittenFiles files;
};

// `kareus solve`: validates every input (flags within their bounds, the output folder, the whole
// CSV) before anything is written; writes the outputs as a whole (OutputFolder: `out` then holds
// exactly this solve's files). On a terminal, a progress line shows the solver's steps.
// With deadline_s > 0 it writes only plan.json: the least-energy plan whose iteration time is
// at most the deadline (InputError, nothing written, when the deadline is below the minimum
// iteration time).
SolveProfileSummary SolveProfile(const SolveProfileOptions& options);

enum class ExportFormat { kZeus, kKareusScheds };
const char* ToString(ExportFormat format);                     // "zeus" | "kareus-scheds"
ExportFormat ExportFormatFromString(const std::string& text);  // throws InputError

// Python-literal schedule texts. Zeus: one list per stage of ('forward'|'backward', MHz) in
// execution order. Kareus scheds: one tuple per instruction, ('forward', cfg, ...) with one
// 'slot-none-sms-1024' string per partition type in plan order; a sequential instruction is
// the 1-tuple ('forward',). Every string from the plan is written as data (PythonStringLiteral),
// so loading the file never runs anything a plan smuggled into it.
std::string PythonStringLiteral(std::string_view text);  // 'a\'b\n' -> "'a\\'b\\n'"
// With nanobatched instructions (a plan for Kareus's execution) the Zeus text says so in a
// comment: its times assume that execution, not the clocks-only one the file gives.
std::string ZeusFreqsText(const Plan& plan);
std::string KareusSchedsText(const Plan& plan);

struct ExportOptions {
  std::filesystem::path plan;  // a plan file, or a folder of plan_NNNNN.json files
  ExportFormat format = ExportFormat::kZeus;
  std::filesystem::path out;  // output folder
  // Zeus format only: export the clocks of a plan with nanobatched instructions (refused
  // otherwise, SequentialJobRefusal); the files then say that the times assume Kareus's
  // execution.
  bool clocks_only = false;

  std::optional<OptionError> Validate() const;  // as SolveProfileOptions::Validate
};

struct ExportSummary {
  std::vector<std::filesystem::path> files;
};

// `kareus export`: file index NNNNN from plan_NNNNN.json, else 0. Reads every plan before
// writing anything; writes the output folder as a whole (OutputFolder). The Zeus format
// refuses (InputError, nothing written) a plan with nanobatched instructions unless
// clocks_only.
ExportSummary ExportPlans(const ExportOptions& options);

}  // namespace kareus::plan
