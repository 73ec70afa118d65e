# cmake/cuda.cmake: the CUDA backend (docs/gpu.md). Built whenever the CUDA toolkit is found
# (nvcc on PATH, CMAKE_CUDA_COMPILER, or /usr/local/cuda), so CI compiles it on machines without
# a GPU; -DZT_WITH_CUDA=OFF leaves it out. Sets ZT_HAVE_CUDA and defines:
#   zt_cuda_runtime  core/device.h on the CUDA runtime (linked into zt_core)
#   zt_cuda          the GPU kernels (src/kernels/cuda/), cuBLASLt GEMMs
#   zt_cuda_tests    every GPU kernel against its CPU naive reference (skips without a GPU)
#   zt_cuda_bench    GEMM and attention throughput on the GPU (bench/gpu_check.sh runs it)
set(ZT_HAVE_CUDA OFF)
option(ZT_WITH_CUDA "Build the CUDA backend when the CUDA toolkit is found" ON)
if(NOT ZT_WITH_CUDA)
  return()
endif()
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(STATUS "CUDA toolkit not found: building without the CUDA backend")
  return()
endif()
# sm_90 machine code (H100/H200) plus compute_90 PTX that newer GPUs compile at load.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 has no C++20 flag for nvcc; passed below
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(ZT_HAVE_CUDA ON)
message(STATUS "CUDA backend: nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}")

add_library(zt_cuda_runtime STATIC ${CMAKE_SOURCE_DIR}/src/core/device_cuda.cpp)
target_include_directories(zt_cuda_runtime PUBLIC ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(zt_cuda_runtime PUBLIC CUDA::cudart)
target_compile_definitions(zt_cuda_runtime PUBLIC ZT_HAVE_CUDA=1)

file(GLOB ZT_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/kernels/cuda/*.cu
     ${CMAKE_SOURCE_DIR}/src/kernels/cuda/*.cpp)
add_library(zt_cuda STATIC ${ZT_CUDA_SOURCES})
target_link_libraries(zt_cuda PUBLIC zt_cuda_runtime CUDA::cublasLt)
target_compile_options(zt_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo --expt-relaxed-constexpr -std=c++20>)
set_target_properties(zt_cuda PROPERTIES CUDA_SEPARABLE_COMPILATION OFF POSITION_INDEPENDENT_CODE ON)

# The GPU tests build without the CPU engine's dependencies (oneDNN, Highway, MPI): they compare
# with the templated naive references of kernels/reference.h, so bench/gpu_check.sh can build them
# on a GPU machine that has only the toolkit (ZT_CUDA_ONLY=ON, gtest from ZT_GTEST_SOURCE).
file(GLOB ZT_CUDA_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/cuda/*.cpp)
add_executable(zt_cuda_tests ${ZT_CUDA_TEST_SOURCES})
target_include_directories(zt_cuda_tests PRIVATE ${CMAKE_SOURCE_DIR}/tests)
target_link_libraries(zt_cuda_tests PRIVATE zt_cuda GTest::gtest_main)
file(GLOB ZT_CUDA_BENCH_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/bench/gpu/*.cpp)
add_executable(zt_cuda_bench ${ZT_CUDA_BENCH_SOURCES})
target_link_libraries(zt_cuda_bench PRIVATE zt_cuda)
