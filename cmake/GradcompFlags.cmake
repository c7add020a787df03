# Compiler flags shared by every gradcomp target, applied per target via gradcomp_set_flags().
add_library(gradcomp_flags INTERFACE)
target_compile_options(gradcomp_flags INTERFACE -Wall -Wextra -Wpedantic -Wshadow -Wconversion
                       -Wno-sign-conversion)
# GCC 12 reports false -Wrestrict positives in std::string concatenation (GCC bug 105329).
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(gradcomp_flags INTERFACE -Wno-restrict)
endif()
# The instruction set: the build machine's (-march=native, opt-in) or a stated x86-64
# level. GRADCOMP_ISA_TARGET is what `gradcomp train` and `gradcomp bench codec` print as
# "built for" (gradcomp/cpu.h).
if(GRADCOMP_NATIVE)
  target_compile_options(gradcomp_flags INTERFACE -march=native)
  target_compile_definitions(gradcomp_flags INTERFACE GRADCOMP_ISA_TARGET="native")
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  if(NOT GRADCOMP_ARCH MATCHES "^x86-64(-v[234])?$")
    message(FATAL_ERROR "GRADCOMP_ARCH='${GRADCOMP_ARCH}': expected x86-64, x86-64-v2, x86-64-v3 or x86-64-v4")
  endif()
  target_compile_options(gradcomp_flags INTERFACE -march=${GRADCOMP_ARCH} -mtune=generic)
  target_compile_definitions(gradcomp_flags INTERFACE GRADCOMP_ISA_TARGET="${GRADCOMP_ARCH}")
else()
  target_compile_definitions(gradcomp_flags INTERFACE GRADCOMP_ISA_TARGET="${CMAKE_SYSTEM_PROCESSOR}")
endif()
if(GRADCOMP_ASSERTIONS)
  # Comes after CMAKE_CXX_FLAGS_<CONFIG>'s -DNDEBUG on the command line, so it wins.
  target_compile_options(gradcomp_flags INTERFACE -UNDEBUG)
endif()
if(GRADCOMP_SANITIZE)
  target_compile_options(gradcomp_flags INTERFACE -fsanitize=${GRADCOMP_SANITIZE} -fno-omit-frame-pointer
                         -fno-sanitize-recover=all)
  target_link_options(gradcomp_flags INTERFACE -fsanitize=${GRADCOMP_SANITIZE})
endif()

find_package(OpenMP COMPONENTS CXX)
# GCC links OpenMP's runtime itself with -fopenmp; FindOpenMP names libgomp's path instead,
# and next to a pip wheel of torch (whose lib/ bundles a libgomp.so.1) CMake then warns for
# every executable that torch's folder in the run path may hide it. The loader takes one
# libgomp.so.1 either way: the first in the run path, torch's.
if(OpenMP_CXX_FOUND AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  set_property(TARGET OpenMP::OpenMP_CXX PROPERTY INTERFACE_LINK_LIBRARIES -fopenmp)
endif()

# gradcomp_unity_build(TARGET ...): compile each target's sources in batches of 8 (CMake's
# unity build) when GRADCOMP_UNITY_BUILD is ON. For the targets built on LibTorch's headers:
# a unit of src/train spent 8.7 of its 17.5 s instantiating torch's templates and 8.2 s
# optimising and emitting them (gcc -ftime-report), the same work in every unit; a batch
# does it once. Not for the torch-free core and the tests that define same-named helpers
# in their own anonymous namespaces: a batch is one translation unit.
function(gradcomp_unity_build)
  if(GRADCOMP_UNITY_BUILD)
    set_target_properties(${ARGN} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
endfunction()
