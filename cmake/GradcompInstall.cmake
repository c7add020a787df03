# `cmake --install build --prefix P`: the public headers, the libraries and a CMake
# package, so that another project finds gradcomp with
#   find_package(gradcomp CONFIG REQUIRED)   # with -DCMAKE_PREFIX_PATH=P
#   target_link_libraries(app PRIVATE gradcomp::torch)   # GradientExchange (LibTorch)
#   target_link_libraries(app PRIVATE gradcomp::device)  # DeviceCodec, DeviceReducer (ATen)
#   target_link_libraries(app PRIVATE gradcomp::core)    # the codecs alone, torch-free
# Targets: gradcomp::core (codecs, memories, registry, layout; no LibTorch),
# gradcomp::dist (Communicator, reducers, schemes, Exchanger; c10d/Gloo), gradcomp::torch
# (GradientExchange), gradcomp::device (the codecs on the gradients' device, the device
# reducer), gradcomp::advise (the cost model; its byte counts decide the
# reducers' dense fallback). Static libraries, position-independent. examples/cpp is such a
# project; tests/cli/install_test.sh builds and runs it against an installed tree.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set_target_properties(gradcomp_core PROPERTIES EXPORT_NAME core)
set_target_properties(gradcomp_flags PROPERTIES EXPORT_NAME build_flags)
set(gradcomp_export_targets gradcomp_core gradcomp_flags)
if(TARGET gradcomp_torch)
  set_target_properties(gradcomp_dist PROPERTIES EXPORT_NAME dist)
  set_target_properties(gradcomp_torch PROPERTIES EXPORT_NAME torch)
  set_target_properties(gradcomp_libtorch PROPERTIES EXPORT_NAME libtorch)
  set_target_properties(gradcomp_advise PROPERTIES EXPORT_NAME advise)
  set_target_properties(gradcomp_device PROPERTIES EXPORT_NAME device)
  list(APPEND gradcomp_export_targets gradcomp_dist gradcomp_torch gradcomp_libtorch
       gradcomp_advise gradcomp_device)
  if(TARGET gradcomp_cuda_kernels)
    list(APPEND gradcomp_export_targets gradcomp_cuda_kernels)
  endif()
  set(GRADCOMP_PACKAGE_HAS_TORCH ON)
else()
  set(GRADCOMP_PACKAGE_HAS_TORCH OFF)
endif()

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/gradcomp TYPE INCLUDE)
install(TARGETS ${gradcomp_export_targets} EXPORT gradcompTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
set(gradcomp_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/gradcomp)
install(EXPORT gradcompTargets NAMESPACE gradcomp:: DESTINATION ${gradcomp_cmake_dir})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/gradcompConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/gradcompConfig.cmake
                              INSTALL_DESTINATION ${gradcomp_cmake_dir})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/gradcompConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/gradcompConfig.cmake
              ${CMAKE_BINARY_DIR}/gradcompConfigVersion.cmake
              ${CMAKE_CURRENT_LIST_DIR}/GradcompTorchCuda.cmake
        DESTINATION ${gradcomp_cmake_dir})
