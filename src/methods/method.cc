// SPDX-License-Identifier: Apache-2.0
#include "kareus/methods/method.h"

#include "kareus/common/error.h"

namespace kareus::methods {

const char* ToString(Execution execution) {
  switch (execution) {
    case Execution::kSequential:
      return "sequential";
    case Execution::kNanobatched:
      return "nanobatched";
    case Execution::kPerInstruction:
      return "per_instruction";
  }
  return "?";
}

const char* ToString(ClockControl clock) {
  return clock == ClockControl::kDefault ? "default" : "per_instruction";
}

const char* ToString(CommSource source) {
  switch (source) {
    case CommSource::kLibraryDefault:
      return "library_default";
    case CommSource::kProfiled:
      return "profiled";
    case CommSource::kExhaustive:
      return "exhaustive";
  }
  return "?";
}

const std::vector<MethodSpec>& MethodTable() {
  // The methods of the published evaluation (reference/kareus-official.md §6.1) and the oracle.
  static const std::vector<MethodSpec> table = {
      {.name = "megatron",
       .label = "Megatron-LM",
       .execution = Execution::kSequential,
       .clock = ClockControl::kDefault,
       .comm = CommSource::kLibraryDefault},
      {.name = "nanobatching",
       .label = "Nanobatching",
       .execution = Execution::kNanobatched,
       .clock = ClockControl::kDefault,
       .comm = CommSource::kLibraryDefault},
      {.name = "perseus",
       .label = "Perseus",
       .execution = Execution::kSequential,
       .clock = ClockControl::kPerInstruction,
       .comm = CommSource::kLibraryDefault},
      {.name = "nanobatching+perseus",
       .label = "Nanobatching+Perseus",
       .execution = Execution::kNanobatched,
       .clock = ClockControl::kPerInstruction,
       .comm = CommSource::kLibraryDefault},
      {.name = "kareus",
       .label = "Kareus",
       .execution = Execution::kPerInstruction,
       .clock = ClockControl::kPerInstruction,
       .comm = CommSource::kProfiled},
      {.name = "kareus-oracle",
       .label = "Kareus (oracle)",
       .execution = Execution::kPerInstruction,
       .clock = ClockControl::kPerInstruction,
       .comm = CommSource::kExhaustive,
       .noise_free = true,
       .in_default_set = false},
  };
  return table;
}

std::string MethodNames() {
  std::string names;
  for (const MethodSpec& m : MethodTable()) names += (names.empty() ? "" : ", ") + m.name;
  return names;
}

const MethodSpec& FindMethod(std::string_view name) {
  for (const MethodSpec& m : MethodTable()) {
    if (m.name == name) return m;
  }
  ThrowInput("--methods", std::string(name), "unknown method (valid: " + MethodNames() + ")");
}

std::vector<MethodSpec> DefaultMethods() {
  std::vector<MethodSpec> out;
  for (const MethodSpec& m : MethodTable()) {
    if (m.in_default_set) out.push_back(m);
  }
  return out;
}

}  // namespace kareus::methods
