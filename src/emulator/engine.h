// SPDX-License-Identifier: Apache-2.0
// The emulator's private engine: per-GPU constants, per-kernel constants compiled once, and the
// fluid discrete-event loop over a compute stream and a comm stream (DESIGN.md §5).
#pragma once

#include <cstdint>
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
  double hbm_peak_bps = 0.0;     // B_hbm, bytes/s
  double hbm_bps = 0.0;          // achievable: B_hbm x hbm_efficiency
  double sm_bps_at_fmax = 0.0;   // per-SM issue limit b_sm(f_max), bytes/s
  double static_w = 0.0;
  double cap_w = 0.0;
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
  bool empty = false;            // no work at all (zero FLOPs and bytes, or a 1-GPU collective)
  // Compute kernels: t_core(s, f) = ceil(tiles/s) x cycles_per_tile / f.
  int64_t tiles = 1;
  double cycles_per_tile = 0.0;
  double core_activity = 0.0;    // activity while the SM computes (kind factor)
  double hbm_bytes = 0.0;        // HBM traffic of the kernel (a collective: what it causes)
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

// The partition loop of the published runtime (kareus-official.md §5.3): compute ops run in
// order on the compute stream; the collective starts when compute op `launch_index` starts and
// holds `comm_sms` SMs until it ends; the partition ends when both streams are done. A
// negative `launch_index` launches the collective after the last compute op (serialized).
void RunPartition(const GpuPhysics& physics, std::span<const CompiledKernel> compute,
                  const CompiledKernel* collective, int comm_sms, int launch_index,
                  double f_lock_hz, Accumulator& acc);

// Kernels one after another; compute on all SMs, collectives alone on `collective_sms`.
void RunSequential(const GpuPhysics& physics, std::span<const CompiledKernel> kernels,
                   int collective_sms, double f_lock_hz, Accumulator& acc);

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
                       const CompiledKernel* comm, int comm_sms, double f_lock_hz,
                       SetState* state);

// V(f) by linear interpolation of the GPU's curve, clamped at its ends (1 V without a curve).
double VoltageAtHz(const GpuPhysics& physics, double f_hz);

}  // namespace kareus::emulator::internal
