# SPDX-License-Identifier: Apache-2.0
# cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -P run_consumer.cmake
# Installs the build into a fresh prefix, builds tests/consumer against it with
# find_package(kareus), and runs both programs.
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "${var} is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "failed (${result}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(file include/kareus/c_api.h include/kareus/methods/run.h bin/kareus
        libexec/kareus/kareus-clock-watcher
        share/kareus/data/gpus/A100-SXM4-40GB.yaml lib/cmake/kareus/kareusConfig.cmake)
  if(NOT EXISTS ${prefix}/${file})
    message(FATAL_ERROR "not installed: ${file}")
  endif()
endforeach()
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/build -G Ninja
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer_c ${SOURCE_DIR}/tests/runtime/data/plan_2x8.json)
run(${CMAKE_COMMAND} -E env KAREUS_DATA_DIR=${prefix}/share/kareus/data
    ${WORK_DIR}/build/consumer_cxx ${SOURCE_DIR}/examples/paper/01-llama3.2-3b-tp8-mbs8-seq4096.yaml)
# The installed CLI finds its presets beside its prefix.
run(${CMAKE_COMMAND} -E env --unset=KAREUS_DATA_DIR ${prefix}/bin/kareus gpus --json)
