#!/usr/bin/env bash
# OPT-RTN (`--iters 0`) time, quantserve against the `auto-round` pip package, one after the
# other on the same machine, model, calibration tokens and settings: SmolLM2-135M-Instruct
# (scripts/fetch_smollm2.sh), W4 sym at each group size of QS_GROUPS (default "32 128"),
# QS_NSAMPLES x QS_SEQLEN pre-tokenized samples (default 32 x 512; the tool's defaults are
# 128 x 2048) written by scripts/golden/time_autoround.py --write-calibration, QS_THREADS
# threads (default 2). Ours runs twice: as a user runs it (bf16 products, the tool's amp
# default) and with --disable_amp (f32 products; QS_F32_ROW=0 skips that run). With QS_BASELINE=path/to/an/older/quantserve
# the older binary runs the same command too (with QS_BASELINE_FLAGS, e.g. nothing for a binary
# older than --disable_amp), and its exported safetensors are compared byte for byte with our
# --disable_amp ones.
# Prints one markdown table: tool, group size, wall s, s per block, peak RSS, and our time as
# a ratio of the tool's. Needs the venv of scripts/golden/requirements.txt +
# requirements-quant.txt (QS_PY, default .venv-goldens/bin/python) and /usr/bin/time.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${QS_BIN:-build/quantserve}"
py="${QS_PY:-.venv-goldens/bin/python}"
baseline="${QS_BASELINE:-}"
baseline_flags="${QS_BASELINE_FLAGS:-}"
f32_row="${QS_F32_ROW:-1}"
groups="${QS_GROUPS:-32 128}"
nsamples="${QS_NSAMPLES:-32}"
seqlen="${QS_SEQLEN:-512}"
threads="${QS_THREADS:-2}"
work="${1:-/tmp/qs-optrtn-vs-autoround}"
model="${QS_CACHE:-$HOME/.cache/quantserve}/smollm2/hf"
[[ -x "$bin" ]] || scripts/setup.sh
[[ -f "$model/config.json" ]] || QS_BIN="$bin" scripts/fetch_smollm2.sh
mkdir -p "$work"
cal="$work/calibration-$nsamples-$seqlen.jsonl"
[[ -f "$cal" ]] || "$py" scripts/golden/time_autoround.py --model "$model" \
  --write-calibration "$cal" --nsamples "$nsamples" --seqlen "$seqlen" --concatenate
blocks=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["num_hidden_layers"])' \
  "$model/config.json")

rss_mib() { awk -F': ' '/Maximum resident/ {printf "%.0f", $2 / 1024}' "$1"; }
row() {  # tool, group size, wall s, time -v log, ratio
  printf '| %s | %s | %.1f | %.2f | %s MiB | %s |\n' "$1" "$2" "$3" \
    "$(echo "$3 / $blocks" | bc -l)" "$(rss_mib "$4")" "$5"
}
ours() {  # binary, output dir, group size, time -v log, extra flags -> wall seconds on stdout
  rm -rf "$2"
  local start
  start=$(date +%s.%N)
  # shellcheck disable=SC2086  # the extra flags are words
  /usr/bin/time -v -o "$4" "$1" quantize --model "$model" --output_dir "$2" --iters 0 \
    --bits 4 --group_size "$3" --nsamples "$nsamples" --seqlen "$seqlen" \
    --threads "$threads" --dataset "$cal" ${5:-} > "$2.log" 2>&1
  echo "$(date +%s.%N) - $start" | bc -l
}

echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# SmolLM2-135M-Instruct, $blocks blocks, W4 sym, --iters 0, $nsamples x $seqlen tokens, $threads threads"
echo "| tool | group size | wall s | s per block | peak RSS | / auto-round |"
echo "|---|---:|---:|---:|---:|---:|"
for g in $groups; do
  OMP_NUM_THREADS="$threads" /usr/bin/time -v -o "$work/ar-g$g.time" "$py" \
    scripts/golden/time_autoround.py --model "$model" --calibration "$cal" --iters 0 \
    --bits 4 --group-size "$g" --nsamples "$nsamples" --seqlen "$seqlen" --threads "$threads" \
    > "$work/ar-g$g.json" 2> "$work/ar-g$g.log"
  ar=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["quantize_s"])' \
    "$work/ar-g$g.json")
  row "auto-round $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["tool"].split()[1], "torch", d["torch"], "amp" if d["amp"] else "fp32")' "$work/ar-g$g.json") (tuning only)" \
    "$g" "$ar" "$work/ar-g$g.time" "1.00"
  if [[ -n "$baseline" ]]; then
    base=$(ours "$baseline" "$work/base-g$g" "$g" "$work/base-g$g.time" "$baseline_flags")
    row "quantserve baseline ($(basename "$baseline"); load, calibration, export)" "$g" "$base" \
      "$work/base-g$g.time" "$(printf '%.2f' "$(echo "$base / $ar" | bc -l)")"
  fi
  if [[ "$f32_row" != 0 ]]; then
    f32=$(ours "$bin" "$work/f32-g$g" "$g" "$work/f32-g$g.time" --disable_amp)
    row "quantserve quantize --disable_amp (f32 products; load, calibration, export)" "$g" \
      "$f32" "$work/f32-g$g.time" "$(printf '%.2f' "$(echo "$f32 / $ar" | bc -l)")"
  fi
  qs=$(ours "$bin" "$work/ours-g$g" "$g" "$work/ours-g$g.time")
  row "quantserve quantize (bf16 products; load, calibration, export)" "$g" "$qs" \
    "$work/ours-g$g.time" "$(printf '%.2f' "$(echo "$qs / $ar" | bc -l)")"
  if [[ -n "$baseline" && "$f32_row" != 0 ]]; then
    for f in "$work/f32-g$g"/*.safetensors; do
      if cmp -s "$f" "$work/base-g$g/$(basename "$f")"; then
        echo "# g$g $(basename "$f") (--disable_amp): identical to the baseline's"
      else
        echo "# g$g $(basename "$f") (--disable_amp): DIFFERS from the baseline's"
      fi
    done
  fi
done
