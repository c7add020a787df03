# The fused CUDA kernels of the device codecs (src/device/cuda/). GRADCOMP_CUDA_KERNELS:
#   AUTO (default)  where torch is a CUDA build and CMake finds a CUDA toolkit of torch's
#                   major version (cmake/GradcompTorchCuda.cmake);
#   ON              wherever a CUDA compiler is (CI compiles and links them against a CPU
#                   torch with the machine's nvcc; nothing runs them without a GPU);
#   OFF             never: the device codecs run their ATen operations on CUDA too.
# Architectures: CMAKE_CUDA_ARCHITECTURES (or CUDAARCHS) where set, else
# GRADCOMP_DEFAULT_CUDA_ARCHITECTURES (cmake/GradcompTorchCuda.cmake): sm_80 and sm_90 machine
# code with compute_90 PTX for later GPUs.
# (The option itself is defined, in any case, in the top-level CMakeLists.txt.)
set(GRADCOMP_CUDA_KERNELS_BUILT OFF)
if(GRADCOMP_CUDA_KERNELS STREQUAL "ON" OR (GRADCOMP_CUDA_KERNELS STREQUAL "AUTO" AND GRADCOMP_TORCH_CUDA_TOOLKIT))
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT CMAKE_CUDA_ARCHITECTURES)  # undefined, or cleared by torch's package
      if(DEFINED ENV{CUDAARCHS})
        set(CMAKE_CUDA_ARCHITECTURES $ENV{CUDAARCHS})
      else()
        set(CMAKE_CUDA_ARCHITECTURES ${GRADCOMP_DEFAULT_CUDA_ARCHITECTURES})
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
