// Set (to "1") beside OPENBLAS_CORETYPE when gradcomp-torch chose the OpenBLAS core itself
// because OpenBLAS fell back to its generic kernels (tools/gradcomp/blas_core.h); the run
// header's BLAS line (describe_blas, trainer.h) says so. Torch-free, for both sides.
#pragma once

namespace gradcomp::train {

inline constexpr const char* kBlasCoreSetByGradcomp = "GRADCOMP_SET_OPENBLAS_CORETYPE";

}  // namespace gradcomp::train
