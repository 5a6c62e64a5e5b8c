// SPDX-License-Identifier: Apache-2.0
#include "emulator/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

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
  p.idle_w = gpu.power.idle_w;
  p.cap_w = gpu.power.cap_w;
  p.cap_average = gpu.power.cap_mode == hw::PowerSpec::CapMode::kAverage;
  p.kernel_gap_s = gpu.launch.kernel_gap_us * 1e-6;
  p.host_launch_s = gpu.launch.host_launch_us * 1e-6;
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
  k.tiles =
      op.tiles > 0 ? op.tiles : std::max<int64_t>(1, static_cast<int64_t>(op.bytes / 65536.0));
  const double flops_per_tile = op.flops / static_cast<double>(k.tiles);
  switch (op.kind) {
    case workload::OpKind::kGemm:
      k.cycles_per_tile = flops_per_tile / (p.tensor_flops_per_cycle_sm * p.gemm_efficiency);
      k.core_activity = p.activity.gemm;
      break;
    case workload::OpKind::kAttention:
      k.cycles_per_tile = flops_per_tile / (p.tensor_flops_per_cycle_sm * p.attention_efficiency);
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
//   power:  P = P_idle + P_dyn_max * (V(f)/V_max)^2 * (f/f_max)
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
  st.power_w = p.idle_w + p.dynamic_max_w * v * v * fr * (sm_activity / p.sm_count) +
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
  r.effective_freq_mhz = time_s <= 0.0                  ? 0.0
                         : min_freq_mhz == max_freq_mhz ? max_freq_mhz
                                                        : freq_time_mhz_s / time_s;
  r.compute_busy_s = compute_busy_s;
  r.comm_busy_s = comm_busy_s;
  r.overlap_s = overlap_s;
  return r;
}

namespace {

// Advances one segment of length dt with the set's state.
inline void Accumulate(Accumulator& acc, const GpuPhysics& p, double power_w, double f_hz,
                       double dt, bool compute_running, bool comm_running) {
  acc.time_s += dt;
  acc.dynamic_energy_j += (power_w - p.static_w) * dt;
  acc.freq_time_mhz_s += f_hz / kMega * dt;
  acc.min_freq_mhz = std::min(acc.min_freq_mhz, f_hz / kMega);
  acc.max_freq_mhz = std::max(acc.max_freq_mhz, f_hz / kMega);
  if (compute_running) acc.compute_busy_s += dt;
  if (comm_running) acc.comm_busy_s += dt;
  if (compute_running && comm_running) acc.overlap_s += dt;
}

void PushLaunch(Program& program, Entry entry) {
  entry.launch_ordinal = ++program.launches;
  if (entry.kind == Entry::Kind::kComm) {
    ++program.comm_entries;
  } else {
    ++program.compute_entries;
  }
  program.entries.push_back(entry);
}

void PushJoin(Program& program) {
  program.entries.push_back({.kind = Entry::Kind::kJoin,
                             .kernel = nullptr,
                             .sms = 0,
                             .need = program.comm_entries,
                             .launch_ordinal = program.launches});
  ++program.compute_entries;
}

// The realized clock of a running set, memoized for the sets the power cap binds on (they
// recur: every occurrence of a partition type runs the same compiled kernels).
class CapCache {
 public:
  double Realize(const GpuPhysics& p, const CompiledKernel* ck, int c_sms, const CompiledKernel* mk,
                 int m_sms, double f_lock_hz, SetState* st) {
    *st = EvaluateSet(p, ck, c_sms, mk, m_sms, f_lock_hz);
    if (p.cap_w <= 0.0 || st->power_w <= p.cap_w) return f_lock_hz;
    const Key key{ck, mk, c_sms, m_sms};
    if (const auto it = cache_.find(key); it != cache_.end()) {
      *st = it->second.second;
      return it->second.first;
    }
    const double f = RealizedClockHz(p, ck, c_sms, mk, m_sms, f_lock_hz, st);
    cache_.emplace(key, std::make_pair(f, *st));
    return f;
  }

 private:
  struct Key {
    const CompiledKernel* compute;
    const CompiledKernel* comm;
    int compute_sms;
    int comm_sms;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      const size_t a = std::hash<const void*>()(k.compute);
      const size_t b = std::hash<const void*>()(k.comm);
      return a ^ (b * 0x9e3779b97f4a7c15ull) ^ (size_t(k.compute_sms) << 20) ^ size_t(k.comm_sms);
    }
  };
  std::unordered_map<Key, std::pair<double, SetState>, KeyHash> cache_;
};

}  // namespace

void AppendPartition(Program& program, const CompiledPartition& partition, bool with_collective,
                     int comm_sms, int launch_index) {
  const bool comm = with_collective && partition.has_collective;
  const int n = static_cast<int>(partition.compute.size());
  const int launch = launch_index < 0 ? n : std::min(launch_index, n);
  bool launched = !comm;
  auto launch_comm = [&] {
    PushLaunch(program, {.kind = Entry::Kind::kComm,
                         .kernel = &partition.collective,
                         .sms = comm_sms,
                         .need = program.compute_entries});
    launched = true;
  };
  for (int i = 0; i < n; ++i) {
    // The collective starts when the compute stream reaches the op at its launch slot (§5.3).
    if (!launched && i >= launch) launch_comm();
    const CompiledKernel& k = partition.compute[static_cast<size_t>(i)];
    if (k.empty) continue;
    PushLaunch(program, {.kind = Entry::Kind::kCompute, .kernel = &k});
  }
  if (!launched) launch_comm();
  // Partition end: the compute stream waits for the comm stream (§5.3).
  if (comm) PushJoin(program);
}

void AppendSequential(Program& program, std::span<const CompiledKernel> kernels,
                      int collective_sms) {
  for (const CompiledKernel& k : kernels) {
    if (k.empty) continue;
    if (k.collective) {
      PushLaunch(program, {.kind = Entry::Kind::kComm,
                           .kernel = &k,
                           .sms = collective_sms,
                           .need = program.compute_entries});
      PushJoin(program);
    } else {
      PushLaunch(program, {.kind = Entry::Kind::kCompute, .kernel = &k});
    }
  }
}

namespace {

// The event loop at one clock limit: with `hold_each_set`, the power cap lowers the clock of
// every running set on its own; without, every set runs at f_lock_hz.
void RunProgramAt(const GpuPhysics& p, const Program& program, double f_lock_hz, HostStart host,
                  bool hold_each_set, Accumulator& acc) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const std::vector<Entry>& entries = program.entries;
  const size_t n = entries.size();
  const double gap = p.kernel_gap_s;
  const bool after_sync = host == HostStart::kAfterSync;
  auto enqueued = [&](const Entry& e) {
    return after_sync ? e.launch_ordinal * p.host_launch_s : 0.0;
  };
  // When each stream completed its k-th entry (index 0: the start).
  thread_local std::vector<double> compute_done_at, comm_done_at;
  compute_done_at.assign(static_cast<size_t>(program.compute_entries) + 1, 0.0);
  comm_done_at.assign(static_cast<size_t>(program.comm_entries) + 1, 0.0);
  auto next_compute = [&](size_t from) {
    while (from < n && entries[from].kind == Entry::Kind::kComm) ++from;
    return from;
  };
  auto next_comm = [&](size_t from) {
    while (from < n && entries[from].kind != Entry::Kind::kComm) ++from;
    return from;
  };
  size_t ci = next_compute(0), mi = next_comm(0);
  int c_done = 0, m_done = 0;
  double c_free = 0.0, m_free = 0.0;  // when each stream finished its last entry
  bool c_run = false, m_run = false;
  double c_left = 1.0, m_left = 1.0;
  double t = 0.0;
  CapCache cap;
  while (true) {
    // Start whatever is ready at t; joins complete as soon as their collectives have.
    double c_ready = kInf, m_ready = kInf;
    for (bool progress = true; progress;) {
      progress = false;
      c_ready = m_ready = kInf;
      if (!c_run && ci < n) {
        const Entry& e = entries[ci];
        if (e.kind == Entry::Kind::kJoin) {
          if (m_done >= e.need) {
            c_free = std::max(c_free, comm_done_at[static_cast<size_t>(e.need)]);
            compute_done_at[static_cast<size_t>(++c_done)] = c_free;
            ci = next_compute(ci + 1);
            progress = true;
          }
        } else {
          c_ready = std::max(enqueued(e), c_free + gap);
          if (c_ready <= t) {
            c_run = true;
            c_left = 1.0;
            progress = true;
          }
        }
      }
      if (!m_run && mi < n) {
        const Entry& e = entries[mi];
        if (c_done >= e.need) {
          m_ready = std::max(
              {enqueued(e), m_free + gap, compute_done_at[static_cast<size_t>(e.need)] + gap});
          if (m_ready <= t) {
            m_run = true;
            m_left = 1.0;
            progress = true;
          }
        }
      }
    }
    if (c_run) c_ready = kInf;
    if (m_run) m_ready = kInf;
    const double next_ready = std::min(c_ready, m_ready);
    if (!c_run && !m_run) {
      if (ci >= n && mi >= n) break;
      KAREUS_CHECK(next_ready < kInf) << "stream program deadlocked at entry " << ci << "/" << mi;
      Accumulate(acc, p, p.idle_w, f_lock_hz, next_ready - t, false, false);
      t = next_ready;
      continue;
    }
    const CompiledKernel* ck = c_run ? entries[ci].kernel : nullptr;
    const CompiledKernel* mk = m_run ? entries[mi].kernel : nullptr;
    const int m_sms = m_run ? entries[mi].sms : 0;
    const int c_sms = p.sm_count - m_sms;
    SetState st;
    double f = f_lock_hz;
    if (hold_each_set) {
      f = cap.Realize(p, ck, c_sms, mk, m_sms, f_lock_hz, &st);
    } else {
      st = EvaluateSet(p, ck, c_sms, mk, m_sms, f_lock_hz);
    }
    const double dt_c = c_run ? c_left / st.compute_rate : kInf;
    const double dt_m = m_run ? m_left / st.comm_rate : kInf;
    const double dt = std::min({dt_c, dt_m, next_ready - t});
    Accumulate(acc, p, st.power_w, f, dt, c_run, m_run);
    const double t_end = dt == next_ready - t ? next_ready : t + dt;
    if (c_run) {
      c_left -= st.compute_rate * dt;
      if (dt_c <= dt || c_left < kDoneFraction) {
        c_run = false;
        c_free = t_end;
        compute_done_at[static_cast<size_t>(++c_done)] = t_end;
        ci = next_compute(ci + 1);
      }
    }
    if (m_run) {
      m_left -= st.comm_rate * dt;
      if (dt_m <= dt || m_left < kDoneFraction) {
        m_run = false;
        m_free = t_end;
        comm_done_at[static_cast<size_t>(++m_done)] = t_end;
        mi = next_comm(mi + 1);
      }
    }
    t = t_end;
  }
  // In a loop the host launches the next iteration while the GPU runs this one: an iteration
  // lasts at least the host's launch time, the GPU idling the rest.
  const double host_s = program.launches * p.host_launch_s;
  if (!after_sync && host_s > t) Accumulate(acc, p, p.idle_w, f_lock_hz, host_s - t, false, false);
}

double AveragePowerW(const GpuPhysics& p, const Accumulator& a) {
  return a.time_s > 0.0 ? p.static_w + a.dynamic_energy_j / a.time_s : 0.0;
}

void Add(Accumulator& acc, const Accumulator& run) {
  acc.time_s += run.time_s;
  acc.dynamic_energy_j += run.dynamic_energy_j;
  acc.freq_time_mhz_s += run.freq_time_mhz_s;
  acc.min_freq_mhz = std::min(acc.min_freq_mhz, run.min_freq_mhz);
  acc.max_freq_mhz = std::max(acc.max_freq_mhz, run.max_freq_mhz);
  acc.compute_busy_s += run.compute_busy_s;
  acc.comm_busy_s += run.comm_busy_s;
  acc.overlap_s += run.overlap_s;
}

}  // namespace

Accumulator HoldToPowerLimit(const GpuPhysics& p, double f_lock_hz,
                             const std::function<Accumulator(double, bool)>& run) {
  if (!p.cap_average || p.cap_w <= 0.0) return run(f_lock_hz, /*hold_each_set=*/true);
  // The average-holding limit: the highest clock up to the lock at which the run's average
  // power fits (average power rises with the clock), bisected over the whole range as
  // RealizedClockHz does for one set.
  Accumulator at_lock = run(f_lock_hz, false);
  if (AveragePowerW(p, at_lock) <= p.cap_w) return at_lock;
  double lo = p.f_min_hz, hi = f_lock_hz;
  for (int i = 0; i < kCapBisectionSteps; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (AveragePowerW(p, run(mid, false)) <= p.cap_w) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return run(lo, false);
}

void RunProgram(const GpuPhysics& p, const Program& program, double f_lock_hz, HostStart host,
                Accumulator& acc) {
  Add(acc, HoldToPowerLimit(p, f_lock_hz, [&](double f_hz, bool hold_each_set) {
        Accumulator run;
        RunProgramAt(p, program, f_hz, host, hold_each_set, run);
        return run;
      }));
}

}  // namespace kareus::emulator::internal
