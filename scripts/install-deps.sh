#!/usr/bin/env bash
# Installs every Debian package gradcomp needs to build, test, benchmark and train.
# Idempotent: packages already present are left alone. Nothing is downloaded from
# anywhere but the Debian archive configured on the machine.
#
#   scripts/install-deps.sh            what every build needs (Gloo's headers, GoogleTest,
#                                      Eigen, LAPACK, ...), not a torch
#   scripts/install-deps.sh --debian-torch
#                                      also Debian's own torch 1.13 (libtorch-dev,
#                                      python3-torch) and what its Python tests use
#                                      (scripts/test-debian-torch.sh)
#   scripts/install-deps.sh --netlab   also the network lab's extras (scripts/bench-net.sh,
#                                      netlab-faults.sh): iproute2, nftables, iptables,
#                                      libnetfilter-queue-dev, iputils-ping
#   scripts/install-deps.sh --torch2   also .venv-torch2/: the machine's python3 with a pip
#                                      wheel of torch 2.x (GRADCOMP_TORCH2_VERSION, default
#                                      2.13.0, the CPU wheel these machines keep on disk),
#                                      and what the torch 2.x test lane installs with
#                                      (scikit-build-core) and tests with (pytest, numpy),
#                                      all from PyPI; scikit-build-core's wheels also in
#                                      .wheelhouse/ (scripts/test.sh installs offline)
#   scripts/install-deps.sh --cuda-torch
#                                      also .venv-torch2-cuda/: the same with a CUDA build
#                                      of torch (GRADCOMP_CUDA_TORCH_VERSION, default 2.14.1,
#                                      and torchvision 0.29.1: on disk here; its CUDA
#                                      libraries, ~3 GB, from PyPI),
#                                      what most users have (scripts/test-cuda-torch.sh)
# What CI runs (scripts/test.sh) is `--torch2`: Debian's torch is not part of it, and its
# packages pull 400-odd others (OpenCV, GDAL, ...: 75 s of a fresh machine's apt-get).
set -euo pipefail
cd "$(dirname "$0")/.."

netlab=0
torch2=0
cuda_torch=0
debian_torch=0
for arg in "$@"; do
  case $arg in
    --netlab) netlab=1 ;;
    --torch2) torch2=1 ;;
    --cuda-torch) cuda_torch=1 ;;
    --debian-torch) debian_torch=1 ;;
    *) echo "install-deps: unknown option '$arg' (known: --netlab, --torch2, --cuda-torch, --debian-torch)" >&2
       exit 2 ;;
  esac
done

packages=(
  # toolchain and build
  build-essential cmake ninja-build ccache pkg-config git
  # core tests, benchmarks, fuzzing (clang's libFuzzer + sanitizer runtimes)
  libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-14-dev clang-format
  # CLI parsing
  libcli11-dev
  # Gloo's headers (torch's ProcessGroupGloo.hpp includes them; Gloo's code is in
  # libtorch) and a fast BLAS under the core's LAPACK (and Debian's LibTorch: without
  # OpenBLAS it falls back to the reference BLAS, matrix products 10-35x slower)
  libgloo-dev libopenblas0-pthread
  # dense linear algebra for ATOMO's SVD, kept out of LibTorch: Eigen for the range
  # finder, LAPACK's sgesdd for the SVD itself (src/core/detail/lapack_svd.h)
  libeigen3-dev liblapack-dev
  # data: zlib reads the gzipped IDX files; Fashion-MNIST itself; the fortunes text
  # (2.6 MB of English, /usr/share/games/fortunes) for the language model (--dataset fortunes)
  zlib1g-dev dataset-fashion-mnist fortunes
  # the Python package's build (a venv's torch brings its own pybind11)
  python3-dev python3-venv
)
if [ "$debian_torch" = 1 ]; then
  # Debian's LibTorch 1.13 and the same torch for /usr/bin/python3, the pybind11 it was
  # built with, numpy and pytest for its Python tests
  packages+=(libtorch-dev python3-torch python3-numpy pybind11-dev python3-pytest)
fi
if [ "$netlab" = 1 ]; then
  # namespaces, veth and tc; where the kernel has no netem, the delay line
  # (tools/netlab/nfq-delay.c, built by netlab.sh against libnetfilter-queue) gets its
  # packets from iptables' NFQUEUE target, and nftables drops packets for netlab-faults'
  # loss-only fallback; ping checks a link's delay
  packages+=(iproute2 nftables iptables libnetfilter-queue-dev iputils-ping)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    SUDO="sudo"
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "install-deps: done"
fi

# A venv of the python3 on PATH (not /usr/bin/python3, Debian's, with its torch 1.13), as a
# user's, with this torch and what the tests need.
torch_venv() {  # torch_venv DIR TORCH_VERSION [PACKAGE==VERSION MODULE]
  local venv=$1 version=$2 extra=${3:-} extra_module=${4:-}
  if ! "$venv/bin/python" -c "import torch, numpy, pytest, scikit_build_core, sys; \
${extra_module:+import $extra_module;} sys.exit(torch.__version__.split('+')[0] != '$version')" 2>/dev/null; then
    echo "install-deps: $venv with torch $version ${extra:+and $extra }(pip)"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "torch==$version" $extra \
      numpy pytest 'scikit-build-core>=0.10' 2>&1 | grep -v "^WARNING: Location" || true
    "$venv/bin/python" -c "import torch, numpy, pytest, scikit_build_core ${extra_module:+, $extra_module}" || {
      echo "install-deps: $venv: torch $version, $extra numpy, pytest or scikit-build-core did not install" >&2
      exit 1
    }
  fi
  echo "install-deps: $venv: torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
}
if [ "$torch2" = 1 ]; then
  torch_venv .venv-torch2 "${GRADCOMP_TORCH2_VERSION:-2.13.0}"
  # pyproject.toml's build requirement as wheels, for scripts/test.sh's `pip install .`:
  # pip's isolated build then installs it from this folder, not from PyPI at test time.
  if ! ls .wheelhouse/scikit_build_core-*.whl >/dev/null 2>&1; then
    echo "install-deps: .wheelhouse/ with scikit-build-core (pip download)"
    .venv-torch2/bin/python -m pip download -q --disable-pip-version-check --only-binary=:all: \
      -d .wheelhouse 'scikit-build-core>=0.10' 2>&1 | { grep -v "^WARNING: Location" || true; }
  fi
fi
# torchvision: scripts/bench_ddp_gpu.py's models (test-cuda-torch.sh runs it on the CPU).
if [ "$cuda_torch" = 1 ]; then
  torch_venv .venv-torch2-cuda "${GRADCOMP_CUDA_TORCH_VERSION:-2.14.1}" \
    "torchvision==${GRADCOMP_CUDA_TORCHVISION_VERSION:-0.29.1}" torchvision
fi
