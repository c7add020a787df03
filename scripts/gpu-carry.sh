#!/usr/bin/env bash
# Prepares .gpu-carry/ (ignored by git): what scripts/gpu-check.sh needs on a GPU machine
# that the machine lacks and cannot download (it has no network, no Debian -dev packages):
# the headers gradcomp builds against (Gloo's, which torch's ProcessGroupGloo.hpp includes
# and pip wheels do not ship; Eigen's, with its CMake package; zlib's) and a reference
# LAPACK/BLAS with their Fortran runtime (ATOMO's SVD). Laid out as a CMake prefix:
# include/, lib/, share/eigen3/cmake. About 25 MB; the device tool carries it
# (`carry: [".gpu-carry"]`).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.gpu-carry
rm -rf "$dest"
mkdir -p "$dest/include" "$dest/lib" "$dest/share/eigen3"
cp -r /usr/include/gloo "$dest/include/"
cp -r /usr/include/eigen3 "$dest/include/"
rm -rf "$dest/include/eigen3/unsupported"  # gradcomp uses Eigen/ only
cp -r /usr/share/eigen3/cmake "$dest/share/eigen3/"
cp /usr/include/zlib.h /usr/include/zconf.h "$dest/include/"
arch=/usr/lib/x86_64-linux-gnu
# Reference LAPACK and BLAS (Debian's liblapack3/libblas3), not OpenBLAS (36 MB): ATOMO's
# SVDs are small. Unversioned names for the linker, .so.3 for the loader.
cp -L "$arch/lapack/liblapack.so.3" "$arch/blas/libblas.so.3" "$dest/lib/"
cp -L /lib/x86_64-linux-gnu/libgfortran.so.5 /lib/x86_64-linux-gnu/libquadmath.so.0 \
  /lib/x86_64-linux-gnu/libz.so.1 "$dest/lib/"
ln -s liblapack.so.3 "$dest/lib/liblapack.so"
ln -s libblas.so.3 "$dest/lib/libblas.so"
ln -s libz.so.1 "$dest/lib/libz.so"
du -sh "$dest"
