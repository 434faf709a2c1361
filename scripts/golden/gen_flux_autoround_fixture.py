#!/usr/bin/env python3
"""Generates tests/golden/fixtures/flux/tiny_autoround_w4g32: the tiny FLUX pipeline's
transformer quantized by the real auto-round (W4A16, int4 group 32 sym, SignRound 2 iters on
4 calibration prompts, auto_round format), and diffusers' output of that quantized
transformer.

The source is tests/golden/fixtures/flux/tiny_pipeline (gen_flux_fixtures.py). auto-round
quantizes the pipeline directory (its diffusion path: calibration inputs collected by running
the pipeline on the prompts below, then block-wise tuning of every Linear in
transformer_blocks.* and single_transformer_blocks.*), and saves the pipeline. Only the
transformer is kept (the other components are the source's, byte for byte):
  - transformer/: config.json (with quantization_config), quantization_config.json, and the
    weights. auto-round 0.16.1 names them model.safetensors, which diffusers 0.42.1 does not
    look for, so they are renamed diffusion_pytorch_model.safetensors (what diffusers loads;
    quantserve reads either name).
  - reference.safetensors: `xf_out_torch`, the transformer's output at the inputs of
    reference.safetensors' xf_* tensors (timestep 0.7, guidance 3.5), computed by diffusers
    with auto-round's pure-PyTorch backend (dequantized weights, f32 activations), and
    `xf_out_auto`, the same with the backend diffusers picks by default on CPU (auto-round's
    ark kernel); `dequant.*`: the dequantized weight of two linears, from the torch backend.

Install (the venv of scripts/golden/requirements.txt, with requirements-diffusion.txt and
requirements-quant.txt, all --no-deps), then:
    .venv-goldens/bin/python scripts/golden/gen_flux_autoround_fixture.py
Nothing is downloaded: the prompts are below, the pipeline is the committed fixture.
"""

import json
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

import auto_round
import diffusers
from auto_round import AutoRound
from diffusers import FluxTransformer2DModel
from diffusers.quantizers.quantization_config import AutoRoundConfig

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests/golden/fixtures/flux"
SOURCE = FIXTURES / "tiny_pipeline"
OUT = FIXTURES / "tiny_autoround_w4g32"
PROMPTS = [
    "a photograph of an astronaut riding a horse",
    "a red apple on a wooden table",
    "a cat in a hat",
    "a lighthouse at dusk",
]
DEQUANT = ["transformer_blocks.0.attn.to_q", "single_transformer_blocks.0.proj_out"]


def transformer_output(model, ref):
    with torch.no_grad():
        out = model(
            hidden_states=ref["xf_hidden_in"].float(),
            encoder_hidden_states=ref["xf_encoder_in"].float(),
            pooled_projections=ref["xf_pooled_in"].float(),
            timestep=torch.tensor([0.7]),
            guidance=torch.tensor([3.5]),
            img_ids=ref["xf_img_ids"].float(),
            txt_ids=ref["xf_txt_ids"].float(),
            return_dict=False,
        )[0]
    return out.contiguous()


def main():
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src, quantized = tmp / "pipe", tmp / "quantized"
        shutil.copytree(SOURCE, src)
        tsv = tmp / "prompts.tsv"
        tsv.write_text("id\tcaption\n" + "".join(f"{i}\t{p}\n" for i, p in enumerate(PROMPTS)))
        ar = AutoRound(
            model=str(src),
            scheme="W4A16",
            group_size=32,
            iters=2,
            nsamples=len(PROMPTS),
            batch_size=1,
            dataset=str(tsv),
            num_inference_steps=2,
            calib_num_inference_steps=2,
            guidance_scale=3.5,
            seed=42,
            device_map="cpu",
        )
        ar.quantize_and_save(str(quantized), format="auto_round")

        shutil.rmtree(OUT, ignore_errors=True)
        (OUT / "transformer").mkdir(parents=True)
        for f in (quantized / "transformer").iterdir():
            name = "diffusion_pytorch_model.safetensors" if f.name == "model.safetensors" else f.name
            shutil.copy(f, OUT / "transformer" / name)
        config_path = OUT / "transformer" / "config.json"
        config = json.loads(config_path.read_text())
        config.pop("_name_or_path", None)  # the temporary directory: not reproducible
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")

    ref = load_file(str(FIXTURES / "reference.safetensors"))
    tensors = {}
    for backend in ("torch", "auto"):
        # The torch backend computes in f16 or bf16 only and casts the model to f16 after
        # loading; loading as f16 (exact for these bf16 weights and f16 scales) and then
        # widening every module to f32 (nn.Module.to: diffusers refuses a quantized model's
        # .to(dtype)) gives its dequantized weights with f32 activations.
        model = FluxTransformer2DModel.from_pretrained(
            str(OUT / "transformer"),
            torch_dtype=torch.float16 if backend == "torch" else torch.float32,
            quantization_config=AutoRoundConfig(bits=4, group_size=32, sym=True, backend=backend),
        )
        if backend == "torch":
            torch.nn.Module.to(model, torch.float32)
        tensors[f"xf_out_{backend}"] = transformer_output(model, ref)
        if backend == "torch":
            for name in DEQUANT:
                layer = model.get_submodule(name)
                eye = torch.eye(layer.infeatures if hasattr(layer, "infeatures") else layer.in_features)
                bias = layer.bias.float() if layer.bias is not None else 0
                with torch.no_grad():  # W^T = f(I) - b, so the weight as the backend applies it
                    w = (layer(eye) - bias).T.contiguous()
                tensors[f"dequant.{name}"] = w
    save_file(tensors, str(OUT / "reference.safetensors"))
    meta = {
        "auto_round": auto_round.__version__,
        "diffusers": diffusers.__version__,
        "torch": torch.__version__,
        "scheme": "W4A16 int4 g32 sym, iters 2, nsamples 4, seed 42, format auto_round",
        "prompts": PROMPTS,
        "inputs": "reference.safetensors xf_* of tiny_pipeline, timestep 0.7, guidance 3.5",
        "max_abs_diff_torch_vs_auto": float((tensors["xf_out_torch"] - tensors["xf_out_auto"]).abs().max()),
    }
    (OUT / "reference.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
