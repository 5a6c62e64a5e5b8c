/* SPDX-License-Identifier: Apache-2.0 */
/* Loads a plan through the installed C API and walks stage 0 of it, without a GPU (no
 * frequency controller): the order check and the knobs. */
#include <stdio.h>
#include <string.h>

#include "kareus/c_api.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: consumer_c PLAN.json\n");
    return 2;
  }
  KareusExecutor* executor = NULL;
  if (kareus_executor_create(argv[1], 0, NULL, &executor) != KAREUS_OK) {
    fprintf(stderr, "kareus_executor_create: %s\n", kareus_last_error());
    return 1;
  }
  /* A wrong first instruction is refused with a message naming what the plan expects. */
  const int status = kareus_executor_on_instruction_begin(executor, "backward");
  if (status != KAREUS_ERROR_INPUT || strstr(kareus_last_error(), "expects forward") == NULL) {
    fprintf(stderr, "expected an order mismatch, got %d: %s\n", status, kareus_last_error());
    return 1;
  }
  kareus_executor_destroy(executor);
  printf("c api ok\n");
  return 0;
}
