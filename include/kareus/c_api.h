/* SPDX-License-Identifier: Apache-2.0 */
/* The Kareus runtime's C API (libkareus.so): apply a plan in a training job from C, C++ built
 * with another compiler, or any language with a C FFI.
 *
 * Conventions:
 * - Every function returns an int status (KareusStatus); KAREUS_OK is 0. On failure,
 *   kareus_last_error() returns a message for the calling thread (valid until its next call);
 *   no C++ exception ever crosses this boundary.
 * - Objects are opaque handles made by *_create and released by *_destroy (NULL is accepted).
 *   A handle is used by one thread at a time, except where a function says otherwise.
 * - Strings in are NUL-terminated UTF-8; strings out are owned by the library, with the
 *   lifetime the function states.
 * - GPU indices are NVML indices; kareus_nvml_index_for_cuda_device maps a CUDA ordinal.
 * - NVML is loaded at run time: $KAREUS_NVML_LIBRARY, else libnvidia-ml.so.1. */
#ifndef KAREUS_C_API_H_
#define KAREUS_C_API_H_

#if defined(KAREUS_C_API_BUILD)
#define KAREUS_C_EXPORT __attribute__((visibility("default")))
#else
#define KAREUS_C_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum KareusStatus {
  KAREUS_OK = 0,
  KAREUS_ERROR_INVALID_ARGUMENT = 1, /* NULL handle or out-pointer, bad flag */
  KAREUS_ERROR_INPUT = 2,            /* bad plan/frontier file, clock, or a loop/plan mismatch */
  KAREUS_ERROR_ENVIRONMENT = 3,      /* NVML missing or failing, no such GPU, unreadable file */
  KAREUS_ERROR_INTERNAL = 4          /* anything else: a bug, please report it */
} KareusStatus;

/* The message of the calling thread's last failed call ("" if none). */
KAREUS_C_EXPORT const char* kareus_last_error(void);
/* "0.1.0". */
KAREUS_C_EXPORT const char* kareus_version(void);
/* Maps a CUDA device ordinal (e.g. LOCAL_RANK) to an NVML index through CUDA_VISIBLE_DEVICES. */
KAREUS_C_EXPORT int kareus_nvml_index_for_cuda_device(int cuda_device, int* nvml_index);

/* ---- Frequency controller: one GPU's locked SM clock, set off the calling thread. ---- */
typedef struct KareusController KareusController;

#define KAREUS_CONTROLLER_NO_SIGNAL_HANDLERS 1 /* do not reset clocks on SIGINT/SIGTERM */
#define KAREUS_CONTROLLER_NO_COALESCE 2        /* apply every queued clock, even stale ones */

typedef struct KareusControllerStats {
  long long requests;  /* request_clock calls */
  long long unchanged; /* requests that needed no NVML call */
  long long coalesced; /* requests superseded before the setter reached them */
  long long set_calls; /* nvmlDeviceSetGpuLockedClocks calls made */
  long long failures;  /* failed set/reset calls */
  int applied_mhz;     /* clock last applied; 0 = default clocks */
  int measure_only;    /* 1 after a permission refusal: no further clock changes */
} KareusControllerStats;

/* flags: a bitwise OR of KAREUS_CONTROLLER_* (0 for the defaults). */
KAREUS_C_EXPORT int kareus_controller_create(int gpu, int flags, KareusController** out);
/* Stops the setter thread and resets the locked clocks. */
KAREUS_C_EXPORT int kareus_controller_destroy(KareusController* controller);
/* Thread-safe, non-blocking: queue a clock (MHz) / a reset to default clocks. */
KAREUS_C_EXPORT int kareus_controller_request_clock(KareusController* controller, int freq_mhz);
KAREUS_C_EXPORT int kareus_controller_request_reset(KareusController* controller);
/* Blocking: wait until every queued request is applied / reset now and wait. */
KAREUS_C_EXPORT int kareus_controller_wait_idle(KareusController* controller);
KAREUS_C_EXPORT int kareus_controller_reset(KareusController* controller);
KAREUS_C_EXPORT int kareus_controller_stats(const KareusController* controller,
                                            KareusControllerStats* out);

/* ---- Plan executor: one pipeline stage of plan.json, driven by the training loop hooks. ---- */
typedef struct KareusExecutor KareusExecutor;

typedef enum KareusInstructionKind {
  KAREUS_FORWARD = 0,
  KAREUS_BACKWARD = 1
} KareusInstructionKind;

typedef struct KareusInstruction {
  int kind;           /* KareusInstructionKind */
  int microbatch;     /* 0-based */
  int freq_mhz;       /* planned SM clock */
  int nanobatched;    /* 1: two nanobatches with overlapped comm; 0: sequential */
  int num_partitions; /* knobs available through kareus_executor_partition */
  int step;           /* current step, 0-based */
  int index;          /* index of this instruction within the step */
} KareusInstruction;

/* Reads and validates plan_path (KAREUS_ERROR_INPUT on a bad file; no clock is touched).
 * controller may be NULL (order checks and knobs only); it must outlive the executor. */
KAREUS_C_EXPORT int kareus_executor_create(const char* plan_path, int stage,
                                           KareusController* controller, KareusExecutor** out);
KAREUS_C_EXPORT int kareus_executor_destroy(KareusExecutor* executor);
/* Hooks. kind is "forward" or "backward". A loop that does not follow the plan gets
 * KAREUS_ERROR_INPUT with the step, the instruction index and what was expected. */
KAREUS_C_EXPORT int kareus_executor_on_step_begin(KareusExecutor* executor);
KAREUS_C_EXPORT int kareus_executor_on_step_end(KareusExecutor* executor);
KAREUS_C_EXPORT int kareus_executor_on_instruction_begin(KareusExecutor* executor,
                                                         const char* kind);
KAREUS_C_EXPORT int kareus_executor_on_instruction_end(KareusExecutor* executor, const char* kind);
/* Interleaved 1F1B: the same hooks with the model chunk the loop runs (Megatron-LM's
 * model_chunk_id), checked against the plan. The hooks without a chunk follow the plan's
 * order, chunks included. */
KAREUS_C_EXPORT int kareus_executor_on_instruction_begin_chunk(KareusExecutor* executor,
                                                               const char* kind, int chunk);
KAREUS_C_EXPORT int kareus_executor_on_instruction_end_chunk(KareusExecutor* executor,
                                                             const char* kind, int chunk);
/* Around the stage's data-parallel gradient sync after its last instruction (Megatron-LM:
 * finalize_model_grads): applies the plan's clock for the sync tail; a no-op without one. */
KAREUS_C_EXPORT int kareus_executor_on_gradient_sync_begin(KareusExecutor* executor);
KAREUS_C_EXPORT int kareus_executor_on_gradient_sync_end(KareusExecutor* executor);
/* The model chunk of the current instruction; KAREUS_ERROR_INPUT before the first. */
KAREUS_C_EXPORT int kareus_executor_current_chunk(const KareusExecutor* executor, int* chunk);
/* The gradient reduction the current instruction launches (the last backward of a chunk):
 * *found = 0 when it launches none; else its SMs and whether its buckets overlap it (1/0).
 * sms and overlapped may be NULL. */
KAREUS_C_EXPORT int kareus_executor_gradient_sync(const KareusExecutor* executor, int* found,
                                                  int* sms, int* overlapped);
/* This stage's gradient-sync tail: *found = 0 without data parallelism; else its clock and
 * SMs (either may be NULL). */
KAREUS_C_EXPORT int kareus_executor_stage_gradient_sync(const KareusExecutor* executor, int* found,
                                                        int* freq_mhz, int* sms);
/* The current (last begun) instruction; KAREUS_ERROR_INPUT before the first. */
KAREUS_C_EXPORT int kareus_executor_current(const KareusExecutor* executor, KareusInstruction* out);
/* Knobs of partition i (0 <= i < num_partitions) of the current instruction. The strings stay
 * valid until the plan is swapped (a step boundary after a swap request) or destroy. */
KAREUS_C_EXPORT int kareus_executor_partition(const KareusExecutor* executor, int i,
                                              const char** type, int* sms, const char** slot);
/* Knobs of a partition type in the current instruction; *found = 0 when it has none (use the
 * library default). *slot has the lifetime stated for kareus_executor_partition. */
KAREUS_C_EXPORT int kareus_executor_knobs(const KareusExecutor* executor, const char* type,
                                          int* found, int* sms, const char** slot);
/* Swap to another plan of the same job at the next step boundary. Thread-safe. */
KAREUS_C_EXPORT int kareus_executor_swap_plan(KareusExecutor* executor, const char* plan_path);
/* Straggler mode: pick from folder/frontier.json the lowest-energy point with time <=
 * target_time_s and swap to its plan. Outputs may be NULL. */
KAREUS_C_EXPORT int kareus_executor_swap_to_frontier(KareusExecutor* executor, const char* folder,
                                                     double target_time_s, double* time_s,
                                                     double* energy_j, int* meets_target);

/* Power-budget mode: pick from folder/frontier.json the fastest point whose average power per
 * GPU (energy / time / the plan's GPUs) is <= budget_w_per_gpu, or the lowest-power point with
 * *fits = 0 when none is, and swap to its plan at the next step boundary. Outputs may be NULL. */
KAREUS_C_EXPORT int kareus_executor_swap_to_power_budget(KareusExecutor* executor,
                                                         const char* folder,
                                                         double budget_w_per_gpu, double* time_s,
                                                         double* power_w_per_gpu, int* fits);
/* Timetable mode: from the next step on, every on_step_begin moves to the plan the timetable
 * (timetable.json of kareus schedule, plans/ beside it) asks for at the system clock's time,
 * waiting there through its pauses; first_iteration: iterations done before this call. Each
 * process reads its own clock: a multi-process job whose ranks must switch at the same step
 * uses the Python module with rank 0's broadcast time (examples/pytorch/train.py). */
KAREUS_C_EXPORT int kareus_executor_follow_timetable(KareusExecutor* executor,
                                                     const char* timetable_path,
                                                     double first_iteration);
/* The last timetable decision: its interval (-1: past the last), whether the job is behind,
 * late (cannot finish by the deadline) or done, and the iterations planned by then. Outputs
 * may be NULL; an error before the first step in timetable mode. */
KAREUS_C_EXPORT int kareus_executor_timetable_status(const KareusExecutor* executor, int* interval,
                                                     int* behind, int* late, int* done,
                                                     double* planned_iterations);

/* ---- Energy monitor: named measurement windows (like ZeusMonitor). Thread-safe. ---- */
typedef struct KareusMonitor KareusMonitor;

/* gpus: NVML indices, or NULL/num_gpus = 0 for every GPU. */
KAREUS_C_EXPORT int kareus_monitor_create(const int* gpus, int num_gpus, KareusMonitor** out);
KAREUS_C_EXPORT int kareus_monitor_destroy(KareusMonitor* monitor);
KAREUS_C_EXPORT int kareus_monitor_num_gpus(const KareusMonitor* monitor, int* num_gpus);
KAREUS_C_EXPORT int kareus_monitor_begin_window(KareusMonitor* monitor, const char* name);
/* time_s, total_energy_j may be NULL; gpu_energy_j NULL or room for num_gpus values. */
KAREUS_C_EXPORT int kareus_monitor_end_window(KareusMonitor* monitor, const char* name,
                                              double* time_s, double* total_energy_j,
                                              double* gpu_energy_j);
KAREUS_C_EXPORT int kareus_monitor_cancel_window(KareusMonitor* monitor, const char* name);

#ifdef __cplusplus
}
#endif

#endif /* KAREUS_C_API_H_ */
