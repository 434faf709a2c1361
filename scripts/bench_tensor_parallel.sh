#!/usr/bin/env bash
# Tensor parallelism on one machine, for docs/benchmarks.md: decode tokens/s of memory-bound
# models with --tensor-parallel-size 2 over two 1-thread ranks (mpirun -np 2) against one
# process on one thread (TP=1, the same cores' worth of each rank) and on two threads (the same
# total cores), through `quantserve bench latency` (random 64-token decode, no prompt). Runs are
# alternated round by round, and the medians reported; rank 0's time in collectives (all-reduces
# and the logits' all-gather, waiting for the other rank included) and its bytes per token come
# from the same runs. The machine's CPU is printed first.
#
#   scripts/bench_tensor_parallel.sh            # tables on stdout, JSON in $DIR
# Environment: QS_TP_DIR [/tmp/qs-tp-bench], QS_TP_ROUNDS [3], QS_TP_TOKENS [64]
set -euo pipefail
cd "$(dirname "$0")/.."
QS=$PWD/build/quantserve
DIR=${QS_TP_DIR:-/tmp/qs-tp-bench}
ROUNDS=${QS_TP_ROUNDS:-3}
TOKENS=${QS_TP_TOKENS:-64}
mkdir -p "$DIR"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
echo "flags: $(lscpu | sed -n 's/^Flags: *//p' | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|avx512_vnni|amx_tile|amx_bf16)$' | tr '\n' ' ')"
echo "Open MPI: $(mpirun --version | head -1)"

# Qwen2.5-0.5B (bf16, 24 layers: 14 heads over 2 KV heads split 7 / 1 per rank) and
# Llama-3.2-1B's shape with 8 of its 16 layers, W4G128 (its o_proj and down_proj keep whole
# groups per rank).
[[ -f $DIR/qwen05/config.json ]] || "$QS" make-model --like qwen2.5-0.5b --out "$DIR/qwen05" >/dev/null 2>&1
[[ -f $DIR/llama1b_w4/config.json ]] ||
  "$QS" make-model --like llama-3.2-1b --layers 8 --quantize w4g128 --out "$DIR/llama1b_w4" >/dev/null 2>&1

run() {  # run NAME MODEL MODE ROUND -> $DIR/NAME.MODE.ROUND.json
  local name=$1 model=$2 mode=$3 round=$4 out="$DIR/$1.$3.$4.json"
  local args=(bench latency --model "$model" --input-len 0 --output-len "$TOKENS" --repetitions 3
              --json "$out")
  case $mode in
    tp1_1t) "$QS" "${args[@]}" --threads 1 >/dev/null 2>&1 ;;
    tp1_2t) "$QS" "${args[@]}" --threads 2 >/dev/null 2>&1 ;;
    tp2_1t) mpirun -np 2 --bind-to core "$QS" "${args[@]}" --threads 1 --no-roofline \
              --tensor-parallel-size 2 >/dev/null 2>&1 ;;
  esac
}

for model in qwen05 llama1b_w4; do
  for round in $(seq "$ROUNDS"); do
    for mode in tp1_1t tp2_1t tp1_2t; do run "$model" "$DIR/$model" "$mode" "$round"; done
  done
done

python3 - "$DIR" "$ROUNDS" <<'PY'
import json, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
def med(name, mode, key):
    vals = []
    for r in range(1, rounds + 1):
        for row in json.load(open(f"{d}/{name}.{mode}.{r}.json")):
            if row["test"].startswith("tg") and key in row:
                vals.append(row[key])
    return statistics.median(vals) if vals else float("nan")
print("| model | TP=1, 1 thread | TP=2, 2 ranks x 1 thread | TP=1, 2 threads | TP=2 / TP=1 (1 thread) "
      "| collectives' share (rank 0) | collective calls, KiB per token | roofline of TP=1 (1 thread) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for name, label in [("qwen05", "Qwen2.5-0.5B shape, bf16"),
                    ("llama1b_w4", "Llama-3.2-1B shape, 8 layers, W4G128")]:
    a = med(name, "tp1_1t", "tokens_per_second_mean")
    b = med(name, "tp2_1t", "tokens_per_second_mean")
    c = med(name, "tp1_2t", "tokens_per_second_mean")
    share = med(name, "tp2_1t", "collective_share")
    calls = med(name, "tp2_1t", "collective_calls_per_token")
    kib = med(name, "tp2_1t", "collective_bytes_per_token") / 1024
    roof = med(name, "tp1_1t", "roofline_fraction")
    bw = med(name, "tp1_1t", "read_bandwidth_gbs_before")
    print(f"| {label} | {a:.2f} | {b:.2f} | {c:.2f} | {b / a:.2f}x | {100 * share:.1f} % "
          f"| {calls:.0f}, {kib:.1f} | {100 * roof:.0f} % of {bw:.1f} GB/s |")
PY
