# A CUDA build of torch (what `pip install torch` installs on Linux) has a CMake package that
# wants a whole CUDA toolkit: its cuda.cmake runs the legacy FindCUDA, and
#   - without a toolkit it stops: "Your installed Caffe2 version uses CUDA but I cannot find
#     the CUDA libraries" (the usual machine: the wheel carries CUDA's runtime libraries, and
#     nvcc is not installed);
#   - it takes the toolkit's root from where `nvcc` is on PATH (wrong for a wrapper script);
#   - it wants nvrtc and the CUDA math libraries' files beside nvcc (a partial toolkit stops it
#     at link time: -lCUDA_nvrtc_LIBRARY-NOTFOUND);
#   - it compiles and runs a program to detect the GPUs unless TORCH_CUDA_ARCH_LIST is set
#     (and asks CMake 3.25 for a CUDA C++20 dialect it has no flags for);
#   - it sets CMAKE_CUDA_ARCHITECTURES to OFF.
# gradcomp needs none of that. Its host code reaches CUDA only through c10's device-generic
# interfaces (streams, events, guards), and libtorch_cuda.so brings the CUDA runtime it was
# built with; gradcomp's own kernels need only nvcc and the CUDA runtime, through CMake's CUDA
# language (cmake/GradcompCuda.cmake). So for a CUDA torch, gradcomp_prepare_cuda_torch()
# defines torch::cudart before find_package(Torch), which torch's cuda.cmake takes as
# "already found" and returns at once. A user who sets CUDA_TOOLKIT_ROOT_DIR gets torch's own
# route instead (with TORCH_CUDA_ARCH_LIST defaulted to gradcomp's architectures and the
# architectures torch clears restored afterwards).
#
# gradcomp's build and its installed package (gradcompConfig.cmake) both use it.
#
# gradcomp_prepare_cuda_torch() sets GRADCOMP_TORCH_CUDA (torch's CUDA version, "unknown" when
# no file says, empty for a CPU torch); gradcomp_find_kernel_toolkit() sets
# GRADCOMP_TORCH_CUDA_TOOLKIT (ON where a CUDA toolkit of torch's major version is there for
# gradcomp's kernels: GRADCOMP_CUDA_KERNELS=AUTO builds them then) and says what it found.

# gradcomp's CUDA architectures where neither CMAKE_CUDA_ARCHITECTURES nor CUDAARCHS says:
# sm_80 and sm_90 machine code, compute_90 PTX for later GPUs (cmake/GradcompCuda.cmake).
set(GRADCOMP_DEFAULT_CUDA_ARCHITECTURES 80-real 90)

# `torch_dir`: torch's CMake package (Torch_DIR), or empty: found here as find_package finds it.
macro(gradcomp_prepare_cuda_torch torch_dir)
  set(GRADCOMP_TORCH_CUDA "")
  set(gradcomp_torch_cuda_own_route OFF)
  set(gradcomp_torch_config "${torch_dir}/TorchConfig.cmake")
  if(NOT EXISTS "${gradcomp_torch_config}")
    unset(gradcomp_torch_config)
    find_file(gradcomp_torch_config TorchConfig.cmake PATH_SUFFIXES share/cmake/Torch Torch NO_CACHE)
  endif()
  get_filename_component(gradcomp_torch_prefix "${gradcomp_torch_config}/../../../.." ABSOLUTE)
  if(gradcomp_torch_config AND EXISTS "${gradcomp_torch_prefix}/lib/libtorch_cuda.so")
    _gradcomp_torch_cuda_version("${gradcomp_torch_prefix}" GRADCOMP_TORCH_CUDA)
    if(TARGET torch::cudart)
      # A project that includes gradcomp's already chose.
    elseif(CUDA_TOOLKIT_ROOT_DIR)
      set(gradcomp_torch_cuda_own_route ON)
      _gradcomp_torch_cuda_package_settings()
    else()
      _gradcomp_torch_cudart_from_the_wheel("${gradcomp_torch_prefix}")
    endif()
  endif()
endmacro()

macro(gradcomp_finish_cuda_torch)
  if(gradcomp_torch_cuda_own_route AND CMAKE_CUDA_ARCHITECTURES STREQUAL "OFF")
    # Cleared by torch's cuda.cmake ("not compatible"), after its enable_language(CUDA)
    # cached nvcc's default: GradcompCuda.cmake chooses anew.
    unset(CMAKE_CUDA_ARCHITECTURES)
    unset(CMAKE_CUDA_ARCHITECTURES CACHE)
    if(DEFINED gradcomp_saved_cuda_architectures)
      set(CMAKE_CUDA_ARCHITECTURES "${gradcomp_saved_cuda_architectures}")
    endif()
  endif()
endmacro()

# torch's CUDA version: torch/version.py (pip wheels), else LibTorch's build-version
# ("2.x.y+cu130").
function(_gradcomp_torch_cuda_version prefix out)
  set(version "unknown")
  if(EXISTS "${prefix}/version.py")
    file(STRINGS "${prefix}/version.py" line REGEX "^cuda[^=]*= *'[0-9.]+'")
    if(line MATCHES "'([0-9.]+)'")
      set(version ${CMAKE_MATCH_1})
    endif()
  elseif(EXISTS "${prefix}/build-version")
    file(READ "${prefix}/build-version" build)
    if(build MATCHES "\\+cu([0-9]+)([0-9])")
      set(version "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}")
    endif()
  endif()
  set(${out} ${version} PARENT_SCOPE)
endfunction()

# A toolkit for gradcomp's kernels: nvcc and the CUDA runtime, of torch's major version (one
# process, one CUDA major). FindCUDAToolkit asks nvcc where its toolkit is.
macro(gradcomp_find_kernel_toolkit)
  set(GRADCOMP_TORCH_CUDA_TOOLKIT OFF)
  if(GRADCOMP_TORCH_CUDA)
    _gradcomp_find_matching_toolkit()
    if(GRADCOMP_TORCH_CUDA_TOOLKIT)
      set(gradcomp_toolkit_line "CUDA toolkit ${CUDAToolkit_VERSION} for gradcomp's kernels")
    else()
      string(CONCAT gradcomp_toolkit_line "${gradcomp_no_toolkit_reason}: no gradcomp CUDA "
                    "kernels (the device codecs run ATen operations on CUDA tensors)")
    endif()
    message(STATUS "gradcomp: torch is a CUDA ${GRADCOMP_TORCH_CUDA} build; ${gradcomp_toolkit_line}")
  endif()
endmacro()

macro(_gradcomp_find_matching_toolkit)
  set(gradcomp_no_toolkit_reason "")
  if(GRADCOMP_CUDA_KERNELS STREQUAL "OFF")
    set(gradcomp_no_toolkit_reason "GRADCOMP_CUDA_KERNELS=OFF")
  else()
    find_package(CUDAToolkit QUIET)
    string(REGEX REPLACE "\\..*" "" gradcomp_torch_cuda_major "${GRADCOMP_TORCH_CUDA}")
    if(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::cudart_static)
      set(gradcomp_no_toolkit_reason "CMake finds no CUDA toolkit (nvcc and its runtime)")
    elseif(NOT GRADCOMP_TORCH_CUDA STREQUAL "unknown"
           AND NOT CUDAToolkit_VERSION_MAJOR STREQUAL gradcomp_torch_cuda_major)
      string(CONCAT gradcomp_no_toolkit_reason "the CUDA toolkit found (${CUDAToolkit_VERSION} "
                    "at ${CUDAToolkit_BIN_DIR}) is not CUDA ${gradcomp_torch_cuda_major}")
    else()
      set(GRADCOMP_TORCH_CUDA_TOOLKIT ON)
    endif()
  endif()
endmacro()

# torch's own route: the architectures its package compiles for (and checks against) without
# its GPU probe: gradcomp's (cmake/GradcompCuda.cmake), as TORCH_CUDA_ARCH_LIST spells them.
macro(_gradcomp_torch_cuda_package_settings)
  if(DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(gradcomp_saved_cuda_architectures "${CMAKE_CUDA_ARCHITECTURES}")
  endif()
  if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(gradcomp_archs "${CMAKE_CUDA_ARCHITECTURES}")
    if(gradcomp_archs STREQUAL "" AND DEFINED ENV{CUDAARCHS})
      set(gradcomp_archs "$ENV{CUDAARCHS}")
    endif()
    if(gradcomp_archs STREQUAL "")
      set(gradcomp_archs ${GRADCOMP_DEFAULT_CUDA_ARCHITECTURES})
    endif()
    set(TORCH_CUDA_ARCH_LIST "")
    foreach(arch IN LISTS gradcomp_archs)
      if(arch MATCHES "^([0-9]+)([0-9])")
        list(APPEND TORCH_CUDA_ARCH_LIST "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}")
      endif()
    endforeach()
  endif()
  if(NOT DEFINED CMAKE_CUDA_STANDARD)
    set(CMAKE_CUDA_STANDARD 17)  # gradcomp's kernels are C++17
  endif()
endmacro()

# torch::cudart for torch's package: nothing to link (libtorch_cuda.so needs its CUDA runtime
# itself). A pip wheel's libtorch_cuda.so finds CUDA's libraries under site-packages/nvidia/
# only because `import torch` loads them first; an executable linked against it (the CLI, a
# LibTorch program) gets those folders for the linker and in its run path.
macro(_gradcomp_torch_cudart_from_the_wheel prefix)
  add_library(torch::cudart INTERFACE IMPORTED)
  file(GLOB gradcomp_cuda_wheel_lib_dirs LIST_DIRECTORIES true "${prefix}/../nvidia/*/lib")
  foreach(dir IN LISTS gradcomp_cuda_wheel_lib_dirs)
    get_filename_component(dir "${dir}" ABSOLUTE)
    set_property(TARGET torch::cudart APPEND PROPERTY INTERFACE_LINK_OPTIONS
                 "$<$<STREQUAL:$<TARGET_PROPERTY:TYPE>,EXECUTABLE>:LINKER:-rpath-link,${dir},-rpath,${dir}>")
  endforeach()
endmacro()
