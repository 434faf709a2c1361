#!/usr/bin/env bash
# `bench serve` at several concurrencies against one `serve` of an MoE checkpoint, with the
# server's MoE counters scraped around each run: output tokens/s per concurrency, and how many
# (token, expert) pairs each expert weight read served (quantserve:moe_routed_slots over
# quantserve:moe_expert_reads; 1.0 would be one read per token, as without batching). Each
# concurrency draws its own prompts (--seed), so none is served from the prefix cache.
#   scripts/bench_moe_serve.sh MODEL_DIR     (holding a tokenizer: make-model writes none, so
#                                            copy one in, e.g. ../shared/data/tokenizers/qwen2)
# Environment (defaults in brackets): QS_MOE_CONCURRENCY [1,4,16]  QS_MOE_PROMPTS [32]
#   QS_MOE_INPUT_LEN [128]  QS_MOE_OUTPUT_LEN [64]  QS_MOE_PORT [8123]  QS_MOE_THREADS [2]
set -euo pipefail
cd "$(dirname "$0")/.."
QS=$PWD/build/quantserve
MODEL=${1:?model directory}
PORT=${QS_MOE_PORT:-8123}
OUT=$(mktemp -d)
trap 'kill "$SERVER" 2> /dev/null || true; rm -rf "$OUT"' EXIT
echo "# $(date -u '+%F %T UTC'), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, $MODEL"
"$QS" serve "$MODEL" --port "$PORT" --threads "${QS_MOE_THREADS:-2}" \
  --max-model-len 512 > "$OUT/serve.log" 2>&1 &
SERVER=$!
for _ in $(seq 600); do
  curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break
  kill -0 "$SERVER" 2> /dev/null || { cat "$OUT/serve.log" >&2; exit 1; }
  sleep 1
done
counter() {  # the value of one counter series on /metrics
  curl -sf "http://127.0.0.1:$PORT/metrics" | awk -v n="$1_total" '$1 ~ "^"n"[{ ]" || $1 == n {print $2}'
}
echo "| concurrency | requests | output tok/s | mean TPOT ms | routed slots | expert reads | slots per read |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
IFS=, read -ra CONC <<< "${QS_MOE_CONCURRENCY:-1,4,16}"
for c in "${CONC[@]}"; do
  s0=$(counter quantserve:moe_routed_slots)
  r0=$(counter quantserve:moe_expert_reads)
  "$QS" bench serve --port "$PORT" --tokenizer "$MODEL" --max-concurrency "$c" \
    --num-prompts "${QS_MOE_PROMPTS:-32}" --random-input-len "${QS_MOE_INPUT_LEN:-128}" \
    --random-output-len "${QS_MOE_OUTPUT_LEN:-64}" --save-result --result-dir "$OUT" \
    --result-filename "c$c.json" --disable-tqdm --seed "$c" > "$OUT/c$c.log" 2>&1
  s1=$(counter quantserve:moe_routed_slots)
  r1=$(counter quantserve:moe_expert_reads)
  python3 - "$OUT/c$c.json" "$c" "$s0" "$s1" "$r0" "$r1" << 'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c, s0, s1, r0, r1 = sys.argv[2], *map(float, sys.argv[3:])
slots, reads = s1 - s0, r1 - r0
print(f"| {c} | {r['completed']} | {r['output_throughput']:.1f} | {r['mean_tpot_ms']:.1f} "
      f"| {slots:.0f} | {reads:.0f} | {slots / reads:.2f} |")
PY
done
