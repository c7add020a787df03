# Compiler flags shared by every gradcomp target, applied per target via gradcomp_set_flags().
add_library(gradcomp_flags INTERFACE)
target_compile_options(gradcomp_flags INTERFACE -Wall -Wextra -Wpedantic -Wshadow -Wconversion
                       -Wno-sign-conversion)
# GCC 12 reports false -Wrestrict positives in std::string concatenation (GCC bug 105329).
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(gradcomp_flags INTERFACE -Wno-restrict)
endif()
if(GRADCOMP_NATIVE)
  target_compile_options(gradcomp_flags INTERFACE -march=native)
endif()
if(GRADCOMP_SANITIZE)
  target_compile_options(gradcomp_flags INTERFACE -fsanitize=${GRADCOMP_SANITIZE} -fno-omit-frame-pointer
                         -fno-sanitize-recover=all)
  target_link_options(gradcomp_flags INTERFACE -fsanitize=${GRADCOMP_SANITIZE})
endif()

find_package(OpenMP COMPONENTS CXX)
