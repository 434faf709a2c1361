#!/usr/bin/env bash
# pp512 / tg128 of quantserve and llama.cpp on the same random-weight checkpoint, both engines
# in the same run: quantserve bf16 / W8 (per channel) / W4G128 / W4G32 from
# `make-model`, llama.cpp F16 / Q8_0 / Q4_0 (against both W4 rows: Q4_0 is group 32) converted from the bf16 directory by llama.cpp's own
# convert_hf_to_gguf.py and llama-quantize (built from source in a scratch folder; nothing of
# it is in this tree). Prints `bench latency`'s and `llama-bench`'s tables, then one markdown
# table of both, with quantserve's prefill as a share of this CPU's compute peak (peak_bench:
# VNNI int8 for the int rows, f32 FMA for bf16, the AMX tiles where the CPU has them; per core,
# times the threads) and its decode as a share of the read bandwidth probed around it.
#   scripts/bench_vs_llamacpp.sh            # Qwen2.5-0.5B shape, 1 and 2 threads
#   QS_VS_PRESET=tinyllama-1.1b QS_VS_TOKENIZER=../shared/data/tokenizers/llama2 \
#     scripts/bench_vs_llamacpp.sh          # TinyLlama-1.1B shape
#   QS_VS_PRESET=qwen3-30b-a3b QS_VS_LAYERS=6 QS_VS_PAIRS="bf16:f16:F16 w4g128:q4_0:Q4_0" \
#     QS_VS_OUTPUT_TYPE=f16 scripts/bench_vs_llamacpp.sh   # Qwen3-30B-A3B (MoE), 6 layers
# Environment (defaults in brackets):
#   QS_VS_DIR [/tmp/qs-vs-llamacpp]          checkpoints, GGUFs, JSON
#   QS_VS_PRESET [qwen2.5-0.5b]              make-model --like
#   QS_VS_TOKENIZER [../shared/data/tokenizers/qwen2]   a real tokenizer beside the weights
#                                            (llama.cpp's converter recognises only those)
#   QS_VS_THREADS [1,2]  QS_VS_REPS [2]
#   QS_VS_LAYERS [all]                       make-model --layers (big MoE shapes: a few layers)
#   QS_VS_PAIRS ["bf16:f16:F16 w8:q8_0:Q8_0 w4g128:q4_0:Q4_0 w4g32:q4_0:Q4_0"]
#                                            quantserve scheme : GGUF file : its label
#   QS_VS_OUTPUT_TYPE [llama-quantize's]     llama-quantize --output-tensor-type (f16 keeps
#                                            lm_head 16-bit, as make-model's W4 checkpoints do)
#   QS_VS_LM_HEAD [auto]                     quantserve's --lm-head-dtype: int8 rounds the 16-bit
#                                            tied head per row at load, as llama-quantize stores
#                                            its output matrix in a quantized type (Q8_0, Q6_K)
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
PAIRS=${QS_VS_PAIRS:-bf16:f16:F16 w8:q8_0:Q8_0 w4g128:q4_0:Q4_0 w4g32:q4_0:Q4_0}
LM_HEAD=${QS_VS_LM_HEAD:-auto}
layers=()
[[ -n ${QS_VS_LAYERS:-} ]] && layers=(--layers "$QS_VS_LAYERS")
qtype=()
[[ -n ${QS_VS_OUTPUT_TYPE:-} ]] && qtype=(--output-tensor-type "$QS_VS_OUTPUT_TYPE")
mkdir -p "$DIR"
[[ -x $QS ]] || { echo "build/quantserve missing" >&2; exit 1; }
[[ -x $LLAMA_BIN/llama-bench ]] || { echo "no llama-bench in $LLAMA_BIN" >&2; exit 1; }

echo "# $(date -u '+%F %T UTC'), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs"
echo "# flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -oE 'avx512f|avx512_bf16|avx512_vnni|amx_tile|amx_bf16|amx_int8' | tr '\n' ' ')"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# quantserve --lm-head-dtype $LM_HEAD"

schemes=(bf16)  # the GGUFs are converted from the bf16 directory
for pair in $PAIRS; do schemes+=("${pair%%:*}"); done
for s in $(printf '%s\n' "${schemes[@]}" | sort -u); do
  # The same seed, so the same weights before quantization.
  [[ -f $DIR/$PRESET-$s/config.json ]] && continue
  q=()
  [[ $s == bf16 ]] || q=(--quantize "$s")
  "$QS" make-model --like "$PRESET" "${layers[@]}" --dtype bf16 "${q[@]}" --out "$DIR/$PRESET-$s" >&2
done
cp "${QS_VS_TOKENIZER:-../shared/data/tokenizers/qwen2}"/* "$DIR/$PRESET-bf16/"
[[ -f $DIR/$PRESET-f16.gguf ]] || PYTHONPATH=$LLAMA_SRC/gguf-py "$PY" \
  "$LLAMA_SRC/convert_hf_to_gguf.py" "$DIR/$PRESET-bf16" --outtype f16 \
  --outfile "$DIR/$PRESET-f16.gguf" > "$DIR/convert.log" 2>&1
for pair in $PAIRS; do
  IFS=: read -r _ g t <<< "$pair"
  [[ $t == F16 || -f $DIR/$PRESET-$g.gguf ]] && continue
  "$LLAMA_BIN/llama-quantize" "${qtype[@]}" "$DIR/$PRESET-f16.gguf" "$DIR/$PRESET-$g.gguf" "$t" 2 \
    > "$DIR/quantize-$t.log" 2>&1
done

# The compute peaks prefill is set against, per core (the kernel lab's instruction throughput).
PEAK=$PWD/build/bench/peak_bench
[[ -x $PEAK ]] || { echo "build/bench/peak_bench missing: cmake --build build --target peak_bench" >&2; exit 1; }
"$PEAK" --benchmark_format=json > "$DIR/peak.json" 2> "$DIR/peak.log"

# The engines alternate per format, so drift in the host's bandwidth hits both alike.
rows=()
for pair in $PAIRS; do
  IFS=: read -r s g label <<< "$pair"
  "$QS" bench latency --model "$DIR/$PRESET-$s" --input-len 512 --output-len 128 \
    --threads "$THREADS" --repetitions "$REPS" --lm-head-dtype "$LM_HEAD" \
    --json "$DIR/qs-$s.json" >&2
  LD_LIBRARY_PATH=$LLAMA_BIN "$LLAMA_BIN/llama-bench" -m "$DIR/$PRESET-$g.gguf" -p 512 -n 128 \
    -t "$THREADS" -r "$REPS" -o json > "$DIR/llama-$s-$g.json" 2> "$DIR/llama-$s-$g.log"
  rows+=("$s" "$label")
done

python3 - "$DIR" "$LM_HEAD" "${rows[@]}" << 'EOF'
import json, os, sys
d, head, rows = sys.argv[1], sys.argv[2], sys.argv[3:]
def qs(s):  # bench latency --json: one entry per test ("pp512", "tg128") and thread count
    out = {}
    for e in json.load(open(f"{d}/qs-{s}.json")):
        t = out.setdefault(e["threads"], {})
        t[e["test"][:2]] = e["tokens_per_second_mean"]
        t["model"] = e["model"]
        if "roofline_fraction" in e:  # decode: weight bytes per token against the probe around it
            bw = 0.5 * (e["read_bandwidth_gbs_before"] + e["read_bandwidth_gbs_after"])
            t["roof"] = f"{100 * e['roofline_fraction']:.0f} % of {bw:.1f} GB/s"
            t["mib"] = e["weight_bytes_per_token"] / 2**20
    return out
def peaks():  # GOP/s per core by case name: f32_fma_avx512, int8_vnni_avx512, amx_*
    out = {}
    for b in json.load(open(f"{d}/peak.json"))["benchmarks"]:
        if "GOP/s" in b:
            out[b["name"].split("/")[0]] = b["GOP/s"]
    return out
PEAKS = peaks()
def prefill_gop_per_token(model_dir):
    # The block matmuls and attention of a 512-token prompt (mean context 256.5), per token;
    # the lm_head runs once per prompt (the last row's logits), a 512th per token. An MoE
    # token runs its top-k experts (and a shared one): the active parameters.
    c = json.load(open(f"{model_dir}/config.json"))
    h, inter, layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    if c.get("num_experts", c.get("num_local_experts")):
        inter = c["num_experts_per_tok"] * c.get("moe_intermediate_size", inter) + \
            c.get("shared_expert_intermediate_size", 0)
    hd = c.get("head_dim", h // c["num_attention_heads"])
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    linear = h * (q + 2 * kv) + q * h + 3 * h * inter
    attn = 2 * q * 256.5  # q.k and p.v over the mean context
    return (2 * layers * (linear + attn) + 2 * h * c["vocab_size"] / 512) / 1e9
def peak_for(s, threads):
    # The int rows run on VNNI, bf16 on f32 FMAs; on a CPU with AMX (peak_bench ran its tile
    # cases) both go to the tiles unless QS_AMX=0.
    amx = "int8_amx_k64" in PEAKS and os.environ.get("QS_AMX") != "0"
    if s == "bf16":
        key = "bf16_amx_k32" if amx else "f32_fma_avx512"
    else:
        key = "int8_amx_k64" if amx else "int8_vnni_avx512"
    return key, PEAKS.get(key, 0) * threads
def ll(s, g):
    out = {}
    for e in json.load(open(f"{d}/llama-{s}-{g.lower()}.json")):
        k = "pp" if e["n_prompt"] > 0 else "tg"
        out.setdefault(e["n_threads"], {})[k] = e["avg_ts"]
    return out
print()
print("| threads | quantserve | pp512 t/s | pp512 of peak | tg128 t/s | MiB/token | tg128 roofline | llama.cpp | pp512 t/s | tg128 t/s | pp ratio | tg ratio |")
print("|---:|---|---:|---|---:|---:|---|---|---:|---:|---:|---:|")
for s, g in zip(rows[::2], rows[1::2]):
    a, b = qs(s), ll(s, g)
    for t in sorted(a):
        pa, ta = a[t]["pp"], a[t]["tg"]
        pb, tb = b[t]["pp"], b[t]["tg"]
        key, peak = peak_for(s, t)
        frac = f"{100 * pa * prefill_gop_per_token(a[t]['model']) / peak:.1f} % of {peak:.0f} GOP/s ({key})" if peak else ""
        label = s if head == "auto" else f"{s}, {head} head"
        print(f"| {t} | {label} | {pa:.1f} | {frac} | {ta:.1f} | {a[t].get('mib', 0):.0f} | {a[t].get('roof', '')} "
              f"| {g} | {pb:.1f} | {tb:.1f} | {pa / pb:.2f}x | {ta / tb:.2f}x |")
EOF
echo
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
