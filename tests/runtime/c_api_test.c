/* SPDX-License-Identifier: Apache-2.0 */
/* The C API driven from C: the 2-stage x 8-microbatch 1F1B loop of tests/runtime/data/plan_2x8.json
 * through libkareus.so and the fake NVML, then the call log is checked. Plain C11, no framework:
 * prints each failed check and exits non-zero. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "c_check.h"
#include "kareus/c_api.h"

enum { kStages = 2, kMicrobatches = 8, kSteps = 2, kMaxCalls = 256 };

/* Megatron's non-interleaved 1F1B order for one stage: 0 = forward, 1 = backward. */
static int OneFOneB(int stage, int* kinds) {
  int warmup = kStages - stage - 1;
  int n = 0, m;
  if (warmup > kMicrobatches) warmup = kMicrobatches;
  for (m = 0; m < warmup; ++m) kinds[n++] = 0;
  for (m = 0; m < kMicrobatches - warmup; ++m) {
    kinds[n++] = 0;
    kinds[n++] = 1;
  }
  for (m = 0; m < warmup; ++m) kinds[n++] = 1;
  return n;
}

/* The set/reset calls of `gpu` in the fake's log, as clocks (0 = reset). */
/* Copies `from` to `to`; 0 on success. */
static int CopyFile(const char* from, const char* to) {
  char buffer[4096];
  size_t n;
  FILE* in = fopen(from, "rb");
  FILE* out = in != NULL ? fopen(to, "wb") : NULL;
  if (out == NULL) {
    if (in != NULL) fclose(in);
    return -1;
  }
  while ((n = fread(buffer, 1, sizeof buffer, in)) > 0) fwrite(buffer, 1, n, out);
  fclose(in);
  return fclose(out);
}

static int ReadClockCalls(const char* log, int gpu, int* calls) {
  char line[256];
  int n = 0;
  FILE* in = fopen(log, "r");
  if (in == NULL) return 0;
  while (fgets(line, sizeof line, in) != NULL && n < kMaxCalls) {
    unsigned index = 0, min_mhz = 0, max_mhz = 0;
    int code = 0;
    if (sscanf(line, "set %u %u %u -> %d", &index, &min_mhz, &max_mhz, &code) == 4) {
      if ((int)index == gpu) calls[n++] = (int)max_mhz;
    } else if (sscanf(line, "reset %u -> %d", &index, &code) == 2) {
      if ((int)index == gpu) calls[n++] = 0;
    }
  }
  fclose(in);
  return n;
}

static void RunStage(const char* plan_path, int stage, int* planned_mhz, int* num_planned) {
  KareusController* controller = NULL;
  KareusExecutor* executor = NULL;
  KareusInstruction current;
  int kinds[2 * kMicrobatches];
  int n = OneFOneB(stage, kinds), step, i;
  static const char* kKindNames[] = {"forward", "backward"};

  CHECK_OK(kareus_controller_create(stage, KAREUS_CONTROLLER_NO_COALESCE, &controller));
  CHECK_OK(kareus_executor_create(plan_path, stage, controller, &executor));
  if (controller == NULL || executor == NULL) return;
  *num_planned = 0;
  for (step = 0; step < kSteps; ++step) {
    CHECK_OK(kareus_executor_on_step_begin(executor));
    for (i = 0; i < n; ++i) {
      CHECK_OK(kareus_executor_on_instruction_begin(executor, kKindNames[kinds[i]]));
      CHECK_OK(kareus_executor_current(executor, &current));
      CHECK(current.kind == kinds[i]);
      CHECK(current.step == step);
      CHECK(current.index == i);
      if (step == 0) planned_mhz[(*num_planned)++] = current.freq_mhz;
      if (current.kind == KAREUS_FORWARD) {
        int found = 0, sms = 0;
        const char* slot = NULL;
        CHECK_OK(kareus_executor_knobs(executor, "fwd_attn", &found, &sms, &slot));
        CHECK(found == 1 && sms >= 1 && slot != NULL && strcmp(slot, "rope_0") == 0);
        CHECK(current.nanobatched == 1 && current.num_partitions == 2);
      }
      CHECK_OK(kareus_executor_on_instruction_end(executor, kKindNames[kinds[i]]));
    }
    CHECK_OK(kareus_executor_on_step_end(executor));
  }
  CHECK_OK(kareus_controller_wait_idle(controller));
  {
    KareusControllerStats stats;
    CHECK_OK(kareus_controller_stats(controller, &stats));
    CHECK(stats.requests == kSteps * n);
    CHECK(stats.measure_only == 0);
    CHECK(stats.failures == 0);
  }
  CHECK_OK(kareus_executor_destroy(executor));
  CHECK_OK(kareus_controller_destroy(controller)); /* resets the clocks */
}

int main(void) {
  char log[256], plan_path[512], bad_path[512];
  int stage;
  snprintf(log, sizeof log, "/tmp/kareus_c_api_test_%d.log", (int)getpid());
  unlink(log);
  setenv("FAKE_NVML_LOG", log, 1);
  if (getenv("KAREUS_NVML_LIBRARY") == NULL)
    setenv("KAREUS_NVML_LIBRARY", KAREUS_FAKE_NVML_PATH, 1);
  snprintf(plan_path, sizeof plan_path, "%s/plan_2x8.json", KAREUS_RUNTIME_TEST_DATA);

  /* Errors come back as codes with a message, never as a crash. */
  CHECK(kareus_controller_request_clock(NULL, 1410) == KAREUS_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kareus_last_error(), "controller") != NULL);
  CHECK(strlen(kareus_version()) > 0);
  {
    KareusExecutor* executor = NULL;
    snprintf(bad_path, sizeof bad_path, "%s/bad_version.json", KAREUS_RUNTIME_TEST_DATA);
    CHECK(kareus_executor_create(bad_path, 0, NULL, &executor) == KAREUS_ERROR_INPUT);
    CHECK(executor == NULL);
    CHECK(strstr(kareus_last_error(), "unsupported version") != NULL);
    snprintf(bad_path, sizeof bad_path, "%s/truncated.json", KAREUS_RUNTIME_TEST_DATA);
    CHECK(kareus_executor_create(bad_path, 0, NULL, &executor) == KAREUS_ERROR_INPUT);
    CHECK(strstr(kareus_last_error(), "not valid JSON") != NULL);
    CHECK(kareus_executor_create(plan_path, 5, NULL, &executor) == KAREUS_ERROR_INPUT);
  }
  {
    KareusController* controller = NULL;
    CHECK(kareus_controller_create(7, 0, &controller) == KAREUS_ERROR_ENVIRONMENT);
    CHECK(strstr(kareus_last_error(), "gpu = 7") != NULL);
    CHECK(kareus_controller_create(0, 64, &controller) == KAREUS_ERROR_INVALID_ARGUMENT);
  }
  {
    int calls[kMaxCalls];
    CHECK(ReadClockCalls(log, 0, calls) == 0); /* nothing so far touched a clock */
  }

  /* A mismatched loop is reported with the step, the instruction and the expectation. */
  {
    KareusExecutor* executor = NULL;
    CHECK_OK(kareus_executor_create(plan_path, 0, NULL, &executor));
    CHECK_OK(kareus_executor_on_instruction_begin(executor, "forward"));
    CHECK_OK(kareus_executor_on_instruction_end(executor, "forward"));
    CHECK(kareus_executor_on_instruction_begin(executor, "backward") == KAREUS_ERROR_INPUT);
    CHECK(strstr(kareus_last_error(), "step 0, instruction 1") != NULL);
    CHECK(strstr(kareus_last_error(), "expects forward (microbatch 1)") != NULL);
    CHECK_OK(kareus_executor_destroy(executor));
  }

  /* The loop: clocks set only on change, in plan order, then one reset. */
  for (stage = 0; stage < kStages; ++stage) {
    int planned[2 * kMicrobatches], num_planned = 0, expected[kMaxCalls], calls[kMaxCalls];
    int num_expected = 0, num_calls, last = 0, step, i;
    RunStage(plan_path, stage, planned, &num_planned);
    for (step = 0; step < kSteps; ++step) {
      for (i = 0; i < num_planned; ++i) {
        if (planned[i] != last) expected[num_expected++] = planned[i];
        last = planned[i];
      }
    }
    expected[num_expected++] = 0;
    num_calls = ReadClockCalls(log, stage, calls);
    CHECK(num_calls == num_expected);
    for (i = 0; i < num_calls && i < num_expected; ++i) {
      if (calls[i] != expected[i]) {
        fprintf(stderr, "stage %d call %d: got %d, expected %d\n", stage, i, calls[i], expected[i]);
        ++g_failures;
      }
    }
  }

  /* Power budgets: the fastest frontier point that fits, or the lowest-power one (fits = 0).
   * plan_2x8.json's job has 2 GPUs; both points name a copy of it. */
  {
    char folder[256], frontier_path[512], copy_path[512];
    KareusExecutor* executor = NULL;
    double time_s = 0, power = 0;
    int fits = -1, interval = 0;
    FILE* out;
    snprintf(folder, sizeof folder, "/tmp/kareus_c_api_frontier_%d", (int)getpid());
    mkdir(folder, 0700);
    snprintf(frontier_path, sizeof frontier_path, "%s/frontier.json", folder);
    snprintf(copy_path, sizeof copy_path, "%s/plan.json", folder);
    CHECK(CopyFile(plan_path, copy_path) == 0);
    out = fopen(frontier_path, "w");
    CHECK(out != NULL);
    if (out != NULL) {
      fprintf(out,
              "{\"format\": \"kareus.frontier/1\", \"method\": \"kareus\", \"workload\": {},"
              " \"points\": [{\"time_s\": 1.0, \"energy_j\": 600, \"static_energy_j\": 0,"
              " \"plan_index\": 0, \"plan_path\": \"%s\"}, {\"time_s\": 1.5, \"energy_j\": 510,"
              " \"static_energy_j\": 0, \"plan_index\": 1, \"plan_path\": \"%s\"}]}\n",
              "plan.json", "plan.json");
      fclose(out);
    }
    CHECK_OK(kareus_executor_create(plan_path, 0, NULL, &executor));
    CHECK_OK(kareus_executor_swap_to_power_budget(executor, folder, 250.0, &time_s, &power, &fits));
    CHECK(time_s == 1.5 && power == 170.0 && fits == 1);
    CHECK_OK(kareus_executor_swap_to_power_budget(executor, folder, 100.0, NULL, NULL, &fits));
    CHECK(fits == 0);
    CHECK(kareus_executor_swap_to_power_budget(executor, folder, -1.0, NULL, NULL, NULL) ==
          KAREUS_ERROR_INPUT);
    CHECK(kareus_executor_timetable_status(executor, &interval, NULL, NULL, NULL, NULL) ==
          KAREUS_ERROR_INVALID_ARGUMENT);
    CHECK(kareus_executor_follow_timetable(executor, frontier_path, 0.0) == KAREUS_ERROR_INPUT);
    CHECK(strstr(kareus_last_error(), "kareus-timetable") != NULL);
    CHECK_OK(kareus_executor_destroy(executor));
    unlink(frontier_path);
    unlink(copy_path);
    rmdir(folder);
  }

  /* Energy windows: the counter's difference (the fake's counter is static here). */
  {
    KareusMonitor* monitor = NULL;
    int gpus[1] = {1}, num_gpus = 0;
    double time_s = -1, total_j = -1, per_gpu[1] = {-1};
    CHECK_OK(kareus_monitor_create(gpus, 1, &monitor));
    CHECK_OK(kareus_monitor_num_gpus(monitor, &num_gpus));
    CHECK(num_gpus == 1);
    CHECK_OK(kareus_monitor_begin_window(monitor, "step"));
    CHECK(kareus_monitor_begin_window(monitor, "step") == KAREUS_ERROR_INPUT);
    CHECK_OK(kareus_monitor_end_window(monitor, "step", &time_s, &total_j, per_gpu));
    CHECK(time_s >= 0.0 && total_j == 0.0 && per_gpu[0] == 0.0);
    CHECK(kareus_monitor_end_window(monitor, "step", NULL, NULL, NULL) == KAREUS_ERROR_INPUT);
    CHECK_OK(kareus_monitor_destroy(monitor));
  }

  /* A plan nested 100,000 levels deep is refused (no crash), and the clock stays as it was. */
  {
    char deep_path[512];
    KareusController* controller = NULL;
    KareusExecutor* executor = NULL;
    KareusControllerStats stats;
    FILE* out;
    int i;
    snprintf(deep_path, sizeof deep_path, "/tmp/kareus_c_api_deep_%d.json", (int)getpid());
    out = fopen(deep_path, "w");
    CHECK(out != NULL);
    if (out != NULL) {
      for (i = 0; i < 100000; ++i) fputc('[', out);
      fclose(out);
    }
    CHECK_OK(kareus_controller_create(0, 0, &controller));
    CHECK_OK(kareus_executor_create(plan_path, 0, controller, &executor));
    CHECK_OK(kareus_executor_on_instruction_begin(executor, "forward"));
    CHECK_OK(kareus_controller_wait_idle(controller));
    CHECK(kareus_executor_swap_plan(executor, deep_path) == KAREUS_ERROR_INPUT);
    CHECK(strstr(kareus_last_error(), "nested deeper") != NULL);
    {
      KareusExecutor* other = NULL;
      CHECK(kareus_executor_create(deep_path, 0, controller, &other) == KAREUS_ERROR_INPUT);
      CHECK(other == NULL);
    }
    CHECK_OK(kareus_controller_stats(controller, &stats));
    CHECK(stats.applied_mhz > 0); /* the plan's clock is still applied */
    CHECK_OK(kareus_executor_destroy(executor));
    CHECK_OK(kareus_controller_destroy(controller));
    unlink(deep_path);
  }

  /* SIGKILL: nothing of the process runs, yet the clock watcher resets the clock it locked. As a
   * child subreaper this process inherits the orphaned watcher and waits for it too. */
  {
    int calls[kMaxCalls], num_calls, status = 0;
    pid_t child;
    unlink(log);
    CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
    child = fork();
    if (child == 0) {
      KareusController* controller = NULL;
      if (kareus_controller_create(1, 0, &controller) != KAREUS_OK) _exit(3);
      if (kareus_controller_request_clock(controller, 1410) != KAREUS_OK) _exit(4);
      if (kareus_controller_wait_idle(controller) != KAREUS_OK) _exit(5);
      raise(SIGKILL);
      _exit(6);
    }
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    while (waitpid(-1, &status, 0) > 0 || errno == EINTR) {
    } /* the watcher */
    num_calls = ReadClockCalls(log, 1, calls);
    CHECK(num_calls == 2);
    CHECK(num_calls >= 1 && calls[0] == 1410);
    CHECK(num_calls >= 2 && calls[1] == 0);
  }

  unlink(log);
  if (g_failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", g_failures);
    return 1;
  }
  printf("c_api_test: all checks passed\n");
  return 0;
}
