#!/usr/bin/env bash
# Installs everything quantserve needs on a fresh Debian 12 machine (apt-get, as root or via
# sudo) and builds the release binary into build/. Safe to run again: installed packages and
# an existing build are reused.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake pkg-config git nlohmann-json3-dev libpcre2-dev libopenblas-dev
          libgtest-dev libgmock-dev libbenchmark-dev clang-format clang lld libcpp-httplib-dev
          python3-venv python3-dev libpng-dev libsndfile1-dev libsoxr-dev libfftw3-dev
          zlib1g-dev libjpeg62-turbo-dev libwebp-dev libavformat-dev libavcodec-dev
          libswscale-dev libswresample-dev libavutil-dev libopenmpi-dev openmpi-bin
          libhwy-dev ffmpeg)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  echo "setup: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

BUILD_DIR="${QS_BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
# Only the binary by default; scripts/test.sh passes --all to build the tests as well.
if [[ "${1:-}" == "--all" ]]; then
  cmake --build "$BUILD_DIR" -j"$(nproc)"
else
  cmake --build "$BUILD_DIR" --target quantserve -j"$(nproc)"
fi
echo "setup: built $BUILD_DIR/quantserve" >&2
