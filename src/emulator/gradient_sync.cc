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
  for (const workload::GradientBucket& b : buckets) out.push_back(internal::CompileKernel(reduction, b.collective));
  return out;
}

void Accumulate(Accumulator& acc, double static_w, const SetState& st, double f_hz, double dt,
                bool compute_running, bool comm_running) {
  acc.time_s += dt;
  acc.dynamic_energy_j += (st.power_w - static_w) * dt;
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
  Accumulator acc;
  internal::RunSequential(reduction, kernels, knobs.sms, knobs.freq_mhz * 1e6, acc);
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
  const double f_lock = knobs.freq_mhz * 1e6;
  constexpr double kDone = 1e-12;
  const double inf = std::numeric_limits<double>::infinity();

  Accumulator acc;
  int i = 0;           // running (or next) backward kernel
  double compute_left = 1.0;
  int q = 0;           // running (or next) bucket
  bool bucket_running = false;
  double bucket_left = 1.0;
  while (true) {
    while (i < n && compute[static_cast<std::size_t>(i)].empty) ++i;
    while (q < nb && comm[static_cast<std::size_t>(q)].empty) ++q;
    // A bucket starts once the kernel that completes its gradients has ended and the previous
    // bucket is done (one reduction stream, buckets in order).
    if (!bucket_running && q < nb && (i >= n || buckets[static_cast<std::size_t>(q)].ready_after < i)) {
      bucket_running = true;
      bucket_left = 1.0;
    }
    const bool c_run = i < n;
    const bool m_run = bucket_running;
    if (!c_run && !m_run) break;
    const CompiledKernel* ck = c_run ? &compute[static_cast<std::size_t>(i)] : nullptr;
    const CompiledKernel* mk = m_run ? &comm[static_cast<std::size_t>(q)] : nullptr;
    SetState st;
    double f = f_lock;
    if (ck != nullptr && ck->collective) {
      // An in-layer collective of the sequential backward on the library-default SMs; with a
      // bucket next to it both are comm kernels: each at its own rate, their dynamic power adds.
      SetState tp;
      f = internal::RealizedClockHz(physics, nullptr, 0, ck, library_sms, f_lock, &tp);
      st.compute_rate = tp.comm_rate;
      st.power_w = tp.power_w;
      if (mk != nullptr) {
        const SetState dp = internal::EvaluateSet(reduction, nullptr, 0, mk, sms, f);
        st.comm_rate = dp.comm_rate;
        st.power_w += dp.power_w - physics.static_w;
      }
    } else if (ck != nullptr) {
      f = internal::RealizedClockHz(reduction, ck, physics.sm_count - (mk ? sms : 0), mk, sms, f_lock, &st);
    } else {
      f = internal::RealizedClockHz(reduction, nullptr, 0, mk, sms, f_lock, &st);
    }
    const double dt_c = c_run ? compute_left / st.compute_rate : inf;
    const double dt_m = m_run ? bucket_left / st.comm_rate : inf;
    const double dt = std::min(dt_c, dt_m);
    Accumulate(acc, physics.static_w, st, f, dt, c_run, m_run);
    if (c_run) {
      compute_left -= st.compute_rate * dt;
      if (dt_c <= dt || compute_left < kDone) {
        ++i;
        compute_left = 1.0;
      }
    }
    if (m_run) {
      bucket_left -= st.comm_rate * dt;
      if (dt_m <= dt || bucket_left < kDone) {
        bucket_running = false;
        ++q;
      }
    }
  }
  return acc.Finish(physics.static_w);
}

}  // namespace kareus::emulator
