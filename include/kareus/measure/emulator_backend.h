// SPDX-License-Identifier: Apache-2.0
// The embedded GPU emulator as a measurement backend (DESIGN.md §5): the default backend and
// the one CI uses. Readings carry the emulator's measurement noise, keyed by configuration so
// that a configuration reads the same whenever it is measured; the noise-free twin is the
// oracle and the evaluator of plans.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "kareus/common/error.h"
#include "kareus/emulator/emulator.h"
#include "kareus/measure/backend.h"

namespace kareus::measure {

struct EmulatorBackendOptions {
  emulator::MeasurementOptions measurement;  // noise and protocol (noise_free for the oracle)
  uint64_t seed = 1;               // noise stream; a configuration's reading depends on (seed, key)
  double batch_warmup_s = 10.0;    // per batch and GPU: process start, communicators, warm-up run
                                   // (published: one torch spawn per batch, §3.7)
  std::string workload_signature;  // part of every measurement's noise key

  // The first invalid field (name as written here), its value and the rule; nullopt if valid.
  std::optional<OptionError> Validate() const;
};

// The emulator backend for one GPU. Partition batches need only the GPU; instruction and
// fixed-work requests simulate the model they are given.
std::unique_ptr<Backend> MakeEmulatorBackend(const hw::GpuSpec& gpu,
                                             const EmulatorBackendOptions& options);

// A factory of emulator backends (one per workload: its GPU, its signature, the run's seed).
// `options.seed` and `options.workload_signature` are replaced by the factory's arguments.
BackendFactory EmulatorBackendFactory(const EmulatorBackendOptions& options = {});

}  // namespace kareus::measure
