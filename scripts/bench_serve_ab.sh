#!/usr/bin/env bash
# Two builds of quantserve side by side on one checkpoint: both servers up together, the
# `bench serve` runs alternated point by point (c=1, then c=16, old then new, ROUNDS times),
# so that load on a shared machine hits both alike. Random 128 in / 128 out, --ignore-eos.
#   scripts/bench_serve_ab.sh OLD_BINARY NEW_BINARY MODEL_DIR [TOKENIZER_DIR]
# Environment: ROUNDS [2], THREADS [2], MAX_MODEL_LEN [2048], QS_AB_DIR [/tmp/qs-serve-ab] (logs and result JSONs).
set -euo pipefail
OLD=${1:?usage: scripts/bench_serve_ab.sh OLD_BINARY NEW_BINARY MODEL_DIR [TOKENIZER_DIR]}
NEW=${2:?}
MODEL=${3:?}
TOKENIZER=${4:-$MODEL}
ROUNDS=${ROUNDS:-2}
THREADS=${THREADS:-2}
DIR=${QS_AB_DIR:-/tmp/qs-serve-ab}
mkdir -p "$DIR"
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT

start() {  # start BINARY LOG -> STARTED_PORT (not in a subshell: the EXIT trap needs PIDS)
  : > "$2"
  "$1" serve "$MODEL" --port 0 --threads "$THREADS" --served-model-name ab --max-num-seqs 64 \
    --max-model-len "${MAX_MODEL_LEN:-2048}" --kv-cache-memory 1GiB 2> "$2" > /dev/null &
  PIDS+=($!)
  local port=""
  for _ in $(seq 600); do
    port=$(grep -oE 'on http://127\.0\.0\.1:[0-9]+' "$2" | grep -oE '[0-9]+$' | head -1 || true)
    [[ -n $port ]] && break
    sleep 0.2
  done
  [[ -n $port ]] || { echo "server did not start: $2" >&2; exit 1; }
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/health" > /dev/null && break; sleep 0.5; done
  STARTED_PORT=$port
}

start "$OLD" "$DIR/old.log"
PORT_OLD=$STARTED_PORT
start "$NEW" "$DIR/new.log"
PORT_NEW=$STARTED_PORT
echo "# $(date -u '+%F %T UTC'), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, threads $THREADS, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| round | concurrency | side | output tok/s | mean TPOT ms | mean TTFT ms |"
echo "|---:|---:|---|---:|---:|---:|"
for r in $(seq "$ROUNDS"); do
  for c in 1 16; do
    n=$((c == 1 ? 3 : 32))
    for side in old new; do
      port=$PORT_OLD
      [[ $side == new ]] && port=$PORT_NEW
      "$NEW" bench serve --base-url "http://127.0.0.1:$port" --model ab --tokenizer "$TOKENIZER" \
        --dataset-name random --random-input-len 128 --random-output-len 128 --ignore-eos \
        --num-prompts "$n" --max-concurrency "$c" --disable-tqdm --save-result \
        --result-dir "$DIR" --result-filename "$side-c$c-r$r.json" > "$DIR/$side-c$c-r$r.txt" 2>&1
      python3 - "$DIR/$side-c$c-r$r.json" "$r" "$c" "$side" << 'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {r['output_throughput']:.1f} | "
      f"{r['mean_tpot_ms']:.1f} | {r['mean_ttft_ms']:.1f} |")
PY
    done
  done
done
echo "# load after $(cut -d' ' -f1-3 /proc/loadavg)"
