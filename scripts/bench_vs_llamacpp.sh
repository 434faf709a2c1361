#!/usr/bin/env bash
# pp512 / tg128 of quantserve and llama.cpp on the same random-weight checkpoint, both engines
# in the same run (issue 10): quantserve bf16 / W8 (per channel) / W4G128 / W4G32 from
# `make-model`, llama.cpp F16 / Q8_0 / Q4_0 (against both W4 rows: Q4_0 is group 32) converted from the bf16 directory by llama.cpp's own
# convert_hf_to_gguf.py and llama-quantize (built from source in a scratch folder; nothing of
# it is in this tree). Prints `bench latency`'s and `llama-bench`'s tables, then one markdown
# table of both.
#   scripts/bench_vs_llamacpp.sh            # Qwen2.5-0.5B shape, 1 and 2 threads
#   QS_VS_PRESET=tinyllama-1.1b QS_VS_TOKENIZER=../shared/data/tokenizers/llama2 \
#     scripts/bench_vs_llamacpp.sh          # TinyLlama-1.1B shape
# Environment (defaults in brackets):
#   QS_VS_DIR [/tmp/qs-vs-llamacpp]          checkpoints, GGUFs, JSON
#   QS_VS_PRESET [qwen2.5-0.5b]              make-model --like
#   QS_VS_TOKENIZER [../shared/data/tokenizers/qwen2]   a real tokenizer beside the weights
#                                            (llama.cpp's converter recognises only those)
#   QS_VS_THREADS [1,2]  QS_VS_REPS [2]
#   QS_VS_LLAMA_BIN [/work/scratch/llama.cpp/build/bin]   llama-bench, llama-quantize
#   QS_VS_LLAMA_SRC [/work/scratch/llama.cpp/src]         convert_hf_to_gguf.py, gguf-py
#   QS_VS_PYTHON [/work/venv-goldens/bin/python]          runs convert_hf_to_gguf.py
set -euo pipefail
cd "$(dirname "$0")/.."
QS=$PWD/build/quantserve
DIR=${QS_VS_DIR:-/tmp/qs-vs-llamacpp}
PRESET=${QS_VS_PRESET:-qwen2.5-0.5b}
THREADS=${QS_VS_THREADS:-1,2}
REPS=${QS_VS_REPS:-2}
LLAMA_BIN=${QS_VS_LLAMA_BIN:-/work/scratch/llama.cpp/build/bin}
LLAMA_SRC=${QS_VS_LLAMA_SRC:-/work/scratch/llama.cpp/src}
PY=${QS_VS_PYTHON:-/work/venv-goldens/bin/python}
mkdir -p "$DIR"
[[ -x $QS ]] || { echo "build/quantserve missing" >&2; exit 1; }
[[ -x $LLAMA_BIN/llama-bench ]] || { echo "no llama-bench in $LLAMA_BIN" >&2; exit 1; }

echo "# $(date -u '+%F %T UTC'), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs"
echo "# flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -oE 'avx512f|avx512_bf16|avx512_vnni|amx_tile|amx_bf16|amx_int8' | tr '\n' ' ')"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"

for s in bf16 w8 w4g128 w4g32; do  # the same seed, so the same weights before quantization
  [[ -f $DIR/$PRESET-$s/config.json ]] && continue
  q=()
  [[ $s == bf16 ]] || q=(--quantize "$s")
  "$QS" make-model --like "$PRESET" --dtype bf16 "${q[@]}" --out "$DIR/$PRESET-$s" >&2
done
cp "${QS_VS_TOKENIZER:-../shared/data/tokenizers/qwen2}"/* "$DIR/$PRESET-bf16/"
[[ -f $DIR/$PRESET-f16.gguf ]] || PYTHONPATH=$LLAMA_SRC/gguf-py "$PY" \
  "$LLAMA_SRC/convert_hf_to_gguf.py" "$DIR/$PRESET-bf16" --outtype f16 \
  --outfile "$DIR/$PRESET-f16.gguf" > "$DIR/convert.log" 2>&1
for t in Q8_0 Q4_0; do
  g=$DIR/$PRESET-$(echo "$t" | tr 'A-Z' 'a-z').gguf
  [[ -f $g ]] || "$LLAMA_BIN/llama-quantize" "$DIR/$PRESET-f16.gguf" "$g" "$t" 2 \
    > "$DIR/quantize-$t.log" 2>&1
done

# The engines alternate per format, so drift in the host's bandwidth hits both alike.
rows=()
for pair in "bf16 f16 F16" "w8 q8_0 Q8_0" "w4g128 q4_0 Q4_0" "w4g32 q4_0 Q4_0"; do
  read -r s g label <<< "$pair"
  "$QS" bench latency --model "$DIR/$PRESET-$s" --input-len 512 --output-len 128 \
    --threads "$THREADS" --repetitions "$REPS" --json "$DIR/qs-$s.json" >&2
  LD_LIBRARY_PATH=$LLAMA_BIN "$LLAMA_BIN/llama-bench" -m "$DIR/$PRESET-$g.gguf" -p 512 -n 128 \
    -t "$THREADS" -r "$REPS" -o json > "$DIR/llama-$s-$g.json" 2> "$DIR/llama-$s-$g.log"
  rows+=("$s" "$label")
done

python3 - "$DIR" "${rows[@]}" << 'EOF'
import json, sys
d, rows = sys.argv[1], sys.argv[2:]
def qs(s):  # bench latency --json: one entry per test ("pp512", "tg128") and thread count
    out = {}
    for e in json.load(open(f"{d}/qs-{s}.json")):
        t = out.setdefault(e["threads"], {})
        t[e["test"][:2]] = e["tokens_per_second_mean"]
        if "roofline_fraction" in e:  # decode: weight bytes per token against the probe around it
            bw = 0.5 * (e["read_bandwidth_gbs_before"] + e["read_bandwidth_gbs_after"])
            t["roof"] = f"{100 * e['roofline_fraction']:.0f} % of {bw:.1f} GB/s"
            t["mib"] = e["weight_bytes_per_token"] / 2**20
    return out
def ll(s, g):
    out = {}
    for e in json.load(open(f"{d}/llama-{s}-{g.lower()}.json")):
        k = "pp" if e["n_prompt"] > 0 else "tg"
        out.setdefault(e["n_threads"], {})[k] = e["avg_ts"]
    return out
print()
print("| threads | quantserve | pp512 t/s | tg128 t/s | MiB/token | tg128 roofline | llama.cpp | pp512 t/s | tg128 t/s | pp ratio | tg ratio |")
print("|---:|---|---:|---:|---:|---|---|---:|---:|---:|---:|")
for s, g in zip(rows[::2], rows[1::2]):
    a, b = qs(s), ll(s, g)
    for t in sorted(a):
        pa, ta = a[t]["pp"], a[t]["tg"]
        pb, tb = b[t]["pp"], b[t]["tg"]
        print(f"| {t} | {s} | {pa:.1f} | {ta:.1f} | {a[t].get('mib', 0):.0f} | {a[t].get('roof', '')} "
              f"| {g} | {pb:.1f} | {tb:.1f} | {pa / pb:.2f}x | {ta / tb:.2f}x |")
EOF
echo
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
