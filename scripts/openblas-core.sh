#!/usr/bin/env bash
# Prints the OpenBLAS core the gradcomp-torch at $1 set for itself because Debian's OpenBLAS
# fell back to its generic Prescott kernels on this CPU (tools/gradcomp/blas_core.h; its
# --version says so), or nothing. The test scripts export it for the tests.
#   usage: scripts/openblas-core.sh PATH/TO/gradcomp-torch
set -euo pipefail
"${1:?usage: openblas-core.sh PATH/TO/gradcomp-torch}" --version |
  sed -n 's/.*OPENBLAS_CORETYPE=\([A-Za-z0-9]*\), set by gradcomp.*/\1/p'
