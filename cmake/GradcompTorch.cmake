# LibTorch for gradcomp_dist, the exchange, the CLI and the Python package.
#
# Which torch: by default the one find_package(Torch) finds (Debian's libtorch-dev, 1.13,
# or LibTorch under CMAKE_PREFIX_PATH). With GRADCOMP_TORCH_PYTHON set to an interpreter
# (`pip install .` sets it to the installing Python), the torch installed for that Python:
# a pip wheel's CMake package under torch.utils.cmake_prefix_path, its libtorch_python
# and its bundled pybind11 (python/CMakeLists.txt). An extension is built per torch
# release: c10d's C++ interface is not stable across releases.
set(GRADCOMP_TORCH_PYTHON "" CACHE FILEPATH
    "Build against the torch installed for this Python interpreter (e.g. a venv's python)")
if(SKBUILD AND NOT GRADCOMP_TORCH_PYTHON)
  set(GRADCOMP_TORCH_PYTHON ${Python_EXECUTABLE})  # the Python running `pip install`
endif()
# How to run that Python so that it sees its torch (every probe of torch's below, and
# python/CMakeLists.txt's).
set(GRADCOMP_TORCH_PYTHON_RUN ${GRADCOMP_TORCH_PYTHON})
if(GRADCOMP_TORCH_PYTHON)
  set(gradcomp_torch_probe "import torch, torch.utils; print(torch.utils.cmake_prefix_path, end='')")
  execute_process(COMMAND ${GRADCOMP_TORCH_PYTHON} -c "${gradcomp_torch_probe}"
                  OUTPUT_VARIABLE gradcomp_torch_prefix RESULT_VARIABLE gradcomp_torch_rc
                  ERROR_VARIABLE gradcomp_torch_err)
  if(NOT gradcomp_torch_rc EQUAL 0 AND SKBUILD AND DEFINED ENV{PYTHONPATH})
    # A plain `pip install .` builds in an isolated environment: pip runs the same Python
    # with PYTHONPATH pointing at the build requirements and a sitecustomize that hides the
    # environment's own packages, torch among them. gradcomp must be built against that
    # torch (an extension is built per torch release), so it asks the same Python without
    # pip's additions.
    set(gradcomp_outside_pip ${CMAKE_COMMAND} -E env --unset=PYTHONPATH --unset=PYTHONNOUSERSITE
                             ${GRADCOMP_TORCH_PYTHON})
    execute_process(COMMAND ${gradcomp_outside_pip} -c "${gradcomp_torch_probe}"
                    OUTPUT_VARIABLE gradcomp_torch_prefix RESULT_VARIABLE gradcomp_torch_rc
                    ERROR_QUIET)
    if(gradcomp_torch_rc EQUAL 0)
      set(GRADCOMP_TORCH_PYTHON_RUN ${gradcomp_outside_pip})
      message(STATUS "gradcomp: pip builds in an isolated environment; building against "
                     "the torch of ${GRADCOMP_TORCH_PYTHON} outside it")
    endif()
  endif()
  if(NOT gradcomp_torch_rc EQUAL 0)
    string(STRIP "${gradcomp_torch_err}" gradcomp_torch_err)
    string(REGEX REPLACE ".*\n" "" gradcomp_torch_err "${gradcomp_torch_err}")  # the last line
    if(SKBUILD)
      message(FATAL_ERROR "gradcomp builds against the torch of the Python that runs the build "
                          "(${GRADCOMP_TORCH_PYTHON}), which cannot import it (${gradcomp_torch_err}): "
                          "install torch into that environment first; if it is there and the "
                          "installer builds in a fresh environment (uv, python -m build), build "
                          "with --no-build-isolation")
    endif()
    message(FATAL_ERROR "GRADCOMP_TORCH_PYTHON=${GRADCOMP_TORCH_PYTHON} cannot import torch: ${gradcomp_torch_err}")
  endif()
  # FORCE: packages cached by an earlier configure (another torch) would win otherwise.
  # Debian's torch keeps its CMake package apart (libtorch-dev), where CMake finds it alone.
  if(EXISTS "${gradcomp_torch_prefix}/Torch/TorchConfig.cmake")
    set(Torch_DIR "${gradcomp_torch_prefix}/Torch" CACHE PATH "torch's CMake package" FORCE)
    set(Caffe2_DIR "${gradcomp_torch_prefix}/Caffe2" CACHE PATH "torch's Caffe2 package" FORCE)
  endif()
  set(Python_EXECUTABLE ${GRADCOMP_TORCH_PYTHON})
endif()
# torch's CMake package finds its Caffe2 package and its libraries (libtorch, libc10, ...)
# with find_package/find_library(... PATHS <its own folders>), which CMake searches after the
# system's: on a machine that also has Debian's libtorch-dev, a wheel's package picks
# Debian's Caffe2 targets and libc10.so (seen with torch 2.13.0). Its folders go first, and
# no earlier configure's choice is kept.
set(gradcomp_torch_lib_dir "")
if(Torch_DIR)
  get_filename_component(gradcomp_torch_cmake_dir "${Torch_DIR}/.." ABSOLUTE)
  list(PREPEND CMAKE_PREFIX_PATH ${gradcomp_torch_cmake_dir})
  get_filename_component(gradcomp_torch_lib_dir "${Torch_DIR}/../../../lib" ABSOLUTE)
  if(EXISTS "${gradcomp_torch_lib_dir}/libtorch.so")
    list(PREPEND CMAKE_LIBRARY_PATH ${gradcomp_torch_lib_dir})
    foreach(lib TORCH c10 kineto torch_cpu torch_python)
      unset(${lib}_LIBRARY CACHE)
    endforeach()
    # The package looks for a kineto library of its own and warns "library kineto not
    # found" where there is none: pip wheels link kineto into libtorch_cpu, which answers.
    if(NOT EXISTS "${gradcomp_torch_lib_dir}/libkineto.a" AND EXISTS "${gradcomp_torch_lib_dir}/libtorch_cpu.so")
      set(kineto_LIBRARY "${gradcomp_torch_lib_dir}/libtorch_cpu.so")
    endif()
  else()
    set(gradcomp_torch_lib_dir "")
  endif()
endif()
# A CUDA build of torch: which CUDA toolkit its package gets, if any (GradcompTorchCuda.cmake).
include(GradcompTorchCuda)
gradcomp_prepare_cuda_torch("${Torch_DIR}")
find_package(Torch REQUIRED CONFIG)
gradcomp_finish_cuda_torch()
gradcomp_find_kernel_toolkit()
message(STATUS "gradcomp: torch ${Torch_VERSION} at ${TORCH_INSTALL_PREFIX}")
if(c10_LIBRARY AND EXISTS "${TORCH_INSTALL_PREFIX}/lib/libc10.so"
   AND NOT c10_LIBRARY STREQUAL "${TORCH_INSTALL_PREFIX}/lib/libc10.so")
  message(FATAL_ERROR "torch's CMake package at ${Torch_DIR} picked another torch's library "
                      "${c10_LIBRARY}: configure with -DTorch_DIR=${Torch_DIR} (gradcomp then "
                      "searches ${TORCH_INSTALL_PREFIX}/lib first) or -DGRADCOMP_TORCH_PYTHON=<python>")
endif()
# For gradcompConfig.cmake: a consumer finds the same torch the same way.
set(GRADCOMP_TORCH_LIB_DIR ${gradcomp_torch_lib_dir})
if(gradcomp_torch_lib_dir)
  set(GRADCOMP_TORCH_CMAKE_DIR ${gradcomp_torch_cmake_dir})
endif()

add_library(gradcomp_libtorch INTERFACE)
target_link_libraries(gradcomp_libtorch INTERFACE ${TORCH_LIBRARIES})
# torch's exported flags (Debian's carry -D_GLIBCXX_USE_CXX11_ABI; recent wheels none).
target_compile_options(gradcomp_libtorch INTERFACE ${TORCH_CXX_FLAGS})
# ProcessGroupGloo.hpp is compiled out unless USE_C10D_GLOO is defined; torch's own
# targets define it for their consumers only in some releases (Caffe2Targets).
target_compile_definitions(gradcomp_libtorch INTERFACE USE_C10D_GLOO USE_DISTRIBUTED)

# One C++ ABI for every target, torch-free ones included: a std::string crossing from the
# core into torch-linked code must have one layout. torch says which in TORCH_CXX_FLAGS
# (Debian) or torch._C._GLIBCXX_USE_CXX11_ABI (wheels, whose CMake package no longer does).
set(gradcomp_cxx11_abi "")
if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=([01])")
  set(gradcomp_cxx11_abi ${CMAKE_MATCH_1})
elseif(GRADCOMP_TORCH_PYTHON)
  execute_process(COMMAND ${GRADCOMP_TORCH_PYTHON_RUN} -c
                          "import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI), end='')"
                  OUTPUT_VARIABLE gradcomp_cxx11_abi ERROR_QUIET)
endif()
if(gradcomp_cxx11_abi MATCHES "^[01]$")
  add_compile_definitions(_GLIBCXX_USE_CXX11_ABI=${gradcomp_cxx11_abi})
endif()

# Gloo's headers, which torch's ProcessGroupGloo.hpp includes: the communicator creates
# its own Gloo group for `gradcomp train`. Headers only: Gloo's code is inside libtorch
# (linked by Debian's, compiled into a wheel's libtorch_cpu), and a second copy of Gloo in
# the process would be a second set of its globals. Debian's libgloo-dev provides them;
# pip wheels do not ship them (checked: torch 2.13.0), and Debian's match what
# ProcessGroupGloo.hpp needs of them (its class declarations; tested in both lanes).
unset(GRADCOMP_GLOO_INCLUDE_DIR CACHE)
unset(GRADCOMP_GLOO_LIBRARY CACHE)
find_path(GRADCOMP_GLOO_INCLUDE_DIR gloo/context.h HINTS ${TORCH_INSTALL_PREFIX}/include NO_CACHE)
if(NOT GRADCOMP_GLOO_INCLUDE_DIR)
  message(FATAL_ERROR "gradcomp_dist needs Gloo's headers (gloo/context.h), which torch's "
                      "ProcessGroupGloo.hpp includes: apt-get install libgloo-dev")
endif()
# Debian's LibTorch links Gloo as a shared library of its own: symbols of Gloo's that
# ProcessGroupGloo.hpp's inline code uses resolve there.
find_library(GRADCOMP_GLOO_LIBRARY gloo NO_CACHE)
if(Torch_VERSION VERSION_LESS 2 AND GRADCOMP_GLOO_LIBRARY)
  target_link_libraries(gradcomp_libtorch INTERFACE ${GRADCOMP_GLOO_LIBRARY})
endif()
