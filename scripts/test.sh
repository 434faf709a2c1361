#!/usr/bin/env bash
# Sets up, builds and runs every test: the release build runs all suites (unit, kernels,
# golden) and the end-to-end server tests (pytest, tests/server); a second build with
# AddressSanitizer + UndefinedBehaviorSanitizer runs the unit and kernel suites. Exits
# non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"

scripts/setup.sh --all
# House style: the tree is clang-format clean (.clang-format, clang-format 14 from Debian).
git ls-files '*.cc' '*.h' | xargs clang-format --dry-run --Werror
ctest --test-dir build --output-on-failure -j"$jobs"

# End-to-end server tests: build/quantserve serve on 127.0.0.1, driven by the openai client
# and raw HTTP (tests/server). Their pinned packages live in .venv (Debian's pip refuses
# system-wide installs); it is rebuilt only when tests/server/requirements.txt changes.
if ! cmp -s tests/server/requirements.txt .venv/requirements.txt; then
  rm -rf .venv
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -r tests/server/requirements.txt
  cp tests/server/requirements.txt .venv/requirements.txt
fi
QS_BINARY="$PWD/build/quantserve" .venv/bin/python -m pytest -q -p no:cacheprovider tests/server

# Release flags (no -g) keep this build quick; sanitizer reports still name functions.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Release -DQS_SANITIZE=ON -DQS_BUILD_BENCH=OFF \
  -DQS_TEST_SUITES="unit;kernels" >/dev/null
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" -L 'unit|kernels'
