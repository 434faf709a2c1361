#!/usr/bin/env python3
"""Generates the Qwen2.5-VL reference fixture in tests/golden/fixtures/vl/.

qwen2_5_vl/ is a random-init transformers Qwen2_5_VLForConditionalGeneration saved by
save_pretrained (transformers 5 nests the decoder's fields under text_config; the real hub
checkpoints keep them at the top level: the loader reads both): a Qwen2 decoder (hidden 64, 2
layers, 4 heads over 2 KV heads, q/k/v biases, M-RoPE with mrope_section [2, 3, 3] over
head_dim 16) and a vision tower (depth 2, hidden 32, 2 heads, patch 14, temporal patch 2,
spatial merge 2, window 56 px with block 1 of full attention, output 64). Weights are drawn
as gen_hf_fixtures.py draws them (decisive argmax).

reference.safetensors (float32 unless noted), for three prompts, "text" (text only),
"image" (one image of 4 x 6 patches: 6 merged tokens) and "two_images" (that image and one of
8 x 4 patches: 8 tokens):
  <case>_ids [n] i32              the prompt (<|vision_start|> <|image_pad|> x k <|vision_end|>)
  <case>_positions [3, n] i32     transformers' get_rope_index (temporal, height, width)
  <case>_rope_delta [1] i32       what decode adds to the cache length
  <case>_image_embeds [k, 64]     the vision tower's merged output for the prompt's images
                                  (pooler_output), in prompt order
  <case>_logits [n, vocab]        logits of every prompt position
  <case>_greedy [g] i32           greedy tokens, one step at a time over the KV cache
  <case>_greedy_logits [g, vocab] the logits that chose them
  image<i>_pixel_values [p, 1176], image<i>_grid_thw [3] i32: the vision tower's inputs
  (random pixel values: the image processor has its own fixture)

Install: the pins of scripts/golden/requirements.txt. Regenerate (deterministic on CPU):
    python scripts/golden/gen_vl_fixtures.py
"""

import json
import math
import shutil
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

OUT = Path(__file__).resolve().parents[2] / "tests/golden/fixtures/vl"
VOCAB = 300
VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = 288, 289, 290, 291
N_GREEDY = 6


def reinit(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("ln_q.weight") or \
                    name.endswith("norm1.weight") or name.endswith("norm2.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            else:
                fan_in = p[0].numel() if p.dim() > 2 else p.shape[-1]
                p.copy_(1.5 / math.sqrt(fan_in) * torch.randn(p.shape, generator=gen))


def prompt_ids(texts, images):
    """Text ids and images interleaved: texts[0] img0 texts[1] img1 ... texts[-1]."""
    ids = []
    for i, t in enumerate(texts):
        ids += t
        if i < len(images):
            ids += [VISION_START] + [IMAGE_PAD] * images[i] + [VISION_END]
    return ids


@torch.no_grad()
def greedy(model, ids, pixel_values, grids, types):
    """One token per step over the cache, as an engine decodes."""
    kwargs = {}
    if pixel_values is not None:
        kwargs = dict(pixel_values=pixel_values, image_grid_thw=grids)
    out = model(input_ids=ids, mm_token_type_ids=types, use_cache=True, **kwargs)
    past, logits = out.past_key_values, [out.logits[0, -1]]
    toks = [int(logits[-1].argmax())]
    for _ in range(N_GREEDY - 1):
        nxt = torch.tensor([[toks[-1]]])
        out = model(input_ids=nxt, past_key_values=past, use_cache=True,
                    mm_token_type_ids=torch.zeros_like(nxt, dtype=torch.int32))
        past = out.past_key_values
        logits.append(out.logits[0, -1])
        toks.append(int(logits[-1].argmax()))
    return toks, torch.stack(logits)


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    config = Qwen2_5_VLConfig(
        text_config=dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, rms_norm_eps=1e-6, bos_token_id=1,
                         eos_token_id=2, rope_scaling={"type": "mrope",
                                                       "mrope_section": [2, 3, 3]},
                         rope_theta=10000.0, tie_word_embeddings=False),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=2,
                           out_hidden_size=64, patch_size=14, spatial_merge_size=2,
                           temporal_patch_size=2, window_size=56, fullatt_block_indexes=[1],
                           in_channels=3),
        image_token_id=IMAGE_PAD, video_token_id=VIDEO_PAD, vision_start_token_id=VISION_START,
        vision_end_token_id=VISION_END, tie_word_embeddings=False)
    config._attn_implementation = "eager"
    model = Qwen2_5_VLForConditionalGeneration(config).eval()
    reinit(model, gen)
    model_dir = OUT / "qwen2_5_vl"
    if model_dir.exists():
        shutil.rmtree(model_dir)
    model.save_pretrained(model_dir)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager").eval()

    grids = [torch.tensor([1, 4, 6]), torch.tensor([1, 8, 4])]
    pixels = [torch.randn(int(g.prod()), 3 * 2 * 14 * 14, generator=gen) for g in grids]
    ref, meta = {}, {"transformers": transformers.__version__, "torch": torch.__version__}
    for i, (g, pv) in enumerate(zip(grids, pixels)):
        ref[f"image{i}_pixel_values"] = pv
        ref[f"image{i}_grid_thw"] = g.to(torch.int32)
    cases = {
        "text": ([[1, 17, 42, 99, 7, 123, 250]], []),
        "image": ([[1, 17, 42], [99, 7, 123]], [0]),
        "two_images": ([[1, 17], [42, 99], [7, 123, 55]], [0, 1]),
    }
    for case, (texts, which) in cases.items():
        counts = [int(grids[w].prod()) // 4 for w in which]
        ids = torch.tensor([prompt_ids(texts, counts)])
        types = (ids == IMAGE_PAD).to(torch.int32)
        pv = torch.cat([pixels[w] for w in which]) if which else None
        gt = torch.stack([grids[w] for w in which]) if which else None
        with torch.no_grad():
            pos, delta = model.model.get_rope_index(ids, types, image_grid_thw=gt)
            kwargs = dict(pixel_values=pv, image_grid_thw=gt) if which else {}
            logits = model(input_ids=ids, mm_token_type_ids=types, **kwargs).logits[0]
            if which:
                embeds = model.model.visual(pv, grid_thw=gt).pooler_output
                ref[f"{case}_image_embeds"] = embeds.contiguous()
        toks, glogits = greedy(model, ids, pv, gt, types)
        ref[f"{case}_ids"] = ids[0].to(torch.int32)
        ref[f"{case}_positions"] = pos[:, 0].to(torch.int32).contiguous()
        ref[f"{case}_rope_delta"] = delta.reshape(1).to(torch.int32)
        ref[f"{case}_logits"] = logits.contiguous()
        ref[f"{case}_greedy"] = torch.tensor(toks, dtype=torch.int32)
        ref[f"{case}_greedy_logits"] = glogits.contiguous()
        top2 = glogits.topk(2, dim=-1).values
        meta[case] = {"ids": ids[0].tolist(), "greedy": toks,
                      "rope_delta": int(delta.reshape(-1)[0]),
                      "greedy_min_top2_margin": float((top2[:, 0] - top2[:, 1]).min())}
        print(case, meta[case])
    save_file(ref, OUT / "reference.safetensors")
    (OUT / "reference.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
