#!/usr/bin/env bash
# The exact W4A16 path (bf16 activations, what transformers and vLLM compute) against the int8
# activation path, whole model: `bench latency` prefill pp512 and decode tg128 on random
# checkpoints of the Qwen2.5-0.5B and TinyLlama-1.1B shapes at W4G128 and W4G32, 1 and 2 threads.
# Three variants, alternated per round so that drift in the host hits all alike:
#   int8         QS_ACTIVATION_PRECISION=int8 (the default)
#   exact        QS_ACTIVATION_PRECISION=bf16 (resident panels, kernels/qpanels.h)
#   exact-column QS_ACTIVATION_PRECISION=bf16 QS_EXACT_PANELS=0 (the per-column kernel before)
# Prints one markdown table of medians over QS_ROUNDS rounds, with the CPU named.
# Environment: QS_DIR [/tmp/qs-exact] QS_ROUNDS [3] QS_PRESETS ["qwen2.5-0.5b tinyllama-1.1b"]
#   QS_SCHEMES ["w4g128 w4g32"] QS_THREADS ["1,2"] QS_VARIANTS ["int8 exact exact-column"]
set -euo pipefail
cd "$(dirname "$0")/.."
QS=$PWD/build/quantserve
DIR=${QS_DIR:-/tmp/qs-exact}
ROUNDS=${QS_ROUNDS:-3}
PRESETS=${QS_PRESETS:-qwen2.5-0.5b tinyllama-1.1b}
SCHEMES=${QS_SCHEMES:-w4g128 w4g32}
THREADS=${QS_THREADS:-1,2}
VARIANTS=${QS_VARIANTS:-int8 exact exact-column}
[[ -x $QS ]] || { echo "build/quantserve missing" >&2; exit 1; }
mkdir -p "$DIR"

echo "# $(date -u '+%F %T UTC'), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs"
echo "# flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -oE 'avx512f|avx512_bf16|avx512_vnni|avx512_vbmi|amx_tile|amx_bf16|amx_int8' | tr '\n' ' ')"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"

for p in $PRESETS; do
  for s in $SCHEMES; do
    [[ -f $DIR/$p-$s/config.json ]] && continue
    "$QS" make-model --like "$p" --dtype bf16 --quantize "$s" --out "$DIR/$p-$s" >&2
  done
done

run() {  # variant preset scheme round
  local env=(QS_ACTIVATION_PRECISION=int8)
  case $1 in
    exact) env=(QS_ACTIVATION_PRECISION=bf16) ;;
    exact-column) env=(QS_ACTIVATION_PRECISION=bf16 QS_EXACT_PANELS=0) ;;
  esac
  env "${env[@]}" "$QS" bench latency --model "$DIR/$2-$3" --input-len 512 --output-len 128 \
    --threads "$THREADS" --repetitions 1 --no-roofline --json "$DIR/$1-$2-$3-r$4.json" \
    > /dev/null 2> "$DIR/$1-$2-$3-r$4.log"
}

for r in $(seq 1 "$ROUNDS"); do
  for p in $PRESETS; do
    for s in $SCHEMES; do
      for v in $VARIANTS; do run "$v" "$p" "$s" "$r"; done
    done
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$DIR" "$ROUNDS" "$PRESETS" "$SCHEMES" "$VARIANTS" << 'EOF'
import json, statistics, sys
d, rounds, presets, schemes, variants = sys.argv[1], int(sys.argv[2]), *[a.split() for a in sys.argv[3:]]
def tps(v, p, s, r):
    out = {}
    for e in json.load(open(f"{d}/{v}-{p}-{s}-r{r}.json")):
        out[(e["test"], e["threads"])] = e["tokens_per_second_mean"]
    return out
print("| shape | scheme | test | threads | " + " | ".join(f"{v} tok/s" for v in variants) +
      " | " + " | ".join(f"{v} / int8" for v in variants if v != "int8") + " |")
print("|---|---|---|---:|" + "---:|" * (2 * len(variants) - 1))
for p in presets:
    for s in schemes:
        runs = {v: [tps(v, p, s, r) for r in range(1, rounds + 1)] for v in variants}
        for key in sorted(runs[variants[0]][0]):
            med = {v: statistics.median(x[key] for x in runs[v]) for v in variants}
            ratios = [f"{med[v] / med['int8']:.2f}" for v in variants if v != "int8"]
            print(f"| {p} | {s} | {key[0]} | {key[1]} | " +
                  " | ".join(f"{med[v]:.1f}" for v in variants) + " | " + " | ".join(ratios) + " |")
EOF
