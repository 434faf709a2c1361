#!/usr/bin/env bash
# Quality on real weights: a model (default SmolLM2-135M-Instruct from scripts/fetch_smollm2.sh;
# QS_QUALITY_MODEL=models/stories260K for the shipped one) quantized by RTN, OPT-RTN and
# AutoRound at each scheme, every result evaluated against the 16-bit model on held-out
# WikiText-2 and TinyStories text (perplexity, mean / p99 KL, top-1 agreement). Prints one
# markdown table (docs/quantization.md, "Measurements") and keeps every eval JSON and quantize
# log under OUT; a rerun skips what OUT already holds.
#
# Usage: scripts/quality_table.sh [OUT]        (default /tmp/qs-quality)
# Environment (calibration defaults are the auto-round tool's own):
#   QS_QUALITY_MODEL     the 16-bit model directory
#   QS_QUALITY_SCHEMES   "W4G128 W4G32 W3G128 W2G32"
#   QS_QUALITY_METHODS   "rtn opt ar"
#   QS_QUALITY_ITERS     AutoRound iterations (200)
#   QS_QUALITY_NSAMPLES  calibration samples (128)
#   QS_QUALITY_SEQLEN    calibration tokens per sample (2048)
#   QS_QUALITY_BATCH     --batch_size (8)
#   QS_QUALITY_EVAL_TOKENS  tokens scored per text (16384), in windows of 512
#   QS_THREADS           (2)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${QS_BIN:-$root/build/quantserve}"
out="${1:-/tmp/qs-quality}"
smollm2="${QS_CACHE:-$HOME/.cache/quantserve}/smollm2/hf"
ref="${QS_QUALITY_MODEL:-$smollm2}"
schemes="${QS_QUALITY_SCHEMES:-W4G128 W4G32 W3G128 W2G32}"
methods="${QS_QUALITY_METHODS:-rtn opt ar}"
iters="${QS_QUALITY_ITERS:-200}"
nsamples="${QS_QUALITY_NSAMPLES:-128}"
seqlen="${QS_QUALITY_SEQLEN:-2048}"
batch="${QS_QUALITY_BATCH:-8}"
eval_tokens="${QS_QUALITY_EVAL_TOKENS:-16384}"
threads="${QS_THREADS:-2}"
texts=("$root/data/eval/wiki.test.raw.406" "$root/data/eval/tinystories-valid.txt.1000")

[[ -x "$bin" ]] || { echo "quality: $bin not built" >&2; exit 1; }
[[ -f "$ref/config.json" || "$ref" != "$smollm2" ]] || "$root/scripts/fetch_smollm2.sh"
mkdir -p "$out"
lscpu | grep -E 'Model name' | sed 's/^/# /'
echo "# $(date -u +%FT%TZ) main at $(git -C "$root" rev-parse --short HEAD); $ref; AutoRound --iters $iters," \
  "calibration $nsamples x $seqlen, --batch_size $batch, $threads threads"

for scheme in $schemes; do
  bits="${scheme:1:1}"
  group="${scheme#*G}"
  for method in $methods; do
    dir="$out/$scheme-$method"
    case "$method" in
      rtn) flags=(--iters 0 --disable_opt_rtn) ;;
      opt) flags=(--iters 0 --nsamples "$nsamples" --seqlen "$seqlen") ;;
      ar) flags=(--iters "$iters" --nsamples "$nsamples" --seqlen "$seqlen" --batch_size "$batch") ;;
      *) echo "quality: unknown method $method" >&2; exit 2 ;;
    esac
    if [[ ! -f "$dir/config.json" ]]; then
      start=$(date +%s.%N)
      /usr/bin/time -f "%M" -o "$dir.rss" "$bin" quantize --model "$ref" --output_dir "$dir" \
        --bits "$bits" --group_size "$group" --threads "$threads" --overwrite "${flags[@]}" \
        > "$dir.log" 2>&1
      echo "$(date +%s.%N) $start" | awk '{printf "%.1f\n", $1 - $2}' > "$dir.seconds"
    fi
    for text in "${texts[@]}"; do
      name="$(basename "$text")"
      json="$dir.$name.json"
      [[ -f "$json" ]] || "$bin" eval --model "$dir" --reference "$ref" --dataset "$text" \
        --seqlen 512 --max-tokens "$eval_tokens" --threads "$threads" --json "$json" \
        > "$dir.$name.log" 2>&1
    done
  done
done

python3 - "$out" "$schemes" "$methods" "${texts[@]}" <<'PY'
import json, os, sys
out, schemes, methods, texts = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4:]
names = {"rtn": "RTN", "opt": "OPT-RTN", "ar": "AutoRound"}
short = {"wiki.test.raw.406": "WikiText-2", "tinystories-valid.txt.1000": "TinyStories"}
refs = []
for t in texts:
    j = json.load(open(f"{out}/{schemes[0]}-{methods[0]}.{os.path.basename(t)}.json"))
    refs.append(f"{short[os.path.basename(t)]} {j['reference_ppl']:.3f} ({j['scored_tokens']} scored tokens)")
print("16-bit reference ppl: " + ", ".join(refs) + "\n")
cols = []
for t in texts:
    s = short[os.path.basename(t)]
    cols += [f"{s} ppl", f"{s} KL mean", f"{s} KL p99", f"{s} top-1"]
print("| scheme | method | " + " | ".join(cols) + " | quantize time | peak RSS |")
print("|---|---|" + "---:|" * (len(cols) + 2))
for scheme in schemes:
    for m in methods:
        d = f"{out}/{scheme}-{m}"
        row = []
        for t in texts:
            j = json.load(open(f"{d}.{os.path.basename(t)}.json"))
            row += [f"{j['ppl']:.3f}", f"{j['kl_mean']:.5f}", f"{j['kl_p99']:.4f}",
                    f"{100 * j['top1_agreement']:.2f}%"]
        secs = open(f"{d}.seconds").read().strip()
        rss = int(open(f"{d}.rss").read().split()[-1]) / 1024
        print(f"| {scheme} | {names[m]} | " + " | ".join(row) + f" | {secs} s | {rss:.0f} MiB |")
PY
