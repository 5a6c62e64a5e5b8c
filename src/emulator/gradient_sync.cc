// SPDX-License-Identifier: Apache-2.0
#include "kareus/emulator/gradient_sync.h"

#include <algorithm>
#include <limits>
#include <string>

#include "emulator/engine.h"
#include "kareus/common/error.h"

namespace kareus::emulator {
namespace {

using internal::Accumulator;
using internal::CompiledKernel;
using internal::GpuPhysics;
using internal::SetState;

void Validate(const hw::GpuSpec& gpu, const GradientSyncKnobs& knobs) {
  if (!gpu.clock.Contains(knobs.freq_mhz)) {
    ThrowInput("freq_mhz", std::to_string(knobs.freq_mhz),
               "not a supported clock of " + gpu.name + " (" + std::to_string(gpu.clock.min_mhz) +
                   ".." + std::to_string(gpu.clock.max_mhz) + " MHz in steps of " +
                   std::to_string(gpu.clock.step_mhz) + ")");
  }
  if (knobs.sms < 1 || knobs.sms >= gpu.sm_count) {
    ThrowInput("sms", std::to_string(knobs.sms),
               "the gradient reduction's SMs must leave compute at least one: valid 1.." +
                   std::to_string(gpu.sm_count - 1) + " on " + gpu.name);
  }
}

// The physics the reduction kernel sees: the same GPU, with the ring's bandwidth and latency
// those of the network its group spans (EvaluateSet takes a collective's bandwidth ceiling from
// bus_bps and CompileKernel its latency from latency_s).
GpuPhysics ReductionPhysics(const workload::WorkloadModel& model, const GpuPhysics& physics) {
  GpuPhysics p = physics;
  if (model.gradient_sync.inter_node) {
    p.bus_bps = std::min(physics.bus_bps, physics.inter_node_bps);
    p.latency_s = physics.inter_node_latency_s;
  }
  return p;
}

std::vector<CompiledKernel> CompileBuckets(const GpuPhysics& reduction,
                                           const std::vector<workload::GradientBucket>& buckets) {
  std::vector<CompiledKernel> out;
  out.reserve(buckets.size());
  for (const workload::GradientBucket& b : buckets)
    out.push_back(internal::CompileKernel(reduction, b.collective));
  return out;
}

void Accumulate(Accumulator& acc, double static_w, double power_w, double f_hz, double dt,
                bool compute_running, bool comm_running) {
  acc.time_s += dt;
  acc.dynamic_energy_j += (power_w - static_w) * dt;
  acc.freq_time_mhz_s += f_hz / 1e6 * dt;
  acc.min_freq_mhz = std::min(acc.min_freq_mhz, f_hz / 1e6);
  acc.max_freq_mhz = std::max(acc.max_freq_mhz, f_hz / 1e6);
  if (compute_running) acc.compute_busy_s += dt;
  if (comm_running) acc.comm_busy_s += dt;
  if (compute_running && comm_running) acc.overlap_s += dt;
}

}  // namespace

SimResult SimulateGradientBuckets(const workload::WorkloadModel& model,
                                  const std::vector<workload::GradientBucket>& buckets,
                                  const GradientSyncKnobs& knobs) {
  const hw::GpuSpec& gpu = model.workload.gpu;
  Validate(gpu, knobs);
  const GpuPhysics physics = internal::MakePhysics(gpu);
  const GpuPhysics reduction = ReductionPhysics(model, physics);
  const std::vector<CompiledKernel> kernels = CompileBuckets(reduction, buckets);
  // The engine's stream program: each bucket alone on its SMs, one after another, launched
  // from a device synchronisation (the hook around finalize_model_grads).
  internal::Program program;
  internal::AppendSequential(program, kernels, knobs.sms);
  Accumulator acc;
  internal::RunProgram(reduction, program, knobs.freq_mhz * 1e6, internal::HostStart::kAfterSync,
                       acc);
  return acc.Finish(physics.static_w);
}

SimResult SimulateBackwardWithGradientSync(const workload::WorkloadModel& model, int stage,
                                           int chunk,
                                           const std::vector<workload::GradientBucket>& buckets,
                                           const GradientSyncKnobs& knobs) {
  const hw::GpuSpec& gpu = model.workload.gpu;
  Validate(gpu, knobs);
  if (stage < 0 || stage >= model.num_stages) {
    ThrowInput("stage", std::to_string(stage), "valid 0.." + std::to_string(model.num_stages - 1));
  }
  if (chunk < 0 || chunk >= model.num_chunks) {
    ThrowInput("chunk", std::to_string(chunk), "valid 0.." + std::to_string(model.num_chunks - 1));
  }
  const GpuPhysics physics = internal::MakePhysics(gpu);
  const GpuPhysics reduction = ReductionPhysics(model, physics);
  const std::vector<workload::Op> order = workload::BackwardKernelOrder(model, stage, chunk);
  std::vector<CompiledKernel> compute;
  compute.reserve(order.size());
  for (const workload::Op& op : order) compute.push_back(internal::CompileKernel(physics, op));
  const std::vector<CompiledKernel> comm = CompileBuckets(reduction, buckets);
  const int n = static_cast<int>(compute.size());
  const int nb = static_cast<int>(comm.size());
  const int sms = knobs.sms;
  const int library_sms = std::clamp(physics.library_default_sms, 1, physics.sm_count - 1);
  const double f_lock_hz = knobs.freq_mhz * 1e6;
  constexpr double kDone = 1e-12;
  const double inf = std::numeric_limits<double>::infinity();

  // The engine's timing rules (internal::RunProgram with HostStart::kAfterSync): the host
  // launches kernels in order from the device synchronisation that starts the instruction,
  // host_launch_s each (a bucket right after the kernel that completes it); a stream starts its
  // next kernel kernel_gap_s after the one before it (a bucket also kernel_gap_s after the
  // kernel it waits for); while nothing runs the GPU draws idle_w. Unlike the engine's two
  // streams, the reduction has its own stream (its own NCCL communicator): a bucket runs beside
  // the backward's in-layer collectives.
  std::vector<double> kernel_launch_s(static_cast<std::size_t>(n), 0.0);
  std::vector<double> bucket_launch_s(static_cast<std::size_t>(nb), 0.0);
  {
    int ordinal = 0, b = 0;
    for (int k = 0; k < n; ++k) {
      if (!compute[static_cast<std::size_t>(k)].empty) ++ordinal;
      kernel_launch_s[static_cast<std::size_t>(k)] = ordinal * physics.host_launch_s;
      for (; b < nb && buckets[static_cast<std::size_t>(b)].ready_after <= k; ++b) {
        if (!comm[static_cast<std::size_t>(b)].empty) ++ordinal;
        bucket_launch_s[static_cast<std::size_t>(b)] = ordinal * physics.host_launch_s;
      }
    }
  }
  const double gap = physics.kernel_gap_s;
  // One run of the three streams at clock limit f_lock (held per set, or unheld: the power
  // limit's mode, internal::HoldToPowerLimit).
  auto run = [&](double f_lock, bool hold_each_set) {
    auto realize = [&](const GpuPhysics& ph, const CompiledKernel* c, int c_sms,
                       const CompiledKernel* m, int m_sms, SetState* out) {
      if (hold_each_set) return internal::RealizedClockHz(ph, c, c_sms, m, m_sms, f_lock, out);
      *out = internal::EvaluateSet(ph, c, c_sms, m, m_sms, f_lock);
      return f_lock;
    };
    std::vector<double> done_at(static_cast<std::size_t>(n), 0.0);  // when kernel k ended
    Accumulator acc;
    double t = 0.0;
    int i = 0;  // running (or next) backward kernel
    bool c_run = false;
    double c_left = 1.0, c_free = 0.0;
    int q = 0;  // running (or next) bucket
    bool m_run = false;
    double m_left = 1.0, m_free = 0.0;
    while (true) {
      if (!c_run) {
        for (; i < n && compute[static_cast<std::size_t>(i)].empty; ++i)
          done_at[static_cast<std::size_t>(i)] = c_free;
      }
      if (!m_run) {
        while (q < nb && comm[static_cast<std::size_t>(q)].empty) ++q;
      }
      double c_ready = inf, m_ready = inf;
      if (!c_run && i < n) {
        c_ready = std::max(kernel_launch_s[static_cast<std::size_t>(i)], c_free + gap);
        if (c_ready <= t) {
          c_run = true;
          c_left = 1.0;
          c_ready = inf;
        }
      }
      // A bucket waits for the kernel that completes its gradients and for the bucket before it.
      if (!m_run && q < nb && buckets[static_cast<std::size_t>(q)].ready_after < i) {
        const int after = buckets[static_cast<std::size_t>(q)].ready_after;
        m_ready = std::max({bucket_launch_s[static_cast<std::size_t>(q)], m_free + gap,
                            (after >= 0 ? done_at[static_cast<std::size_t>(after)] : 0.0) + gap});
        if (m_ready <= t) {
          m_run = true;
          m_left = 1.0;
          m_ready = inf;
        }
      }
      const double next_ready = std::min(c_ready, m_ready);
      if (!c_run && !m_run) {
        if (i >= n && q >= nb) break;
        KAREUS_CHECK(next_ready < inf)
            << "gradient sync simulation stalled at kernel " << i << ", bucket " << q;
        Accumulate(acc, physics.static_w, physics.idle_w, f_lock, next_ready - t, false, false);
        t = next_ready;
        continue;
      }
      const CompiledKernel* ck = c_run ? &compute[static_cast<std::size_t>(i)] : nullptr;
      const CompiledKernel* mk = m_run ? &comm[static_cast<std::size_t>(q)] : nullptr;
      SetState st;
      double f = f_lock;
      if (ck != nullptr && ck->collective) {
        // An in-layer collective of the sequential backward on the library-default SMs; with a
        // bucket next to it both are comm kernels: each at its own rate, their dynamic power adds.
        SetState tp;
        f = realize(physics, nullptr, 0, ck, library_sms, &tp);
        st.compute_rate = tp.comm_rate;
        st.power_w = tp.power_w;
        if (mk != nullptr) {
          const SetState dp = internal::EvaluateSet(reduction, nullptr, 0, mk, sms, f);
          st.comm_rate = dp.comm_rate;
          st.power_w += dp.power_w - physics.idle_w;
        }
      } else if (ck != nullptr) {
        f = realize(reduction, ck, physics.sm_count - (mk ? sms : 0), mk, sms, &st);
      } else {
        f = realize(reduction, nullptr, 0, mk, sms, &st);
      }
      const double dt_c = c_run ? c_left / st.compute_rate : inf;
      const double dt_m = m_run ? m_left / st.comm_rate : inf;
      const double dt = std::min({dt_c, dt_m, next_ready - t});
      Accumulate(acc, physics.static_w, st.power_w, f, dt, c_run, m_run);
      const double t_end = dt == next_ready - t ? next_ready : t + dt;
      if (c_run) {
        c_left -= st.compute_rate * dt;
        if (dt_c <= dt || c_left < kDone) {
          c_run = false;
          c_free = t_end;
          done_at[static_cast<std::size_t>(i)] = t_end;
          ++i;
        }
      }
      if (m_run) {
        m_left -= st.comm_rate * dt;
        if (dt_m <= dt || m_left < kDone) {
          m_run = false;
          m_free = t_end;
          ++q;
        }
      }
      t = t_end;
    }
    return acc;
  };
  return internal::HoldToPowerLimit(physics, f_lock_hz, run).Finish(physics.static_w);
}

}  // namespace kareus::emulator
