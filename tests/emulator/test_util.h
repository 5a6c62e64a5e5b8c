// SPDX-License-Identifier: Apache-2.0
// Shared fixtures of the emulator tests: GPU presets, hand-made kernels with exact shapes, and
// the published workloads (examples/paper) built once per test binary.
#pragma once

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "kareus/emulator/emulator.h"
#include "kareus/hw/gpu_spec.h"
#include "kareus/workload/ops.h"
#include "kareus/workload/workload.h"

namespace kareus::emulator::testing {

inline const hw::GpuSpec& A100() {
  static const hw::GpuSpec gpu = hw::GpuPreset("A100-SXM4-40GB");
  return gpu;
}

inline const hw::GpuSpec& H100() {
  static const hw::GpuSpec gpu = hw::GpuPreset("H100-SXM");
  return gpu;
}

// A BF16 GEMM C[m x n] = A[m x k] B[k x n] with 128 x 256 output tiles (as the workload model).
inline workload::Op MakeGemm(int64_t m, int64_t n, int64_t k) {
  workload::Op op;
  op.name = "gemm";
  op.module = "gemm";
  op.kind = workload::OpKind::kGemm;
  op.group = workload::SlotGroup::kLinear;
  op.m = m;
  op.n = n;
  op.k = k;
  op.flops = 2.0 * double(m) * double(n) * double(k);
  op.bytes = 2.0 * (double(m) * k + double(k) * n + double(m) * n);
  op.tiles = ((m + 127) / 128) * ((n + 255) / 256);
  return op;
}

// A streaming kernel (norm-like): `bytes` of HBM traffic, 2 FLOP per byte, 64 KiB per block.
inline workload::Op MakeMemoryOp(double bytes) {
  workload::Op op;
  op.name = "norm";
  op.module = "norm";
  op.kind = workload::OpKind::kMemory;
  op.group = workload::SlotGroup::kNorm;
  op.bytes = bytes;
  op.flops = 2.0 * bytes;
  op.tiles = static_cast<int64_t>(std::ceil(bytes / 65536.0));
  return op;
}

inline workload::Op MakeCollective(workload::CollectiveType type, double bytes, int group) {
  workload::Op op;
  op.name = "collective";
  op.module = "collective";
  op.kind = workload::OpKind::kCollective;
  op.collective = type;
  op.bytes = bytes;
  op.group_size = group;
  return op;
}

inline std::filesystem::path SourceDir() {
  const char* dir = std::getenv("KAREUS_SOURCE_DIR");
  return dir != nullptr ? std::filesystem::path(dir) : std::filesystem::path(".");
}

// examples/paper/01: Llama 3.2 3B, TP 8, MBS 8, seq 4096, PP 2 (15/13 layers), A100 40GB.
inline const workload::WorkloadModel& LlamaTp8() {
  static const workload::WorkloadModel model =
      workload::BuildWorkloadModel(workload::LoadWorkloadFile(
          SourceDir() / "examples/paper/01-llama3.2-3b-tp8-mbs8-seq4096.yaml"));
  return model;
}

// examples/paper/02: Llama 3.2 3B, CP 2 + TP 4, MBS 8, seq 4096.
inline const workload::WorkloadModel& LlamaCp2Tp4() {
  static const workload::WorkloadModel model =
      workload::BuildWorkloadModel(workload::LoadWorkloadFile(
          SourceDir() / "examples/paper/02-llama3.2-3b-cp2-tp4-mbs8-seq4096.yaml"));
  return model;
}

// The noise-free best (lowest energy) point of a sweep.
inline const SweepPoint& MinEnergy(const std::vector<SweepPoint>& points) {
  const SweepPoint* best = &points.front();
  for (const SweepPoint& p : points) {
    if (p.result.energy_j < best->result.energy_j) best = &p;
  }
  return *best;
}

}  // namespace kareus::emulator::testing
