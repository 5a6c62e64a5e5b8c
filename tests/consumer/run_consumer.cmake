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
foreach(file include/kareus/c_api.h include/kareus/methods/run.h include/kareus/device/nvml.h
        include/kareus/device/frequency_controller.h include/kareus/runtime/plan_executor.h
        bin/kareus libexec/kareus/kareus-clock-watcher
        share/kareus/data/gpus/A100-SXM4-40GB.yaml lib/cmake/kareus/kareusConfig.cmake
        lib/pkgconfig/kareus.pc)
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

# The C API through pkg-config: kareus.pc names the install prefix given to cmake --install.
find_program(PKG_CONFIG NAMES pkg-config pkgconf)
if(PKG_CONFIG)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${prefix}/lib/pkgconfig
                          ${PKG_CONFIG} --cflags --libs kareus
                  OUTPUT_VARIABLE pc_flags OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE pc_result)
  if(NOT pc_result EQUAL 0 OR NOT pc_flags MATCHES "-I${prefix}/include")
    message(FATAL_ERROR "pkg-config kareus: '${pc_flags}' (want -I${prefix}/include)")
  endif()
  separate_arguments(pc_list UNIX_COMMAND "${pc_flags}")
  run(cc ${SOURCE_DIR}/tests/consumer/consumer.c ${pc_list} -Wl,-rpath,${prefix}/lib
      -o ${WORK_DIR}/consumer_pkgconfig)
  run(${WORK_DIR}/consumer_pkgconfig ${SOURCE_DIR}/tests/runtime/data/plan_2x8.json)
endif()
# The Python package cmake --install put under the prefix (when the module was built): it
# imports from there and reads a plan, with the presets installed beside it.
file(GLOB python_packages ${prefix}/lib/python3*/*-packages/kareus/__init__.py)
if(EXISTS ${BUILD_DIR}/python/kareus/__init__.py)
  if(NOT python_packages)
    message(FATAL_ERROR "cmake --install put no kareus Python package under ${prefix}/lib")
  endif()
  list(GET python_packages 0 init)
  get_filename_component(package ${init} DIRECTORY)
  get_filename_component(site ${package} DIRECTORY)
  run(${CMAKE_COMMAND} -E env PYTHONPATH=${site} --unset=KAREUS_DATA_DIR /usr/bin/python3 -c
      "import kareus, sys; assert kareus.__file__.startswith(sys.argv[1]), kareus.__file__; print(len(kareus.load_plan(sys.argv[2])['stages']), 'stages from', kareus.__file__)"
      ${site} ${SOURCE_DIR}/tests/runtime/data/plan_2x8.json)
  foreach(file kareus-clock-watcher data/gpus/A100-SXM4-40GB.yaml _kareus.pyi py.typed)
    if(NOT EXISTS ${package}/${file})
      message(FATAL_ERROR "not installed with the Python package: ${file}")
    endif()
  endforeach()
endif()
