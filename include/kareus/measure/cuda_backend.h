// SPDX-License-Identifier: Apache-2.0
// The real-GPU measurement backend (`--backend cuda`): each partition's kernels with the
// workload's real shapes on the GPUs of one tensor/context-parallel group of one node, one
// process with one host thread per GPU (DESIGN.md §6, reference/kareus-official.md §3.7).
//
// - GEMMs: cuBLASLt, bf16 operands, fp32 accumulation, the op's M, N, K.
// - Attention: cuBLASLt strided-batched bf16 GEMMs (Q K^T, P V; the backward's five) plus a
//   causal softmax kernel: unfused, over the full S x S scores (a flash kernel skips the masked
//   half). Description() says so.
// - Memory-bound ops (RMSNorm, RoPE, SwiGLU, dropout-add, residual, copies): small CUDA kernels
//   moving exactly the op's bytes.
// - Collectives: NCCL on a second (high-priority) stream, one communicator per comm-SM count
//   (minCTAs = maxCTAs = SMs, created once, cached), launched at the chosen slot through
//   events; the other nanobatch's buffers, so the two nanobatches run on two streams as the
//   emulator's execution model describes (docs/ARCHITECTURE.md §4).
// - Time: device events over repeated runs after a warm-up; energy: NVML's total-energy
//   counter over a window long enough for its update period (the partition is repeated to fill
//   it), per GPU; per sample, time is the max over the ranks and energy the mean (published
//   §3.1). The realized clock and the clock event (throttle) reasons seen are recorded.
// - Clocks: locked per measured clock only with allow_clock_control (and when the driver
//   permits), reset to the default after every call and on every exit path (the runtime's
//   frequency guard); otherwise measured at the clock as found, and Gpu() offers only that one
//   clock level so the profiler searches the other knobs.
//
// cuBLASLt, NCCL, the CUDA driver and NVML are loaded at run time: a binary built with CUDA runs
// everywhere, and on a machine without a GPU this backend fails with EnvironmentError (exit 2).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kareus/common/error.h"
#include "kareus/measure/backend.h"
#include "kareus/workload/ops.h"

namespace kareus::measure {

struct CudaBackendOptions {
  std::vector<int> devices;          // CUDA ordinals of ranks 0, 1, ...; empty: 0, 1, 2, ...
  bool allow_clock_control = false;  // lock the SM clock of every measurement (needs root)
  double settle_s = 2.0;             // after locking a clock (published: 2 s)
  int warmup_runs = 10;              // before calibration and again before the window ...
  double min_warmup_s = 0.2;         // ... and at least this much work (leaving the idle clock)
  int calibration_runs = 100;        // timed runs that size the window (published: 100)
  double window_s = 5.0;             // energy window (published: 5 s) ...
  int min_counter_periods = 20;      // ... and at least this many energy-counter updates
  double cooldown_s = 5.0;           // idle before the window ("thermally stable", published 5 s)
  int64_t max_repeats = 10'000'000;
  double timeout_s = 600.0;  // GPU work of one phase; beyond it the backend gives up
  std::string log_path;      // appends one JSON line per measurement (ranks, clocks,
                             // reasons, GPU name, driver, power limit); empty: none
  bool quiet = false;        // no notes on stderr

  // The first invalid field (its name here), its value and the rule; nullopt when valid.
  std::optional<OptionError> Validate() const;
};

// True when this build has the CUDA backend (KAREUS_WITH_CUDA found the toolkit).
bool CudaBackendBuilt();

// Checks that the backend can run here (built with CUDA, driver, a GPU, cuBLASLt, NCCL, NVML)
// without measuring anything; throws EnvironmentError naming what is missing.
void CheckCudaBackendAvailable(const CudaBackendOptions& options);

// The backend for one workload (its GPU preset gives the knob choices and P_static). Throws
// EnvironmentError when it cannot run here, InputError for invalid options.
std::unique_ptr<Backend> MakeCudaBackend(const workload::WorkloadModel& model,
                                         const CudaBackendOptions& options);

// A factory of CUDA backends (one per workload); the seed is unused (real readings).
BackendFactory CudaBackendFactory(const CudaBackendOptions& options);

}  // namespace kareus::measure
