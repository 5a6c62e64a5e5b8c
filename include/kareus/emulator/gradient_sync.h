// SPDX-License-Identifier: Apache-2.0
// The data-parallel gradient reduction on the emulator: Megatron-Core DDP's buckets (an
// all-reduce, or a reduce-scatter with the distributed optimizer, of each bucket's gradients
// over the DP x CP replicas; workload::GradientBucket) run by one reduction kernel on `sms`
// SMs, alone or next to the backward that completes them (overlap_grad_reduce).
//
// Network: a group within one node (TP x CP x DP <= 8 GPUs) rings over NVLink like the
// in-layer collectives (interconnect.bus_bandwidth_gbps, latency_us); a group spanning nodes
// rings over the inter-node network, whose per-GPU share is the ring's slowest link
// (interconnect.inter_node_bandwidth_gbps, inter_node_latency_us of the GPU preset: A100 p4d
// 4 x 100 Gb/s EFA / 8 GPUs = 6.25 GB/s, H100/H200 p5 3200 Gb/s EFA / 8 GPUs = 50 GB/s). Either
// way the kernel's rate is capped by its SMs as for any collective (NCCL's per-channel ceiling,
// interconnect.channel_bandwidth_gbps), and it reads and writes HBM (2 x wire bytes plus the
// local operand of what it reduces), competing with compute for it.
#pragma once

#include <vector>

#include "kareus/emulator/emulator.h"
#include "kareus/workload/ops.h"

namespace kareus::emulator {

struct GradientSyncKnobs {
  int freq_mhz = 0;  // locked SM clock
  int sms = 0;       // SMs (thread blocks) of the reduction kernel
};

// `buckets` back to back with nothing else running (the exposed tail of the sync, or buckets
// reduced after the backward). InputError for a clock off the grid or SMs outside
// 1..sm_count-1. Empty buckets (a group of one) take no time.
SimResult SimulateGradientBuckets(const workload::WorkloadModel& model,
                                  const std::vector<workload::GradientBucket>& buckets,
                                  const GradientSyncKnobs& knobs);

// The backward of (stage, chunk) in sequential execution (workload::BackwardKernelOrder) with
// `buckets` reduced on their own stream as the backward completes them
// (GradientBucket::ready_after), one after another: a fluid simulation in which the running
// compute kernel gets sm_count - sms SMs while a bucket runs and shares HBM with it, and the
// reduction's SMs draw power. Done when the backward and every bucket are. The in-layer TP/CP
// collectives of the sequential backward run on the library-default SMs next to the bucket.
SimResult SimulateBackwardWithGradientSync(const workload::WorkloadModel& model, int stage,
                                           int chunk,
                                           const std::vector<workload::GradientBucket>& buckets,
                                           const GradientSyncKnobs& knobs);

}  // namespace kareus::emulator
