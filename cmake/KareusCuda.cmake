# SPDX-License-Identifier: Apache-2.0
# The CUDA measurement backend (src/measure/cuda/) is built when the CUDA toolkit is found:
#   KAREUS_WITH_CUDA=AUTO (default): when nvcc and the cuBLASLt and NCCL headers are found;
#   KAREUS_WITH_CUDA=ON: required (configuration fails without them); OFF: never.
# Only the headers and the static CUDA runtime are needed at build time: cuBLASLt, NCCL and the
# driver (libcuda.so.1) are loaded at run time, so the same binary runs on a machine without a
# GPU (where `--backend cuda` exits 2 with a message). Sets KAREUS_CUDA_ENABLED.
set(KAREUS_WITH_CUDA AUTO CACHE STRING "Build the CUDA measurement backend: AUTO, ON or OFF")
set_property(CACHE KAREUS_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)
set(KAREUS_CUDA_ENABLED OFF)

function(kareus_cuda_unavailable reason)
  if(KAREUS_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KAREUS_WITH_CUDA=ON but ${reason}")
  endif()
  message(STATUS "Kareus: CUDA backend not built (${reason}; KAREUS_WITH_CUDA=${KAREUS_WITH_CUDA})")
endfunction()

if(NOT KAREUS_WITH_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "KAREUS_WITH_CUDA = ${KAREUS_WITH_CUDA}: must be AUTO, ON or OFF")
endif()

if(KAREUS_WITH_CUDA STREQUAL "OFF")
  message(STATUS "Kareus: CUDA backend not built (KAREUS_WITH_CUDA=OFF)")
else()
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
    find_program(KAREUS_NVCC nvcc PATHS /usr/local/cuda/bin NO_CACHE)
    if(KAREUS_NVCC)
      set(CMAKE_CUDA_COMPILER ${KAREUS_NVCC})
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    kareus_cuda_unavailable("no CUDA compiler (nvcc) was found")
  else()
    # sm_80 (A100) and sm_90 (H100/H200) machine code, plus compute_90 PTX for newer GPUs. Two
    # targets keep nvcc's share of the CI build small.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES "80-real;90")
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(NOT CUDAToolkit_FOUND)
      kareus_cuda_unavailable("nvcc was found but not the CUDA toolkit's libraries")
    else()
      find_path(KAREUS_CUBLASLT_INCLUDE_DIR cublasLt.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
      find_path(KAREUS_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
      if(NOT KAREUS_CUBLASLT_INCLUDE_DIR)
        kareus_cuda_unavailable("cublasLt.h was not found")
      elseif(NOT KAREUS_NCCL_INCLUDE_DIR)
        kareus_cuda_unavailable("nccl.h was not found (NCCL 2.17 or newer is needed)")
      else()
        set(KAREUS_CUDA_ENABLED ON)
        message(STATUS "Kareus: CUDA backend ON (CUDA ${CUDAToolkit_VERSION}, architectures "
                       "${CMAKE_CUDA_ARCHITECTURES}; NCCL headers in ${KAREUS_NCCL_INCLUDE_DIR})")
      endif()
    endif()
  endif()
endif()
