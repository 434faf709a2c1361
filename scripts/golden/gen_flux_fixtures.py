#!/usr/bin/env python3
"""Generates the FLUX.1 reference fixtures in tests/golden/fixtures/flux/.

tiny_pipeline/ is a random-init FluxPipeline saved by diffusers as an ordinary pipeline
directory (model_index.json, transformer/, text_encoder/, text_encoder_2/, tokenizer/,
tokenizer_2/, vae/, scheduler/), at the shapes diffusers' own FLUX tests use
(tests/pipelines/flux/test_pipeline_flux.py: transformer inner dim 32 = 2 heads x 16, one
double-stream and one single-stream block, RoPE axes 4+4+8, joint/pooled dim 32; CLIP text
encoder hidden 32, 5 layers, 4 heads, intermediate 37), with two departures that make the
fixture exercise more of the code: the VAE has two levels (block_out_channels 8, 16, four
latent channels, GroupNorm with 4 groups) so that its up/down-sampling and multi-group norms
run, hence the transformer takes 16 = 4 x 2 x 2 packed input channels; and the T5 encoder is
built here (T5 v1.1 as FLUX uses it: gated-GELU, relative position buckets) instead of
downloaded.

The tokenizers are trained here on the small corpus below: CLIP's byte-level BPE with its
"</w>" end-of-word marks (vocab.json + merges.txt) and T5's SentencePiece Unigram (a
tokenizer.json with the scores), since nothing can be downloaded from the Hub.

reference.safetensors holds what diffusers/transformers compute (float32), reference.json the
prompts and settings that produced it:
  clip_ids [P, 77] i32, clip_hidden [P, 77, 32], clip_pooled [P, 32]
  t5_ids [P, 32] i32, t5_hidden [P, 32, 32]
  xf_hidden_in [1, 64, 16], xf_encoder_in [1, 8, 32], xf_pooled_in [1, 32], xf_img_ids [64, 3],
  xf_txt_ids [8, 3], xf_out [1, 64, 16]   (timestep and guidance in reference.json)
  sched_<steps>_<seq>_sigmas / _timesteps                     FlowMatchEulerDiscrete + dynamic shift
  vae_decode_in [1, 4, 16, 16] -> vae_decode_out [1, 3, 32, 32]
  vae_encode_in [1, 3, 32, 32] -> vae_encode_mean [1, 4, 16, 16] (latent_dist.mean)
  <run>_noise [1, 64, 16]  the packed initial noise, an input to both sides
  <run>_step<i> [1, 64, 16] latents after scheduler step i
  <run>_image [1, 32, 32, 3] the decoded image in [0, 1] (output_type="np"); <run>.png
for the runs "dev" (guidance embedding 3.5, one forward per step) and "cfg" (the same plus a
negative prompt and true_cfg_scale 4: two branches per step). reference.json also holds
"compare_dev_cfg": PSNR, max error and SSIM (pytorch_msssim) of dev.png against cfg.png.

Install: the pins of scripts/golden/requirements.txt, then
    pip install --no-deps -r scripts/golden/requirements-diffusion.txt
Regenerate (deterministic on CPU; overwrites tests/golden/fixtures/flux/):
    python scripts/golden/gen_flux_fixtures.py
"""

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import diffusers
import numpy as np
import torch
import transformers
from diffusers import (AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline,
                       FluxTransformer2DModel)
from diffusers.pipelines.flux.pipeline_flux import calculate_shift, retrieve_timesteps
from safetensors.torch import save_file
from tokenizers import Tokenizer
from tokenizers.models import Unigram
from tokenizers.pre_tokenizers import Metaspace
from tokenizers.trainers import UnigramTrainer
from transformers import (CLIPTextConfig, CLIPTextModel, CLIPTokenizer, T5Config, T5EncoderModel,
                          T5TokenizerFast)

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "golden" / "fixtures" / "flux"

CORPUS = """\
a photograph of an astronaut riding a horse on the moon
a red fox sitting in the snow at sunrise, highly detailed
an oil painting of a lighthouse on a cliff above a stormy sea
a cat wearing a small hat, studio lighting, 35mm photo
the city skyline at night with neon lights reflected in the rain
a bowl of ramen with an egg and green onions on a wooden table
watercolor landscape of mountains, lakes and a small cabin in the forest
a robot reading a book in a library full of old books
close-up portrait of an old man with a white beard, black and white
a cup of coffee on a desk next to a laptop and a notebook
blurry, low quality, distorted, ugly, watermark, text, jpeg artifacts
children playing football in a park on a sunny afternoon
a futuristic car driving through the desert under two suns
a plate of fresh fruit: apples, oranges, grapes and bananas
"""

PROMPTS = [
    "a photograph of an astronaut riding a horse",
    "A Cat wearing a small hat, studio lighting!",
    "watercolor mountains and a lake at sunrise 2024",
]
NEGATIVE_PROMPT = "blurry, low quality, watermark"
T5_MAX_LEN = 32
HEIGHT = WIDTH = 32
STEPS = 4


def bytes_to_unicode():
    """CLIP's (and GPT-2's) reversible byte -> printable character map."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def train_clip_bpe(corpus, vocab_size):
    """Byte-level BPE in CLIP's vocabulary order: 256 bytes, the same with "</w>", then one
    entry per merge, then <|startoftext|> and <|endoftext|>."""
    b2u = bytes_to_unicode()
    chars = list(b2u.values())
    pat = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d|[a-z]+|[0-9]|[^\sa-z0-9]+")
    words = Counter()
    for w in pat.findall(" ".join(corpus.lower().split())):
        sym = [b2u[b] for b in w.encode("utf-8")]
        sym[-1] += "</w>"
        words[tuple(sym)] += 1
    vocab = chars + [c + "</w>" for c in chars]
    merges = []
    while len(vocab) < vocab_size - 2:
        pairs = Counter()
        for w, n in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        best, count = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        if count < 2:
            break
        merges.append(best)
        vocab.append(best[0] + best[1])
        merged = Counter()
        for w, n in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += n
        words = merged
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    return {tok: i for i, tok in enumerate(vocab)}, merges


def train_t5_unigram(corpus, vocab_size):
    """A SentencePiece Unigram vocabulary (piece, log-probability) with T5's special ids:
    <pad> 0, </s> 1, <unk> 2."""
    tok = Tokenizer(Unigram())
    tok.pre_tokenizer = Metaspace()
    trainer = UnigramTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "</s>", "<unk>"],
                             unk_token="<unk>", show_progress=False)
    tok.train_from_iterator(corpus.splitlines(), trainer)
    vocab = json.loads(tok.to_str())["model"]["vocab"]
    # The trainer's EM runs threaded: its scores vary in the last bits and tied pieces swap
    # places between runs. Rounded scores and a fixed order (specials first, then by score and
    # piece) make the fixture regenerate byte for byte.
    special, rest = vocab[:3], vocab[3:]
    rest = sorted(((p, round(float(s), 6)) for p, s in rest), key=lambda ps: (-ps[1], ps[0]))
    return [(p, float(s)) for p, s in special] + rest


def build_pipeline(work):
    vocab, merges = train_clip_bpe(CORPUS, 1000)
    clip_tok = CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=77)
    t5_tok = T5TokenizerFast(vocab=train_t5_unigram(CORPUS, 180), extra_ids=0,
                             model_max_length=T5_MAX_LEN)

    torch.manual_seed(0)
    transformer = FluxTransformer2DModel(
        patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32,
        guidance_embeds=True, axes_dims_rope=[4, 4, 8])
    torch.manual_seed(0)
    clip = CLIPTextModel(CLIPTextConfig(
        bos_token_id=vocab["<|startoftext|>"], eos_token_id=vocab["<|endoftext|>"],
        pad_token_id=vocab["<|endoftext|>"], hidden_size=32, intermediate_size=37,
        layer_norm_eps=1e-05, num_attention_heads=4, num_hidden_layers=5, vocab_size=1000,
        hidden_act="quick_gelu", projection_dim=32, max_position_embeddings=77))
    torch.manual_seed(0)
    t5 = T5EncoderModel(T5Config(
        vocab_size=len(t5_tok), d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4,
        relative_attention_num_buckets=8, relative_attention_max_distance=20,
        feed_forward_proj="gated-gelu", dense_act_fn="gelu_new", is_gated_act=True,
        layer_norm_epsilon=1e-6, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0))
    torch.manual_seed(0)
    vae = AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16), layers_per_block=1,
        latent_channels=4, norm_num_groups=4, sample_size=32, use_quant_conv=False,
        use_post_quant_conv=False, shift_factor=0.0609, scaling_factor=1.5035)
    # FLUX.1-dev's scheduler_config.json.
    scheduler = FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True, base_shift=0.5,
        max_shift=1.15, base_image_seq_len=256, max_image_seq_len=4096)
    pipe = FluxPipeline(scheduler=scheduler, vae=vae, text_encoder=clip, tokenizer=clip_tok,
                        text_encoder_2=t5, tokenizer_2=t5_tok, transformer=transformer)
    pipe.save_pretrained(work, safe_serialization=True)
    # Reload so that the references come from exactly what the C++ side reads.
    return FluxPipeline.from_pretrained(work, torch_dtype=torch.float32)


def text_refs(pipe, ref):
    ids = pipe.tokenizer(PROMPTS, padding="max_length", max_length=77, truncation=True,
                         return_tensors="pt").input_ids
    out = pipe.text_encoder(ids, output_hidden_states=False)
    ref["clip_ids"] = ids.to(torch.int32)
    ref["clip_hidden"] = out.last_hidden_state
    ref["clip_pooled"] = out.pooler_output
    ids = pipe.tokenizer_2(PROMPTS, padding="max_length", max_length=T5_MAX_LEN, truncation=True,
                           return_tensors="pt").input_ids
    ref["t5_ids"] = ids.to(torch.int32)
    ref["t5_hidden"] = pipe.text_encoder_2(ids).last_hidden_state


def transformer_refs(pipe, ref, info):
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(1, 64, 16, generator=g)
    encoder = torch.randn(1, 8, 32, generator=g)
    pooled = torch.randn(1, 32, generator=g)
    img_ids = FluxPipeline._prepare_latent_image_ids(1, 8, 8, "cpu", torch.float32)
    txt_ids = torch.zeros(8, 3)
    timestep, guidance = 0.7, 3.5
    out = pipe.transformer(hidden_states=hidden, encoder_hidden_states=encoder,
                           pooled_projections=pooled, timestep=torch.tensor([timestep]),
                           guidance=torch.tensor([guidance]), img_ids=img_ids, txt_ids=txt_ids,
                           return_dict=False)[0]
    ref.update(xf_hidden_in=hidden, xf_encoder_in=encoder, xf_pooled_in=pooled,
               xf_img_ids=img_ids, xf_txt_ids=txt_ids, xf_out=out)
    info["transformer"] = dict(timestep=timestep, guidance=guidance)


def scheduler_refs(pipe, ref, info):
    cases = []
    cfg = pipe.scheduler.config
    for steps, seq in [(4, 64), (28, 4096), (50, 1024), (1, 256)]:
        sched = FlowMatchEulerDiscreteScheduler.from_config(cfg)
        sigmas = np.linspace(1.0, 1 / steps, steps)
        mu = calculate_shift(seq, cfg.base_image_seq_len, cfg.max_image_seq_len, cfg.base_shift,
                             cfg.max_shift)
        timesteps, _ = retrieve_timesteps(sched, steps, "cpu", sigmas=sigmas, mu=mu)
        ref[f"sched_{steps}_{seq}_sigmas"] = sched.sigmas.to(torch.float32)
        ref[f"sched_{steps}_{seq}_timesteps"] = timesteps.to(torch.float32)
        cases.append(dict(steps=steps, image_seq_len=seq, mu=mu))
    info["scheduler"] = cases


def vae_refs(pipe, ref):
    g = torch.Generator().manual_seed(2)
    z = torch.randn(1, 4, 16, 16, generator=g)
    ref["vae_decode_in"] = z
    ref["vae_decode_out"] = pipe.vae.decode(z, return_dict=False)[0]
    x = torch.rand(1, 3, 32, 32, generator=g) * 2 - 1
    ref["vae_encode_in"] = x
    ref["vae_encode_mean"] = pipe.vae.encode(x).latent_dist.mean


def pipeline_run(pipe, ref, info, name, **kw):
    g = torch.Generator().manual_seed(3 if name == "dev" else 4)
    # Packed latents [1, (H/16)*(W/16), 16] as FluxPipeline.prepare_latents makes them.
    noise = pipe._pack_latents(torch.randn(1, 4, 16, 16, generator=g), 1, 4, 16, 16)
    steps = []

    def keep(p, i, t, kwargs):
        steps.append(kwargs["latents"].clone())
        return {}

    out = pipe(height=HEIGHT, width=WIDTH, num_inference_steps=STEPS, latents=noise.clone(),
               max_sequence_length=T5_MAX_LEN, output_type="np", callback_on_step_end=keep, **kw)
    image = torch.from_numpy(out.images).to(torch.float32)
    ref[f"{name}_noise"] = noise
    for i, s in enumerate(steps):
        ref[f"{name}_step{i}"] = s
    ref[f"{name}_image"] = image
    pipe.numpy_to_pil(out.images)[0].save(OUT_DIR / f"{name}.png")
    info[name] = dict(kw, height=HEIGHT, width=WIDTH, num_inference_steps=STEPS,
                      max_sequence_length=T5_MAX_LEN)


def metrics_refs(info):
    """What compare-images must report for diffusers' two PNGs (dev vs cfg): PSNR and max
    error on uint8, SSIM by pytorch_msssim (Wang et al.'s 11x11 Gaussian window, sigma 1.5,
    valid windows, channel mean, data_range 255)."""
    from PIL import Image
    from pytorch_msssim import ssim

    a, b = (np.asarray(Image.open(OUT_DIR / f"{n}.png").convert("RGB"), dtype=np.float64)
            for n in ("dev", "cfg"))
    mse = float(((a - b) ** 2).mean())
    ta, tb = (torch.from_numpy(x).permute(2, 0, 1)[None].float() for x in (a, b))
    info["compare_dev_cfg"] = dict(
        psnr_db=10 * np.log10(255.0 ** 2 / mse), max_abs_error=int(np.abs(a - b).max()),
        ssim=float(ssim(ta, tb, data_range=255, size_average=True)))


def main():
    torch.set_num_threads(1)
    # Everything but the hand-written README is regenerated.
    if OUT_DIR.exists():
        for p in OUT_DIR.iterdir():
            if p.name != "README.md":
                shutil.rmtree(p) if p.is_dir() else p.unlink()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    pipe_dir = OUT_DIR / "tiny_pipeline"
    pipe = build_pipeline(pipe_dir)
    ref, info = {}, {}
    with torch.no_grad():
        text_refs(pipe, ref)
        transformer_refs(pipe, ref, info)
        scheduler_refs(pipe, ref, info)
        vae_refs(pipe, ref)
        pipeline_run(pipe, ref, info, "dev", prompt=PROMPTS[0], guidance_scale=3.5)
        pipeline_run(pipe, ref, info, "cfg", prompt=PROMPTS[0], guidance_scale=3.5,
                     negative_prompt=NEGATIVE_PROMPT, true_cfg_scale=4.0)
    metrics_refs(info)
    save_file({k: v.contiguous() for k, v in ref.items()}, OUT_DIR / "reference.safetensors")
    info["prompts"] = PROMPTS
    info["versions"] = dict(torch=torch.__version__, transformers=transformers.__version__,
                            diffusers=diffusers.__version__)
    (OUT_DIR / "reference.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
