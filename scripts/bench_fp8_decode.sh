#!/usr/bin/env bash
# FP8 against bf16 decode speed, robust to this host's drifting memory bandwidth
# (docs/kernels.md, "FP8 weights"): writes a random-weight TinyLlama-1.1B-shaped checkpoint as
# bf16 and as fp8 (compressed-tensors FP8_DYNAMIC: per-channel e4m3 weights, dynamic per-token
# fp8 activations), then alternates short `bench latency` decode runs of the two, bf16 first
# and last, and rates every fp8 run against the mean of the bf16 runs on either side of it.
# Prints each run, each ratio, and the median ratio. The bound is the bytes per token,
# printed too (the bf16 lm_head stays 16-bit in both, as llm-compressor keeps it).
# Usage: scripts/bench_fp8_decode.sh [model-dir]; QS_PAIRS (default 12), QS_PRESET
# (default tinyllama-1.1b), QS_THREADS (default 2), QS_OUTPUT_LEN (default 32).
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${QS_BIN:-build/quantserve}"
[[ -x "$bin" ]] || scripts/setup.sh
dir="${1:-/tmp/qs-bench-fp8}"
preset="${QS_PRESET:-tinyllama-1.1b}"
pairs="${QS_PAIRS:-12}"
threads="${QS_THREADS:-2}"
out_len="${QS_OUTPUT_LEN:-32}"
mkdir -p "$dir"
bf16="$dir/$preset-bf16"
fp8="$dir/$preset-fp8"
[[ -f "$bf16/config.json" ]] || "$bin" make-model --like "$preset" --dtype bf16 --out "$bf16"
[[ -f "$fp8/config.json" ]] || "$bin" make-model --like "$preset" --dtype bf16 --quantize fp8 \
  --format compressed-tensors --out "$fp8"

run() {  # model dir -> "tok/s bytes_per_token"
  "$bin" bench latency --model "$1" --input-len 0 --output-len "$out_len" --repetitions 2 \
    --no-roofline --threads "$threads" --json - 2>/dev/null |
    python3 -c 'import json,sys; r=json.load(sys.stdin)[0]; print(r["tokens_per_second_mean"], r["weight_bytes_per_token"])'
}

echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, $(date -u '+%Y-%m-%d %H:%M UTC'), $threads threads, tg$out_len"
bf=()
fp=()
read -r t bytes_bf <<<"$(run "$bf16")"
bf+=("$t")
for ((i = 0; i < pairs; ++i)); do
  read -r t bytes_fp <<<"$(run "$fp8")"
  fp+=("$t")
  read -r t _ <<<"$(run "$bf16")"
  bf+=("$t")
done
python3 - "$bytes_bf" "$bytes_fp" "${bf[*]}" "${fp[*]}" <<'EOF'
import statistics, sys
bytes_bf, bytes_fp = int(sys.argv[1]), int(sys.argv[2])
bf = [float(v) for v in sys.argv[3].split()]
fp = [float(v) for v in sys.argv[4].split()]
ratios = []
print("| fp8 run | bf16 before | fp8 tok/s | bf16 after | fp8 / mean(bf16 around) |")
print("|---:|---:|---:|---:|---:|")
for i, f in enumerate(fp):
    r = f / ((bf[i] + bf[i + 1]) / 2)
    ratios.append(r)
    print(f"| {i + 1} | {bf[i]:.2f} | {f:.2f} | {bf[i + 1]:.2f} | {r:.2f}x |")
print(f"median {statistics.median(ratios):.2f}x, range {min(ratios):.2f}-{max(ratios):.2f}x; "
      f"bytes per token {bytes_bf / 2**20:.0f} / {bytes_fp / 2**20:.0f} MiB, "
      f"bound {bytes_bf / bytes_fp:.2f}x")
EOF
