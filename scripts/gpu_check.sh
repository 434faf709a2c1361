#!/usr/bin/env bash
# The GPU check of issue 30, in one short run for whenever a GPU machine is lent: configures a
# Release build with the CUDA kernels (QS_CUDA=ON), builds the tests labelled gpu (and the
# host-only runtime tests), runs `ctest -L gpu`, and writes into OUTDIR:
#   nvidia-smi.txt   the GPU, driver and CUDA version (or why there is none)
#   configure.log, build.log, ctest_host.log, ctest_gpu.log, backend.log, summary.txt
#   bench/             with a GPU: `bench latency` (pp512 / tg128) and `bench serve` (random
#                      512 / 128 at concurrency 1, 16, 64) of a random Llama-3.2-1B-shaped
#                      checkpoint as bf16, W4A16 (auto_round, RTN) and FP8 dynamic
#                      (compressed-tensors) on --device cuda; their JSON and a table in summary.txt
# Sized for a few minutes on a 16-core machine (QS_GPU_BENCH=0 skips the benchmarks).
#
#   scripts/gpu_check.sh OUTDIR        (QS_GPU_BUILD_DIR: build directory, default build-gpu)
#
# Exit status: 0 when a GPU is present and every gpu test passed (some may skip on purpose on
# a GPU they do not apply to); 1 when a step or a test failed, or the CUDA runtime saw no device
# although nvidia-smi lists one; 2 when the machine has no GPU (everything is still built and
# run, the gpu tests skip, and nothing was measured).
set -uo pipefail
if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUTDIR" >&2
  exit 1
fi
cd "$(dirname "$0")/.."
out="$1"
mkdir -p "$out"
build="${QS_GPU_BUILD_DIR:-build-gpu}"
jobs="$(nproc)"
summary="$out/summary.txt"
: >"$summary"
note() { echo "gpu_check: $*" | tee -a "$summary"; }

have_gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >"$out/nvidia-smi.txt" 2>&1; then
  nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv \
    >>"$out/nvidia-smi.txt" 2>&1
  if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    have_gpu=1
  fi
else
  echo "nvidia-smi is missing or failed: no NVIDIA driver on this machine" >>"$out/nvidia-smi.txt"
fi
if ((have_gpu)); then
  note "GPU: $(nvidia-smi -L | head -n 1)"
else
  note "no GPU on this machine: the gpu tests will skip and nothing is measured"
fi

start=$SECONDS
if ! cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DQS_CUDA=ON -DQS_BUILD_BENCH=OFF \
  >"$out/configure.log" 2>&1; then
  note "configure failed (configure.log)"
  exit 1
fi
# The gpu-labelled test binaries (tests/*/cuda_*_test.cc) and the host-only runtime tests.
# The backends' own tests (every op, and greedy decoding of stories260K and the golden families,
# on each backend against the CPU) run on the GPU through their cuda:0 instances.
targets=(device_runtime_test device_float_codecs_test backend_ops_test backend_greedy_test quantserve)
for src in tests/*/cuda_*_test.cc; do
  [[ -e $src ]] && targets+=("$(basename "${src%.cc}")")
done
if ! cmake --build "$build" -j"$jobs" --target "${targets[@]}" >"$out/build.log" 2>&1; then
  note "build failed (build.log)"
  exit 1
fi
note "built ${targets[*]} in $((SECONDS - start)) s"

start=$SECONDS
# The runtime tests first (they print the device, or why there is none), then every gpu test.
ctest --test-dir "$build" --verbose --no-tests=error \
  -R '^DeviceRuntime\.|^DeviceFloatCodecs\.' >"$out/ctest_host.log" 2>&1
host_rc=$?
ctest --test-dir "$build" --verbose --no-tests=error -L gpu >"$out/ctest_gpu.log" 2>&1
gpu_rc=$?
ctest --test-dir "$build" --verbose --no-tests=error -R '^Devices/Backend' >"$out/backend.log" 2>&1 ||
  gpu_rc=1
# ctest counts a skipped test as passed: the skips are counted apart.
for log in ctest_host ctest_gpu backend; do
  note "$log: $(grep -E '^[0-9]+% tests passed' "$out/$log.log" | head -n 1)," \
    "$(grep -c '(Skipped)$' "$out/$log.log") skipped"
done
note "ctest ran in $((SECONDS - start)) s"
grep -ho -m 1 -E '(no CUDA device|device 0): .*' "$out/ctest_host.log" | head -n 1 |
  sed 's/^/gpu_check: /' | tee -a "$summary"

if ((host_rc != 0 || gpu_rc != 0)); then
  note "FAILED: see ctest_host.log and ctest_gpu.log"
  exit 1
fi
if ((!have_gpu)); then
  exit 2
fi
# A test may skip on purpose on some GPUs (one that needs sm_89 on an A100); one that found no
# device while nvidia-smi lists one is a failure of the build or the driver.
if grep -q 'no CUDA device:' "$out/ctest_gpu.log"; then
  note "FAILED: nvidia-smi lists a GPU but the CUDA runtime sees none (ctest_gpu.log says why)"
  exit 1
fi
note "tests passed"

if [[ ${QS_GPU_BENCH:-1} == 1 ]]; then
  scripts/gpu_bench.sh "$build/quantserve" "$out/bench" >>"$summary" 2>"$out/bench.log" ||
    { note "FAILED: the benchmarks (bench.log)"; exit 1; }
fi
exit 0
