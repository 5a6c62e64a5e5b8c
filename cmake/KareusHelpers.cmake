# SPDX-License-Identifier: Apache-2.0
# kareus_add_library(<component> SOURCES ... [DEPS ...])
#   Builds kareus_<component> (static) with the alias kareus::<component>; public headers live in
#   include/kareus/<component>/, private ones in src/<component>/.
# kareus_add_test(<name> SOURCES ... [DEPS ...] [LABELS ...])
#   One GoogleTest executable and one CTest entry per call.
# kareus_add_benchmark(<name> SOURCES ... [DEPS ...])

function(kareus_target_defaults target)
  target_compile_features(${target} PUBLIC cxx_std_20)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic)
    if(KAREUS_WARNINGS_AS_ERRORS)
      target_compile_options(${target} PRIVATE -Werror)
      # GCC 12 reports -Wrestrict inside libstdc++'s std::string at -O3 for ordinary code
      # (GCC bug 105329, fixed in GCC 13): keep it a warning there.
      if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
        target_compile_options(${target} PRIVATE -Wno-error=restrict)
      endif()
    endif()
  endif()
  if(KAREUS_SANITIZERS)
    foreach(san IN LISTS KAREUS_SANITIZERS)
      target_compile_options(${target} PUBLIC -fsanitize=${san} -fno-omit-frame-pointer)
      target_link_options(${target} PUBLIC -fsanitize=${san})
    endforeach()
  endif()
endfunction()

# Registers a library target for `cmake --install` (exported as kareus::<export_name>).
function(kareus_export target export_name)
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
  set_property(GLOBAL APPEND PROPERTY KAREUS_EXPORTED_TARGETS ${target})
endfunction()

function(kareus_add_library component)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  set(target kareus_${component})
  add_library(${target} STATIC ${ARG_SOURCES})
  add_library(kareus::${component} ALIAS ${target})
  target_include_directories(${target}
    PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:include>
    PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${target} PUBLIC ${ARG_DEPS})
  kareus_target_defaults(${target})
  kareus_export(${target} ${component})
endfunction()

function(kareus_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  kareus_target_defaults(${name})
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES
    ENVIRONMENT "KAREUS_DATA_DIR=${PROJECT_SOURCE_DIR}/data;KAREUS_SOURCE_DIR=${PROJECT_SOURCE_DIR};KAREUS_BINARY_DIR=${PROJECT_BINARY_DIR}"
    WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  if(ARG_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
endfunction()

function(kareus_add_benchmark name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark benchmark::benchmark_main)
  kareus_target_defaults(${name})
endfunction()
