#!/usr/bin/env bash
# Sets up, builds and runs every test: the release build runs all suites (unit, kernels,
# golden); a second build with AddressSanitizer + UndefinedBehaviorSanitizer runs the unit
# and kernel suites. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"

scripts/setup.sh --all
# House style: the tree is clang-format clean (.clang-format, clang-format 14 from Debian).
git ls-files '*.cc' '*.h' | xargs clang-format --dry-run --Werror
ctest --test-dir build --output-on-failure -j"$jobs"

# tests/server: pytest drives build/quantserve over HTTP on 127.0.0.1, from a gitignored venv
# with the pinned packages of every tests/server/requirements*.txt.
[[ -x .venv-server/bin/python ]] || python3 -m venv .venv-server
for req in tests/server/requirements*.txt; do .venv-server/bin/pip install -q -r "$req"; done
.venv-server/bin/python -m pytest -q tests/server

# Release flags (no -g) keep this build quick; sanitizer reports still name functions.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Release -DQS_SANITIZE=ON -DQS_BUILD_BENCH=OFF \
  -DQS_TEST_SUITES="unit;kernels" >/dev/null
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" -L 'unit|kernels'
