// SPDX-License-Identifier: Apache-2.0
// The C API over the runtime: every entry point is wrapped in Guard(), which turns exceptions
// into status codes and the thread-local last-error string (STYLE.md "Errors").
#include "kareus/c_api.h"

#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "kareus/device/frequency_controller.h"
#include "kareus/device/nvml.h"
#include "kareus/runtime/energy_monitor.h"
#include "kareus/runtime/plan_executor.h"

struct KareusController {
  std::unique_ptr<kareus::device::FrequencyController> impl;
};
struct KareusExecutor {
  std::unique_ptr<kareus::runtime::PlanExecutor> impl;
};
struct KareusMonitor {
  std::unique_ptr<kareus::runtime::EnergyMonitor> impl;
};

namespace kareus::runtime::internal {
namespace {

thread_local std::string t_last_error;

// A caller's mistake in using the API itself (NULL where a pointer is required, unknown flags).
class InvalidArgument : public std::exception {
 public:
  explicit InvalidArgument(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

template <typename T>
T* NotNull(T* pointer, const char* name) {
  if (pointer == nullptr) throw InvalidArgument(std::string(name) + " must not be NULL");
  return pointer;
}

// The current instruction, or KAREUS_ERROR_INPUT before the first one.
const kareus::plan::PlannedInstruction& Current(const PlanExecutor& executor) {
  if (!executor.has_current_instruction()) {
    throw InputError("no instruction has begun yet (call on_instruction_begin first)");
  }
  return executor.current_instruction();
}

template <typename Body>
int Guard(Body body) noexcept {
  try {
    body();
    t_last_error.clear();
    return KAREUS_OK;
  } catch (const InvalidArgument& e) {
    t_last_error = e.what();
    return KAREUS_ERROR_INVALID_ARGUMENT;
  } catch (const InputError& e) {
    t_last_error = e.what();
    return KAREUS_ERROR_INPUT;
  } catch (const EnvironmentError& e) {
    t_last_error = e.what();
    return KAREUS_ERROR_ENVIRONMENT;
  } catch (const std::bad_alloc&) {
    t_last_error = "out of memory";
    return KAREUS_ERROR_INTERNAL;
  } catch (const std::exception& e) {
    t_last_error = std::string("internal error: ") + e.what();
    return KAREUS_ERROR_INTERNAL;
  } catch (...) {
    t_last_error = "internal error: unknown exception";
    return KAREUS_ERROR_INTERNAL;
  }
}

// One NVML session for every handle of the process, opened on first use, closed with the last.
std::shared_ptr<device::Nvml> SharedNvml() {
  static std::mutex mutex;
  static std::weak_ptr<device::Nvml> cache;
  std::lock_guard<std::mutex> lock(mutex);
  std::shared_ptr<device::Nvml> nvml = cache.lock();
  if (!nvml) {
    nvml = device::Nvml::Open();
    cache = nvml;
  }
  return nvml;
}

}  // namespace
}  // namespace kareus::runtime::internal

using kareus::runtime::internal::Current;
using kareus::runtime::internal::Guard;
using kareus::runtime::internal::NotNull;
namespace rt = kareus::runtime;
namespace device = kareus::device;

extern "C" {

const char* kareus_last_error(void) { return kareus::runtime::internal::t_last_error.c_str(); }

const char* kareus_version(void) { return KAREUS_VERSION; }

int kareus_nvml_index_for_cuda_device(int cuda_device, int* nvml_index) {
  return Guard(
      [&] { *NotNull(nvml_index, "nvml_index") = device::NvmlIndexForCudaDevice(cuda_device); });
}

int kareus_controller_create(int gpu, int flags, KareusController** out) {
  return Guard([&] {
    NotNull(out, "out");
    *out = nullptr;
    if ((flags & ~(KAREUS_CONTROLLER_NO_SIGNAL_HANDLERS | KAREUS_CONTROLLER_NO_COALESCE)) != 0) {
      throw kareus::runtime::internal::InvalidArgument("flags = " + std::to_string(flags) +
                                                       ": unknown bits (use KAREUS_CONTROLLER_*)");
    }
    auto controller = std::make_unique<KareusController>();
    controller->impl = std::make_unique<device::FrequencyController>(
        kareus::runtime::internal::SharedNvml(),
        device::FrequencyControllerOptions{
            .gpu = gpu,
            .install_signal_handlers = (flags & KAREUS_CONTROLLER_NO_SIGNAL_HANDLERS) == 0,
            .coalesce = (flags & KAREUS_CONTROLLER_NO_COALESCE) == 0,
            .warn = {}});
    *out = controller.release();
  });
}

int kareus_controller_destroy(KareusController* controller) {
  return Guard([&] { delete controller; });
}

int kareus_controller_request_clock(KareusController* controller, int freq_mhz) {
  return Guard([&] { NotNull(controller, "controller")->impl->RequestClock(freq_mhz); });
}

int kareus_controller_request_reset(KareusController* controller) {
  return Guard([&] { NotNull(controller, "controller")->impl->RequestReset(); });
}

int kareus_controller_wait_idle(KareusController* controller) {
  return Guard([&] { NotNull(controller, "controller")->impl->WaitIdle(); });
}

int kareus_controller_reset(KareusController* controller) {
  return Guard([&] { NotNull(controller, "controller")->impl->ResetClocks(); });
}

int kareus_controller_stats(const KareusController* controller, KareusControllerStats* out) {
  return Guard([&] {
    NotNull(out, "out");
    const device::FrequencyController& impl = *NotNull(controller, "controller")->impl;
    const device::FrequencyControllerStats stats = impl.stats();
    *out = KareusControllerStats{.requests = stats.requests,
                                 .unchanged = stats.unchanged,
                                 .coalesced = stats.coalesced,
                                 .set_calls = stats.set_calls,
                                 .failures = stats.failures,
                                 .applied_mhz = stats.applied_mhz,
                                 .measure_only = impl.measure_only() ? 1 : 0};
  });
}

int kareus_executor_create(const char* plan_path, int stage, KareusController* controller,
                           KareusExecutor** out) {
  return Guard([&] {
    NotNull(out, "out");
    *out = nullptr;
    auto executor = std::make_unique<KareusExecutor>();
    executor->impl = std::make_unique<rt::PlanExecutor>(
        std::filesystem::path(NotNull(plan_path, "plan_path")),
        rt::PlanExecutorOptions{.stage = stage},
        controller != nullptr ? controller->impl.get() : nullptr);
    *out = executor.release();
  });
}

int kareus_executor_destroy(KareusExecutor* executor) {
  return Guard([&] { delete executor; });
}

int kareus_executor_on_step_begin(KareusExecutor* executor) {
  return Guard([&] { NotNull(executor, "executor")->impl->OnStepBegin(); });
}

int kareus_executor_on_step_end(KareusExecutor* executor) {
  return Guard([&] { NotNull(executor, "executor")->impl->OnStepEnd(); });
}

int kareus_executor_on_instruction_begin(KareusExecutor* executor, const char* kind) {
  return Guard(
      [&] { NotNull(executor, "executor")->impl->OnInstructionBegin(NotNull(kind, "kind")); });
}

int kareus_executor_on_instruction_end(KareusExecutor* executor, const char* kind) {
  return Guard(
      [&] { NotNull(executor, "executor")->impl->OnInstructionEnd(NotNull(kind, "kind")); });
}

int kareus_executor_on_instruction_begin_chunk(KareusExecutor* executor, const char* kind,
                                               int chunk) {
  return Guard([&] {
    NotNull(executor, "executor")->impl->OnInstructionBegin(NotNull(kind, "kind"), chunk);
  });
}

int kareus_executor_on_instruction_end_chunk(KareusExecutor* executor, const char* kind,
                                             int chunk) {
  return Guard(
      [&] { NotNull(executor, "executor")->impl->OnInstructionEnd(NotNull(kind, "kind"), chunk); });
}

int kareus_executor_on_gradient_sync_begin(KareusExecutor* executor) {
  return Guard([&] { NotNull(executor, "executor")->impl->OnGradientSyncBegin(); });
}

int kareus_executor_on_gradient_sync_end(KareusExecutor* executor) {
  return Guard([&] { NotNull(executor, "executor")->impl->OnGradientSyncEnd(); });
}

int kareus_executor_current_chunk(const KareusExecutor* executor, int* chunk) {
  return Guard([&] {
    NotNull(chunk, "chunk");
    *chunk = Current(*NotNull(executor, "executor")->impl).chunk;
  });
}

int kareus_executor_gradient_sync(const KareusExecutor* executor, int* found, int* sms,
                                  int* overlapped) {
  return Guard([&] {
    NotNull(found, "found");
    const auto sync = NotNull(executor, "executor")->impl->gradient_sync();
    *found = sync ? 1 : 0;
    if (!sync) return;
    if (sms != nullptr) *sms = sync->sms;
    if (overlapped != nullptr) *overlapped = sync->overlapped ? 1 : 0;
  });
}

int kareus_executor_stage_gradient_sync(const KareusExecutor* executor, int* found, int* freq_mhz,
                                        int* sms) {
  return Guard([&] {
    NotNull(found, "found");
    const auto& sync = NotNull(executor, "executor")->impl->stage_gradient_sync();
    *found = sync ? 1 : 0;
    if (!sync) return;
    if (freq_mhz != nullptr) *freq_mhz = sync->freq_mhz;
    if (sms != nullptr) *sms = sync->sms;
  });
}

int kareus_executor_current(const KareusExecutor* executor, KareusInstruction* out) {
  return Guard([&] {
    NotNull(out, "out");
    const rt::PlanExecutor& impl = *NotNull(executor, "executor")->impl;
    const kareus::plan::PlannedInstruction* instruction = &Current(impl);
    *out = KareusInstruction{
        .kind = instruction->kind == kareus::schedule::Direction::kForward ? KAREUS_FORWARD
                                                                           : KAREUS_BACKWARD,
        .microbatch = instruction->microbatch,
        .freq_mhz = instruction->freq_mhz,
        .nanobatched = instruction->mode == kareus::schedule::ExecutionMode::kNanobatched ? 1 : 0,
        .num_partitions = static_cast<int>(instruction->partitions.size()),
        .step = impl.step(),
        .index = impl.instruction_index()};
  });
}

int kareus_executor_partition(const KareusExecutor* executor, int i, const char** type, int* sms,
                              const char** slot) {
  return Guard([&] {
    const rt::PlanExecutor& impl = *NotNull(executor, "executor")->impl;
    const kareus::plan::PlannedInstruction* instruction = &Current(impl);
    if (i < 0 || i >= static_cast<int>(instruction->partitions.size())) {
      kareus::ThrowInput("i", std::to_string(i),
                         "must be in [0, num_partitions = " +
                             std::to_string(instruction->partitions.size()) + ")");
    }
    const kareus::plan::PartitionKnobs& knobs = instruction->partitions[i];
    if (type != nullptr) *type = knobs.type.c_str();
    if (sms != nullptr) *sms = knobs.sms;
    if (slot != nullptr) *slot = knobs.slot.c_str();
  });
}

int kareus_executor_knobs(const KareusExecutor* executor, const char* type, int* found, int* sms,
                          const char** slot) {
  return Guard([&] {
    NotNull(found, "found");
    const rt::PlanExecutor& impl = *NotNull(executor, "executor")->impl;
    NotNull(type, "type");
    *found = 0;
    if (!impl.has_current_instruction()) return;
    // Point into the plan (stable storage) rather than into a temporary copy.
    for (const kareus::plan::PartitionKnobs& knobs : impl.current_instruction().partitions) {
      if (knobs.type == type) {
        *found = 1;
        if (sms != nullptr) *sms = knobs.sms;
        if (slot != nullptr) *slot = knobs.slot.c_str();
        return;
      }
    }
  });
}

int kareus_executor_swap_plan(KareusExecutor* executor, const char* plan_path) {
  return Guard([&] {
    NotNull(executor, "executor")
        ->impl->SwapPlan(kareus::plan::ReadPlanFile(NotNull(plan_path, "plan_path")));
  });
}

int kareus_executor_swap_to_frontier(KareusExecutor* executor, const char* folder,
                                     double target_time_s, double* time_s, double* energy_j,
                                     int* meets_target) {
  return Guard([&] {
    const rt::FrontierChoice choice =
        NotNull(executor, "executor")
            ->impl->SwapToFrontier(NotNull(folder, "folder"), target_time_s);
    if (time_s != nullptr) *time_s = choice.point.time_s;
    if (energy_j != nullptr) *energy_j = choice.point.energy_j;
    if (meets_target != nullptr) *meets_target = choice.meets_target ? 1 : 0;
  });
}

int kareus_executor_swap_to_power_budget(KareusExecutor* executor, const char* folder,
                                         double budget_w_per_gpu, double* time_s,
                                         double* power_w_per_gpu, int* fits) {
  return Guard([&] {
    const rt::PowerChoice choice =
        NotNull(executor, "executor")
            ->impl->SwapToPowerBudget(NotNull(folder, "folder"), budget_w_per_gpu);
    if (time_s != nullptr) *time_s = choice.point.time_s;
    if (power_w_per_gpu != nullptr) *power_w_per_gpu = choice.power_w_per_gpu;
    if (fits != nullptr) *fits = choice.fits ? 1 : 0;
  });
}

int kareus_executor_follow_timetable(KareusExecutor* executor, const char* timetable_path,
                                     double first_iteration) {
  return Guard([&] {
    auto follower =
        std::make_shared<const rt::TimetableFollower>(NotNull(timetable_path, "timetable_path"));
    NotNull(executor, "executor")->impl->FollowTimetable(std::move(follower), first_iteration);
  });
}

int kareus_executor_timetable_status(const KareusExecutor* executor, int* interval, int* behind,
                                     int* late, int* done, double* planned_iterations) {
  return Guard([&] {
    const auto& step = NotNull(executor, "executor")->impl->timetable_step();
    if (!step) {
      throw kareus::runtime::internal::InvalidArgument(
          "no timetable decision yet (follow a timetable, then begin a step)");
    }
    if (interval != nullptr) *interval = step->interval;
    if (behind != nullptr) *behind = step->behind ? 1 : 0;
    if (late != nullptr) *late = step->late ? 1 : 0;
    if (done != nullptr) *done = step->done ? 1 : 0;
    if (planned_iterations != nullptr) *planned_iterations = step->planned_iterations;
  });
}

int kareus_monitor_create(const int* gpus, int num_gpus, KareusMonitor** out) {
  return Guard([&] {
    NotNull(out, "out");
    *out = nullptr;
    if (num_gpus < 0) kareus::ThrowInput("num_gpus", std::to_string(num_gpus), "must be >= 0");
    rt::EnergyMonitorOptions options;
    if (gpus != nullptr) options.gpus.assign(gpus, gpus + num_gpus);
    auto monitor = std::make_unique<KareusMonitor>();
    monitor->impl =
        std::make_unique<rt::EnergyMonitor>(kareus::runtime::internal::SharedNvml(), options);
    *out = monitor.release();
  });
}

int kareus_monitor_destroy(KareusMonitor* monitor) {
  return Guard([&] { delete monitor; });
}

int kareus_monitor_num_gpus(const KareusMonitor* monitor, int* num_gpus) {
  return Guard([&] {
    *NotNull(num_gpus, "num_gpus") =
        static_cast<int>(NotNull(monitor, "monitor")->impl->gpus().size());
  });
}

int kareus_monitor_begin_window(KareusMonitor* monitor, const char* name) {
  return Guard([&] { NotNull(monitor, "monitor")->impl->BeginWindow(NotNull(name, "name")); });
}

int kareus_monitor_end_window(KareusMonitor* monitor, const char* name, double* time_s,
                              double* total_energy_j, double* gpu_energy_j) {
  return Guard([&] {
    const rt::EnergyMeasurement measurement =
        NotNull(monitor, "monitor")->impl->EndWindow(NotNull(name, "name"));
    if (time_s != nullptr) *time_s = measurement.time_s;
    if (total_energy_j != nullptr) *total_energy_j = measurement.total_energy_j;
    if (gpu_energy_j != nullptr) {
      for (size_t i = 0; i < measurement.gpu_energy_j.size(); ++i) {
        gpu_energy_j[i] = measurement.gpu_energy_j[i];
      }
    }
  });
}

int kareus_monitor_cancel_window(KareusMonitor* monitor, const char* name) {
  return Guard([&] { NotNull(monitor, "monitor")->impl->CancelWindow(NotNull(name, "name")); });
}

}  // extern "C"
