#!/usr/bin/env bash
# Prepares .gpu-carry/ (ignored by git): what scripts/gpu-check.sh needs on a GPU machine
# that the machine lacks and cannot download (it has no network, no Debian -dev packages):
# the headers gradcomp builds against (Gloo's, which torch's ProcessGroupGloo.hpp includes
# and pip wheels do not ship; Eigen's, with its CMake package; zlib's) and a reference
# LAPACK/BLAS with their Fortran runtime (ATOMO's SVD). Laid out as a CMake prefix:
# include/, lib/, share/eigen3/cmake. Beside it, fashion-mnist/ for the examples' CUDA test
# (tests/python/test_examples.py): the test split, and the training split's first 12,000
# images. About 28 MB; the device tool carries it (`carry: [".gpu-carry"]`, at most 64 MiB
# with the working tree).
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
# The examples' data: a cut of the training split keeps the carry small (26 MB whole).
mkdir -p "$dest/fashion-mnist"
data=/usr/share/datasets/fashion-mnist
cp "$data"/t10k-* "$dest/fashion-mnist/"
python3 - "$data" "$dest/fashion-mnist" 12000 <<'PY'
import gzip, struct, sys
src, dst, keep = sys.argv[1], sys.argv[2], int(sys.argv[3])
for name, per_item in (("train-images-idx3-ubyte.gz", 28 * 28), ("train-labels-idx1-ubyte.gz", 1)):
    raw = gzip.open(f"{src}/{name}").read()
    dims = raw[3]
    header = bytearray(raw[:4 + 4 * dims])
    struct.pack_into(">I", header, 4, keep)  # the first dimension: the item count
    with gzip.open(f"{dst}/{name}", "wb") as f:
        f.write(bytes(header) + raw[len(header):len(header) + keep * per_item])
PY
du -sh "$dest"
