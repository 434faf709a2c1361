#!/usr/bin/env bash
# Time to quantize, quantserve against the `auto-round` pip package, one after the other on
# the same machine, model, calibration tokens and settings (docs/quantization.md, "Speed"):
# a random-weight Qwen3-0.6B-shaped checkpoint (`make-model --like qwen3-0.6b`), W4G128 sym,
# --iters 50 --nsamples 32 --seqlen 512 --batch_size 8 on 2 threads by default. Both read the
# same pre-tokenized samples (scripts/golden/time_autoround.py --write-calibration).
# Every block of the model has the same shapes and work, so QS_LAYERS (default 2) blocks
# give the per-block time; QS_LAYERS=28 is the whole model (about an hour on 2 cores).
# Prints one markdown table: tool, blocks, wall s, s per block, user+sys CPU s, peak RSS.
# Needs the venv of scripts/golden/requirements.txt + requirements-quant.txt (QS_PY, default
# .venv-goldens/bin/python) and /usr/bin/time.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${QS_BIN:-build/quantserve}"
py="${QS_PY:-.venv-goldens/bin/python}"
layers="${QS_LAYERS:-2}"
iters="${QS_ITERS:-50}"
nsamples="${QS_NSAMPLES:-32}"
seqlen="${QS_SEQLEN:-512}"
threads="${QS_THREADS:-2}"
work="${1:-/tmp/qs-quantize-vs-autoround}"
[[ -x "$bin" ]] || scripts/setup.sh
mkdir -p "$work"
model="$work/qwen3-0.6b-l$layers"
if [[ ! -f "$model/config.json" ]]; then
  "$bin" make-model --like qwen3-0.6b --layers "$layers" --dtype bf16 --out "$model"
  cp ../shared/data/tokenizers/qwen2/{vocab.json,merges.txt,tokenizer_config.json} "$model/"
fi
cal="$work/calibration-$nsamples-$seqlen.jsonl"
[[ -f "$cal" ]] || "$py" scripts/golden/time_autoround.py --model "$model" \
  --write-calibration "$cal" --nsamples "$nsamples" --seqlen "$seqlen"

row() {  # tool, blocks, wall, /usr/bin/time -v log
  local user sys rss
  user=$(awk -F': ' '/User time/ {print $2}' "$4")
  sys=$(awk -F': ' '/System time/ {print $2}' "$4")
  rss=$(awk -F': ' '/Maximum resident/ {print $2}' "$4")
  printf '| %s | %s | %.1f | %.1f | %.0f | %.0f MiB |\n' "$1" "$2" "$3" \
    "$(echo "$3 / $2" | bc -l)" "$(echo "$user + $sys" | bc -l)" "$(echo "$rss / 1024" | bc -l)"
}

OMP_NUM_THREADS="$threads" /usr/bin/time -v -o "$work/autoround.time" "$py" \
  scripts/golden/time_autoround.py --model "$model" --calibration "$cal" --iters "$iters" \
  --nsamples "$nsamples" --seqlen "$seqlen" --threads "$threads" \
  > "$work/autoround.json" 2> "$work/autoround.log"
ar_s=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["quantize_s"])' "$work/autoround.json")

rm -rf "$work/ours"
start=$(date +%s.%N)
/usr/bin/time -v -o "$work/ours.time" "$bin" quantize --model "$model" --output_dir "$work/ours" \
  --iters "$iters" --nsamples "$nsamples" --seqlen "$seqlen" --batch_size 8 \
  --threads "$threads" --dataset "$cal" > "$work/ours.log" 2>&1
qs_s=$(echo "$(date +%s.%N) - $start" | bc -l)

echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["tool"], "torch", d["torch"], "amp", d["amp"])' "$work/autoround.json")"
echo "| tool | blocks | wall s | s per block | CPU s | peak RSS |"
echo "|---|---:|---:|---:|---:|---:|"
row "auto-round (tuning only; model load excluded)" "$layers" "$ar_s" "$work/autoround.time"
row "quantserve quantize (load, tuning, export)" "$layers" "$qs_s" "$work/ours.time"
echo "ratio quantserve / auto-round: $(printf '%.2f' "$(echo "$qs_s / $ar_s" | bc -l)")"
