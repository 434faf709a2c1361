#!/usr/bin/env bash
# Issue 30's CPU speed check: `bench latency` (pp512 / tg128, 1 and 2 threads) of two builds of
# quantserve on the same random checkpoints, interleaved round by round so that drift in the
# machine's bandwidth lands on both alike, and a table of their medians and ratios.
#   QS_BEFORE=/path/to/old/quantserve [QS_AFTER=build/quantserve] scripts/bench_backend_seam.sh
# Checkpoints (Qwen2.5-0.5B shape, bf16 and W4G128) are made once under QS_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
BEFORE=${QS_BEFORE:?set QS_BEFORE to the quantserve binary to compare against}
AFTER=${QS_AFTER:-$PWD/build/quantserve}
DIR=${QS_DIR:-/tmp/qs-seam}
ROUNDS=${QS_ROUNDS:-3}
PRESET=${QS_PRESET:-qwen2.5-0.5b}
SCHEMES=${QS_SCHEMES:-bf16 w4g128}
mkdir -p "$DIR"

echo "# $(date -u '+%F %T UTC'), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs"
echo "# flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -oE 'avx512f|avx512_bf16|avx512_vnni|amx_tile' | tr '\n' ' ')"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for s in $SCHEMES; do
  [[ -f $DIR/$PRESET-$s/config.json ]] && continue
  quant=(--quantize "$s")
  [[ $s == bf16 ]] && quant=()
  "$AFTER" make-model --like "$PRESET" --dtype bf16 "${quant[@]}" --out "$DIR/$PRESET-$s" >&2
done

for r in $(seq 1 "$ROUNDS"); do
  for s in $SCHEMES; do
    for side in before after; do
      bin=$BEFORE
      [[ $side == after ]] && bin=$AFTER
      "$bin" bench latency --model "$DIR/$PRESET-$s" --input-len 512 --output-len 128 \
        --threads 1,2 --repetitions 1 --no-roofline --json "$DIR/$side-$s-r$r.json" \
        > /dev/null 2> "$DIR/$side-$s-r$r.log"
    done
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$DIR" "$ROUNDS" "$PRESET" $SCHEMES <<'PY'
import json, statistics, sys
d, rounds, preset, schemes = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
def tps(side, s, r):
    return {(e["test"], e["threads"]): e["tokens_per_second_mean"]
            for e in json.load(open(f"{d}/{side}-{s}-r{r}.json"))}
print("| shape | weights | test | threads | before tok/s | after tok/s | after / before |")
print("|---|---|---|---:|---:|---:|---:|")
for s in schemes:
    runs = {side: [tps(side, s, r) for r in range(1, rounds + 1)] for side in ("before", "after")}
    for key in sorted(runs["before"][0]):
        med = {side: statistics.median(x[key] for x in runs[side]) for side in runs}
        print(f"| {preset} | {s} | {key[0]} | {key[1]} | {med['before']:.1f} | "
              f"{med['after']:.1f} | {med['after'] / med['before']:.3f} |")
PY
