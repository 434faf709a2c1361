#!/usr/bin/env python3
"""Generates the Wan2.2 reference fixtures in tests/golden/fixtures/wan/.

Three tiny random-init pipelines saved by diffusers as ordinary pipeline directories
(model_index.json, text_encoder/, tokenizer/, transformer/[, transformer_2/], vae/, scheduler/),
at the shapes diffusers' own Wan tests use (tests/pipelines/wan/test_wan_22.py and
test_wan_22_image_to_video.py: transformer patch (1, 2, 2), 2 heads x 12, text_dim 32,
freq_dim 256, ffn_dim 32, 2 layers, cross_attn_norm, q/k RMSNorm across heads, rope_max_seq_len
32; VAE base_dim 3, dim_mult [1, 1, 1, 1], one residual block per level), with these changes so
that more of the code runs: frames of 32x32 (t2v, i2v) and 64x64 (ti2v) so that a frame has 2x2
transformer tokens and the 3-D rotary positions vary along every axis; 4 steps so that both
experts of A14B run; latents_mean/latents_std drawn at random instead of 0/1 so that the
de-normalisation is checked; the transformers' and UMT5's norm weights (and biases) drawn around 1 and 0
(they start at exactly 1 and 0); guidance_scale_2 distinct from guidance_scale.

  t2v_a14b/   WanPipeline, transformer + transformer_2 (boundary_ratio 0.875), Wan2.1's VAE
              (z_dim 16, 8x spatial, 4x temporal), UniPC flow_shift 3.0
  ti2v_5b/    WanPipeline with expand_timesteps (per-token timesteps), Wan2.2's VAE (z_dim 48,
              is_residual, patch_size 2: 16x spatial), transformer in/out 48, UniPC flow_shift
              5.0; also run as WanImageToVideoPipeline (the first latent frame from an image)
  i2v_a14b/   WanImageToVideoPipeline, two experts (boundary_ratio 0.9), transformer in 36 =
              16 noise + 4 mask + 16 image-condition channels, Wan2.1's VAE, flow_shift 5.0

The UMT5 tokenizer is a SentencePiece Unigram trained here on a small corpus (nothing can be
downloaded from the Hub), as gen_flux_fixtures.py trains T5's.

<name>/reference.safetensors holds what diffusers/transformers compute (float32) and
<name>/reference.json the prompts and settings:
  umt5_ids [P, L] i32 (the third prompt shorter than L), umt5_mask [P, L] i32, umt5_hidden [P, L, 32]  (last_hidden_state with the
      attention mask, as the pipeline calls it), umt5_embeds [P, L, 32] (what the pipeline passes
      on: positions past the prompt zeroed)
  xf_hidden_in [1, C, T, H, W], xf_timestep [1] or [1, seq], xf_text_in [1, L, 32], xf_out
      (transformer; and xf2_* for transformer_2)
  vae_decode_in [1, z, 3, h, w] -> vae_decode_out [1, 3, 9, 32, 32]  (clamped to [-1, 1], as _decode does)
  vae_encode_in [1, 3, 9, 32, 32] -> vae_encode_mean (latent_dist.mode())
  sched_sigmas [steps + 1], sched_timesteps [steps]
  <run>_noise, <run>_step<i> (latents after scheduler step i), <run>_frames [F, H, W, 3] in
      [0, 1] (output_type "np"), and for image runs <run>_image_in [1, 3, H, W] in [-1, 1]
      (the preprocessed image)
  resize_out [1, 3, 32, 32]: VideoProcessor.preprocess of resize_input.png (50x38, so Pillow's
      Lanczos resize runs both ways) at 32x32, as an I2V request of another size is prepared
      (i2v_a14b only)

vae_wide/{wan22,wan21}/vae and vae_wide/reference.safetensors: two wider VAEs alone (see
generate_wide_vaes), <name>_decode_in [1, 8, 4, 2, 3] -> <name>_decode_out [1, 3, 13, H, W] and
<name>_encode_in [1, 3, 13, H, W] -> <name>_encode_mean.

Install: the pins of scripts/golden/requirements.txt, then
    pip install --no-deps -r scripts/golden/requirements-diffusion.txt \
        -r scripts/golden/requirements-wan.txt
Regenerate (deterministic on CPU; overwrites tests/golden/fixtures/wan/):
    python scripts/golden/gen_wan_fixtures.py
"""
import json
import shutil
import sys
from pathlib import Path

import diffusers
import numpy as np
import torch
import transformers
from diffusers import (AutoencoderKLWan, UniPCMultistepScheduler, WanImageToVideoPipeline,
                       WanPipeline, WanTransformer3DModel)
from PIL import Image
from safetensors.torch import save_file
from transformers import T5TokenizerFast, UMT5Config, UMT5EncoderModel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_flux_fixtures import CORPUS, train_t5_unigram  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "golden" / "fixtures" / "wan"

PROMPTS = [
    "a photograph of an astronaut riding a horse",
    "A Cat wearing a small hat, studio lighting!",
    "a cat",  # shorter than MAX_LEN: the attention mask and the zeroed rows
]
NEGATIVE_PROMPT = "blurry, low quality, watermark"
MAX_LEN = 16
NUM_FRAMES = 9
STEPS = 4


def make_tokenizer():
    return T5TokenizerFast(vocab=train_t5_unigram(CORPUS, 180), extra_ids=0,
                           model_max_length=MAX_LEN)


def make_text_encoder(tok):
    torch.manual_seed(0)
    # UMT5: every layer has its own relative-position bias (T5 has it in the first only).
    te = UMT5EncoderModel(UMT5Config(
        vocab_size=len(tok), d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4,
        relative_attention_num_buckets=8, relative_attention_max_distance=20,
        feed_forward_proj="gated-gelu", layer_norm_epsilon=1e-6, pad_token_id=0,
        eos_token_id=1, decoder_start_token_id=0))
    randomize_norms(te, 99)
    return te


def randomize_norms(module, seed):
    """Norm weights start at 1 and biases at 0, which would let a mistake in applying them
    pass: draw them around those values instead."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "norm" in name:
                base = 1.0 if name.endswith("weight") else 0.0
                p.copy_(base + 0.2 * torch.randn(p.shape, generator=g))


def make_transformer(seed, in_channels, out_channels):
    torch.manual_seed(seed)
    t = WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12,
        in_channels=in_channels, out_channels=out_channels, text_dim=32, freq_dim=256,
        ffn_dim=32, num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
        rope_max_seq_len=32)
    randomize_norms(t, 100 + seed)
    return t


def make_vae(z_dim, residual):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(5)
    mean = (torch.randn(z_dim, generator=g) * 0.5).tolist()
    std = (torch.rand(z_dim, generator=g) * 2 + 0.5).tolist()
    if residual:  # Wan2.2's VAE (TI2V-5B): patchified input, residual up/down blocks
        return AutoencoderKLWan(
            base_dim=3, z_dim=z_dim, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
            temperal_downsample=[False, True, True], latents_mean=mean, latents_std=std,
            is_residual=True, in_channels=12, out_channels=12, patch_size=2,
            scale_factor_temporal=4, scale_factor_spatial=16)
    return AutoencoderKLWan(
        base_dim=3, z_dim=z_dim, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
        temperal_downsample=[False, True, True], latents_mean=mean, latents_std=std)


def make_scheduler(flow_shift):
    # Wan2.2's scheduler_config.json, with the flow shift of the model.
    return UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True,
                                   num_train_timesteps=1000, flow_shift=flow_shift)


def build(kind, work):
    tok = make_tokenizer()
    te = make_text_encoder(tok)
    if kind == "t2v_a14b":
        pipe = WanPipeline(
            tokenizer=tok, text_encoder=te, vae=make_vae(16, False),
            scheduler=make_scheduler(3.0), transformer=make_transformer(0, 16, 16),
            transformer_2=make_transformer(1, 16, 16), boundary_ratio=0.875)
        cls = WanPipeline
    elif kind == "ti2v_5b":
        pipe = WanPipeline(
            tokenizer=tok, text_encoder=te, vae=make_vae(48, True),
            scheduler=make_scheduler(5.0), transformer=make_transformer(0, 48, 48),
            expand_timesteps=True)
        cls = WanPipeline
    else:
        pipe = WanImageToVideoPipeline(
            tokenizer=tok, text_encoder=te, vae=make_vae(16, False),
            scheduler=make_scheduler(5.0), transformer=make_transformer(0, 36, 16),
            transformer_2=make_transformer(1, 36, 16), boundary_ratio=0.9)
        cls = WanImageToVideoPipeline
    pipe.save_pretrained(work, safe_serialization=True)
    # Reload so that the references come from exactly what the C++ side reads.
    return cls.from_pretrained(work, torch_dtype=torch.float32)


def text_refs(pipe, ref):
    from diffusers.pipelines.wan.pipeline_wan import prompt_clean
    cleaned = [prompt_clean(p) for p in PROMPTS]
    t = pipe.tokenizer(cleaned, padding="max_length", max_length=MAX_LEN, truncation=True,
                       add_special_tokens=True, return_attention_mask=True, return_tensors="pt")
    ref["umt5_ids"] = t.input_ids.to(torch.int32)
    ref["umt5_mask"] = t.attention_mask.to(torch.int32)
    ref["umt5_hidden"] = pipe.text_encoder(t.input_ids, t.attention_mask).last_hidden_state
    ref["umt5_embeds"] = pipe._get_t5_prompt_embeds(PROMPTS, max_sequence_length=MAX_LEN)


def transformer_refs(pipe, ref, info, size):
    g = torch.Generator().manual_seed(1)
    vae_s = pipe.vae_scale_factor_spatial
    t_lat = (NUM_FRAMES - 1) // pipe.vae_scale_factor_temporal + 1
    shape = (1, pipe.transformer.config.in_channels, t_lat, size // vae_s, size // vae_s)
    hidden = torch.randn(*shape, generator=g)
    text = torch.randn(1, MAX_LEN, 32, generator=g)
    if pipe.config.expand_timesteps:
        seq = t_lat * (size // vae_s // 2) ** 2
        # The image-conditioned TI2V run gives the first frame's tokens timestep 0.
        timestep = torch.full((1, seq), 700.0)
        timestep[0, : seq // t_lat] = 0.0
    else:
        timestep = torch.tensor([700.0])
    ref.update(xf_hidden_in=hidden, xf_timestep=timestep, xf_text_in=text)
    ref["xf_out"] = pipe.transformer(hidden_states=hidden, timestep=timestep,
                                     encoder_hidden_states=text, return_dict=False)[0]
    if pipe.transformer_2 is not None:
        ref["xf2_out"] = pipe.transformer_2(hidden_states=hidden, timestep=timestep,
                                            encoder_hidden_states=text, return_dict=False)[0]
    info["transformer"] = dict(timestep_shape=list(timestep.shape))


def vae_refs(pipe, ref, size=32):
    g = torch.Generator().manual_seed(2)
    vae = pipe.vae
    t_lat = (NUM_FRAMES - 1) // pipe.vae_scale_factor_temporal + 1
    s = size // pipe.vae_scale_factor_spatial
    z = torch.randn(1, vae.config.z_dim, t_lat, s, s, generator=g)
    ref["vae_decode_in"] = z
    ref["vae_decode_out"] = vae.decode(z, return_dict=False)[0]
    x = torch.rand(1, 3, NUM_FRAMES, size, size, generator=g) * 2 - 1
    ref["vae_encode_in"] = x
    ref["vae_encode_mean"] = vae.encode(x).latent_dist.mode()


def scheduler_refs(pipe, ref):
    pipe.scheduler.set_timesteps(STEPS)
    ref["sched_sigmas"] = pipe.scheduler.sigmas.to(torch.float32).clone()
    ref["sched_timesteps"] = pipe.scheduler.timesteps.to(torch.float32).clone()


def test_image(size):
    """A smooth deterministic picture with edges: the I2V input, saved as a PNG beside it."""
    y, x = np.mgrid[0:size, 0:size] / (size - 1)
    rgb = np.stack([x, y, 0.5 + 0.5 * np.sin(6 * x * y)], axis=-1)
    rgb[size // 4: size // 2, size // 4: size // 2] = [0.9, 0.2, 0.1]
    return Image.fromarray((rgb * 255).round().astype(np.uint8))


def pipeline_run(pipe, ref, info, name, size, image=None, **kw):
    g = torch.Generator().manual_seed(3)
    t_lat = (NUM_FRAMES - 1) // pipe.vae_scale_factor_temporal + 1
    s = size // pipe.vae_scale_factor_spatial
    noise = torch.randn(1, pipe.vae.config.z_dim, t_lat, s, s, generator=g)
    steps = []

    def keep(p, i, t, kwargs):
        steps.append(kwargs["latents"].clone())
        return {}

    args = dict(prompt=PROMPTS[0], negative_prompt=NEGATIVE_PROMPT, height=size, width=size,
                num_frames=NUM_FRAMES, num_inference_steps=STEPS, latents=noise.clone(),
                max_sequence_length=MAX_LEN, output_type="np", callback_on_step_end=keep, **kw)
    if image is not None:
        image.save(OUT_DIR / name.split("/")[0] / f"{name.split('/')[1]}_input.png")
        args["image"] = image
        ref[f"{name.split('/')[1]}_image_in"] = pipe.video_processor.preprocess(
            image, height=size, width=size)
    frames = torch.from_numpy(pipe(**args).frames[0]).to(torch.float32)
    run = name.split("/")[1]
    ref[f"{run}_noise"] = noise
    for i, st in enumerate(steps):
        ref[f"{run}_step{i}"] = st
    ref[f"{run}_frames"] = frames
    info[run] = dict({k: v for k, v in kw.items()}, prompt=PROMPTS[0],
                     negative_prompt=NEGATIVE_PROMPT, height=size, width=size,
                     num_frames=NUM_FRAMES, num_inference_steps=STEPS,
                     max_sequence_length=MAX_LEN, image=image is not None)


def generate(kind, size, runs):
    out = OUT_DIR / kind
    work = out / "pipeline"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    pipe = build(kind, work)
    ref, info = {}, dict(prompts=PROMPTS, max_sequence_length=MAX_LEN, num_frames=NUM_FRAMES,
                         size=size, steps=STEPS)
    with torch.no_grad():
        text_refs(pipe, ref)
        transformer_refs(pipe, ref, info, size)
        vae_refs(pipe, ref)
    scheduler_refs(pipe, ref)
    boundary = pipe.config.boundary_ratio
    info["boundary_timestep"] = None if boundary is None else boundary * 1000
    if kind == "i2v_a14b":
        img = test_image(64).resize((50, 38), Image.BICUBIC)
        img.save(out / "resize_input.png")
        ref["resize_out"] = pipe.video_processor.preprocess(img, height=32, width=32)
    for run, image_run, kw in runs:
        p = pipe
        if image_run and not isinstance(pipe, WanImageToVideoPipeline):
            p = WanImageToVideoPipeline.from_pretrained(work, torch_dtype=torch.float32)
        pipeline_run(p, ref, info, f"{kind}/{run}", size,
                     image=test_image(size) if image_run else None, **kw)
    ref = {k: v.contiguous() for k, v in ref.items()}
    save_file(ref, out / "reference.safetensors")
    info["versions"] = dict(torch=torch.__version__, diffusers=diffusers.__version__,
                            transformers=transformers.__version__)
    (out / "reference.json").write_text(json.dumps(info, indent=1) + "\n")


def generate_wide_vaes():
    """VAEs with more than one channel per group, so that the order of the channels that
    Wan2.2's AvgDown3D / DupUp3D shortcuts fold and unfold is checked (the pipelines' VAEs have
    3 channels a level, where every order gives the same numbers), with norm gains and biases
    off 1 and 0, the time downsampling in other levels and a non-square latent grid."""
    out = OUT_DIR / "vae_wide"
    shutil.rmtree(out, ignore_errors=True)
    ref = {}
    for name, kw in [
        ("wan22", dict(base_dim=4, decoder_base_dim=6, z_dim=8, dim_mult=[1, 2, 2, 2],
                       num_res_blocks=1, temperal_downsample=[True, True, False],
                       is_residual=True, in_channels=12, out_channels=12, patch_size=2,
                       scale_factor_temporal=4, scale_factor_spatial=16)),
        ("wan21", dict(base_dim=4, z_dim=8, dim_mult=[1, 2, 2, 2], num_res_blocks=1,
                       temperal_downsample=[False, True, True])),
    ]:
        torch.manual_seed(0)
        vae = AutoencoderKLWan(latents_mean=[0.0] * 8, latents_std=[1.0] * 8, **kw)
        g = torch.Generator().manual_seed(7)
        with torch.no_grad():
            for pname, p in vae.named_parameters():
                if "norm" in pname or pname.endswith("bias"):
                    base = 1.0 if pname.endswith(("weight", "gamma")) else 0.0
                    p.copy_(base + 0.2 * torch.randn(p.shape, generator=g))
        vae.save_pretrained(out / name / "vae", safe_serialization=True)
        vae = AutoencoderKLWan.from_pretrained(out / name / "vae")
        s = vae.config.scale_factor_spatial
        z = torch.randn(1, 8, 4, 2, 3, generator=g)
        x = torch.rand(1, 3, 13, 2 * s, 3 * s, generator=g) * 2 - 1
        with torch.no_grad():
            ref[f"{name}_decode_in"] = z
            ref[f"{name}_decode_out"] = vae.decode(z, return_dict=False)[0]
            ref[f"{name}_encode_in"] = x
            ref[f"{name}_encode_mean"] = vae.encode(x).latent_dist.mode()
    save_file({k: v.contiguous() for k, v in ref.items()}, out / "reference.safetensors")


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    generate("t2v_a14b", 32, [("t2v", False, dict(guidance_scale=5.0, guidance_scale_2=4.0))])
    generate("ti2v_5b", 64, [("t2v", False, dict(guidance_scale=5.0)),
                             ("i2v", True, dict(guidance_scale=5.0))])
    generate("i2v_a14b", 32, [("i2v", True, dict(guidance_scale=5.0, guidance_scale_2=3.0))])
    generate_wide_vaes()


if __name__ == "__main__":
    main()
