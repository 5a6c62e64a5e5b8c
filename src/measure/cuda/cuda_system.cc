// SPDX-License-Identifier: Apache-2.0
// The CUDA device layer: GEMMs through cuBLASLt (bf16, fp32 accumulation), attention as
// cuBLASLt strided-batched GEMMs plus the softmax kernels, memory-bound kernels (kernels.cu),
// collectives through NCCL communicators created with minCTAs = maxCTAs, two streams per GPU
// (communication at the higher priority), device events for timing and NVML for energy, clocks
// and clock locks (kareus::device's FrequencyController, whose guard resets clocks on signals and
// exit).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "kareus/common/error.h"
#include "kareus/device/frequency_controller.h"
#include "kareus/device/nvml.h"
#include "kareus/measure/cuda_backend.h"
#include "measure/cuda/cuda_libraries.h"
#include "measure/cuda/cuda_ops.h"
#include "measure/cuda/device.h"
#include "measure/cuda/kernels.h"

namespace kareus::measure {

bool CudaBackendBuilt() { return true; }

namespace internal {
namespace {

using kernels::Bf16;

void NcclCheck(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return;
  throw EnvironmentError(fmt::format("NCCL: {} failed: {} ({})", what,
                                     Nccl().GetErrorString(result), static_cast<int>(result)));
}

std::string UuidString(const cudaUUID_t& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  return fmt::format(
      "GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-"
      "{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
      b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
      b[15]);
}

// --- One GPU -------------------------------------------------------------------------------------

class CudaRank final : public DeviceRank {
 public:
  CudaRank(int ordinal, std::shared_ptr<device::Nvml> nvml) : nvml_(std::move(nvml)) {
    info_.ordinal = ordinal;
    Use();
    cudaDeviceProp prop{};
    CudaCheck(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties", ordinal);
    info_.name = prop.name;
    info_.uuid = UuidString(prop.uuid);
    info_.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    CudaCheck(cudaDeviceGetAttribute(&info_.sm_count, cudaDevAttrMultiProcessorCount, ordinal),
              "cudaDeviceGetAttribute(multiProcessorCount)", ordinal);
    // NVML's index of this device: by UUID (CUDA and NVML may order devices differently), else
    // through CUDA_VISIBLE_DEVICES as the runtime does.
    for (int i = 0; i < nvml_->device_count(); ++i) {
      std::string uuid;
      if (nvml_->DeviceUuid(i, &uuid) == device::NvmlStatus::kSuccess && uuid == info_.uuid)
        info_.nvml_index = i;
    }
    if (info_.nvml_index < 0) {
      try {
        const int index = device::NvmlIndexForCudaDevice(ordinal);
        if (index < nvml_->device_count()) info_.nvml_index = index;
      } catch (const EnvironmentError&) {
      }
    }
    if (info_.nvml_index >= 0) {
      std::string name;
      if (nvml_->DeviceName(info_.nvml_index, &name) == device::NvmlStatus::kSuccess)
        info_.name = name;
      int mhz = 0;
      if (nvml_->MaxClockMhz(info_.nvml_index, device::ClockType::kSm, &mhz) ==
          device::NvmlStatus::kSuccess) {
        info_.max_sm_clock_mhz = mhz;
      }
      double watts = 0.0;
      if (nvml_->EnforcedPowerLimitW(info_.nvml_index, &watts) == device::NvmlStatus::kSuccess ||
          nvml_->PowerManagementLimitW(info_.nvml_index, &watts) == device::NvmlStatus::kSuccess) {
        info_.power_limit_w = watts;
      }
    }
    int least = 0, greatest = 0;
    CudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest),
              "cudaDeviceGetStreamPriorityRange", ordinal);
    CudaCheck(cudaStreamCreateWithPriority(&streams_[kComputeStream], cudaStreamNonBlocking, least),
              "cudaStreamCreateWithPriority", ordinal);
    // NCCL's kernels get the higher priority, as overlap frameworks give them, so their CTAs are
    // scheduled as soon as SMs free up.
    CudaCheck(cudaStreamCreateWithPriority(&streams_[kCommStream], cudaStreamNonBlocking, greatest),
              "cudaStreamCreateWithPriority", ordinal);
    CudaCheck(cudaEventCreate(&start_), "cudaEventCreate", ordinal);
    CudaCheck(cudaEventCreate(&end_), "cudaEventCreate", ordinal);
    CudaCheck(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming), "cudaEventCreate", ordinal);
    LtCheck(CublasLt().Create(&lt_), "cublasLtCreate");
    CudaCheck(cudaMalloc(&workspace_, kWorkspaceBytes), "cudaMalloc(cuBLASLt workspace)", ordinal);
  }

  ~CudaRank() override {
    cudaSetDevice(info_.ordinal);
    cudaDeviceSynchronize();
    for (Comm& c : comms_) {
      if (c.comm != nullptr) Nccl().CommDestroy(c.comm);
    }
    prepared_.clear();
    if (lt_ != nullptr) CublasLt().Destroy(lt_);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    for (cudaEvent_t e : {start_, end_, join_}) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    for (cudaStream_t s : streams_) {
      if (s != nullptr) cudaStreamDestroy(s);
    }
    for (void* p : {arena_, comm_buffer_, workspace_}) {
      if (p != nullptr) cudaFree(p);
    }
    controller_.reset();  // resets a locked clock
  }

  const DeviceInfo& Info() const override { return info_; }

  void SetCancel(const std::atomic<bool>* cancel) override { cancel_ = cancel; }

  int CreateCommunicator(const CommKey& key, const CommId& id, int nranks, int rank) override {
    Use();
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 1;
    if (key.ctas > 0) {
      // One CTA per SM: the comm kernel holds exactly `ctas` SMs (NVLS uses its own count).
      config.minCTAs = key.ctas;
      config.maxCTAs = key.ctas;
      config.nvlsCTAs = key.ctas;
    }
    ncclUniqueId unique{};
    static_assert(sizeof unique.internal <= sizeof id.bytes);
    std::memcpy(unique.internal, id.bytes.data(), sizeof unique.internal);
    ncclComm_t comm = nullptr;
    NcclCheck(Nccl().CommInitRankConfig(&comm, nranks, unique, rank, &config),
              "ncclCommInitRankConfig");
    comms_.push_back({comm, nranks, rank, key.ctas});
    return static_cast<int>(comms_.size()) - 1;
  }

  void Prepare(const Program& program) override {
    Use();
    size_t arena = arena_bytes_, comm = comm_bytes_;
    for (const ProgramItem& item : program.items) {
      if (item.kernel) {
        arena = std::max(arena, Prepared(*item.kernel).bytes);
      } else if (item.collective) {
        CheckComm(item.comm);
        comm = std::max(comm, AlignUp(static_cast<size_t>(item.collective->bytes)));
      }
    }
    while (static_cast<int>(events_.size()) < program.events) {
      cudaEvent_t e = nullptr;
      CudaCheck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate",
                info_.ordinal);
      events_.push_back(e);
    }
    if (arena > arena_bytes_) Grow(&arena_, &arena_bytes_, arena, "compute buffers");
    if (comm > comm_bytes_) Grow(&comm_buffer_, &comm_bytes_, comm, "collective buffer");
  }

  void BeginTiming() override {
    Use();
    CudaCheck(cudaEventRecord(start_, streams_[kComputeStream]), "cudaEventRecord", info_.ordinal);
  }

  void Enqueue(const Program& program, int64_t repeats) override {
    Use();
    std::vector<const PreparedKernel*> kernels(program.items.size(), nullptr);
    for (size_t i = 0; i < program.items.size(); ++i) {
      if (program.items[i].kernel) kernels[i] = &Prepared(*program.items[i].kernel);
    }
    for (int64_t r = 0; r < repeats; ++r) {
      for (const Step& step : program.steps) {
        cudaStream_t stream = streams_[step.stream];
        switch (step.kind) {
          case Step::Kind::kLaunch: {
            const ProgramItem& item = program.items[static_cast<size_t>(step.item)];
            if (item.kernel) {
              Launch(*kernels[static_cast<size_t>(step.item)], stream);
            } else {
              LaunchCollective(*item.collective, item.comm, stream);
            }
            break;
          }
          case Step::Kind::kRecord:
            CudaCheck(cudaEventRecord(events_[static_cast<size_t>(step.event)], stream),
                      "cudaEventRecord", info_.ordinal);
            break;
          case Step::Kind::kWait:
            CudaCheck(cudaStreamWaitEvent(stream, events_[static_cast<size_t>(step.event)], 0),
                      "cudaStreamWaitEvent", info_.ordinal);
            break;
        }
      }
    }
  }

  double EndTiming(double timeout_s) override {
    Use();
    // Both streams end the timed span: the compute stream waits for the communication stream.
    CudaCheck(cudaEventRecord(join_, streams_[kCommStream]), "cudaEventRecord", info_.ordinal);
    CudaCheck(cudaStreamWaitEvent(streams_[kComputeStream], join_, 0), "cudaStreamWaitEvent",
              info_.ordinal);
    CudaCheck(cudaEventRecord(end_, streams_[kComputeStream]), "cudaEventRecord", info_.ordinal);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (true) {
      const cudaError_t state = cudaEventQuery(end_);
      if (state == cudaSuccess) break;
      if (state != cudaErrorNotReady)
        CudaCheck(state, "running the measured kernels", info_.ordinal);
      for (const Comm& c : comms_) {
        ncclResult_t async = ncclSuccess;
        if (c.comm != nullptr && Nccl().CommGetAsyncError(c.comm, &async) == ncclSuccess &&
            async != ncclSuccess && async != ncclInProgress) {
          AbortComms();
          NcclCheck(async, "a collective (asynchronous error)");
        }
      }
      const bool cancelled = cancel_ != nullptr && cancel_->load();
      if (cancelled || std::chrono::steady_clock::now() > deadline) {
        AbortComms();  // a collective waiting for a peer that will not come
        throw EnvironmentError(
            cancelled ? fmt::format("device {}: stopped because another rank failed", info_.ordinal)
                      : fmt::format("device {}: the measured kernels did not finish in {:.0f} s "
                                    "(a hung collective?)",
                                    info_.ordinal, timeout_s));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    float ms = 0.0f;
    CudaCheck(cudaEventElapsedTime(&ms, start_, end_), "cudaEventElapsedTime", info_.ordinal);
    return ms / 1000.0;
  }

  std::optional<double> EnergyJ() override {
    if (info_.nvml_index < 0) return std::nullopt;
    uint64_t mj = 0;
    if (nvml_->TotalEnergyMj(info_.nvml_index, &mj) != device::NvmlStatus::kSuccess)
      return std::nullopt;
    return static_cast<double>(mj) / 1000.0;
  }

  int SmClockMhz() override {
    if (info_.nvml_index < 0) return 0;
    try {
      return nvml_->ClockMhz(info_.nvml_index, device::ClockType::kSm);
    } catch (const device::NvmlError&) {
      return 0;
    }
  }

  uint64_t ClockEventReasons() override {
    uint64_t reasons = 0;
    if (info_.nvml_index >= 0) nvml_->ClockEventReasons(info_.nvml_index, &reasons);
    return reasons;
  }

  ClockResult LockClock(int mhz) override {
    if (info_.nvml_index < 0) return ClockResult::kFailed;
    if (!controller_) {
      device::FrequencyControllerOptions options;
      options.gpu = info_.nvml_index;
      options.warn = [](const std::string&) {};  // the backend reports the outcome itself
      controller_ = std::make_unique<device::FrequencyController>(nvml_, options);
    }
    controller_->RequestClock(mhz);
    controller_->WaitIdle();
    if (controller_->measure_only()) return ClockResult::kNoPermission;
    return controller_->stats().applied_mhz == controller_->SnapToSupported(mhz)
               ? ClockResult::kOk
               : ClockResult::kFailed;
  }

  void ResetClock() override {
    if (controller_) controller_->ResetClocks();
  }

  double NowS() override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void SleepS(double seconds) override {
    if (seconds > 0.0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  }

 private:
  struct Comm {
    ncclComm_t comm = nullptr;
    int nranks = 1;
    int rank = 0;
    int ctas = 0;
  };

  void Use() const { CudaCheck(cudaSetDevice(info_.ordinal), "cudaSetDevice", info_.ordinal); }

  void CheckComm(int comm) const {
    KAREUS_CHECK(comm >= 0 && comm < static_cast<int>(comms_.size()))
        << "unknown communicator " << comm;
  }

  void AbortComms() {
    for (Comm& c : comms_) {
      if (c.comm != nullptr) {
        Nccl().CommAbort(c.comm);
        c.comm = nullptr;
      }
    }
  }

  // Replaces a buffer by a larger one filled with random bf16 values (data changes the power a
  // GEMM draws: zeros would read low).
  void Grow(void** buffer, size_t* size, size_t bytes, const char* what) {
    CudaCheck(cudaDeviceSynchronize(), "cudaDeviceSynchronize", info_.ordinal);
    if (*buffer != nullptr) CudaCheck(cudaFree(*buffer), "cudaFree", info_.ordinal);
    *buffer = nullptr;
    *size = 0;
    const cudaError_t code = cudaMalloc(buffer, bytes);
    if (code != cudaSuccess) {
      size_t free_bytes = 0, total = 0;
      cudaMemGetInfo(&free_bytes, &total);
      throw EnvironmentError(fmt::format(
          "CUDA device {}: cannot allocate {:.2f} GiB of {} ({:.2f} GiB free): {}", info_.ordinal,
          bytes / 1073741824.0, what, free_bytes / 1073741824.0, cudaGetErrorString(code)));
    }
    *size = bytes;
    CudaCheck(
        kernels::FillUniform(static_cast<Bf16*>(*buffer), static_cast<int64_t>(bytes / 2 / 8 * 8),
                             0x5eed + info_.ordinal, 1.0f, streams_[kComputeStream]),
        "filling buffers", info_.ordinal);
    CudaCheck(cudaStreamSynchronize(streams_[kComputeStream]), "cudaStreamSynchronize",
              info_.ordinal);
  }

  const PreparedKernel& Prepared(const KernelSpec& spec) {
    for (const auto& p : prepared_) {
      if (p->spec.SameShape(spec)) return *p;
    }
    prepared_.push_back(PrepareKernel(spec, lt_));
    return *prepared_.back();
  }

  void Launch(const PreparedKernel& p, cudaStream_t stream) {
    LaunchKernel(p, arena_, lt_, workspace_, ++dropout_seed_, stream, info_.ordinal);
  }

  void LaunchCollective(const CollectiveSpec& spec, int comm_index, cudaStream_t stream) {
    const Comm& c = comms_[static_cast<size_t>(comm_index)];
    const NcclApi& nccl = Nccl();
    const size_t n = static_cast<size_t>(std::max(1, c.nranks));
    const size_t tensors = static_cast<size_t>(std::max(1, spec.tensors));
    // Elements per tensor, a multiple of the group size (gathers and scatters split evenly).
    const size_t count = std::max<size_t>(n, static_cast<size_t>(spec.bytes) / 2 / tensors / n * n);
    char* base = static_cast<char*>(comm_buffer_);
    if (tensors > 1) NcclCheck(nccl.GroupStart(), "ncclGroupStart");
    for (size_t t = 0; t < tensors; ++t) {
      char* buffer = base + t * count * 2;
      switch (spec.type) {
        case workload::CollectiveType::kAllReduce:
          NcclCheck(nccl.AllReduce(buffer, buffer, count, ncclBfloat16, ncclSum, c.comm, stream),
                    "ncclAllReduce");
          break;
        case workload::CollectiveType::kAllGather: {
          const size_t part = count / n;  // in place: this rank's part sits at its offset
          NcclCheck(nccl.AllGather(buffer + c.rank * part * 2, buffer, part, ncclBfloat16, c.comm,
                                   stream),
                    "ncclAllGather");
          break;
        }
        case workload::CollectiveType::kReduceScatter: {
          const size_t part = count / n;
          NcclCheck(nccl.ReduceScatter(buffer, buffer + c.rank * part * 2, part, ncclBfloat16,
                                       ncclSum, c.comm, stream),
                    "ncclReduceScatter");
          break;
        }
        case workload::CollectiveType::kP2P:
          KAREUS_CHECK(false) << "P2P is not measured";
      }
    }
    if (tensors > 1) NcclCheck(nccl.GroupEnd(), "ncclGroupEnd");
  }

  DeviceInfo info_;
  std::shared_ptr<device::Nvml> nvml_;
  std::unique_ptr<device::FrequencyController> controller_;
  const std::atomic<bool>* cancel_ = nullptr;
  cudaStream_t streams_[2] = {nullptr, nullptr};
  cudaEvent_t start_ = nullptr, end_ = nullptr, join_ = nullptr;
  std::vector<cudaEvent_t> events_;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  void* arena_ = nullptr;
  size_t arena_bytes_ = 0;
  void* comm_buffer_ = nullptr;
  size_t comm_bytes_ = 0;
  std::vector<std::unique_ptr<PreparedKernel>> prepared_;
  std::vector<Comm> comms_;
  uint64_t dropout_seed_ = 0;
};

// --- The machine ---------------------------------------------------------------------------------

class CudaSystem final : public DeviceSystem {
 public:
  CudaSystem() {
    CheckCudaDriverLibrary();
    int count = 0;
    const cudaError_t code = cudaGetDeviceCount(&count);
    if (code != cudaSuccess) {
      throw EnvironmentError(
          fmt::format("CUDA cannot use this machine's GPUs: cudaGetDeviceCount: {} ({})",
                      cudaGetErrorString(code), static_cast<int>(code)));
    }
    if (count == 0) throw EnvironmentError("CUDA found no GPU on this machine");
    count_ = count;
    cudaDriverGetVersion(&cuda_driver_);
    CublasLt();
    Nccl();
    nvml_ = device::Nvml::Open();  // energy, clocks: EnvironmentError when NVML is missing
    if (nvml_->DriverVersion(&driver_) != device::NvmlStatus::kSuccess) driver_.clear();
  }

  int DeviceCount() const override { return count_; }
  std::unique_ptr<DeviceRank> OpenRank(int ordinal) override {
    if (ordinal < 0 || ordinal >= count_) {
      throw EnvironmentError(
          fmt::format("CUDA device {}: this machine has {} (0..{})", ordinal, count_, count_ - 1));
    }
    return std::make_unique<CudaRank>(ordinal, nvml_);
  }
  CommId NewCommId() override {
    ncclUniqueId unique{};
    NcclCheck(Nccl().GetUniqueId(&unique), "ncclGetUniqueId");
    CommId id;
    std::memcpy(id.bytes.data(), unique.internal, sizeof unique.internal);
    return id;
  }
  std::string DriverVersion() const override {
    const std::string cuda =
        fmt::format("CUDA {}.{}", cuda_driver_ / 1000, (cuda_driver_ % 1000) / 10);
    return driver_.empty() ? cuda : driver_ + " (" + cuda + ")";
  }
  std::string LibraryVersions() const override {
    return fmt::format("cuBLASLt {}, NCCL {}",
                       VersionString(static_cast<long long>(CublasLt().version)),
                       VersionString(Nccl().version));
  }
  std::string AttentionMethod() const override {
    return "unfused: cuBLASLt batched GEMMs + causal softmax kernel (not flash)";
  }

 private:
  int count_ = 0;
  int cuda_driver_ = 0;
  std::string driver_;
  std::shared_ptr<device::Nvml> nvml_;
};

}  // namespace

std::unique_ptr<DeviceSystem> OpenCudaSystem() { return std::make_unique<CudaSystem>(); }

}  // namespace internal
}  // namespace kareus::measure
