// SPDX-License-Identifier: Apache-2.0
// The emulator's private engine: per-GPU constants, per-kernel constants compiled once, and the
// fluid discrete-event loop over a compute stream and a comm stream (DESIGN.md §5).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "kareus/emulator/emulator.h"
#include "kareus/hw/gpu_spec.h"
#include "kareus/workload/ops.h"

namespace kareus::emulator::internal {

// Per-GPU constants in SI units, derived once from the GpuSpec.
struct GpuPhysics {
  const hw::GpuSpec* spec = nullptr;
  int sm_count = 0;
  double f_max_hz = 0.0;
  double f_min_hz = 0.0;
  double tensor_flops_per_cycle_sm = 0.0;
  // CUDA-core FP32 FLOP/clk/SM = tensor/16 on A100 (128 = 64 FMA) and H100 (256 = 128 FMA)
  // [derived from NVIDIA A100/H100 whitepapers: 64 resp. 128 FP32 cores per SM].
  double cuda_flops_per_cycle_sm = 0.0;
  double gemm_efficiency = 0.0;
  double attention_efficiency = 0.0;
  double hbm_peak_bps = 0.0;    // B_hbm, bytes/s
  double hbm_bps = 0.0;         // achievable: B_hbm x hbm_efficiency
  double sm_bps_at_fmax = 0.0;  // per-SM issue limit b_sm(f_max), bytes/s
  double static_w = 0.0;        // accounting: static energy = static_w x time
  double idle_w = 0.0;          // physics: baseline under any kernel, and all of an idle GPU
  double cap_w = 0.0;
  bool cap_average = false;    // the limit holds a run's average power (PowerSpec::CapMode)
  double kernel_gap_s = 0.0;   // device gap before each kernel of a stream
  double host_launch_s = 0.0;  // host time per launched kernel
  double dynamic_max_w = 0.0;
  double memory_w = 0.0;
  double v_max = 0.0;
  std::vector<double> curve_hz;     // voltage-frequency curve, ascending, Hz
  std::vector<double> curve_volts;  // volts at curve_hz
  double bus_bps = 0.0;
  double channel_bps = 0.0;
  double channel_exponent = 0.0;
  double latency_s = 0.0;
  double inter_node_bps = 0.0;
  double inter_node_latency_s = 0.0;
  int library_default_sms = 0;
  hw::ActivitySpec activity;  // SM activity per kernel kind (GPU data file, [calibrated])
};

GpuPhysics MakePhysics(const hw::GpuSpec& gpu);

// One kernel with everything that does not depend on the clock or the SMs precomputed.
struct CompiledKernel {
  bool collective = false;
  bool empty = false;  // no work at all (zero FLOPs and bytes, or a 1-GPU collective)
  // Compute kernels: t_core(s, f) = ceil(tiles/s) x cycles_per_tile / f.
  int64_t tiles = 1;
  double cycles_per_tile = 0.0;
  double core_activity = 0.0;  // activity while the SM computes (kind factor)
  double hbm_bytes = 0.0;      // HBM traffic of the kernel (a collective: what it causes)
  // Collectives: bytes on the wire per GPU, fixed latency, and whether it is an inter-node P2P.
  double wire_bytes = 0.0;
  double latency_s = 0.0;
  bool inter_node = false;
};

CompiledKernel CompileKernel(const GpuPhysics& physics, const workload::Op& op);

// A compiled partition: its compute kernels in order and its collective.
struct CompiledPartition {
  std::vector<CompiledKernel> compute;
  CompiledKernel collective;
  bool has_collective = false;
};

CompiledPartition CompilePartition(const GpuPhysics& physics,
                                   const workload::PartitionType& partition);

// Accumulates a simulation: energy split, busy times and the clock integral.
struct Accumulator {
  double time_s = 0.0;
  double dynamic_energy_j = 0.0;
  double freq_time_mhz_s = 0.0;  // integral of the realized clock over time
  double min_freq_mhz = 1e300;   // realized clock range: a constant clock is reported exactly
  double max_freq_mhz = 0.0;
  double compute_busy_s = 0.0;
  double comm_busy_s = 0.0;
  double overlap_s = 0.0;

  SimResult Finish(double static_w) const;
};

// A stream program: the kernels of a partition, of a block of sequential kernels or of a whole
// instruction in the order the host launches them, on two streams (the published runtime,
// kareus-official.md §5.3): compute kernels on the compute stream; a collective on the comm
// stream, triggered by an event the compute stream records at its launch point; a join where
// the compute stream waits for every collective launched before it (the end of a partition, or
// a sequential collective whose output the next kernel needs).
struct Entry {
  enum class Kind : uint8_t { kCompute, kComm, kJoin };
  Kind kind = Kind::kCompute;
  const CompiledKernel* kernel = nullptr;  // kCompute, kComm
  int sms = 0;   // kComm: SMs the collective holds (compute gets the rest while it runs)
  int need = 0;  // kComm: compute-stream entries (kernels and joins) that must have completed
                 // (the event); kJoin: comm entries that must have completed
  int launch_ordinal = 0;  // kCompute, kComm: 1 + the launches the host made before this one
};

struct Program {
  std::vector<Entry> entries;
  int compute_entries = 0;  // kCompute + kJoin
  int comm_entries = 0;
  int launches = 0;  // kCompute + kComm: what the host launches

  void Clear() {
    entries.clear();
    compute_entries = comm_entries = launches = 0;
  }
};

// One partition: compute ops in order; the collective (when `with_collective` and the
// partition has one) launched when the compute stream reaches op `launch_index` (negative or
// past the end: after the last op, serialized) on `comm_sms` SMs; a join at the end.
void AppendPartition(Program& program, const CompiledPartition& partition, bool with_collective,
                     int comm_sms, int launch_index);
// Kernels one after another: compute on all SMs, each collective alone on `collective_sms`
// (it waits for the kernel before it, the kernel after it waits for it).
void AppendSequential(Program& program, std::span<const CompiledKernel> kernels,
                      int collective_sms);

// Where the host is when the program starts.
enum class HostStart {
  // A program run back to back in a loop (the profiler's measurement): the host is ahead; if
  // launching takes longer than the GPU runs, each iteration lasts the host's time and the GPU
  // waits out the rest at idle power.
  kSteadyState,
  // A pipeline instruction: it starts right after a device synchronisation (the frequency hook
  // syncs before every instruction, kareus-official.md §5.4), so the first kernels wait for
  // their launch and the host's lead builds up as the GPU works.
  kAfterSync,
};

// The fluid discrete-event loop over both streams (DESIGN.md §5): between events every running
// kernel progresses at its rate; events are kernel ends and the moments a waiting kernel
// becomes ready (its launch by the host, the stream's gap after the kernel before it, the
// event it waits for); a stream with nothing ready idles, and while no kernel runs the GPU
// draws power.idle_w. The power limit holds every running set on its own (RealizedClockHz),
// or, with PowerSpec::CapMode::kAverage, the program's average power: the program runs at the
// highest clock up to the lock whose average power fits, every set at that clock.
void RunProgram(const GpuPhysics& physics, const Program& program, double f_lock_hz, HostStart host,
                Accumulator& acc);

// Runs `run(f_hz, hold_each_set)` (one simulation of a program at clock limit f_hz; with
// hold_each_set the power cap lowers every running set on its own) under the GPU's power limit:
// CapMode::kEachSet (or no limit) runs it once at f_lock_hz, holding each set; kAverage runs it
// unheld at the highest clock up to f_lock_hz whose average power fits the limit (bisection over
// the whole range), every set at that clock.
Accumulator HoldToPowerLimit(const GpuPhysics& physics, double f_lock_hz,
                             const std::function<Accumulator(double, bool)>& run);

// What one running set (a compute kernel on `compute_sms`, a collective on `comm_sms`, either
// may be absent) does at clock f: progress rates (fraction of the kernel per second), power.
struct SetState {
  double compute_rate = 0.0;
  double comm_rate = 0.0;
  double power_w = 0.0;
};
SetState EvaluateSet(const GpuPhysics& physics, const CompiledKernel* compute, int compute_sms,
                     const CompiledKernel* comm, int comm_sms, double f_hz);

// The realized clock: the locked clock, or lower where the power cap binds (the highest clock
// whose power fits the cap, found over the whole range so that the result is monotone in the
// locked clock). `state` receives the set's rates and power at that clock.
double RealizedClockHz(const GpuPhysics& physics, const CompiledKernel* compute, int compute_sms,
                       const CompiledKernel* comm, int comm_sms, double f_lock_hz, SetState* state);

// V(f) by linear interpolation of the GPU's curve, clamped at its ends (1 V without a curve).
double VoltageAtHz(const GpuPhysics& physics, double f_hz);

}  // namespace kareus::emulator::internal
