// SPDX-License-Identifier: Apache-2.0
// The device layer the real-GPU backend sits on: what one GPU must do for a measurement (prepare
// kernels, create communicators, run a two-stream program many times and time it, read the
// energy counter and clocks, lock and reset the SM clock), behind an interface so that the
// orchestration above it (programs, the communicator cache, the measurement protocol, one host
// thread per rank, aggregation) is tested without a GPU through a fake (tests/measure/cuda/).
// The CUDA implementation is cuda_system.cc.
#pragma once

#include <array>
#include <atomic>
#include <compare>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kareus/workload/ops.h"

namespace kareus::measure::internal {

// ---------------------------------------------------------------------------------------------
// What runs: kernels with the workload's shapes, and collectives.

enum class KernelKind { kGemm, kAttention, kMemory };

// The memory-bound kernels (src/measure/cuda/kernels.cu). Each moves exactly the HBM bytes the
// workload model gives its op (reads + writes), so a measurement and the emulator count the
// same traffic; the pattern makes it the real computation of that op.
enum class MemoryPattern {
  kCopy,                // y = x (layout changes such as qkv_post, embedding rows); 4 B/element
  kRmsNorm,             // y = x / rms(x) * w over rows of `cols`; 4 B/element
  kRmsNormBackward,     // dx from x, dy, w; 6 B/element
  kRope,                // rotary embedding in place over rows of head_dim; 4 B/element
  kSwiglu,              // y = silu(gate) * up; 6 B/element of y
  kSwigluBackward,      // dgate, dup from dy, gate, up; 10 B/element
  kBiasDropoutAdd,      // y = residual + dropout(x), writes the 1-byte mask; 7 B/element
  kDropoutAddBackward,  // dx = dy * mask * scale; 5 B/element
  kAdd,                 // y = a + b; 6 B/element
};
const char* ToString(MemoryPattern pattern);
double BytesPerElement(MemoryPattern pattern);

// Causal self-attention of one TP/CP shard: `heads` query heads in `kv_heads` groups (GQA),
// q_len queries (S / CP) against kv_len keys (S).
struct AttentionShape {
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t q_len = 0;
  int64_t kv_len = 0;
  bool backward = false;
  auto operator<=>(const AttentionShape&) const = default;
};

// One compute kernel as the device runs it.
struct KernelSpec {
  std::string name;  // the workload op's name, for messages
  KernelKind kind = KernelKind::kMemory;
  // GEMM: C[m x n] = A[m x k] B[k x n], bf16 operands, fp32 accumulation.
  int64_t m = 0, n = 0, k = 0;
  AttentionShape attention;
  // Memory-bound: `rows` x `cols` elements (cols = the row length of norms and RoPE; 1 row of
  // all elements otherwise), rounded up to a multiple of 8 elements (16-byte vectors).
  MemoryPattern pattern = MemoryPattern::kCopy;
  int64_t rows = 0, cols = 0;
  double bytes = 0.0;  // the op's HBM bytes as the workload model counts them

  // Shapes only (the name is a label): two ops of one shape share their prepared state.
  bool SameShape(const KernelSpec& other) const;
};

struct CollectiveSpec {
  workload::CollectiveType type = workload::CollectiveType::kAllReduce;
  int64_t bytes = 0;  // the whole buffer of all tensors (all-gather: the gathered buffer)
  int tensors = 1;    // launched together in one NCCL group
  int group_size = 1;
  auto operator<=>(const CollectiveSpec&) const = default;
};

// ---------------------------------------------------------------------------------------------
// Communicators. A group of ranks and the CTAs its collectives get: `ctas` > 0 creates the
// communicator with minCTAs = maxCTAs = ctas (one CTA per SM); 0 is the library's default.

enum class GroupKind { kTensor, kContext };  // TP (all-reduce) and CP (all-gather, RS) groups

struct CommKey {
  GroupKind group = GroupKind::kTensor;
  int ctas = 0;
  auto operator<=>(const CommKey&) const = default;
};

// An NCCL unique id (ncclUniqueId is 128 bytes), made once per (group, CTAs) and shared by the
// ranks of the group.
struct CommId {
  std::array<char, 128> bytes{};
};

// ---------------------------------------------------------------------------------------------
// Programs: one execution of a partition, an instruction or fixed work, as launches and events
// on two streams (0: compute, 1: communication). Executing a program `repeats` times runs it
// back to back; every repeat starts when both streams finished the previous one.

inline constexpr int kComputeStream = 0;
inline constexpr int kCommStream = 1;

struct ProgramItem {
  std::optional<KernelSpec> kernel;          // a compute kernel, or
  std::optional<CollectiveSpec> collective;  // a collective on communicator `comm`
  int comm = -1;                             // a handle from DeviceRank::CreateCommunicator
};

struct Step {
  enum class Kind { kLaunch, kRecord, kWait };
  Kind kind = Kind::kLaunch;
  int stream = kComputeStream;
  int item = -1;   // kLaunch: index into Program::items
  int event = -1;  // kRecord: record `event` on `stream`; kWait: `stream` waits for `event`
  bool operator==(const Step&) const = default;
};

struct Program {
  std::vector<ProgramItem> items;
  std::vector<Step> steps;
  int events = 0;  // events the steps use (0..events-1)
};

// ---------------------------------------------------------------------------------------------
// The device.

struct DeviceInfo {
  int ordinal = 0;      // CUDA device ordinal
  int nvml_index = -1;  // NVML index (-1 when NVML does not know the device)
  std::string name;     // "NVIDIA H200"
  std::string uuid;     // "GPU-..." (empty when unknown)
  int sm_count = 0;
  int64_t memory_bytes = 0;
  int max_sm_clock_mhz = 0;    // NVML's maximum SM clock (0 when unknown)
  double power_limit_w = 0.0;  // enforced power limit (0 when unknown)
};

enum class ClockResult { kOk, kNoPermission, kFailed };

// One GPU, driven by one host thread at a time. Methods throw EnvironmentError on device,
// library or driver failures.
class DeviceRank {
 public:
  virtual ~DeviceRank() = default;
  virtual const DeviceInfo& Info() const = 0;

  // Creates this rank's communicator `key`: rank `rank` of `nranks`, all ranks of the group
  // calling together with the same `id`. Returns a handle for ProgramItem::comm.
  virtual int CreateCommunicator(const CommKey& key, const CommId& id, int nranks, int rank) = 0;

  // Allocates buffers (filled with random data) and plans for every item of `program`; cached,
  // so preparing the same kernels again costs nothing.
  virtual void Prepare(const Program& program) = 0;

  // Timing with device events: BeginTiming marks the start, Enqueue appends `repeats` runs of a
  // prepared program, EndTiming waits for everything and returns the seconds from the mark to
  // the end of the last run. EndTiming throws after `timeout_s` (a hung collective).
  virtual void BeginTiming() = 0;
  virtual void Enqueue(const Program& program, int64_t repeats) = 0;
  virtual double EndTiming(double timeout_s) = 0;
  // While set and true, EndTiming gives up waiting (another rank failed) and throws.
  virtual void SetCancel(const std::atomic<bool>* /*cancel*/) {}

  // Telemetry (NVML). EnergyJ: the total-energy counter in joules, nullopt when unsupported.
  virtual std::optional<double> EnergyJ() = 0;
  virtual int SmClockMhz() = 0;              // current SM clock, 0 when unknown
  virtual uint64_t ClockEventReasons() = 0;  // nvmlClocksEventReason bits, 0 when unknown

  // Locks the SM clock (min = max = mhz) and waits until applied; ResetClock restores the
  // default. Only called with --allow-clock-control.
  virtual ClockResult LockClock(int mhz) = 0;
  virtual void ResetClock() = 0;

  // Host time (monotonic seconds) and sleeping, through the device so a fake can run them on
  // virtual time.
  virtual double NowS() = 0;
  virtual void SleepS(double seconds) = 0;
};

// All GPUs of the machine and the process-wide libraries.
class DeviceSystem {
 public:
  virtual ~DeviceSystem() = default;
  virtual int DeviceCount() const = 0;
  virtual std::unique_ptr<DeviceRank> OpenRank(int ordinal) = 0;
  virtual CommId NewCommId() = 0;
  // What identifies measurements from this system: the driver, the libraries loaded and how
  // attention is computed.
  virtual std::string DriverVersion() const = 0;
  virtual std::string LibraryVersions() const = 0;  // "cublasLt 13.0.2, nccl 2.28.9"
  virtual std::string AttentionMethod() const = 0;
};

// The CUDA system (cuda_system.cc), or EnvironmentError naming what is missing: a build without
// CUDA, no driver (libcuda.so.1), no GPU, no cuBLASLt or NCCL, no NVML.
std::unique_ptr<DeviceSystem> OpenCudaSystem();

// NVML's clock event reason bits by name ("sw_power_cap", "hw_thermal_slowdown", ...).
std::vector<std::string> ClockEventReasonNames(uint64_t reasons);

}  // namespace kareus::measure::internal
