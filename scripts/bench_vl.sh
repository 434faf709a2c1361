#!/usr/bin/env bash
# Vision-language speed on one machine in one run: Qwen2.5-VL-3B's shapes (random weights from
# `make-model --like qwen2.5-vl-3b`), bf16 against W4A16 (int4 g128 RTN; the vision tower is
# 16-bit in both), beside llama.cpp's llama-mtmd-cli on the same bf16 checkpoint converted by
# its own convert_hf_to_gguf.py (text model F16 and Q4_0, mmproj F16). Measures:
#   - a 448x448 image through the vision tower (build/bench/vl_encode_bench: processor and
#     tower timed apart, median of QS_VL_REPS after a warm-up);
#   - a 10 s clip through Qwen2.5-Omni's audio tower (`make-model --like qwen2.5-omni-7b
#     --layers 1`: the tower is full size, the decoder is not timed);
#   - TTFT of a one-image prompt: `quantserve generate --image --max-tokens 1` (its prompt
#     tokens over its prefill rate, tower included), and llama-mtmd-cli's --perf "prompt eval
#     time" (libllama logs it at -lv 4; it runs from the prompt's first decode to its logits,
#     so it holds the image's encode, which "mtmd batch encoding done" gives alone).
# The engines alternate run by run. Prints the raw lines, then one markdown table.
#   scripts/bench_vl.sh                 # everything (first run: ~25 GB of checkpoints and GGUFs)
#   QS_VL_THREADS=1 QS_VL_REPS=5 scripts/bench_vl.sh
# Environment (defaults in brackets):
#   QS_VL_DIR [/tmp/qs-bench-vl]        checkpoints, GGUFs, image, logs (reused when present)
#   QS_VL_THREADS [2]  QS_VL_REPS [3]
#   QS_VL_BUILD [build]                 holds quantserve and bench/vl_encode_bench
#   QS_VL_TOKENIZER [../shared/data/tokenizers/qwen2]   Qwen2.5's tokenizer, copied beside the
#                                       weights (llama.cpp's converter recognises only real ones)
#   QS_VL_LLAMA_BIN [/work/scratch/llama.cpp/build/bin]  llama-mtmd-cli, llama-quantize
#   QS_VL_LLAMA_SRC [/work/scratch/llama.cpp/src]        convert_hf_to_gguf.py, gguf-py
#   QS_VL_PYTHON [/work/.venv-goldens/bin/python]        runs the converter and draws the image
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${QS_VL_BUILD:-build}
QS=$BUILD/quantserve
ENC=$BUILD/bench/vl_encode_bench
DIR=${QS_VL_DIR:-/tmp/qs-bench-vl}
THREADS=${QS_VL_THREADS:-2}
REPS=${QS_VL_REPS:-3}
TOK=${QS_VL_TOKENIZER:-../shared/data/tokenizers/qwen2}
LLAMA_BIN=${QS_VL_LLAMA_BIN:-/work/scratch/llama.cpp/build/bin}
LLAMA_SRC=${QS_VL_LLAMA_SRC:-/work/scratch/llama.cpp/src}
PY=${QS_VL_PYTHON:-/work/.venv-goldens/bin/python}
PROMPT="Describe this image."
for f in "$QS" "$ENC"; do
  [[ -x $f ]] || { echo "$f missing: cmake --build $BUILD --target quantserve vl_encode_bench" >&2; exit 1; }
done
mkdir -p "$DIR"
VL=qwen2.5-vl-3b

echo "# $(date -u '+%F %T UTC'), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, $THREADS threads"
echo "# flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -oE 'avx512f|avx512_bf16|avx512_vnni|amx_tile|amx_bf16|amx_int8' | tr '\n' ' ')"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"

# Checkpoints: the same seed, so the W4A16 one is the RTN of the bf16 one.
for s in bf16 w4g128; do
  d=$DIR/$VL-$s
  if [[ ! -f $d/config.json ]]; then
    q=()
    [[ $s == bf16 ]] || q=(--quantize "$s")
    "$QS" make-model --like $VL --dtype bf16 "${q[@]}" --out "$d" >&2
  fi
  cp "$TOK"/vocab.json "$TOK"/merges.txt "$TOK"/tokenizer_config.json "$d/"
done
OMNI=$DIR/qwen2.5-omni-7b-1layer
[[ -f $OMNI/config.json ]] || "$QS" make-model --like qwen2.5-omni-7b --layers 1 --dtype bf16 --out "$OMNI" >&2

# A 448x448 photo-like PNG (smooth gradients and noise): 32 x 32 patches, 256 image tokens.
IMG=$DIR/image448.png
[[ -f $IMG ]] || "$PY" - "$IMG" << 'EOF'
import sys
import numpy as np
from PIL import Image
rng = np.random.default_rng(0)
y, x = np.mgrid[0:448, 0:448] / 448.0
rgb = np.stack([x, y, 0.5 + 0.5 * np.sin(6 * x * y)], -1) * 200 + rng.normal(0, 12, (448, 448, 3))
Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8)).save(sys.argv[1])
EOF

# llama.cpp's GGUFs from the bf16 directory; a refusal is recorded, not fatal.
convert() {  # out_file log [--mmproj]
  local out=$1 log=$2
  shift 2
  [[ -f $out ]] && return 0
  PYTHONPATH=$LLAMA_SRC/gguf-py "$PY" "$LLAMA_SRC/convert_hf_to_gguf.py" "$DIR/$VL-bf16" \
    --outtype f16 --outfile "$out" "$@" > "$log" 2>&1 || { rm -f "$out"; return 1; }
}
LL_OK=1
convert "$DIR/$VL-f16.gguf" "$DIR/convert-text.log" || LL_OK=0
convert "$DIR/$VL-mmproj-f16.gguf" "$DIR/convert-mmproj.log" --mmproj || LL_OK=0
if [[ $LL_OK == 1 && ! -f $DIR/$VL-q4_0.gguf ]]; then
  "$LLAMA_BIN/llama-quantize" "$DIR/$VL-f16.gguf" "$DIR/$VL-q4_0.gguf" Q4_0 "$THREADS" \
    > "$DIR/quantize-q4_0.log" 2>&1 || LL_OK=0
fi
# Omni's converter takes the whole Qwen2_5OmniModel checkpoint; record what it says of the
# thinker-only one make-model writes.
PYTHONPATH=$LLAMA_SRC/gguf-py "$PY" "$LLAMA_SRC/convert_hf_to_gguf.py" "$OMNI" --mmproj \
  --outtype f16 --outfile "$DIR/omni-mmproj-f16.gguf" > "$DIR/convert-omni.log" 2>&1 || true

# quantserve's towers (llama.cpp's vision tower is timed inside its TTFT runs below).
"$ENC" --model "$DIR/$VL-bf16" --image "$IMG" --threads "$THREADS" --reps "$REPS" \
  > "$DIR/qs-encode-bf16.json"
"$ENC" --model "$OMNI" --audio-seconds 10 --threads "$THREADS" --reps "$REPS" \
  > "$DIR/qs-encode-omni-audio.json"
# TTFT: the two engines alternate run by run on each scheme, so a neighbour's load falls on both.
for pair in bf16:f16 w4g128:q4_0; do
  s=${pair%%:*} g=${pair##*:}
  : > "$DIR/qs-ttft-$s.log"
  : > "$DIR/llama-$g.log"
  for r in $(seq "$REPS"); do
    "$QS" generate --model "$DIR/$VL-$s" --image "$IMG" --prompt "$PROMPT" --max-tokens 1 \
      --temperature 0 --threads "$THREADS" 2>> "$DIR/qs-ttft-$s.log" > /dev/null
    [[ $LL_OK == 1 ]] || continue
    "$LLAMA_BIN/llama-mtmd-cli" -m "$DIR/$VL-$g.gguf" --mmproj "$DIR/$VL-mmproj-f16.gguf" \
      --image "$IMG" -p "$PROMPT" -n 1 --temp 0 -t "$THREADS" -c 4096 --perf -lv 4 \
      >> "$DIR/llama-$g.log" 2>&1 < /dev/null
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$DIR" "$THREADS" "$LL_OK" << 'EOF'
import json, re, statistics, sys
d, threads, ll_ok = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
def mb(xs):  # "median (best)" of the runs: the host is shared, the best is the least disturbed
    xs = list(xs)
    return f"{statistics.median(xs):.2f} ({min(xs):.2f})"
def qs_ttft(s):  # "[generate] load ... | prompt N tokens, R tok/s | ..." once per run
    runs = re.findall(r"prompt (\d+) tokens, ([\d.]+) tok/s", open(f"{d}/qs-ttft-{s}.log").read())
    return int(runs[0][0]), [int(n) / float(r) for n, r in runs]
def ll(g):  # llama-mtmd-cli: per run the image's encode and --perf's prompt eval (encode included)
    t = open(f"{d}/llama-{g}.log").read()
    enc = [float(x) / 1e3 for x in re.findall(r"mtmd batch encoding done in (\d+) ms", t)]
    pe = re.findall(r"llama_perf_context_print: prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens", t)
    return enc, [float(ms) / 1e3 for ms, _ in pe], int(pe[0][1])
img = json.load(open(f"{d}/qs-encode-bf16.json"))["image"]
aud = json.load(open(f"{d}/qs-encode-omni-audio.json"))["audio"]
print(f"\nimage {img['width']}x{img['height']}: grid {img['grid']}, {img['tokens']} tokens; "
      f"audio {aud['seconds']} s: {aud['frames']} frames, {aud['tokens']} tokens; {threads} threads; "
      "seconds, median (best) of the runs\n")
print("| engine | decoder | vision tower, 448x448 | audio tower, 10 s | TTFT, one image | prompt tokens |")
print("|---|---|---:|---:|---:|---:|")
for s, label in (("bf16", "bf16"), ("w4g128", "W4A16 (int4 g128)")):
    n, ttft = qs_ttft(s)
    print(f"| quantserve | {label} | {mb(img['encode_samples_s'])} | {mb(aud['encode_samples_s'])} | {mb(ttft)} | {n} |")
if ll_ok:
    for g, label in (("f16", "F16"), ("q4_0", "Q4_0")):
        enc, ttft, n = ll(g)
        print(f"| llama-mtmd-cli | {label} | {mb(enc)} | n/a | {mb(ttft)} | {n} |")
else:
    print("| llama-mtmd-cli | | conversion failed: see convert-*.log | | | |")
omni = open(f"{d}/convert-omni.log").read().strip().splitlines()
print("\nllama.cpp on the Omni thinker checkpoint:", omni[-1] if omni else "(no output)")
EOF
