#!/usr/bin/env bash
# CFG parallelism against sequential CFG at the same cores (docs/benchmarks.md, "Image
# generation: CFG parallelism over MPI"). Writes a FLUX-shaped random bf16 transformer (FLUX.1's
# head size 128 and block layout, fewer heads and blocks) into a copy of the tiny pipeline,
# whose text encoders and VAE are tiny, so that a denoising step is the transformer's. Then
# times the denoising steps of one true-CFG request, runs alternating:
#   sequential: one process, --threads 2, both branches in one batch-2 forward (the default);
#               also at --threads 1, to show what the second thread buys in one process;
#   parallel:   mpirun -np 2 ... --cfg-parallel-size 2, --threads 1 per rank, each rank one
#               branch, the predictions all-gathered every step.
# Each run prints the median step of its own steps (generate-image's "denoising step median",
# text encoders and VAE excluded) and, in parallel, the median exchange (all-gather of the
# predictions plus the continue flag, waiting for the peer included); the table gives the median
# over the runs of each. The two images are compared byte for byte.
#
# Usage: scripts/bench_cfg_parallel.sh
# Environment: QS_CFG_HEADS (6), QS_CFG_DOUBLE (2), QS_CFG_SINGLE (4) blocks; QS_CFG_SHAPES
# ("64x64:128 128x128:256": WIDTHxHEIGHT px : text tokens; this VAE's 4 px a token a side);
# QS_CFG_STEPS (8); QS_CFG_REPS (3); QS_CFG_BIND (none; core pins each rank to a core).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x build/quantserve ]] || scripts/setup.sh
if ! command -v mpirun >/dev/null; then
  echo "bench_cfg_parallel: needs mpirun (apt-get install openmpi-bin libopenmpi-dev)" >&2
  exit 1
fi
heads=${QS_CFG_HEADS:-6}
double=${QS_CFG_DOUBLE:-2}
single=${QS_CFG_SINGLE:-4}
shapes=${QS_CFG_SHAPES:-"64x64:128 128x128:256"}
steps=${QS_CFG_STEPS:-8}
reps=${QS_CFG_REPS:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun -np 2 --oversubscribe --bind-to "${QS_CFG_BIND:-none}")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pipe="$work/pipeline"
cp -r tests/golden/fixtures/flux/tiny_pipeline "$pipe"
rm -rf "$pipe/transformer"
# The tiny pipeline's CLIP and T5 are 32 wide and its VAE has 4 latent channels: the
# transformer's pooled, joint and in dims follow them (only its first linears see them).
python3 - "$pipe/transformer" "$heads" "$double" "$single" <<'EOF'
import json, os, struct, sys

out, heads, n_double, n_single = sys.argv[1], *map(int, sys.argv[2:])
hd, d, joint, pooled, ch, time_ch = 128, 128 * heads, 32, 32, 16, 256
specs = []
def linear(name, n, k):
    specs.append((name + ".weight", [n, k]))
    specs.append((name + ".bias", [n]))
linear("x_embedder", d, ch)
linear("context_embedder", d, joint)
for e, k in (("timestep_embedder", time_ch), ("guidance_embedder", time_ch),
             ("text_embedder", pooled)):
    linear(f"time_text_embed.{e}.linear_1", d, k)
    linear(f"time_text_embed.{e}.linear_2", d, d)
def attention(p, joint_attn):
    for m in ("to_q", "to_k", "to_v"):
        linear(f"{p}.{m}", d, d)
    specs.extend([(f"{p}.norm_q.weight", [hd]), (f"{p}.norm_k.weight", [hd])])
    if joint_attn:
        for m in ("add_q_proj", "add_k_proj", "add_v_proj"):
            linear(f"{p}.{m}", d, d)
        specs.extend([(f"{p}.norm_added_q.weight", [hd]), (f"{p}.norm_added_k.weight", [hd])])
        linear(f"{p}.to_out.0", d, d)
        linear(f"{p}.to_add_out", d, d)
for i in range(n_double):
    p = f"transformer_blocks.{i}"
    linear(f"{p}.norm1.linear", 6 * d, d)
    linear(f"{p}.norm1_context.linear", 6 * d, d)
    attention(f"{p}.attn", True)
    for ff in ("ff", "ff_context"):
        linear(f"{p}.{ff}.net.0.proj", 4 * d, d)
        linear(f"{p}.{ff}.net.2", d, 4 * d)
for i in range(n_single):
    p = f"single_transformer_blocks.{i}"
    linear(f"{p}.norm.linear", 3 * d, d)
    attention(f"{p}.attn", False)
    linear(f"{p}.proj_mlp", 4 * d, d)
    linear(f"{p}.proj_out", d, 5 * d)
linear("norm_out.linear", 2 * d, d)
linear("proj_out", ch, d)

# Random bf16 of magnitude 2^-7..2^-5 (about 1/sqrt(k) here), either sign: random bytes with
# the high byte's exponent bits fixed. Speed does not depend on the values.
high = bytes((r & 0x80) | 0x3C for r in range(256))
header, offset = {"__metadata__": {"format": "pt"}}, 0
for name, shape in specs:
    n = 2
    for s in shape:
        n *= s
    header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + n]}
    offset += n
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
os.makedirs(out)
with open(os.path.join(out, "diffusion_pytorch_model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text)
    for name, shape in specs:
        data = bytearray(os.urandom(header[name]["data_offsets"][1] -
                                    header[name]["data_offsets"][0]))
        data[1::2] = bytes(data[1::2]).translate(high)
        f.write(data)
json.dump({"_class_name": "FluxTransformer2DModel", "attention_head_dim": hd,
           "num_attention_heads": heads, "num_layers": n_double, "num_single_layers": n_single,
           "in_channels": ch, "out_channels": None, "joint_attention_dim": joint,
           "pooled_projection_dim": pooled, "guidance_embeds": True,
           "axes_dims_rope": [16, 56, 56], "patch_size": 1},
          open(os.path.join(out, "config.json"), "w"))
print(f"transformer: {n_double} double + {n_single} single blocks, {heads} heads x {hd} "
      f"(inner {d}), {offset / 2 / 1e6:.1f} M parameters bf16")
EOF

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $steps steps a run, $reps runs each, alternating;" \
  "mpirun --bind-to ${QS_CFG_BIND:-none}; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| image (tokens) | text tokens | sequential, 1 thread | sequential, 1 process x 2 threads | CFG-parallel, 2 ranks x 1 thread | speed-up over 2 threads | exchange, share of a step | same PNG |"
echo "|---|---:|---:|---:|---:|---:|---:|:-:|"
for shape in $shapes; do
  size=${shape%%:*} text=${shape##*:}
  w=${size%%x*} h=${size##*x}
  args=(generate-image --model "$pipe" --prompt "an astronaut riding a horse on the moon"
        --negative-prompt "blurry, low quality" --true-cfg-scale 4 --width "$w" --height "$h"
        --steps "$steps" --max-sequence-length "$text" --seed 1)
  : >"$work/one" && : >"$work/seq" && : >"$work/par" && : >"$work/exchange"
  for ((r = 0; r < reps; r++)); do
    build/quantserve "${args[@]}" --threads 1 --out "$work/one.png" 2>"$work/log"
    sed -n 's/.*denoising step median \([0-9.]*\) s.*/\1/p' "$work/log" >>"$work/one"
    build/quantserve "${args[@]}" --threads 2 --out "$work/seq.png" 2>"$work/log"
    sed -n 's/.*denoising step median \([0-9.]*\) s.*/\1/p' "$work/log" >>"$work/seq"
    "${mpi[@]}" build/quantserve "${args[@]}" --cfg-parallel-size 2 --threads 1 \
      --out "$work/par.png" 2>"$work/log"
    sed -n 's/.*denoising step median \([0-9.]*\) s, CFG-parallel exchange median \([0-9.]*\) s.*/\1 \2/p' \
      "$work/log" >"$work/line"
    if [[ ! -s "$work/line" ]]; then
      cat "$work/log" >&2
      exit 1
    fi
    cut -d' ' -f1 "$work/line" >>"$work/par"
    cut -d' ' -f2 "$work/line" >>"$work/exchange"
  done
  one_s=$(median <"$work/one") seq_s=$(median <"$work/seq") par_s=$(median <"$work/par") ex_s=$(median <"$work/exchange")
  same=$(cmp -s "$work/seq.png" "$work/par.png" && echo yes || echo no)
  tokens=$(((w / 4) * (h / 4)))
  awk -v size="$size" -v tok="$tokens" -v text="$text" -v o="$one_s" -v s="$seq_s" -v p="$par_s" \
    -v e="$ex_s" -v same="$same" 'BEGIN {
      printf "| %s px (%d) | %d | %.4f s | %.4f s | %.4f s | %.2fx | %.4f s (%.1f %%) | %s |\n",
             size, tok, text, o, s, p, s / p, e, 100 * e / p, same }'
done
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
