#!/usr/bin/env python3
"""Generates tests/golden/fixtures/wan/tiny_autoround_w4g32: the tiny Wan2.2 T2V-A14B pipeline's
two experts (transformer and transformer_2) quantized by the real auto-round (W4A16, int4
group 32 sym, SignRound 50 iters on 4 calibration prompts, auto_round format), and diffusers'
output of each quantized expert. 50 iters rather than a couple: at 2 (and 4) the best
iterate of every block was iteration 0, i.e. plain RTN, byte for byte what `quantserve
quantize --iters 0 --disable_opt_rtn` writes; at 50 each block's loss about halves, so the
codes and scales are the tool's own.

The source is tests/golden/fixtures/wan/t2v_a14b/pipeline (gen_wan_fixtures.py) with its two
experts widened: 2 heads x 16 (inner dim 32) and ffn 64 instead of 2 x 12 and 32, the rest of
make_transformer's recipe unchanged (seeds 0 and 1), stored in bf16 as Wan2.2 ships its
weights. auto-round 0.16.1 keeps every int weight-only layer 16-bit whose weight has a side
that is not a multiple of 32 (export/formats/base.py, _check_divisible_by_32, whatever the
group size; quantserve's planner does the same): on the committed experts (inner 24) it
quantizes nothing and writes a quantization_config whose extra_config marks all 20 block
linears bits 16. At inner 32 / ffn 64 every side is a multiple of 32 and all 10 linears of each
block are quantized (attn1 and attn2 to_q/to_k/to_v/to_out.0, ffn.net.0.proj, ffn.net.2);
patch_embedding, condition_embedder and proj_out are outside `blocks` and stay 16-bit, as
auto-round leaves them. The text encoder, tokenizer, VAE and scheduler are t2v_a14b's (the
text dim, 32, is unchanged), so t2v_a14b's transformer inputs apply as they are.

auto-round's diffusion path (compressors/diffusion_mixin.py) quantizes every pipeline
component whose name starts with "transformer": it caches the primary transformer's block
inputs by running the pipeline on the prompts below, tunes its blocks, then re-runs the
pipeline (with the tuned primary) to cache transformer_2's block inputs and tunes those, and
saves both, each with its own quantization_config. With 2 calibration steps and flow_shift 3
the timesteps are 999 and 750, one on each side of the 875 boundary, so each expert sees one
step per prompt. auto-round casts the pipeline to bf16 first: the 16-bit tensors it writes are
bf16, except the modules WanTransformer3DModel keeps in f32 (time_embedder, scale_shift_table,
norms).

Written (only the transformers; the other components are t2v_a14b's, byte for byte):
  - source/transformer, source/transformer_2: the widened bf16 experts as diffusers saves
    them; t2v_a14b/pipeline with these in place of its own is the pipeline quantized here.
  - transformer/, transformer_2/: config.json (with quantization_config),
    quantization_config.json, and diffusion_pytorch_model.safetensors (auto-round names the
    weights of diffusion components so; a model.safetensors would be renamed here).
  - reference.safetensors: `xf_hidden_in` [1, 16, 3, 4, 4], `xf_timestep` [1] (700),
    `xf_text_in` [1, 16, 32]: t2v_a14b's transformer inputs, copied so that the fixture stands
    alone; `xf_out_torch` / `xf2_out_torch`, transformer's / transformer_2's output there, computed
    by diffusers with auto-round's pure-PyTorch backend (dequantized weights, f32 activations,
    the 16-bit tensors exactly as stored), and `xf_out_auto` / `xf2_out_auto`, the same with the
    backend diffusers picks by default on CPU (auto-round-lib's kernel, auto_round_kernel_zp);
    `xf_out` / `xf2_out`: the source experts' output at the same inputs (bf16 weights, f32
    activations); `dequant.<component>.<linear>`: the dequantized weight of two linears of each
    expert, from the torch backend.

Install (the venv of scripts/golden/requirements.txt, with requirements-diffusion.txt,
requirements-wan.txt and requirements-quant.txt, all --no-deps), then:
    .venv-goldens/bin/python scripts/golden/gen_wan_autoround_fixture.py
Nothing is downloaded: the prompts are below (a local TSV instead of auto-round's default
opens2v), the pipeline is the committed fixture. Deterministic on CPU (one thread).

    .venv-goldens/bin/python scripts/golden/gen_wan_autoround_fixture.py --source DIR
writes that source pipeline (t2v_a14b's with the fixture's source experts) to DIR, and
    .venv-goldens/bin/python scripts/golden/gen_wan_autoround_fixture.py --check DIR
loads the transformer(s) of a quantized pipeline DIR made from the source above (e.g. what
`quantserve quantize` wrote) in diffusers through auto-round's torch backend, prints auto-round's
reading of each quantization_config and each expert's output against the source's (xf_out /
xf2_out); exit status 1 when an expert has no quantized linear or its output is off by more
than --tolerance.
"""

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

import auto_round
import diffusers
from auto_round import AutoRound
from diffusers import WanTransformer3DModel
from diffusers.quantizers.quantization_config import AutoRoundConfig

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests/golden/fixtures/wan"
SOURCE = FIXTURES / "t2v_a14b"
OUT = FIXTURES / "tiny_autoround_w4g32"
GROUP, ITERS = 32, 50
PROMPTS = [
    "a photograph of an astronaut riding a horse",
    "a red apple on a wooden table",
    "a cat in a hat walking through the snow",
    "waves breaking on a lighthouse at dusk",
]
EXPERTS = {"transformer": ("xf", 0), "transformer_2": ("xf2", 1)}  # reference prefix, seed
DEQUANT = ["blocks.0.attn1.to_q", "blocks.1.ffn.net.2"]


def make_wide_transformer(seed):
    # gen_wan_fixtures.make_transformer with head_dim 16 and ffn 64: every linear's sides are
    # multiples of 32, which auto-round's auto_round format requires of int W4A16 layers.
    torch.manual_seed(seed)
    return WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16, in_channels=16,
        out_channels=16, text_dim=32, freq_dim=256, ffn_dim=64, num_layers=2,
        cross_attn_norm=True, qk_norm="rms_norm_across_heads",
        rope_max_seq_len=32).to(torch.bfloat16)


def source_pipeline(dest):
    """t2v_a14b's pipeline with the fixture's source experts in place of its own."""
    shutil.copytree(SOURCE / "pipeline", dest)
    for component in EXPERTS:
        shutil.rmtree(dest / component)
        shutil.copytree(OUT / "source" / component, dest / component)


def transformer_output(model, ref):
    with torch.no_grad():
        out = model(
            hidden_states=ref["xf_hidden_in"].float(),
            timestep=ref["xf_timestep"].float(),
            encoder_hidden_states=ref["xf_text_in"].float(),
            return_dict=False,
        )[0]
    return out.contiguous()


def load_quantized(path, backend):
    config = json.loads((Path(path) / "config.json").read_text())["quantization_config"]
    # The torch backend computes in f16 or bf16 only and casts the model to f16 after loading.
    # Loading as f16 and widening every module to f32 (nn.Module.to: diffusers refuses a
    # quantized model's .to(dtype)) gives its dequantized weights (int4 codes times f16
    # scales, exact in f32) with f32 activations; the 16-bit tensors went through f16 on the
    # way, so they are put back as stored (bf16, or f32 for the modules Wan keeps in f32).
    model = WanTransformer3DModel.from_pretrained(
        str(path),
        torch_dtype=torch.float16 if backend == "torch" else torch.float32,
        quantization_config=AutoRoundConfig(
            bits=config["bits"], group_size=config["group_size"], sym=config["sym"], backend=backend
        ),
    )
    if backend == "torch":
        torch.nn.Module.to(model, torch.float32)
        stored = {}
        for f in sorted(Path(path).glob("*.safetensors")):
            stored.update(load_file(str(f)))
        state = dict(model.named_parameters())
        state.update(model.named_buffers())
        restored = 0
        for name, value in state.items():
            if name in stored and value.is_floating_point() and stored[name].is_floating_point():
                with torch.no_grad():
                    value.copy_(stored[name].to(value.dtype).reshape(value.shape))
                restored += 1
        assert restored > 0, f"no stored tensor matched a parameter of {path}"
    return model


def dequantized_weight(layer):
    eye = torch.eye(layer.infeatures if hasattr(layer, "infeatures") else layer.in_features)
    bias = layer.bias.float() if layer.bias is not None else 0
    with torch.no_grad():  # W^T = f(I) - b, so the weight as the backend applies it
        return (layer(eye) - bias).T.contiguous()


def quantized_linears(model):
    return sorted(n for n, m in model.named_modules() if hasattr(m, "qweight"))


def quantize():
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src, quantized = tmp / "pipe", tmp / "quantized"
        source_pipeline(src)
        tsv = tmp / "prompts.tsv"
        tsv.write_text("id\tcaption\n" + "".join(f"{i}\t{p}\n" for i, p in enumerate(PROMPTS)))
        ar = AutoRound(
            model=str(src),
            scheme="W4A16",
            group_size=GROUP,
            iters=ITERS,
            enable_torch_compile=False,
            nsamples=len(PROMPTS),
            batch_size=1,
            dataset=str(tsv),
            num_inference_steps=2,
            calib_num_inference_steps=2,
            guidance_scale=5.0,
            seed=42,
            device_map="cpu",
            # The fixture's own sizes (WanPipeline's defaults are 480x832, 81 frames and 512
            # text tokens, far beyond the tiny model's rope_max_seq_len and tokenizer).
            pipeline_call_kwargs=dict(height=32, width=32, num_frames=9, max_sequence_length=16),
        )
        ar.quantize_and_save(str(quantized), format="auto_round")

        for component in EXPERTS:
            (OUT / component).mkdir(parents=True)
            for f in (quantized / component).iterdir():
                name = f.name
                if name == "model.safetensors":
                    name = "diffusion_pytorch_model.safetensors"
                shutil.copy(f, OUT / component / name)
            config_path = OUT / component / "config.json"
            config = json.loads(config_path.read_text())
            config.pop("_name_or_path", None)  # the temporary directory: not reproducible
            config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def generate():
    ref = load_file(str(SOURCE / "reference.safetensors"))
    shutil.rmtree(OUT, ignore_errors=True)
    tensors = {k: ref[k].contiguous() for k in ("xf_hidden_in", "xf_timestep", "xf_text_in")}
    linears = {}
    for component, (prefix, seed) in EXPERTS.items():
        path = OUT / "source" / component
        make_wide_transformer(seed).save_pretrained(path, safe_serialization=True)
        # Loaded back as the pipeline loads it: bf16 values widened to f32.
        model = WanTransformer3DModel.from_pretrained(str(path), torch_dtype=torch.float32)
        tensors[f"{prefix}_out"] = transformer_output(model, ref)
    quantize()
    for component, (prefix, _) in EXPERTS.items():
        for backend in ("torch", "auto"):
            model = load_quantized(OUT / component, backend)
            tensors[f"{prefix}_out_{backend}"] = transformer_output(model, ref)
            if backend == "torch":
                linears[component] = quantized_linears(model)
                for name in DEQUANT:
                    layer = model.get_submodule(name)
                    tensors[f"dequant.{component}.{name}"] = dequantized_weight(layer)
    save_file(tensors, str(OUT / "reference.safetensors"))
    meta = {
        "auto_round": auto_round.__version__,
        "diffusers": diffusers.__version__,
        "torch": torch.__version__,
        "source": "t2v_a14b/pipeline, experts widened to 2 heads x 16 and ffn 64 (seeds 0, 1), "
        "bf16",
        "scheme": f"W4A16 int4 g{GROUP} sym, iters {ITERS}, nsamples 4, calib steps 2, seed 42, "
        "format auto_round",
        "prompts": PROMPTS,
        "inputs": "xf_hidden_in, xf_timestep (700), xf_text_in: t2v_a14b's, copied",
        "quantized_linears": {c: len(v) for c, v in linears.items()},
    }
    for component, (prefix, _) in EXPERTS.items():
        torch_out, auto_out = tensors[f"{prefix}_out_torch"], tensors[f"{prefix}_out_auto"]
        source_out = tensors[f"{prefix}_out"]
        meta[f"{component}_max_abs_diff_torch_vs_auto"] = float((torch_out - auto_out).abs().max())
        meta[f"{component}_max_abs_diff_vs_source"] = float((torch_out - source_out).abs().max())
        meta[f"{component}_max_abs_source"] = float(source_out.abs().max())
    (OUT / "reference.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(json.dumps(meta, indent=2))


def check(pipeline_dir, tolerance):
    """Loads another quantizer's output of the source pipeline through diffusers + auto-round."""
    ref = load_file(str(OUT / "reference.safetensors"))
    ok, seen = True, 0
    for component, (prefix, _) in EXPERTS.items():
        path = Path(pipeline_dir) / component
        if not path.is_dir():
            continue
        seen += 1
        qc = json.loads((path / "config.json").read_text()).get("quantization_config")
        if qc is None:
            print(f"{component}: no quantization_config")
            ok = False
            continue
        parsed = AutoRoundConfig.from_dict(dict(qc))  # auto-round's own reading of it
        print(f"{component}: quantization_config {json.dumps(qc, sort_keys=True)}")
        print(f"  auto-round reads: bits {parsed.bits}, group_size {parsed.group_size}, "
              f"sym {parsed.sym}, packing_format {getattr(parsed, 'packing_format', None)}, "
              f"block_name_to_quantize {getattr(parsed, 'block_name_to_quantize', None)}")
        model = load_quantized(path, "torch")
        names = quantized_linears(model)
        packed = set()
        for f in path.glob("*.safetensors"):
            packed.update(k[: -len(".qweight")] for k in load_file(str(f))
                          if k.endswith(".qweight"))
        # A packed linear the config does not name loads as nothing (its .weight is missing).
        stray = sorted(packed - set(names))
        out = transformer_output(model, ref)
        want = ref[f"{prefix}_out"]
        err = float((out - want).abs().max())
        print(f"  {len(names)} quantized linears: {', '.join(names)}")
        if stray:
            print(f"  packed in the checkpoint but not quantized by its config: {', '.join(stray)}")
        print(f"  output max |diff| vs the 16-bit source {err:.4g} "
              f"(outputs up to {float(want.abs().max()):.3g})")
        ok = ok and len(names) > 0 and not stray and err <= tolerance
    return ok and seen > 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", metavar="DIR", help="load a quantized pipeline DIR instead")
    parser.add_argument("--source", metavar="DIR",
                        help="write the source pipeline (t2v_a14b with the widened experts) to DIR")
    parser.add_argument("--tolerance", type=float, default=0.1,
                        help="--check: the largest |diff| allowed against the source's output")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.source:
        source_pipeline(Path(args.source))
        return
    if args.check:
        sys.exit(0 if check(args.check, args.tolerance) else 1)
    generate()


if __name__ == "__main__":
    main()
