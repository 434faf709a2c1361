#!/usr/bin/env bash
# Issue 34's portability check: cross-builds the compute layers (core, dist, formats, kernels,
# ops; -DQS_COMPUTE_LAYERS_ONLY=ON, see CMakeLists.txt for why no more) and every test of the
# unit and kernels suites that includes nothing else and calls no hand-written x86 kernel,
# for aarch64 with Debian's cross compiler, then runs them under qemu-aarch64 through ctest.
# On aarch64 the Highway kernels (elementwise, gemm, linear, ...) run at Highway's NEON
# target (SVE is left out, CMakeLists.txt), which the kernel tests check against the scalar
# references. Installs what
# it lacks (as root, from Debian's archive). Build directory: build-aarch64/. Exits non-zero
# on any failure. 2 to 4 minutes from scratch on two cores (docs/kernels.md, "aarch64").
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"
phase() { echo "== scripts/test_aarch64.sh: $1 done at $((SECONDS / 60)) min $((SECONDS % 60)) s"; }

# Debian's cross toolchain and user-mode qemu, and the arm64 builds of the libraries the
# compute layers and tests link (nlohmann-json3-dev is architecture-independent). libc6:arm64
# and libstdc++6:arm64 come with them: qemu runs the tests on those (cmake/aarch64-linux-gnu.cmake).
need=()
command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
for pkg in libhwy-dev:arm64 libgtest-dev:arm64 nlohmann-json3-dev; do
  dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need+=("$pkg")
done
if ((${#need[@]})); then
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    dpkg --add-architecture arm64
  fi
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}"
fi
phase "set-up"

# No CUDA (nvcc here targets this machine), no MPI (the dist layer builds its single-process
# communicator), no sanitizers; the kernels layer's *_avx2/_avx512/_amx sources are left out by
# the architecture (CMakeLists.txt's QS_X86).
cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" \
  -DCMAKE_BUILD_TYPE=Release -DQS_COMPUTE_LAYERS_ONLY=ON -DQS_CUDA=OFF -DQS_MPI=OFF \
  -DQS_TEST_SUITES="unit;kernels" >/dev/null
cmake --build build-aarch64 -j"$jobs"
phase "cross build"

# One test per core: qemu runs each at a fraction of native speed, within ctest's limits.
ctest --test-dir build-aarch64 --output-on-failure -j"$jobs"
phase "tests under qemu-aarch64"
