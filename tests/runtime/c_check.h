/* SPDX-License-Identifier: Apache-2.0 */
/* The checks of the plain-C runtime tests (c_api_test.c, c_api_schedules_test.c): each failed
 * check prints its line and counts in g_failures; main() returns non-zero when any failed. */
#ifndef KAREUS_TESTS_RUNTIME_C_CHECK_H_
#define KAREUS_TESTS_RUNTIME_C_CHECK_H_

#include <stdio.h>

#include "kareus/c_api.h"

static int g_failures = 0;

#define CHECK(condition)                                                            \
  do {                                                                              \
    if (!(condition)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition); \
      ++g_failures;                                                                 \
    }                                                                               \
  } while (0)

/* A C API call that must return KAREUS_OK; prints kareus_last_error() otherwise. */
#define CHECK_OK(call)                                                             \
  do {                                                                             \
    int status_ = (call);                                                          \
    if (status_ != KAREUS_OK) {                                                    \
      fprintf(stderr, "%s:%d: %s -> %d: %s\n", __FILE__, __LINE__, #call, status_, \
              kareus_last_error());                                                \
      ++g_failures;                                                                \
    }                                                                              \
  } while (0)

#endif /* KAREUS_TESTS_RUNTIME_C_CHECK_H_ */
