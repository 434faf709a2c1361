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

qwen2_5_vl/ also holds what a served checkpoint has beside its weights: tokenizer.json (byte-level
BPE over the 256 bytes, no merges, Qwen2.5-VL's added tokens from id 256, the vision ones at
the config's 288-291), tokenizer_config.json with Qwen2.5-VL-Instruct's chat template,
preprocessor_config.json (Qwen2VLImageProcessor, min/max pixels small enough that the test
images take a few placeholders) and generation_config.json (Qwen2.5-VL's EOS ids).

video_reference.safetensors (and video_reference.json: ids, greedy tokens, delta and the
smallest top-2 logit margin of the greedy steps), for two prompts with a video of 3 x 4 x 2
patches (t x h x w: 3 frames of 2 merged tokens), "video" (that video, one temporal patch every
0.5 s, so 2 position ticks apart at the config's tokens_per_second of 4, and the text after it
resuming at its start + max(h, w) / merge, inside the video's temporal span) and "image_video"
(image 0, then the video at 0.75 s a temporal patch: 3 ticks apart), the same keys as above
(<case>_image_embeds for an image, <case>_video_embeds for the video) and
  video0_pixel_values [24, 1176], video0_grid_thw [3] i32   the tower's inputs
  <case>_second_per_grid [1]        second_per_grid_ts, as get_rope_index and forward take it

chat_reference.json / chat_reference.safetensors: transformers' processor and model end to end
on chat messages holding chat_image_a.png (60 x 40) and chat_image_b.png (30 x 70):
apply_chat_template's text, the processor's ids (each <|image_pad|> expanded to the grid's
tokens), pixel_values and image_grid_thw, and greedy tokens from generate().

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
N_CHAT_GREEDY = 8

# Qwen2.5-VL's added tokens in the hub's order (151643 onwards there), from id 256 here, with the
# vision ones moved to the ids the config names; (text, special) as tokenizer.json marks them.
ADDED = ([("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
          ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
          ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
          ("<tool_call>", False), ("</tool_call>", False), ("<|fim_prefix|>", False),
          ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
          ("<|repo_name|>", False), ("<|file_sep|>", False)] +
         [(f"<|reserved_special_token_{i}|>", True) for i in range(273, VISION_START)] +
         [("<|vision_start|>", True), ("<|vision_end|>", True), ("<|image_pad|>", True),
          ("<|video_pad|>", True), ("<|vision_pad|>", True)] +
         [(f"<|reserved_special_token_{i}|>", True) for i in range(VIDEO_PAD + 2, VOCAB)])
ENDOFTEXT, IM_END = 256, 258

# Qwen/Qwen2.5-VL-7B-Instruct's chat template (tokenizer_config.json and chat_template.json on
# the hub): image parts ({"type": "image"}, or any part with an "image" or "image_url" key)
# become <|vision_start|><|image_pad|><|vision_end|>, which the processor then expands.
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture "
    "{{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video "
    "{{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

# Qwen2.5-VL's image processor fields, with a pixel range that gives the test images 4 to 16
# placeholders (28 x 28 pixels each) instead of thousands.
PREPROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2_5_VLProcessor",
    "min_pixels": 56 * 56,
    "max_pixels": 28 * 28 * 16,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "do_resize": True,
    "do_rescale": True,
    "rescale_factor": 0.00392156862745098,
    "do_normalize": True,
    "do_convert_rgb": True,
    "resample": 3,
}

# The chat cases: user content parts, in order ("a" and "b" are the committed images).
CHAT_CASES = {
    "chat_one_image": [{"role": "user", "content": [
        {"type": "image"}, {"type": "text", "text": "Describe this image."}]}],
    "chat_two_images": [
        {"role": "system", "content": "You compare pictures."},
        {"role": "user", "content": [
            {"type": "text", "text": "First:"}, {"type": "image"},
            {"type": "text", "text": " and second:"}, {"type": "image"},
            {"type": "text", "text": " differ how?"}]}],
}
CHAT_IMAGES = {"chat_one_image": ["chat_image_a.png"],
               "chat_two_images": ["chat_image_a.png", "chat_image_b.png"]}


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


def prompt_ids(texts, images, pad=None):
    """Text ids and images interleaved: texts[0] img0 texts[1] img1 ... texts[-1]; `pad` names
    each item's placeholder id (default: all images)."""
    ids = []
    for i, t in enumerate(texts):
        ids += t
        if i < len(images):
            ids += [VISION_START] + [pad[i] if pad else IMAGE_PAD] * images[i] + [VISION_END]
    return ids


@torch.no_grad()
def greedy(model, ids, pixel_values, grids, types, **kwargs):
    """One token per step over the cache, as an engine decodes (kwargs: a video's inputs)."""
    if pixel_values is not None:
        kwargs.update(pixel_values=pixel_values, image_grid_thw=grids)
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


def byte_level_tokenizer(added):
    """Byte-level BPE over single bytes (no merges) with `added` ((text, special) pairs) from id
    256; returns the tokenizer and tokenizer_config.json's added_tokens_decoder. Shared with
    gen_omni_chat_fixtures.py."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    # GPT-2's printable stand-in of each byte (as gen_whisper_fixtures.py).
    keep = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
    others = [b for b in range(256) if b not in keep]
    char = {b: chr(b) for b in keep}
    char.update({b: chr(256 + i) for i, b in enumerate(others)})
    tok = Tokenizer(models.BPE(vocab={char[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    decoder = {}
    for i, (text, special) in enumerate(added):
        t = AddedToken(text, special=special, normalized=False)
        if special:
            tok.add_special_tokens([t])
        else:
            tok.add_tokens([t])
        assert tok.token_to_id(text) == 256 + i, text
        decoder[str(256 + i)] = {"content": text, "lstrip": False, "normalized": False,
                                 "rstrip": False, "single_word": False, "special": special}
    return tok, decoder


def write_tokenizer(model_dir):
    """Byte-level BPE over single bytes (no merges) with Qwen2.5-VL's added tokens."""
    tok, decoder = byte_level_tokenizer(ADDED)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    assert tok.token_to_id("<|image_pad|>") == IMAGE_PAD
    tok.save(str(model_dir / "tokenizer.json"))
    (model_dir / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "Qwen2Tokenizer", "add_prefix_space": False,
         "added_tokens_decoder": decoder, "bos_token": None, "eos_token": "<|im_end|>",
         "pad_token": "<|endoftext|>", "unk_token": None, "errors": "replace",
         "model_max_length": 512, "split_special_tokens": False,
         "chat_template": CHAT_TEMPLATE}, indent=2) + "\n")
    (model_dir / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2) + "\n")
    # Qwen2.5-VL-Instruct's EOS pair (<|im_end|>, <|endoftext|>); no sampling defaults, so a
    # request's own temperature stands.
    (model_dir / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": ENDOFTEXT, "eos_token_id": [IM_END, ENDOFTEXT],
         "pad_token_id": ENDOFTEXT, "transformers_version": transformers.__version__},
        indent=2) + "\n")


def write_chat_images():
    """Two small RGB images with structure (gradients and a square), written once."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(7)
    for name, (w, h) in {"chat_image_a.png": (60, 40), "chat_image_b.png": (30, 70)}.items():
        y, x = np.mgrid[0:h, 0:w]
        img = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1),
                        (x + y) * 127 // (w + h)], axis=-1).astype(np.int32)
        img[h // 4:h // 2, w // 4:w // 2] = [200, 30, 60]
        img = np.clip(img + rng.integers(-12, 13, img.shape), 0, 255).astype(np.uint8)
        Image.fromarray(img, "RGB").save(OUT / name, optimize=False)


def render_template(template, messages):
    """apply_chat_template's rendering (chat_template_utils.py: a sandboxed jinja2 with
    trim_blocks, lstrip_blocks and loopcontrols), done here because transformers 5.23's own call
    asks for a newer jinja2 than requirements.txt pins. Shared with the Omni and video chat
    generators."""
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    return env.from_string(template).render(messages=messages, add_generation_prompt=True)


@torch.no_grad()
def chat_reference(model, model_dir):
    """transformers' processor + generate on chat messages with the committed images."""
    from PIL import Image
    from transformers import AutoImageProcessor, AutoTokenizer, Qwen2_5_VLProcessor
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    image_processor = AutoImageProcessor.from_pretrained(model_dir, backend="pil")
    # No video processor: it needs torchvision, which this environment leaves out, and the
    # processor's class check would look it up. Images alone never touch it.
    Qwen2_5_VLProcessor.check_argument_for_proper_class = lambda self, name, arg: None
    processor = Qwen2_5_VLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                    video_processor=None, chat_template=CHAT_TEMPLATE)
    ref, meta = {}, {}
    for case, messages in CHAT_CASES.items():
        text = render_template(CHAT_TEMPLATE, messages)
        images = [Image.open(OUT / f).convert("RGB") for f in CHAT_IMAGES[case]]
        inputs = processor(text=[text], images=images, return_tensors="pt")
        out = model.generate(**inputs, max_new_tokens=N_CHAT_GREEDY, do_sample=False,
                             eos_token_id=None, pad_token_id=ENDOFTEXT,
                             output_scores=True, return_dict_in_generate=True)
        toks = out.sequences[0, inputs["input_ids"].shape[1]:].tolist()
        top2 = torch.stack(out.scores)[:, 0].topk(2, dim=-1).values
        ref[f"{case}_ids"] = inputs["input_ids"][0].to(torch.int32)
        ref[f"{case}_pixel_values"] = inputs["pixel_values"].contiguous()
        ref[f"{case}_grid_thw"] = inputs["image_grid_thw"].to(torch.int32).contiguous()
        ref[f"{case}_greedy"] = torch.tensor(toks, dtype=torch.int32)
        meta[case] = {"messages": messages, "images": CHAT_IMAGES[case], "text": text,
                      "ids": inputs["input_ids"][0].tolist(),
                      "pixel_values_shape": list(inputs["pixel_values"].shape),
                      "image_grid_thw": inputs["image_grid_thw"].tolist(), "greedy": toks,
                      "greedy_text": tokenizer.decode(toks, skip_special_tokens=True),
                      "greedy_min_top2_margin": float((top2[:, 0] - top2[:, 1]).min())}
        print(case, meta[case]["image_grid_thw"], toks)
    save_file(ref, OUT / "chat_reference.safetensors")
    (OUT / "chat_reference.json").write_text(json.dumps(meta, indent=1) + "\n")


@torch.no_grad()
def video_reference(model, image_grid, image_pixels, video_grid, video_pixels):
    """The video prompts: get_rope_index with second_per_grid_ts, the forward with
    pixel_values_videos, greedy steps over the cache."""
    ref = {"video0_pixel_values": video_pixels, "video0_grid_thw": video_grid.to(torch.int32)}
    meta = {"transformers": transformers.__version__, "torch": torch.__version__}
    n_image = int(image_grid.prod()) // 4
    n_video = int(video_grid.prod()) // 4
    cases = {  # texts, the items' placeholder ids, seconds per temporal patch
        "video": ([[1, 17, 42], [99, 7, 123]], [VIDEO_PAD], 0.5),
        "image_video": ([[1, 17], [42, 99], [7, 123, 55]], [IMAGE_PAD, VIDEO_PAD], 0.75),
    }
    for case, (texts, pads, seconds) in cases.items():
        counts = [n_image if p == IMAGE_PAD else n_video for p in pads]
        ids = torch.tensor([prompt_ids(texts, counts, pads)])
        types = (ids == IMAGE_PAD).to(torch.int32) + 2 * (ids == VIDEO_PAD).to(torch.int32)
        spg = torch.tensor([seconds])
        video = dict(pixel_values_videos=video_pixels, video_grid_thw=video_grid[None],
                     second_per_grid_ts=spg)
        pv = image_pixels if IMAGE_PAD in pads else None
        gt = image_grid[None] if IMAGE_PAD in pads else None
        pos, delta = model.model.get_rope_index(ids, types, image_grid_thw=gt,
                                                video_grid_thw=video_grid[None],
                                                second_per_grid_ts=spg)
        kwargs = dict(video, pixel_values=pv, image_grid_thw=gt) if pv is not None else video
        logits = model(input_ids=ids, mm_token_type_ids=types, **kwargs).logits[0]
        if pv is not None:
            ref[f"{case}_image_embeds"] = model.model.visual(
                pv, grid_thw=gt).pooler_output.contiguous()
        ref[f"{case}_video_embeds"] = model.model.visual(
            video_pixels, grid_thw=video_grid[None]).pooler_output.contiguous()
        toks, glogits = greedy(model, ids, pv, gt, types, **video)
        ref[f"{case}_ids"] = ids[0].to(torch.int32)
        ref[f"{case}_second_per_grid"] = spg
        ref[f"{case}_positions"] = pos[:, 0].to(torch.int32).contiguous()
        ref[f"{case}_rope_delta"] = delta.reshape(1).to(torch.int32)
        ref[f"{case}_logits"] = logits.contiguous()
        ref[f"{case}_greedy"] = torch.tensor(toks, dtype=torch.int32)
        ref[f"{case}_greedy_logits"] = glogits.contiguous()
        top2 = glogits.topk(2, dim=-1).values
        meta[case] = {"ids": ids[0].tolist(), "second_per_grid": seconds, "greedy": toks,
                      "rope_delta": int(delta.reshape(-1)[0]),
                      "greedy_min_top2_margin": float((top2[:, 0] - top2[:, 1]).min())}
        print(case, meta[case], pos[:, 0].tolist())
    save_file(ref, OUT / "video_reference.safetensors")
    (OUT / "video_reference.json").write_text(json.dumps(meta, indent=1) + "\n")


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
    # Drawn after the images' so that their pixels stay what they were.
    video_grid = torch.tensor([3, 4, 2])
    video_pixels = torch.randn(int(video_grid.prod()), 3 * 2 * 14 * 14, generator=gen)
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
    video_reference(model, grids[0], pixels[0], video_grid, video_pixels)
    write_tokenizer(model_dir)
    write_chat_images()
    chat_reference(model, model_dir)


if __name__ == "__main__":
    main()
