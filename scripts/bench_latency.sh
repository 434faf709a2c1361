#!/usr/bin/env bash
# End-to-end prefill and decode speed (docs/benchmarks.md says how to read it): writes random-weight checkpoints at
# real shapes (bf16 and f16; QS_BENCH_DTYPES overrides) and runs `quantserve bench latency` on 1 and 2 threads, with the read
# bandwidth measured around every decode test. Results: bench-results/*.json and the tables
# printed on stdout. Usage: scripts/bench_latency.sh [preset ...] (default qwen2.5-0.5b).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x build/quantserve ]] || scripts/setup.sh

presets=("$@")
((${#presets[@]})) || presets=(qwen2.5-0.5b)
mkdir -p bench-results
for preset in "${presets[@]}"; do
  for dtype in ${QS_BENCH_DTYPES:-bf16 f16}; do
    dir="bench-models/${preset}-${dtype}"
    [[ -f "$dir/model.safetensors" ]] || build/quantserve make-model --like "$preset" --dtype "$dtype" --out "$dir"
    build/quantserve inspect "$dir" | grep -E 'architecture|parameters|weight memory'
    build/quantserve bench latency --model "$dir" --input-len 512 --output-len 128 --threads 1,2 \
      --repetitions "${QS_BENCH_REPS:-5}" --json "bench-results/${preset}-${dtype}.json"
  done
done
