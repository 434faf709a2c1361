#!/usr/bin/env bash
# Sets up, builds and runs every test: the release build runs all suites (unit, kernels,
# golden, fuzz replays); a second build with AddressSanitizer + UndefinedBehaviorSanitizer
# runs them all again, golden suites and the generation loop included; then the fuzzers
# replay their seeds and findings and run briefly (scripts/fuzz.sh --ci). Exits non-zero on
# any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"

scripts/setup.sh --all
# House style: the tree is clang-format clean (.clang-format, clang-format 14 from Debian).
git ls-files '*.cc' '*.h' | xargs clang-format --dry-run --Werror
ctest --test-dir build --output-on-failure -j"$jobs"

# Release flags (no -g) keep this build quick; sanitizer reports still name functions.
# The golden suites run here too: they drive the generation loop and the CLI end to end.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Release -DQS_SANITIZE=ON -DQS_BUILD_BENCH=OFF \
  -DQS_TEST_SUITES="unit;kernels;golden" >/dev/null
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs"

# Coverage-guided fuzzing, briefly: seeds and past findings first, then 20 s per target.
scripts/fuzz.sh --ci "${QS_FUZZ_CI_SECONDS:-20}"
