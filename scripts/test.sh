#!/usr/bin/env bash
# Sets up, builds and runs every test: the release build runs all suites (unit, kernels,
# golden, fuzz replays) and the end-to-end server tests (pytest, tests/server); a
# position-independent build of the libraries gives the Python package, tested with pytest
# (tests/python); a cross build for aarch64 runs the compute layers' tests under qemu
# (scripts/test_aarch64.sh); a third build
# (clang, build-san/) with AddressSanitizer + UndefinedBehaviorSanitizer and libFuzzer's
# instrumentation runs the C++ suites again, golden suites and the generation loop included,
# and then the fuzzers briefly (scripts/fuzz.sh --ci). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"
# Each phase's end and the time since the start, so that a slow CI says where it went.
phase() { echo "== scripts/test.sh: $1 done at $((SECONDS / 60)) min $((SECONDS % 60)) s"; }

scripts/setup.sh --all
phase "set-up and release build"
# House style: the tree is clang-format clean (.clang-format, clang-format 14 from Debian),
# the CUDA sources included.
git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | xargs clang-format --dry-run --Werror
# Layering (docs/architecture.md): every include between rooms of src/ runs downward, with no
# cycle, and each library links exactly the rooms it includes; the checker first proves on
# made-up trees that each of those rules fires.
python3 scripts/check_layers.py --self-test >/dev/null
python3 scripts/check_layers.py
ctest --test-dir build --output-on-failure -j"$jobs"
phase "release tests"

# End-to-end tests (tests/server): build/quantserve serve on 127.0.0.1 driven by the openai
# client and raw HTTP, and bench serve against a fake OpenAI server. Their pinned packages
# (every tests/server/requirements*.txt, and python/requirements*.txt for the Python package
# below) live in .venv, since Debian's pip refuses system-wide
# installs; it is rebuilt only when those files change.
cat tests/server/requirements*.txt python/requirements*.txt >/tmp/qs-server-requirements.$$
if ! cmp -s /tmp/qs-server-requirements.$$ .venv/requirements.txt; then
  rm -rf .venv
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -r /tmp/qs-server-requirements.$$
  cp /tmp/qs-server-requirements.$$ .venv/requirements.txt
fi
rm -f /tmp/qs-server-requirements.$$
QS_BINARY="$PWD/build/quantserve" .venv/bin/python -m pytest -q -p no:cacheprovider tests/server
# Tensor parallelism across two hosts: network namespaces joined by a veth pair, one rank in
# each, Open MPI over TCP between them (skips, saying why, where namespaces cannot be made).
scripts/test_two_hosts.sh build/quantserve
phase "end-to-end tests"

# The Python package (python/, docs/python.md): the extension module needs every library
# position-independent, so it has a build of its own (libraries, module and CLI, no tests),
# installed as the wheel lays it out and tested with pytest (tests/python). Without the CUDA
# kernels (-DQS_CUDA=OFF): the release build above compiles them, and here they would only
# add CI time.
cmake -S . -B build-py -DCMAKE_BUILD_TYPE=Release -DQS_PYTHON=ON -DQS_BUILD_TESTS=OFF \
  -DQS_BUILD_BENCH=OFF -DQS_CUDA=OFF -DPython_EXECUTABLE="$PWD/.venv/bin/python" >/dev/null
cmake --build build-py --target _core quantserve -j"$jobs"
cmake --install build-py --prefix build-py/site >/dev/null
PYTHONPATH="$PWD/build-py/site" .venv/bin/python -m pytest -q -p no:cacheprovider tests/python
phase "python package"

# Portability (issue 34): the compute layers and their unit and kernel tests cross-built for
# aarch64 with Debian's cross compiler and run under qemu-aarch64, where the Highway kernels run
# their NEON target (installs the cross toolchain and arm64 libraries it lacks).
scripts/test_aarch64.sh
phase "aarch64 under qemu"

# One clang build with AddressSanitizer + UndefinedBehaviorSanitizer (float-cast-overflow
# included, -O1; test bodies -O0) and libFuzzer's coverage instrumentation of the parsing
# layers serves both what follows: every C++ suite again (golden suites and the generation
# loop included), the fuzz replays under ctest, and the fuzzers. scripts/fuzz.sh owns its
# configuration.
scripts/fuzz.sh --configure
cmake --build build-san -j"$jobs"
phase "sanitizer build"
# Every suite, except the comparison with the auto-round tool (tests/golden/autoround_tool_test.cc): its
# three 200-iteration tuning runs take about 11 CPU-minutes here and exercise the same tuner
# code that QuantizeTuned and the quant_block tests run under the sanitizers in seconds; the
# release build above runs it.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-san --output-on-failure -j"$jobs" -E '^Cases/AutoRoundTool\.'
phase "sanitizer tests"

# Coverage-guided fuzzing, briefly: each target starts from its seeds and past findings, then
# fuzzes 10 s, one target per core (long campaigns are scripts/fuzz.sh TARGET SECONDS or
# --campaign TARGET).
scripts/fuzz.sh --ci "${QS_FUZZ_CI_SECONDS:-10}"
phase "fuzzing"
