#!/usr/bin/env bash
# Regenerates the data-parallel tables of docs/benchmarks.md ("Data-parallel replicas"):
#
#  1. throughput: `quantserve bench serve` through the endpoint of one replica with 2 threads
#     (plain `serve --threads 2`) against two replicas with 1 thread each (`serve --threads 2
#     --data-parallel-size 2`), random 256 in / 128 out (ignore_eos), the two servers up
#     together, warmed up, and the runs alternated ROUNDS times, so that load on the machine
#     hits both.
#  2. routing: a prefix-sharing workload through 2 replicas with --data-parallel-routing prefix
#     against round_robin: K groups of prompts, each group sharing one long prefix (a ShareGPT
#     file generated here: `bench serve` has no prefix-repetition dataset), shuffled, at two KV
#     cache sizes per replica; the prefix-cache hit rate summed over the replicas (their
#     vllm:prefix_cache_hits / queries, through the front's /metrics) and TTFT.
#
# Model: random-weight Qwen2.5-0.5B (`make-model --like qwen2.5-0.5b --dtype bf16`) with the
# real Qwen2 tokenizer from the shared test data: big enough that one core is the limit.
#
#   scripts/bench_data_parallel.sh            # both parts; markdown on stdout
#
# Environment (defaults in brackets):
#   QS_DP_DIR [/tmp/qs-dp-bench]   model, logs, datasets and result JSONs
#   QS_DP_PARTS ["throughput routing"], QS_DP_ROUNDS [3]
#   QS_DP_PROMPTS [48], QS_DP_CONCURRENCY [16]                  throughput part
#   QS_DP_GROUPS [16], QS_DP_PER_GROUP [6], QS_DP_PREFIX_WORDS [360], QS_DP_ROUTING_CONCURRENCY [8]
#   QS_DP_KV ["1GiB 96MiB"]                                      KV cache per replica, routing part
set -euo pipefail
cd "$(dirname "$0")/.."
QS=$PWD/build/quantserve
[[ -x $QS ]] || { echo "build/quantserve missing: cmake --build build --target quantserve" >&2; exit 1; }

DIR=${QS_DP_DIR:-/tmp/qs-dp-bench}
PARTS=${QS_DP_PARTS:-throughput routing}
ROUNDS=${QS_DP_ROUNDS:-3}
TOKENIZER_SRC=../shared/data/tokenizers/qwen2
MODEL=$DIR/q05-bf16
mkdir -p "$DIR/results"
if [[ ! -f $MODEL/model.safetensors ]]; then
  "$QS" make-model --like qwen2.5-0.5b --dtype bf16 --out "$MODEL" >&2
fi
cp "$TOKENIZER_SRC"/{vocab.json,merges.txt,tokenizer_config.json} "$MODEL/"

PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  PIDS=()
}
trap cleanup EXIT

start() {  # start NAME [serve flags...] -> PORT (the front's, from its own serving line)
  local log="$DIR/$1.log"
  shift
  : > "$log"
  "$QS" serve "$MODEL" --port 0 --served-model-name q05 --max-model-len 2048 --max-num-seqs 32 \
    "$@" 2> "$log" > /dev/null &
  PIDS+=($!)
  PORT=""
  for _ in $(seq 900); do
    PORT=$(grep -oE 'on http://127\.0\.0\.1:[0-9]+' "$log" | grep -oE '[0-9]+$' | head -1 || true)
    [[ -n $PORT ]] && break
    kill -0 "${PIDS[-1]}" 2> /dev/null || { echo "server died:" >&2; tail -20 "$log" >&2; exit 1; }
    sleep 0.2
  done
  [[ -n $PORT ]] || { echo "server did not start: $log" >&2; exit 1; }
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && return 0; sleep 0.2; done
  echo "server on :$PORT never became healthy" >&2
  exit 1
}

bench() {  # bench PORT RESULT_NAME [bench serve flags...]
  local port=$1 name=$2
  shift 2
  "$QS" bench serve --base-url "http://127.0.0.1:$port" --model q05 --tokenizer "$MODEL" \
    --disable-tqdm --save-result --result-dir "$DIR/results" --result-filename "$name.json" "$@" \
    > "$DIR/results/$name.txt" 2>&1 || { cat "$DIR/results/$name.txt" >&2; return 1; }
}

field() {  # field RESULT_NAME KEY...: numbers from the result JSON
  python3 - "$DIR/results/$1.json" "${@:2}" << 'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(" ".join(f"{r[k]:.1f}" if isinstance(r[k], float) else str(r[k]) for k in sys.argv[2:]))
EOF
}

prefix_stats() {  # prefix_stats PORT: hits queries hit% prefix-routed routed, over all replicas
  curl -s "http://127.0.0.1:$1/metrics" | python3 -c '
import re, sys
tot = {}
for line in sys.stdin:
    m = re.match(r"(vllm:prefix_cache_(?:hits|queries)_total|quantserve:dp_(?:prefix_routed_requests|requests_routed)_total)\{.*\} (\S+)", line)
    if m:
        tot[m.group(1)] = tot.get(m.group(1), 0) + float(m.group(2))
h, q = tot.get("vllm:prefix_cache_hits_total", 0), tot.get("vllm:prefix_cache_queries_total", 0)
print(int(h), int(q), f"{100 * h / q:.1f}" if q else "-",
      int(tot.get("quantserve:dp_prefix_routed_requests_total", 0)),
      int(tot.get("quantserve:dp_requests_routed_total", 0)))'
}

echo "# $(date -u '+%F %T UTC'), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs"
echo "# flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -owE 'avx2|fma|f16c|avx512f|avx512bw|avx512_bf16|avx512_vnni|amx_tile' | tr '\n' ' ')"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"

# --- 1. throughput: 1 replica x 2 threads against 2 replicas x 1 thread ----------------------
if [[ " $PARTS " == *" throughput "* ]]; then
  n=${QS_DP_PROMPTS:-48}
  c=${QS_DP_CONCURRENCY:-16}
  start one --threads 2 --kv-cache-memory 1GiB
  PORT_ONE=$PORT
  start two --threads 2 --data-parallel-size 2 --kv-cache-memory 512MiB
  PORT_TWO=$PORT
  # A first pass pages the mapped weights in and warms each replica; it is not reported.
  for port in "$PORT_ONE" "$PORT_TWO"; do
    bench "$port" "tput-warmup-$port" --dataset-name random --random-input-len 256 \
      --random-output-len 16 --ignore-eos --num-prompts "$c" --max-concurrency "$c" --seed 99
  done
  echo
  echo "random 256 in / 128 out, ignore_eos, $n prompts at --max-concurrency $c; KV cache 1 GiB in all:"
  echo
  echo "| round | server | output tok/s | total tok/s | mean TTFT ms | median TTFT ms | mean TPOT ms | load before |"
  echo "|---:|---|---:|---:|---:|---:|---:|---:|"
  for r in $(seq "$ROUNDS"); do
    for side in one two; do
      port=$PORT_ONE label="1 replica x 2 threads"
      [[ $side == two ]] && port=$PORT_TWO label="2 replicas x 1 thread"
      load=$(cut -d' ' -f1 /proc/loadavg)
      bench "$port" "tput-$side-r$r" --dataset-name random --random-input-len 256 \
        --random-output-len 128 --ignore-eos --num-prompts "$n" --max-concurrency "$c" --seed "$r"
      read -r out tot ttft mttft tpot <<< "$(field "tput-$side-r$r" output_throughput \
        total_token_throughput mean_ttft_ms median_ttft_ms mean_tpot_ms)"
      echo "| $r | $label | $out | $tot | $ttft | $mttft | $tpot | $load |"
    done
  done
  cleanup
fi

# --- 2. routing: prefix against round-robin on a prefix-sharing workload ---------------------
if [[ " $PARTS " == *" routing "* ]]; then
  groups=${QS_DP_GROUPS:-16}
  per=${QS_DP_PER_GROUP:-6}
  words=${QS_DP_PREFIX_WORDS:-360}
  c=${QS_DP_ROUTING_CONCURRENCY:-8}
  data=$DIR/prefix-groups-$groups-$per-$words.json
  # K documents of `words` random words (seeded), each followed by `per` different questions;
  # the completion's text is unused (--sharegpt-output-len).
  python3 - "$data" "$groups" "$per" "$words" << 'EOF'
import json, random, sys
path, groups, per, words = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(36)
vocab = ("river stone market winter garden letter engine window silver forest harbor village "
         "lantern mountain candle thunder meadow orchard bridge castle valley ribbon pepper "
         "marble signal anchor blanket feather pocket copper island needle puzzle ladder "
         "compass saddle mirror kettle violin tunnel basket cactus dragon falcon glacier "
         "hammer jacket koala lemon mango noodle ocean parrot quartz rocket tomato umbrella").split()
entries = []
for g in range(groups):
    doc = " ".join(rng.choice(vocab) for _ in range(words))
    for q in range(per):
        ask = " ".join(rng.choice(vocab) for _ in range(12))
        entries.append({"id": f"g{g}q{q}", "conversations": [
            {"from": "human", "value": f"Document {g}: {doc}\n\nQuestion {q}: where is the {ask}?"},
            {"from": "gpt", "value": "It is in the document."}]})
json.dump(entries, open(path, "w"))
EOF
  n=$((groups * per))
  echo
  echo "prefix-sharing workload: $groups documents of $words words, $per questions each," \
    "shuffled ($n requests), 16 output tokens, --max-concurrency $c; 2 replicas x 1 thread:"
  echo
  echo "| KV cache per replica | routing | prefix-cache hit rate | hits / queried tokens | mean prompt tokens | prefix-routed requests | mean TTFT ms | median TTFT ms | output tok/s | load before |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
  for kv in ${QS_DP_KV:-1GiB 96MiB}; do
    for routing in prefix round_robin; do
      start "route-$routing-$kv" --threads 2 --data-parallel-size 2 --data-parallel-routing "$routing" \
        --kv-cache-memory "$kv"
      load=$(cut -d' ' -f1 /proc/loadavg)
      bench "$PORT" "route-$routing-$kv" --dataset-name sharegpt --dataset-path "$data" \
        --sharegpt-output-len 16 --num-prompts "$n" --max-concurrency "$c" --seed 1
      read -r hits queries rate prefix_routed routed <<< "$(prefix_stats "$PORT")"
      read -r ttft mttft out input done <<< "$(field "route-$routing-$kv" mean_ttft_ms \
        median_ttft_ms output_throughput total_input_tokens completed)"
      echo "| $kv | $routing | $rate % | $hits / $queries | $((input / done)) |" \
        "$prefix_routed / $routed | $ttft | $mttft | $out | $load |"
      cleanup
    done
  done
fi
echo
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
