// SPDX-License-Identifier: Apache-2.0
#include "emulator/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kareus/common/error.h"

namespace kareus::emulator::internal {
namespace {

constexpr double kGiga = 1e9;
constexpr double kMega = 1e6;
// A kernel whose remaining fraction falls below this is done (guards against a sliver segment
// left by rounding when two kernels end together).
constexpr double kDoneFraction = 1e-12;
// Bisection steps for the power-capped clock: the range (~2 GHz) / 2^36 < 0.1 Hz.
constexpr int kCapBisectionSteps = 36;

// Bytes on the wire per GPU as a fraction of the collective's buffer, for the bandwidth-optimal
// ring/all-pairs algorithms: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n
// (Patarasuk & Yuan 2009; NCCL's busbw convention, nccl-tests doc/PERFORMANCE.md).
double WireFraction(workload::CollectiveType type, int n) {
  const double nn = static_cast<double>(n);
  switch (type) {
    case workload::CollectiveType::kAllReduce:
      return 2.0 * (nn - 1.0) / nn;
    case workload::CollectiveType::kAllGather:
    case workload::CollectiveType::kReduceScatter:
      return (nn - 1.0) / nn;
    case workload::CollectiveType::kP2P:
      return 1.0;
  }
  return 1.0;
}

}  // namespace

GpuPhysics MakePhysics(const hw::GpuSpec& gpu) {
  GpuPhysics p;
  p.spec = &gpu;
  p.sm_count = gpu.sm_count;
  p.f_max_hz = gpu.clock.max_mhz * kMega;
  p.f_min_hz = gpu.clock.min_mhz * kMega;
  p.tensor_flops_per_cycle_sm = gpu.tensor_flops_per_clock_per_sm;
  p.cuda_flops_per_cycle_sm = gpu.tensor_flops_per_clock_per_sm / 16.0;
  p.gemm_efficiency = gpu.gemm_efficiency;
  p.attention_efficiency = gpu.attention_efficiency;
  p.hbm_peak_bps = gpu.hbm_bandwidth_gbps * kGiga;
  p.hbm_bps = gpu.hbm_bandwidth_gbps * gpu.hbm_efficiency * kGiga;
  p.sm_bps_at_fmax = gpu.sm_memory_bandwidth_gbps * kGiga;
  p.static_w = gpu.power.static_w;
  p.cap_w = gpu.power.cap_w;
  p.dynamic_max_w = gpu.power.dynamic_max_w;
  p.memory_w = gpu.power.memory_w;
  for (const hw::VoltagePoint& point : gpu.voltage_curve) {
    p.curve_hz.push_back(point.freq_mhz * kMega);
    p.curve_volts.push_back(point.volts);
  }
  p.v_max = VoltageAtHz(p, p.f_max_hz);
  p.bus_bps = gpu.interconnect.bus_bandwidth_gbps * kGiga;
  p.channel_bps = gpu.interconnect.channel_bandwidth_gbps * kGiga;
  p.channel_exponent = gpu.interconnect.channel_clock_exponent;
  p.latency_s = gpu.interconnect.latency_us * 1e-6;
  p.inter_node_bps = gpu.interconnect.inter_node_bandwidth_gbps * kGiga;
  p.inter_node_latency_s = gpu.interconnect.inter_node_latency_us * 1e-6;
  p.library_default_sms = gpu.interconnect.library_default_sms;
  p.activity = gpu.activity;
  KAREUS_CHECK(p.sm_count > 0 && p.f_max_hz > 0 && p.hbm_bps > 0 && p.sm_bps_at_fmax > 0 &&
               p.tensor_flops_per_cycle_sm > 0 && p.gemm_efficiency > 0 &&
               p.attention_efficiency > 0 && p.bus_bps > 0 && p.channel_bps > 0)
      << "GPU spec " << gpu.name << " lacks a figure the emulator needs";
  return p;
}

double VoltageAtHz(const GpuPhysics& p, double f_hz) {
  const std::vector<double>& x = p.curve_hz;
  if (x.empty()) return 1.0;
  if (f_hz <= x.front()) return p.curve_volts.front();
  if (f_hz >= x.back()) return p.curve_volts.back();
  const auto it = std::upper_bound(x.begin(), x.end(), f_hz);
  const size_t hi = static_cast<size_t>(it - x.begin());
  const size_t lo = hi - 1;
  const double w = (f_hz - x[lo]) / (x[hi] - x[lo]);
  return p.curve_volts[lo] + w * (p.curve_volts[hi] - p.curve_volts[lo]);
}

CompiledKernel CompileKernel(const GpuPhysics& p, const workload::Op& op) {
  CompiledKernel k;
  if (op.kind == workload::OpKind::kCollective) {
    k.collective = true;
    const bool p2p = op.collective == workload::CollectiveType::kP2P;
    if (op.bytes <= 0.0 || (!p2p && op.group_size <= 1)) {
      k.empty = true;
      return k;
    }
    const int n = p2p ? 2 : op.group_size;
    k.wire_bytes = op.bytes * WireFraction(op.collective, n);
    // HBM traffic it causes on this GPU: every byte sent is read from local HBM and every byte
    // received is written to it (2 x wire); a reduction also reads the local operand of the
    // (n-1)/n chunks it reduces (T3, arXiv 2401.16677, counts the same reads/writes as the
    // source of compute/comm memory contention). A P2P send only reads its buffer.
    const bool reduces = op.collective == workload::CollectiveType::kAllReduce ||
                         op.collective == workload::CollectiveType::kReduceScatter;
    if (p2p) {
      k.hbm_bytes = op.bytes;
      k.inter_node = true;
      k.latency_s = p.inter_node_latency_s;
    } else {
      k.hbm_bytes = 2.0 * k.wire_bytes + (reduces ? op.bytes * (n - 1.0) / n : 0.0);
      k.latency_s = p.latency_s;
    }
    return k;
  }
  if (op.flops <= 0.0 && op.bytes <= 0.0) {
    k.empty = true;
    return k;
  }
  // Without a tile count (a memory-bound kernel from a coarse model), assume 64 KiB per block:
  // enough blocks that wave quantization is negligible, as for real elementwise kernels.
  k.tiles = op.tiles > 0 ? op.tiles
                         : std::max<int64_t>(1, static_cast<int64_t>(op.bytes / 65536.0));
  const double flops_per_tile = op.flops / static_cast<double>(k.tiles);
  switch (op.kind) {
    case workload::OpKind::kGemm:
      k.cycles_per_tile = flops_per_tile / (p.tensor_flops_per_cycle_sm * p.gemm_efficiency);
      k.core_activity = p.activity.gemm;
      break;
    case workload::OpKind::kAttention:
      k.cycles_per_tile =
          flops_per_tile / (p.tensor_flops_per_cycle_sm * p.attention_efficiency);
      k.core_activity = p.activity.attention;
      break;
    default:
      k.cycles_per_tile = flops_per_tile / p.cuda_flops_per_cycle_sm;
      k.core_activity = p.activity.elementwise;
      break;
  }
  k.hbm_bytes = std::max(0.0, op.bytes);
  return k;
}

CompiledPartition CompilePartition(const GpuPhysics& p, const workload::PartitionType& partition) {
  CompiledPartition c;
  c.compute.reserve(partition.compute_ops.size());
  for (const workload::Op& op : partition.compute_ops) c.compute.push_back(CompileKernel(p, op));
  c.collective = CompileKernel(p, partition.collective);
  c.has_collective = !c.collective.empty;
  return c;
}

// The model of one running set at clock f (DESIGN.md §5; symbols of gpu-power-model.md §6):
//   compute kernel on s SMs:  t_core = ceil(tiles/s) * cycles_per_tile / f        (waves)
//                             b_issue = min(s, tiles) * b_sm * f/f_max           (issue limit)
//                             demand d_c = bytes / max(t_core, bytes / min(B_hbm, b_issue))
//   collective on c SMs:      w = min(B_bus, c * b_ch * (f/f_max)^gamma)         (channels)
//                             t_wire = wire_bytes / w,  demand d_m = hbm_bytes / t_wire
//   HBM shared by demand:     if d_c + d_m > B_hbm, each gets B_hbm * d_i / (d_c + d_m)
//   times:                    t_c = max(t_core, bytes / alloc_c)                 (roofline)
//                             t_m = latency + max(t_wire, hbm_bytes / alloc_m)
//   power:  P = P_static + P_dyn_max * (V(f)/V_max)^2 * (f/f_max)
//                 * [ busy_SMs/S * (a_kind * u + a_stall * (1-u)) + c/S * a_comm ]
//             + P_mem * (HBM bytes/s used) / B_hbm_peak,       u = t_core / t_c
// (V^2 f dynamic power: Guerreiro et al. HPCA'18; component split: AccelWattch MICRO'21.)
SetState EvaluateSet(const GpuPhysics& p, const CompiledKernel* compute, int compute_sms,
                     const CompiledKernel* comm, int comm_sms, double f_hz) {
  const double fr = f_hz / p.f_max_hz;
  double t_core = 0.0, d_c = 0.0, busy_sms = 0.0, bytes_c = 0.0;
  const bool has_c = compute != nullptr && !compute->empty;
  if (has_c) {
    const int64_t s = std::max(compute_sms, 1);
    const int64_t waves = (compute->tiles + s - 1) / s;
    t_core = static_cast<double>(waves) * compute->cycles_per_tile / f_hz;
    const double s_used = static_cast<double>(std::min(s, compute->tiles));
    const double bw_cap = std::min(p.hbm_bps, s_used * p.sm_bps_at_fmax * fr);
    bytes_c = compute->hbm_bytes;
    const double t_alone = std::max(t_core, bytes_c / bw_cap);
    d_c = t_alone > 0.0 ? bytes_c / t_alone : 0.0;
    // Average busy SMs over the kernel: tiles / waves (the last wave runs partly empty).
    busy_sms = static_cast<double>(compute->tiles) / static_cast<double>(waves);
  }
  double t_wire = 0.0, d_m = 0.0;
  const bool has_m = comm != nullptr && !comm->empty;
  if (has_m) {
    double w;
    if (comm->inter_node) {
      w = p.inter_node_bps;
    } else {
      const double g = p.channel_exponent == 0.0 ? 1.0 : std::pow(fr, p.channel_exponent);
      w = std::min(p.bus_bps, comm_sms * p.channel_bps * g);
    }
    t_wire = comm->wire_bytes / w;
    d_m = comm->hbm_bytes / t_wire;
  }
  const double demand = d_c + d_m;
  const double share = demand > p.hbm_bps ? p.hbm_bps / demand : 1.0;

  SetState st;
  double bw_used = 0.0, sm_activity = 0.0;
  if (has_c) {
    const double t_c = bytes_c > 0.0 ? std::max(t_core, bytes_c / (d_c * share)) : t_core;
    st.compute_rate = 1.0 / t_c;
    bw_used += bytes_c / t_c;
    const double u = t_core / t_c;
    sm_activity += busy_sms * (compute->core_activity * u + p.activity.memory_stall * (1.0 - u));
  }
  if (has_m) {
    const double t_m = comm->latency_s + std::max(t_wire, comm->hbm_bytes / (d_m * share));
    st.comm_rate = 1.0 / t_m;
    bw_used += comm->hbm_bytes / t_m;
    if (!comm->inter_node) sm_activity += comm_sms * p.activity.comm;
  }
  const double v = VoltageAtHz(p, f_hz) / p.v_max;
  st.power_w = p.static_w + p.dynamic_max_w * v * v * fr * (sm_activity / p.sm_count) +
               p.memory_w * bw_used / p.hbm_peak_bps;
  return st;
}

double RealizedClockHz(const GpuPhysics& p, const CompiledKernel* compute, int compute_sms,
                       const CompiledKernel* comm, int comm_sms, double f_lock_hz,
                       SetState* state) {
  *state = EvaluateSet(p, compute, compute_sms, comm, comm_sms, f_lock_hz);
  if (p.cap_w <= 0.0 || state->power_w <= p.cap_w) return f_lock_hz;
  // Over the cap: the GPU lowers its clock until the power fits (a locked clock is an upper
  // bound; A100 HPL sustains ~1305 MHz at 400 W, glennklockwood.com/garden/peak-FLOPS). P is
  // increasing in f, so bisect for the highest fitting clock over the whole range.
  double lo = p.f_min_hz, hi = p.f_max_hz;
  SetState at_lo = EvaluateSet(p, compute, compute_sms, comm, comm_sms, lo);
  if (at_lo.power_w > p.cap_w) {
    *state = at_lo;  // not even the lowest clock fits; real GPUs throttle further, we stop here
    return lo;
  }
  for (int i = 0; i < kCapBisectionSteps; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (EvaluateSet(p, compute, compute_sms, comm, comm_sms, mid).power_w <= p.cap_w) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const double f = std::min(lo, f_lock_hz);
  *state = EvaluateSet(p, compute, compute_sms, comm, comm_sms, f);
  return f;
}

SimResult Accumulator::Finish(double static_w) const {
  SimResult r;
  r.time_s = time_s;
  r.static_energy_j = static_w * time_s;
  r.dynamic_energy_j = dynamic_energy_j;
  r.energy_j = r.static_energy_j + r.dynamic_energy_j;
  r.avg_power_w = time_s > 0.0 ? r.energy_j / time_s : 0.0;
  r.effective_freq_mhz = time_s <= 0.0                   ? 0.0
                         : min_freq_mhz == max_freq_mhz ? max_freq_mhz
                                                        : freq_time_mhz_s / time_s;
  r.compute_busy_s = compute_busy_s;
  r.comm_busy_s = comm_busy_s;
  r.overlap_s = overlap_s;
  return r;
}

namespace {

// Advances one segment of length dt with the set's state.
inline void Accumulate(Accumulator& acc, const GpuPhysics& p, const SetState& st, double f_hz,
                       double dt, bool compute_running, bool comm_running) {
  acc.time_s += dt;
  acc.dynamic_energy_j += (st.power_w - p.static_w) * dt;
  acc.freq_time_mhz_s += f_hz / kMega * dt;
  acc.min_freq_mhz = std::min(acc.min_freq_mhz, f_hz / kMega);
  acc.max_freq_mhz = std::max(acc.max_freq_mhz, f_hz / kMega);
  if (compute_running) acc.compute_busy_s += dt;
  if (comm_running) acc.comm_busy_s += dt;
  if (compute_running && comm_running) acc.overlap_s += dt;
}

}  // namespace

void RunPartition(const GpuPhysics& p, std::span<const CompiledKernel> compute,
                  const CompiledKernel* collective, int comm_sms, int launch_index,
                  double f_lock_hz, Accumulator& acc) {
  const int n = static_cast<int>(compute.size());
  const int launch = launch_index < 0 ? n : std::min(launch_index, n);
  const bool comm_present = collective != nullptr && !collective->empty;
  bool comm_started = false;
  bool comm_done = !comm_present;
  double comm_left = 1.0;
  double compute_left = 1.0;
  int i = 0;
  while (true) {
    // The collective starts when the compute op at its launch slot starts (§5.3).
    if (!comm_started && !comm_done && i >= launch) comm_started = true;
    if (i < n && compute[static_cast<size_t>(i)].empty) {
      ++i;
      continue;
    }
    const bool c_run = i < n;
    const bool m_run = comm_started && !comm_done;
    if (!c_run && !m_run) break;
    const CompiledKernel* ck = c_run ? &compute[static_cast<size_t>(i)] : nullptr;
    const CompiledKernel* mk = m_run ? collective : nullptr;
    const int c_sms = p.sm_count - (m_run ? comm_sms : 0);
    SetState st;
    const double f = RealizedClockHz(p, ck, c_sms, mk, comm_sms, f_lock_hz, &st);
    const double inf = std::numeric_limits<double>::infinity();
    const double dt_c = c_run ? compute_left / st.compute_rate : inf;
    const double dt_m = m_run ? comm_left / st.comm_rate : inf;
    const double dt = std::min(dt_c, dt_m);
    Accumulate(acc, p, st, f, dt, c_run, m_run);
    if (c_run) {
      compute_left -= st.compute_rate * dt;
      if (dt_c <= dt || compute_left < kDoneFraction) {
        ++i;
        compute_left = 1.0;
      }
    }
    if (m_run) {
      comm_left -= st.comm_rate * dt;
      if (dt_m <= dt || comm_left < kDoneFraction) comm_done = true;
    }
  }
}

void RunSequential(const GpuPhysics& p, std::span<const CompiledKernel> kernels,
                   int collective_sms, double f_lock_hz, Accumulator& acc) {
  for (const CompiledKernel& k : kernels) {
    if (k.empty) continue;
    SetState st;
    if (k.collective) {
      const double f = RealizedClockHz(p, nullptr, 0, &k, collective_sms, f_lock_hz, &st);
      Accumulate(acc, p, st, f, 1.0 / st.comm_rate, false, true);
    } else {
      const double f = RealizedClockHz(p, &k, p.sm_count, nullptr, 0, f_lock_hz, &st);
      Accumulate(acc, p, st, f, 1.0 / st.compute_rate, true, false);
    }
  }
}

}  // namespace kareus::emulator::internal
