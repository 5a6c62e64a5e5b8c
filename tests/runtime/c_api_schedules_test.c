/* SPDX-License-Identifier: Apache-2.0 */
/* The C API on interleaved 1F1B with a data-parallel gradient sync
 * (tests/runtime/data/plan_interleaved_2x4x2.json): the chunk hooks, the reduction's knobs and
 * the sync tail's clock, through libkareus.so and the fake NVML. Plain C11, no framework. */
#include <stdio.h>
#include <string.h>

#include "c_check.h"
#include "kareus/c_api.h"

/* Stage 1's order for 2 stages x 4 microbatches x 2 chunks (Megatron-LM's interleaved loop:
 * warm-up (2-1-1)*2 + (2-1)*2 = 2 forwards): kind (0 forward, 1 backward), microbatch, chunk. */
static const int kOrder[16][3] = {{0, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1, 0, 1}, {0, 1, 1}, {1, 1, 1},
                                  {0, 2, 0}, {1, 0, 0}, {0, 3, 0}, {1, 1, 0}, {0, 2, 1}, {1, 2, 1},
                                  {0, 3, 1}, {1, 3, 1}, {1, 2, 0}, {1, 3, 0}};

int main(void) {
  char path[1024];
  KareusController* controller = NULL;
  KareusExecutor* executor = NULL;
  static const char* kKinds[] = {"forward", "backward"};
  int i, found = -1, sms = 0, overlapped = -1, freq = 0, chunk = -1, launches = 0;

  snprintf(path, sizeof path, "%s/plan_interleaved_2x4x2.json", KAREUS_RUNTIME_TEST_DATA);
  CHECK_OK(kareus_controller_create(
      1, KAREUS_CONTROLLER_NO_SIGNAL_HANDLERS | KAREUS_CONTROLLER_NO_COALESCE, &controller));
  CHECK_OK(kareus_executor_create(path, 1, controller, &executor));
  if (executor == NULL) return 1;
  CHECK_OK(kareus_executor_stage_gradient_sync(executor, &found, &freq, &sms));
  CHECK(found == 1 && freq == 1200 && sms == 4);
  for (i = 0; i < 16; ++i) {
    CHECK_OK(
        kareus_executor_on_instruction_begin_chunk(executor, kKinds[kOrder[i][0]], kOrder[i][2]));
    CHECK_OK(kareus_executor_current_chunk(executor, &chunk));
    CHECK(chunk == kOrder[i][2]);
    CHECK_OK(kareus_executor_gradient_sync(executor, &found, &sms, &overlapped));
    if (kOrder[i][0] == 1 && kOrder[i][1] == 3) {
      CHECK(found == 1 && sms == 2 + kOrder[i][2] && overlapped == 1);
      ++launches;
    } else {
      CHECK(found == 0);
    }
    CHECK_OK(
        kareus_executor_on_instruction_end_chunk(executor, kKinds[kOrder[i][0]], kOrder[i][2]));
  }
  CHECK(launches == 2);
  CHECK_OK(kareus_executor_on_gradient_sync_begin(executor));
  CHECK_OK(kareus_executor_on_gradient_sync_end(executor));
  CHECK_OK(kareus_executor_on_step_end(executor));
  CHECK_OK(kareus_controller_wait_idle(controller));
  {
    KareusControllerStats stats;
    CHECK_OK(kareus_controller_stats(controller, &stats));
    CHECK(stats.applied_mhz == 1200); /* the sync tail's clock */
  }
  /* The wrong chunk: refused with what the plan expects. */
  CHECK(kareus_executor_on_instruction_begin_chunk(executor, "forward", 1) == KAREUS_ERROR_INPUT);
  CHECK(strstr(kareus_last_error(), "chunk 1") != NULL);
  CHECK(kareus_executor_current_chunk(NULL, &chunk) == KAREUS_ERROR_INVALID_ARGUMENT);
  CHECK_OK(kareus_executor_destroy(executor));
  CHECK_OK(kareus_controller_destroy(controller));
  if (g_failures != 0) fprintf(stderr, "%d check(s) failed\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}
