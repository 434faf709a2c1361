#!/usr/bin/env bash
# The exact W4A16 kernel on resident panels against the int8-activation kernels and the
# per-column exact kernel it replaced, one linear at a time: build/bench/qlinear_bench at the
# Qwen2.5-0.5B MLP shapes, int4 g128 and g32, m = 1..512, one thread. The three variants run
# interleaved QS_ROUNDS times; the table takes each one's best. Prints the CPU and the load.
#   int8     QS_ACTIVATION_PRECISION=int8
#   panels   QS_ACTIVATION_PRECISION=bf16
#   column   QS_ACTIVATION_PRECISION=bf16 QS_EXACT_PANELS=0
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH=$PWD/build/bench/qlinear_bench
ROUNDS=${QS_ROUNDS:-2}
OUT=${QS_DIR:-/tmp/qs-exact-kernels}
FILTER=${QS_FILTER:-'qwen0.5b_(gate_up|down)/avx512/int4_g(128|32)_sym/m:(1|4|16|128|512)/threads:1'}
[[ -x $BENCH ]] || { echo "cmake --build build --target qlinear_bench" >&2; exit 1; }
mkdir -p "$OUT"
echo "# $(date -u '+%F %T UTC'), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs"
echo "# flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -oE 'avx512f|avx512_bf16|avx512_vnni|avx512_vbmi|amx_tile|amx_bf16|amx_int8' | tr '\n' ' ')"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
  for v in int8 panels column; do
    case $v in
      int8) env=(QS_ACTIVATION_PRECISION=int8) ;;
      panels) env=(QS_ACTIVATION_PRECISION=bf16) ;;
      column) env=(QS_ACTIVATION_PRECISION=bf16 QS_EXACT_PANELS=0) ;;
    esac
    env "${env[@]}" "$BENCH" --benchmark_filter="$FILTER" --benchmark_min_time=0.2 \
      --benchmark_format=json > "$OUT/$v-$r.json" 2> /dev/null
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT" "$ROUNDS" << 'PY'
import json, re, sys
d, rounds = sys.argv[1], int(sys.argv[2])
t = {}
for v in ("int8", "panels", "column"):
    for r in range(1, rounds + 1):
        for b in json.load(open(f"{d}/{v}-{r}.json"))["benchmarks"]:
            t.setdefault((v, b["name"]), []).append(b["real_time"])
names = sorted({n for _, n in t}, key=lambda n: (n.split("/")[0], n.split("/")[2],
                                                 int(re.search(r"m:(\d+)", n).group(1))))
print("| shape | weights | m | int8 us | exact, panels us | exact, per-column us | panels / int8 | panels / per-column |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for n in names:
    p, m = n.split("/"), re.search(r"m:(\d+)", n).group(1)
    b = {v: min(t[(v, n)]) for v in ("int8", "panels", "column")}
    print(f"| {p[0]} | {p[2]} | {m} | {b['int8']:.0f} | {b['panels']:.0f} | {b['column']:.0f} | "
          f"{b['panels'] / b['int8']:.2f} | {b['panels'] / b['column']:.2f} |")
PY
