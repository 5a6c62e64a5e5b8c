# SPDX-License-Identifier: Apache-2.0
# cmake -DSOURCE_DIR=... -DBUILD_DIR=... -DOUT_DIR=... -P device_check_script.cmake
# scripts/device-check.sh on this build's binaries (KAREUS_DEVICE_CHECK_BUILD_DIR, no build of
# its own): every phase runs and reports, and device-check.json is kareus's report with the
# script's phases. Without a GPU, cuda_device_test skips and the device check exits 2; with one,
# both run for real (minutes).
foreach(var SOURCE_DIR BUILD_DIR OUT_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "${var} is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${OUT_DIR})

execute_process(
  COMMAND ${CMAKE_COMMAND} -E env OUT=${OUT_DIR} KAREUS_DEVICE_CHECK_BUILD=0 KAREUS_DEVICE_CHECK_BUILD_DIR=${BUILD_DIR}
          bash ${SOURCE_DIR}/scripts/device-check.sh
  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "${out}${err}")
if(NOT result EQUAL 0)
  message(FATAL_ERROR "scripts/device-check.sh exited ${result} (it always exits 0)")
endif()
foreach(file device-check.json device-check.txt gpu-tests.log script.log)
  if(NOT EXISTS ${OUT_DIR}/${file})
    message(FATAL_ERROR "not written: ${OUT_DIR}/${file}")
  endif()
endforeach()

file(READ ${OUT_DIR}/device-check.json report)
function(expect_match path regex)
  string(JSON value ERROR_VARIABLE error GET "${report}" ${path})
  if(error)
    message(FATAL_ERROR "device-check.json: ${path}: ${error}")
  endif()
  if(NOT value MATCHES "${regex}")
    message(FATAL_ERROR "device-check.json: ${path} = '${value}' does not match '${regex}'")
  endif()
endfunction()
expect_match("format" "^kareus-device-check$")
expect_match("workload;status" "^ok$")
expect_match("script;configure" "^skipped")
expect_match("script;binaries" "^build ")
expect_match("script;device_check" "^exit [02] ")
# cuda_device_test and the orchestration tests both ran and exited 0 (skipped tests exit 0).
expect_match("script;gpu_tests" "exit 0 .*exit 0")
expect_match("script;gpu_tests" "PASSED")
string(JSON gpu_tests GET "${report}" script gpu_tests)
if(gpu_tests MATCHES "FAILED")
  message(FATAL_ERROR "device-check.json: GPU tests failed: ${gpu_tests}")
endif()
