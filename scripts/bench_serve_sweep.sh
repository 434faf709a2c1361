#!/usr/bin/env bash
# Regenerates the serving tables of docs/benchmarks.md: `quantserve bench serve`
# against `quantserve serve` and against llama.cpp's `llama-server` on the same random-weight
# Qwen2.5-0.5B, bf16 beside F16 and W4G128 beside Q4_0, at --max-concurrency 1, 4, 16 and 64
# (random 128 in / 128 out, ignore_eos). The two servers of a pair are up together and
# interleaved point by point, so load on a shared machine hits both sides alike. Then the
# ShareGPT report (W4G128) and the prefix-cache TTFT (a long shared prefix, miss vs hit).
#
#   scripts/bench_serve_sweep.sh                 # everything; tables on stdout
#   QS_SWEEP_LLAMA_BIN= scripts/bench_serve_sweep.sh   # quantserve only
#
# Environment (defaults in brackets):
#   QS_SWEEP_DIR [/tmp/qs-serve-sweep]       models, GGUFs, logs and result JSONs
#   QS_SWEEP_THREADS [2]                     threads of both servers
#   QS_SWEEP_CONCURRENCY ["1 4 16 64"]       points; prompts per point: QS_SWEEP_PROMPTS_<C>
#   QS_SWEEP_LLAMA_BIN [/work/scratch/llama.cpp/build/bin]   llama-server and llama-quantize
#   QS_SWEEP_LLAMA_SRC [/work/scratch/llama.cpp/src]         convert_hf_to_gguf.py, gguf-py
#   QS_SWEEP_PYTHON [/work/venv-goldens/bin/python]          runs convert_hf_to_gguf.py
#   QS_SWEEP_SHAREGPT_PROMPTS [200], QS_SWEEP_SHAREGPT_OUTPUT_LEN [16] (0: the replies' own)
#   QS_SWEEP_PARTS ["sweep sharegpt prefix"], QS_SWEEP_ENGINES ["quantserve llama.cpp"]
#   QS_SWEEP_SERVE_ARGS [""]                 more `quantserve serve` flags, e.g.
#                                            "--lm-head-dtype int8" (llama.cpp's tied output
#                                            matrix is Q8_0 in both of its files)
set -euo pipefail
cd "$(dirname "$0")/.."
QS=$PWD/build/quantserve
[[ -x $QS ]] || { echo "build/quantserve missing: cmake --build build --target quantserve" >&2; exit 1; }

DIR=${QS_SWEEP_DIR:-/tmp/qs-serve-sweep}
THREADS=${QS_SWEEP_THREADS:-2}
POINTS=${QS_SWEEP_CONCURRENCY:-1 4 16 64}
LLAMA_BIN=${QS_SWEEP_LLAMA_BIN-/work/scratch/llama.cpp/build/bin}
LLAMA_SRC=${QS_SWEEP_LLAMA_SRC:-/work/scratch/llama.cpp/src}
PY=${QS_SWEEP_PYTHON:-/work/venv-goldens/bin/python}
PARTS=${QS_SWEEP_PARTS:-sweep sharegpt prefix}
TOKENIZER_SRC=../shared/data/tokenizers/qwen2
SHAREGPT=../shared/data/bench/sharegpt/sharegpt_sample.json
mkdir -p "$DIR/results"
LLAMA=0
[[ -n $LLAMA_BIN && -x $LLAMA_BIN/llama-server ]] && LLAMA=1

prompts_for() {  # enough requests per point for several full batches, bounded in time
  local c=$1 var="QS_SWEEP_PROMPTS_$1"
  if [[ -n ${!var:-} ]]; then echo "${!var}"; elif ((c == 1)); then echo 4
  elif ((c < 16)); then echo $((2 * c)); else echo $((2 * c > 64 ? 2 * c : 64)); fi
}

# --- checkpoints: random Qwen2.5-0.5B weights, the real Qwen2 tokenizer beside them --------
model() {  # model NAME [make-model args...]
  local out="$DIR/$1"
  shift
  if [[ ! -f $out/model.safetensors ]]; then
    "$QS" make-model --like qwen2.5-0.5b --dtype bf16 --out "$out" "$@" >&2
  fi
  cp "$TOKENIZER_SRC"/{vocab.json,merges.txt,tokenizer_config.json} "$out/"
}
model q05-bf16
model q05-w4g128 --quantize w4g128
if ((LLAMA)); then
  # The same bf16 weights through llama.cpp's own converter, then its quantizer.
  [[ -f $DIR/q05-f16.gguf ]] || PYTHONPATH=$LLAMA_SRC/gguf-py "$PY" "$LLAMA_SRC/convert_hf_to_gguf.py" \
    "$DIR/q05-bf16" --outtype f16 --outfile "$DIR/q05-f16.gguf" > "$DIR/convert.log" 2>&1
  [[ -f $DIR/q05-q4_0.gguf ]] || "$LLAMA_BIN/llama-quantize" "$DIR/q05-f16.gguf" \
    "$DIR/q05-q4_0.gguf" Q4_0 "$THREADS" > "$DIR/quantize.log" 2>&1
fi

# --- servers -----------------------------------------------------------------------------
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; PIDS=(); }
trap cleanup EXIT

wait_health() {  # wait_health PORT PID LOG
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$1/health" > /dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || { echo "server died:" >&2; tail -20 "$3" >&2; exit 1; }
    sleep 0.5
  done
  echo "server on :$1 never became healthy" >&2
  exit 1
}

start_qs() {  # start_qs MODEL_DIR [serve flags...] -> QS_PORT
  local log="$DIR/qs-$(basename "$1").log"
  # Emptied here, not by the child's redirection: the loop below could otherwise read the
  # previous run's port before the new server has truncated the file.
  : > "$log"
  local extra=()
  read -ra extra <<< "${QS_SWEEP_SERVE_ARGS:-}"
  "$QS" serve "$@" "${extra[@]}" --port 0 --threads "$THREADS" --served-model-name q05 --max-num-seqs 64 \
    --max-model-len 2048 --kv-cache-memory 1GiB 2> "$log" > /dev/null &
  PIDS+=($!)
  for _ in $(seq 600); do
    QS_PORT=$(grep -oE 'on http://127\.0\.0\.1:[0-9]+' "$log" | grep -oE '[0-9]+$' | head -1 || true)
    [[ -n $QS_PORT ]] && break
    sleep 0.2
  done
  wait_health "$QS_PORT" "${PIDS[-1]}" "$log"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start_llama() {  # start_llama GGUF -> LL_PORT; one slot per client of the largest point
  LL_PORT=$(free_port)
  local log="$DIR/llama-$(basename "$1").log"
  "$LLAMA_BIN/llama-server" -m "$1" --host 127.0.0.1 --port "$LL_PORT" -t "$THREADS" \
    -tb "$THREADS" -np 64 -c 32768 -kvu --cont-batching --alias q05 --no-webui \
    > "$log" 2>&1 &
  PIDS+=($!)
  wait_health "$LL_PORT" "${PIDS[-1]}" "$log"
}

bench() {  # bench PORT RESULT_NAME [bench serve flags...]; prints the vLLM block to the log
  local port=$1 name=$2
  shift 2
  "$QS" bench serve --base-url "http://127.0.0.1:$port" --model q05 --tokenizer "$DIR/q05-bf16" \
    --disable-tqdm --save-result --result-dir "$DIR/results" --result-filename "$name.json" "$@" \
    > "$DIR/results/$name.txt" 2>&1 || { cat "$DIR/results/$name.txt" >&2; return 1; }
}

field() {  # field RESULT_NAME KEY...: numbers from the result JSON, tab-separated
  python3 - "$DIR/results/$1.json" "${@:2}" << 'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print("\t".join(f"{r[k]:.1f}" if isinstance(r[k], float) else str(r[k]) for k in sys.argv[2:]))
EOF
}

echo "# $(date -u '+%F %T UTC'), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, threads $THREADS"
echo "# flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -oE 'avx512f|avx512_bf16|avx512_vnni|amx_tile|amx_bf16|amx_int8' | tr '\n' ' ')"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# quantserve serve flags added: ${QS_SWEEP_SERVE_ARGS:-none}"

# --- concurrency sweep, the two engines interleaved per point -----------------------------
if [[ " $PARTS " == *" sweep "* ]]; then
  echo
  echo "| weights | engine | concurrency | prompts | output tok/s | vs c=1 | mean TTFT ms | mean TPOT ms | load before |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
  for pair in "w4g128 q05-w4g128 q05-q4_0.gguf Q4_0" "bf16 q05-bf16 q05-f16.gguf F16"; do
    read -r label qs_model gguf gguf_label <<< "$pair"
    [[ ${QS_SWEEP_ENGINES:-quantserve} == *quantserve* ]] && start_qs "$DIR/$qs_model"
    ((LLAMA)) && [[ ${QS_SWEEP_ENGINES:-llama.cpp} == *llama.cpp* ]] && start_llama "$DIR/$gguf"
    declare -A base=()
    for c in $POINTS; do
      n=$(prompts_for "$c")
      engines="quantserve"
      ((LLAMA)) && engines=${QS_SWEEP_ENGINES:-quantserve llama.cpp}
      for engine in $engines; do
        port=$QS_PORT name="qs-$label"
        [[ $engine == llama.cpp ]] && port=$LL_PORT name="llama-$gguf_label"
        load=$(cut -d' ' -f1 /proc/loadavg)
        bench "$port" "$name-c$c" --dataset-name random --random-input-len 128 \
          --random-output-len 128 --ignore-eos --num-prompts "$n" --max-concurrency "$c" --seed "$c"
        read -r tput ttft tpot <<< "$(field "$name-c$c" output_throughput mean_ttft_ms mean_tpot_ms)"
        [[ -z ${base[$engine]:-} ]] && base[$engine]=$tput
        ratio=$(python3 -c "print(f'{$tput / ${base[$engine]}:.2f}x')")
        w=$label
        [[ $engine == llama.cpp ]] && w=$gguf_label
        echo "| $w | $engine | $c | $n | $tput | $ratio | $ttft | $tpot | $load |"
      done
    done
    unset base
    cleanup
  done
fi

# --- ShareGPT, the full vLLM report ---------------------------------------------------------
if [[ " $PARTS " == *" sharegpt "* ]]; then
  start_qs "$DIR/q05-w4g128"
  out_len=${QS_SWEEP_SHAREGPT_OUTPUT_LEN:-16}
  extra=()
  ((out_len > 0)) && extra=(--sharegpt-output-len "$out_len")
  bench "$QS_PORT" qs-w4g128-sharegpt --dataset-name sharegpt --dataset-path "$SHAREGPT" \
    --num-prompts "${QS_SWEEP_SHAREGPT_PROMPTS:-200}" --max-concurrency 16 \
    --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99 "${extra[@]}"
  echo
  echo "ShareGPT, W4G128, --max-concurrency 16${extra:+, --sharegpt-output-len $out_len}:"
  echo '```'
  cat "$DIR/results/qs-w4g128-sharegpt.txt"
  echo '```'
  cleanup
fi

# --- prefix cache: TTFT of a miss against hits on the same 1024-token prefix -----------------
if [[ " $PARTS " == *" prefix "* ]]; then
  start_qs "$DIR/q05-w4g128"
  # One request at a time: the first fills the cache with the prefix, the rest hit it.
  bench "$QS_PORT" qs-w4g128-prefix --dataset-name random --random-prefix-len 1024 \
    --random-input-len 16 --random-output-len 4 --ignore-eos --num-prompts 6 --max-concurrency 1
  echo
  python3 - "$DIR/results/qs-w4g128-prefix.json" << 'EOF'
import json, statistics, sys
r = json.load(open(sys.argv[1]))
t = [x * 1000 for x in r["ttfts"]]
hits = statistics.median(t[1:])
print(f"prefix cache, W4G128, 1024-token shared prefix + 16 tokens, one request at a time: "
      f"TTFT first (miss) {t[0]:.0f} ms, later (hits) median {hits:.0f} ms "
      f"[{', '.join(f'{x:.0f}' for x in t[1:])}], ratio {t[0] / hits:.1f}x")
EOF
  curl -s "http://127.0.0.1:$QS_PORT/metrics" | grep -E '^vllm:prefix_cache_(queries|hits)_total'
  cleanup
fi
echo
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
