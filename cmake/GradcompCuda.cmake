# The fused CUDA kernels of the device codecs (src/device/cuda/). GRADCOMP_CUDA_KERNELS:
#   AUTO (default)  where torch is a CUDA build and CMake finds a CUDA toolkit of torch's
#                   major version (cmake/GradcompTorchCuda.cmake);
#   ON              wherever a CUDA compiler is (CI compiles and links them against a CPU
#                   torch with the machine's nvcc; nothing runs them without a GPU);
#   OFF             never: the device codecs run their ATen operations on CUDA too.
# Architectures: CMAKE_CUDA_ARCHITECTURES (or CUDAARCHS) where set, else sm_80 and sm_90
# machine code with compute_90 PTX for later GPUs.
set(GRADCOMP_CUDA_KERNELS AUTO CACHE STRING "Build the device codecs' CUDA kernels: AUTO, ON or OFF")
set_property(CACHE GRADCOMP_CUDA_KERNELS PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${GRADCOMP_CUDA_KERNELS}" GRADCOMP_CUDA_KERNELS)  # -D...=on works too
if(NOT GRADCOMP_CUDA_KERNELS MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "GRADCOMP_CUDA_KERNELS=${GRADCOMP_CUDA_KERNELS}: AUTO, ON or OFF")
endif()
set(GRADCOMP_CUDA_KERNELS_BUILT OFF)
if(GRADCOMP_CUDA_KERNELS STREQUAL "ON" OR (GRADCOMP_CUDA_KERNELS STREQUAL "AUTO" AND GRADCOMP_TORCH_CUDA_TOOLKIT))
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT CMAKE_CUDA_ARCHITECTURES)  # undefined, or cleared by torch's package
      if(DEFINED ENV{CUDAARCHS})
        set(CMAKE_CUDA_ARCHITECTURES $ENV{CUDAARCHS})
      else()
        set(CMAKE_CUDA_ARCHITECTURES 80-real 90)
      endif()
    endif()
    if(CCACHE_PROGRAM)
      set(CMAKE_CUDA_COMPILER_LAUNCHER ${CMAKE_CXX_COMPILER_LAUNCHER})
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(GRADCOMP_CUDA_KERNELS_BUILT ON)
    message(STATUS "gradcomp: CUDA kernels for ${CMAKE_CUDA_ARCHITECTURES} (nvcc ${CMAKE_CUDA_COMPILER_VERSION})")
  elseif(GRADCOMP_CUDA_KERNELS STREQUAL "ON")
    message(FATAL_ERROR "GRADCOMP_CUDA_KERNELS=ON, but CMake finds no CUDA compiler (set CUDACXX to nvcc)")
  else()
    message(STATUS "gradcomp: CMake's CUDA language does not work with that toolkit's nvcc "
                   "(CUDACXX, CUDAARCHS?): no gradcomp CUDA kernels (the device codecs run ATen "
                   "operations on CUDA tensors)")
  endif()
endif()
