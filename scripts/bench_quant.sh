#!/usr/bin/env bash
# Quantized vs bf16 end-to-end speed: writes random-weight checkpoints
# of qwen2.5-0.5b and tinyllama-1.1b as bf16 and RTN w4g128 / w8 (AutoRound format), runs
# `quantserve bench latency` pp512 + tg128 on 1 and 2 threads once each (the roofline's read
# bandwidth measured around every decode test), keeps the JSON in bench-results/quant-*.json
# and prints one markdown table: model, weights, resident MiB, threads, pp t/s, tg t/s,
# roofline fraction of decode.
# Usage: scripts/bench_quant.sh [model-dir] (default /tmp/qs-bench-quant). Quick check:
#   QS_BENCH_PRESETS=qwen2.5-0.5b QS_BENCH_LAYERS=2 QS_BENCH_P=16 QS_BENCH_N=8 scripts/bench_quant.sh
# Other knobs: QS_BENCH_SCHEMES (default "bf16 w4g128 w8"), QS_BENCH_THREADS (default 1,2),
# QS_BENCH_REPS (default 1), QS_BIN (default build/quantserve).
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${QS_BIN:-build/quantserve}"
[[ -x "$bin" ]] || scripts/setup.sh

models_dir="${1:-/tmp/qs-bench-quant}"
presets=(${QS_BENCH_PRESETS:-qwen2.5-0.5b tinyllama-1.1b})
schemes=(${QS_BENCH_SCHEMES:-bf16 w4g128 w8})
p="${QS_BENCH_P:-512}"
n="${QS_BENCH_N:-128}"
layers_flag=()
[[ -n "${QS_BENCH_LAYERS:-}" ]] && layers_flag=(--layers "$QS_BENCH_LAYERS")
mkdir -p "$models_dir" bench-results

results=()
for preset in "${presets[@]}"; do
  for scheme in "${schemes[@]}"; do
    dir="$models_dir/${preset}-${scheme}${QS_BENCH_LAYERS:+-l$QS_BENCH_LAYERS}"
    quant_flag=()
    [[ "$scheme" == bf16 ]] || quant_flag=(--quantize "$scheme")
    # Always rewritten: a directory left by an older build may hold another format.
    "$bin" make-model --like "$preset" --dtype bf16 "${layers_flag[@]}" "${quant_flag[@]}" \
      --out "$dir"
    json="bench-results/quant-${preset}-${scheme}.json"
    "$bin" bench latency --model "$dir" --input-len "$p" --output-len "$n" \
      --threads "${QS_BENCH_THREADS:-1,2}" --repetitions "${QS_BENCH_REPS:-1}" --json "$json" >&2
    results+=("$preset" "$scheme" "$json")
  done
done

python3 - "${results[@]}" <<'PY'
import json, sys

args = sys.argv[1:]
print("| model | weights | resident MiB | decode MiB/token | threads | pp t/s | tg t/s "
      "| read GB/s before / after | tg weight GB/s | tg roofline |")
print("|---|---|---:|---:|---:|---:|---:|---|---:|---:|")
for i in range(0, len(args), 3):
    preset, scheme, path = args[i:i + 3]
    rows = {}
    for r in json.load(open(path)):
        row = rows.setdefault(r["threads"], {"resident": r["resident_weight_bytes"],
                                             "per_token": r["weight_bytes_per_token"]})
        kind = "pp" if r["test"].startswith("pp") else "tg"
        row[kind] = f"{r['tokens_per_second_mean']:.2f} ± {r['tokens_per_second_sd']:.2f}"
        if kind == "tg" and "roofline_fraction" in r:
            row["roof"] = r["roofline_fraction"]
            row["bw"] = (r["read_bandwidth_gbs_before"], r["read_bandwidth_gbs_after"])
            row["achieved"] = r["tokens_per_second_mean"] * r["weight_bytes_per_token"] / 1e9
    for threads, row in sorted(rows.items()):
        roof = f"{100 * row['roof']:.0f}%" if "roof" in row else "-"
        bw = f"{row['bw'][0]:.1f} / {row['bw'][1]:.1f}" if "bw" in row else "-"
        ach = f"{row['achieved']:.1f}" if "achieved" in row else "-"
        print(f"| {preset} | {scheme} | {row['resident'] / 2**20:.1f} | "
              f"{row['per_token'] / 2**20:.1f} | {threads} | {row.get('pp', '-')} | "
              f"{row.get('tg', '-')} | {bw} | {ach} | {roof} |")
PY
