# Debian's libtorch-dev installs Torch's CMake package; only the CLI and the comparison
# benchmark link it. Precompiled headers keep those units from re-parsing torch/torch.h.
find_package(Torch REQUIRED CONFIG)
add_library(gradcomp_torch INTERFACE)
target_link_libraries(gradcomp_torch INTERFACE ${TORCH_LIBRARIES})
# Torch's exported flags include -D_GLIBCXX_USE_CXX11_ABI; keep them.
target_compile_options(gradcomp_torch INTERFACE ${TORCH_CXX_FLAGS})
# Gloo itself (LibTorch links it privately): the communicator asks Gloo's contexts for
# each connection's address, to name a lost peer by rank.
find_package(Gloo REQUIRED CONFIG)
