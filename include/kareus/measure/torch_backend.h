// SPDX-License-Identifier: Apache-2.0
// The torch measurement backend (`--backend torch`): measures what kareus.torch executes, so that
// plans and training agree. A worker process (`python -m kareus.torch.measure`, PyTorch) builds
// each partition from the executor's own program (the planner's partition builder) with random
// weights and the workload's shapes, runs it on the executor's code path (compute, the other
// nanobatch's collective at the slot on a communicator with the SM count, the join) on as many
// ranks as its collective needs (one process per GPU; gloo on a CPU), and measures it: CUDA
// events on a GPU, the host clock on a CPU (the CPU kernels' wall time); energy from the
// runtime's NVML energy windows (the fake NVML in tests). Whole instructions, the fixed work and
// the gradient reduction are measured the same way. The worker speaks kareus.measure/1, one JSON
// object per line on its standard input and output (python/kareus/torch/measure.py).
//
// A worker that dies, stays silent past the timeout or answers garbage is an EnvironmentError
// naming the request (and the end of what the worker wrote on its standard error); what was
// measured before was delivered sample by sample, so a store keeps it and a rerun resumes.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "kareus/common/error.h"
#include "kareus/measure/backend.h"

namespace kareus::measure {

struct TorchBackendOptions {
  std::string python;                // interpreter; empty: $KAREUS_PYTHON, else /usr/bin/python3,
                                     // else python3 on PATH
  std::string python_path;           // folder holding the kareus package, put first on the
                                     // worker's PYTHONPATH; empty: $KAREUS_PYTHONPATH, else this
                                     // build's <build>/python
  std::string device = "auto";       // auto (CUDA when PyTorch sees a GPU) | cpu | cuda
  bool allow_clock_control = false;  // lock the SM clock of every measurement (FrequencyController)
  int warmup_runs = 2;               // untimed runs before each measurement
  int min_runs = 3;                  // timed runs at least ...
  double window_s = 0.2;             // ... and at least this much timed work per measurement,
                                     // one energy window (20 periods of the runtime's power
                                     // poller where NVML has no energy counter)
  int threads = 1;                   // compute threads of each rank (a CPU's cores are shared)
  double timeout_s = 600.0;          // the worker's silence, s, after which it counts as hung
  uint64_t seed = 1;                 // of the random weights and inputs

  // The first invalid field (its name here), its value and the rule; nullopt when valid.
  std::optional<OptionError> Validate() const;
};

// Checks that the worker can start here (an interpreter with PyTorch and the kareus package)
// without measuring anything; throws EnvironmentError naming what is missing.
void CheckTorchBackendAvailable(const TorchBackendOptions& options);

// The backend of one workload: starts its worker and checks that it is ready (EnvironmentError
// with the worker's message otherwise). Without allow_clock_control, Gpu() offers only the
// preset's default clock, the one level measured.
std::unique_ptr<Backend> MakeTorchBackend(const workload::WorkloadModel& model,
                                          const TorchBackendOptions& options);

// A factory of torch backends (one worker per workload); `seed` seeds the weights and inputs.
BackendFactory TorchBackendFactory(const TorchBackendOptions& options);

}  // namespace kareus::measure
