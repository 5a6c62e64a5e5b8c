// SPDX-License-Identifier: Apache-2.0
// GPU presets: the figures the workload model, the emulator and the planner need, loaded from
// data/gpus/<name>.yaml where every figure carries its source in a comment.
#pragma once

#include <string>
#include <vector>

namespace kareus::hw {

// Supported locked SM clocks: min..max in step. The profiler's default sub-grid is
// profile_max..profile_min in profile_step (the published A100 grid is 1410..900 by 30).
struct ClockGrid {
  int min_mhz = 0;
  int max_mhz = 0;
  int step_mhz = 15;
  int default_mhz = 0;  // the clock a job runs at when nobody locks it (max boost)
  int profile_min_mhz = 0;
  int profile_step_mhz = 30;

  bool Contains(int freq_mhz) const;
  std::vector<int> Supported() const;    // max..min, descending
  std::vector<int> ProfileGrid() const;  // max..profile_min in profile_step, descending
};

// One point of the voltage-frequency curve; the curve is interpolated linearly.
struct VoltagePoint {
  int freq_mhz = 0;
  double volts = 0.0;
};

struct PowerSpec {
  double cap_w = 0.0;          // the board's power limit in effect (default limit, or the
                               // workload's power_limit_w); the GPU lowers its clock to fit it
  double min_limit_w = 0.0;    // lowest settable power limit (nvidia-smi "Min Power Limit")
  double max_limit_w = 0.0;    // highest settable limit of the board ("Max Power Limit")
  double idle_w = 0.0;         // a GPU that holds a context and waits (pipeline bubble, blocked
                               // in a P2P recv, a stream waiting with nothing to run): the
                               // baseline the emulator adds under any kernel, and all it draws
                               // while no kernel runs
  double static_w = 0.0;       // the "static" power of the energy split (Kareus/Perseus account
                               // E_static = static_w x wall time); accounting, not physics
  double dynamic_max_w = 0.0;  // SM dynamic power at max clock, all SMs at full activity
  double memory_w = 0.0;       // HBM power at full bandwidth
  // How the board's limit holds the clock (optional `cap_mode:` in the data file):
  // kEachSet (default, `each_set`): every running set of kernels is held to the limit on its
  // own, the moment it runs; kAverage (`average`): the limit holds the average power of a
  // simulated run (a partition or kernel loop, an instruction) at one clock, so a kernel may
  // draw more than the limit while others draw less (measured on H200: a GEMM at half duty
  // cycle draws 961 W bursts at 1980 MHz with no cap; data/validation/h200-device/).
  enum class CapMode { kEachSet, kAverage };
  CapMode cap_mode = CapMode::kEachSet;
};

// Launch costs of the software stack on this GPU (PyTorch eager + Transformer Engine + NCCL or
// MSCCL++ as the published runtime launches them): what makes a stream of kernels more than the
// sum of the kernels. Optional in the data file (`launch:`), these defaults otherwise.
struct LaunchSpec {
  double kernel_gap_us = 2.0;    // device-side gap between two kernels of one stream (drain and
                                 // launch of the next; also the join of two streams at an event)
  double host_launch_us = 10.0;  // host time to launch one kernel from the eager framework path
};

struct InterconnectSpec {
  double bus_bandwidth_gbps = 0.0;         // achievable collective bus bandwidth, GB/s
  double channel_bandwidth_gbps = 0.0;     // per comm SM (channel) at max clock, GB/s
  double channel_clock_exponent = 0.0;     // b_ch(f) = b_ch(max) * (f/f_max)^exponent (weak)
  double latency_us = 0.0;                 // per-collective launch + sync latency
  double inter_node_bandwidth_gbps = 0.0;  // P2P between pipeline stages, GB/s per GPU
  double inter_node_latency_us = 0.0;
  int library_default_sms = 0;  // SMs NCCL's default channel count occupies (baselines)
};

// SM activity per kernel kind: the share of power.dynamic_max_w one SM draws while running a
// kernel of that kind (dynamic_max_w is defined by a dense tensor-core GEMM, so gemm = 1). No
// public per-kind figure exists (reference/gpu-power-model.md §7 item 4); the emulator's
// calibration tests fit them. Optional in the data file (`activity:`), these defaults otherwise.
struct ActivitySpec {
  double gemm = 1.0;          // dense tensor-core GEMM (definition of dynamic_max_w)
  double attention = 0.85;    // flash attention: tensor cores plus softmax on the CUDA cores
  double elementwise = 0.5;   // CUDA-core math of norms / RoPE / SwiGLU while not stalled
  double memory_stall = 0.3;  // an SM waiting on HBM (issuing loads/stores, L1/L2 traffic)
  double comm = 0.25;         // an SM running a comm kernel's copy/reduce loop
};

struct GpuSpec {
  std::string name;  // preset name, e.g. "A100-SXM4-40GB"
  // Names the calibration of the constants on a preset's own real-GPU measurements (optional
  // `calibration:` in the data file; "" = none). The emulator backend puts it in its
  // description, so a measurement store written under the preset's earlier constants is
  // refused rather than mixed with new readings.
  std::string calibration;
  int sm_count = 0;
  ClockGrid clock;
  double tensor_flops_per_clock_per_sm = 0.0;  // dense BF16 tensor-core FLOP / clock / SM
  double gemm_efficiency = 0.0;                // measured max matmul / peak (MAMF ceiling)
  double attention_efficiency = 0.0;           // flash-attention ceiling relative to tensor peak
  double hbm_bandwidth_gbps = 0.0;             // GB/s
  double hbm_efficiency = 0.0;                 // achievable fraction of HBM bandwidth
  double sm_memory_bandwidth_gbps = 0.0;       // per-SM issue limit at max clock, GB/s
  PowerSpec power;
  std::vector<VoltagePoint> voltage_curve;  // ascending in freq_mhz
  InterconnectSpec interconnect;
  ActivitySpec activity;
  LaunchSpec launch;

  double PeakTensorFlops(int freq_mhz) const;  // sm_count * flops/clk/SM * f
  double VoltageAt(int freq_mhz) const;        // linear interpolation, clamped at the ends
};

// Sets the board power limit (power.cap_w) to `watts`; InputError naming `field`, the value and
// the board's range [min_limit_w, max_limit_w] when it is outside.
void SetPowerLimit(GpuSpec& gpu, double watts, const std::string& field = "power_limit_w");

// Loads one preset file; throws InputError naming the file and the field.
GpuSpec LoadGpuSpecFile(const std::string& path);

// Presets shipped in DataDir()/gpus, by name; throws InputError listing the valid names.
GpuSpec GpuPreset(const std::string& name);
std::vector<std::string> GpuPresetNames();  // sorted

}  // namespace kareus::hw
