// SPDX-License-Identifier: Apache-2.0
// The methods `kareus run` compares, as one table of traits (DESIGN.md §8). Every method runs
// the same flow (methods/run.h); a method is only what it may choose:
//
//   method                execution                   clock               comm SMs / launch
//   megatron              sequential                  default             library default
//   nanobatching          2 nanobatches               default             library default, at start
//   perseus               sequential                  per instruction     library default
//   nanobatching+perseus  2 nanobatches               per instruction     library default, at start
//   kareus                nanobatched or sequential   per instruction     per partition type,
//   profiled kareus-oracle         as kareus, from exhaustive noise-free partition frontiers
//   (diagnostic)
//
// Adding a method is adding one entry to MethodTable() (src/methods/method.cc), or passing a
// MethodSpec of one's own in RunOptions::methods.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kareus::methods {

// How the method may run an instruction.
enum class Execution {
  kSequential,      // one microbatch, each collective after the compute that feeds it
  kNanobatched,     // two nanobatches overlapping one another's collectives
  kPerInstruction,  // either, chosen per instruction by the solver (sequential is the fallback
                    // where overlap does not pay, or where the workload cannot nanobatch)
};
const char* ToString(Execution execution);

// Which clock the method may lock.
enum class ClockControl {
  kDefault,         // the GPU's default clock (no clock control)
  kPerInstruction,  // any clock of the planning grid, chosen per instruction by the solver
};
const char* ToString(ClockControl clock);

// Where the comm kernel's SMs and launch slot of each partition come from.
enum class CommSource {
  kLibraryDefault,  // NCCL with its default channels, launched at the partition's start
  kProfiled,        // the partition profiler's frontiers (multi-objective BO, mobo/)
  kExhaustive,      // every configuration of every partition type (the oracle diagnostic)
};
const char* ToString(CommSource source);

struct MethodSpec {
  std::string name;   // CLI and file name, e.g. "nanobatching+perseus"
  std::string label;  // tables and report, e.g. "Nanobatching+Perseus"
  Execution execution = Execution::kSequential;
  ClockControl clock = ClockControl::kDefault;
  CommSource comm = CommSource::kLibraryDefault;
  bool noise_free = false;     // measures through the backend's noise-free twin (the oracle)
  bool in_default_set = true;  // part of `kareus run` without --methods

  bool Profiles() const { return comm == CommSource::kProfiled; }
  bool operator==(const MethodSpec&) const = default;
};

// The built-in methods, in the order of the tables.
const std::vector<MethodSpec>& MethodTable();
// The table entry called `name`; InputError listing the names otherwise.
const MethodSpec& FindMethod(std::string_view name);
// The entries with in_default_set.
std::vector<MethodSpec> DefaultMethods();
// "megatron, nanobatching, ..." (every entry).
std::string MethodNames();

}  // namespace kareus::methods
