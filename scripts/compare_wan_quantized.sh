#!/usr/bin/env bash
# The quantized-video table of docs/video.md ("Comparing two pipelines"): the tiny T2V-A14B
# pipeline with tests/golden/fixtures/wan/tiny_autoround_w4g32's widened bf16 expert pair as the
# source, against three W4A16 g32 candidates of it: auto-round's own (the fixture, made by the
# real auto-round, SignRound 50 iterations), quantserve's RTN and quantserve's AutoRound
# (`quantize --iters 50`), each compared with `compare-images --task t2v` at the same settings
# and seed. Random weights give near-flat gray videos, which inflates PSNR: the table shows the
# tool and the order of the candidates, not Wan2.2's quality.
#
# Usage: scripts/compare_wan_quantized.sh [OUT_DIR]
# Environment: QS_WAN_SIZE (512x256), QS_WAN_FRAMES (33), QS_WAN_STEPS (30), QS_WAN_THREADS (2),
# QS_WAN_NSAMPLES (16: quantize's calibration prompts).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x build/quantserve ]] || scripts/setup.sh
out=${1:-$(mktemp -d /tmp/qs_wan_compare.XXXX)}
size=${QS_WAN_SIZE:-512x256}
frames=${QS_WAN_FRAMES:-33}
steps=${QS_WAN_STEPS:-30}
threads=${QS_WAN_THREADS:-2}
nsamples=${QS_WAN_NSAMPLES:-16}
fixture=tests/golden/fixtures/wan
mkdir -p "$out"

# A copy of the tiny T2V-A14B pipeline with the experts of `$2` (a folder holding transformer/
# and transformer_2/).
pipeline_with() {
  rm -rf "$1"
  cp -r "$fixture/t2v_a14b/pipeline" "$1"
  for e in transformer transformer_2; do
    rm -rf "${1:?}/$e"
    cp -r "$2/$e" "$1/$e"
  done
}
pipeline_with "$out/src" "$fixture/tiny_autoround_w4g32/source"
pipeline_with "$out/tool" "$fixture/tiny_autoround_w4g32"
common="--bits 4 --group_size 32 --threads $threads --overwrite"
build/quantserve quantize --model "$out/src" --output_dir "$out/rtn" --iters 0 \
  --disable_opt_rtn $common > "$out/rtn.log" 2>&1
build/quantserve quantize --model "$out/src" --output_dir "$out/ours" --iters 50 \
  --nsamples "$nsamples" $common > "$out/ours.log" 2>&1

printf '%s\n' "a cat on a skateboard" "waves breaking on a rocky shore at sunset" \
  "a red car driving through a snowy forest" "two astronauts playing chess on the moon" \
  > "$out/prompts.txt"
echo "| candidate vs bf16 source | video PSNR (dB) | frame PSNR mean / min | SSIM mean / min | latent cosine |"
echo "|---|---|---|---|---|"
for cand in tool ours rtn; do
  build/quantserve compare-images --task t2v --reference "$out/src" --candidate "$out/$cand" \
    --prompts "$out/prompts.txt" --width "${size%x*}" --height "${size#*x}" \
    --num-frames "$frames" --steps "$steps" --guidance-scale 5 --guidance-scale-2 4 \
    --max-sequence-length 32 --seed 7 --threads "$threads" --out-dir "$out/cmp_$cand" \
    > "$out/cmp_$cand.json" 2> "$out/cmp_$cand.log"
  python3 - "$out/cmp_$cand.json" "$cand" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rows = r["per_prompt"]
name = {"tool": "auto-round W4A16 g32 (SignRound, 50 iters)",
        "ours": "quantserve AutoRound W4A16 g32 (50 iters)",
        "rtn": "quantserve RTN W4A16 g32"}[sys.argv[2]]
def span(key, fmt):
    v = [x[key] for x in rows]
    return f"{fmt.format(min(v))}-{fmt.format(max(v))}"
print(f"| {name} | {span('psnr_db', '{:.2f}')} | {span('psnr_db_mean', '{:.2f}')} / "
      f"{span('psnr_db_min', '{:.2f}')} | {span('ssim_mean', '{:.3f}')} / "
      f"{span('ssim_min', '{:.3f}')} | {span('latent_cosine_similarity', '{:.5f}')} |")
PY
done
echo "(outputs in $out)"
