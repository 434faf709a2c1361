#!/usr/bin/env python3
"""Makes the Qwen2.5-Omni thinker fixture servable and records transformers' processor and
model end to end on chat messages holding an image and a sound clip.

Run after gen_omni_fixtures.py (which writes the weights of
tests/golden/fixtures/omni/qwen2_5_omni_thinker/ and leaves other files there alone). This
script adds what a served Omni checkpoint has beside its weights:
  tokenizer.json           byte-level BPE over the 256 bytes (no merges) and Qwen2.5-Omni's
                           added tokens from id 256, the multimodal ones moved to the ids the
                           config names (<|vision_bos|> 288, <|vision_eos|> 289, <|IMAGE|> 290,
                           <|VIDEO|> 291, <|AUDIO|> 292, <|audio_bos|> 293, <|audio_eos|> 294)
  tokenizer_config.json    with Qwen/Qwen2.5-Omni-7B's chat template and the processor's
                           special-token names
  preprocessor_config.json Qwen2.5-Omni's: WhisperFeatureExtractor (128 mel bins, 300 s
                           chunk_length, n_samples 4 800 000) and Qwen2VLImageProcessor fields,
                           with the VL fixture's small pixel range (4 to 16 image tokens)
  generation_config.json   EOS <|im_end|>, <|endoftext|>

and, in tests/golden/fixtures/omni/:
  chat_audio.wav                 1.6 s of espeak-ng speech at 16 kHz, 16-bit (made once; kept)
  chat_reference.json/.safetensors  per case: the template's text, the processor's ids
                                 (placeholders expanded), the audio features the model reads
                                 (the feature-attention-masked frames), pixel_values and grid,
                                 and eight greedy tokens of generate() with their text

Install: the pins of scripts/golden/requirements.txt and requirements-audio.txt (soundfile,
soxr); espeak-ng (Debian) only when chat_audio.wav is missing. Regenerate (deterministic on
CPU): python scripts/golden/gen_omni_chat_fixtures.py
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_vl_fixtures as vl  # noqa: E402  (the byte-level tokenizer and template rendering)

OUT = Path(__file__).resolve().parents[2] / "tests/golden/fixtures/omni"
VL = Path(__file__).resolve().parents[2] / "tests/golden/fixtures/vl"
MODEL = OUT / "qwen2_5_omni_thinker"
VOCAB = 300
VISION_BOS, IMAGE, AUDIO = 288, 290, 292
ENDOFTEXT, IM_END = 256, 258
N_CHAT_GREEDY = 8

# Qwen2.5-Omni's added tokens from id 256, in the hub's order for the common ones, the
# multimodal ones at the config's ids; (text, special) as tokenizer.json marks them.
ADDED = ([("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
          ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
          ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
          ("<tool_call>", False), ("</tool_call>", False), ("<|fim_prefix|>", False),
          ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
          ("<|repo_name|>", False), ("<|file_sep|>", False)] +
         [(f"<|reserved_special_token_{i}|>", True) for i in range(273, VISION_BOS)] +
         [("<|vision_bos|>", True), ("<|vision_eos|>", True), ("<|IMAGE|>", True),
          ("<|VIDEO|>", True), ("<|AUDIO|>", True), ("<|audio_bos|>", True),
          ("<|audio_eos|>", True), ("<|vision_pad|>", True)] +
         [(f"<|reserved_special_token_{i}|>", True) for i in range(296, VOCAB)])

# Qwen/Qwen2.5-Omni-7B's chat template (chat_template.json on the hub): image parts become
# <|vision_bos|><|IMAGE|><|vision_eos|>, audio parts <|audio_bos|><|AUDIO|><|audio_eos|>,
# video parts <|vision_bos|><|VIDEO|><|vision_eos|>, and a conversation without a system
# message gets the model's own.
SYSTEM = ("You are Qwen, a virtual human developed by the Qwen Team, Alibaba Group, capable of "
          "perceiving auditory and visual inputs, as well as generating text and speech.")
CHAT_TEMPLATE = (
    "{% set audio_count = namespace(value=0) %}{% set image_count = namespace(value=0) %}"
    "{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\n" + SYSTEM +
    "<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n{% else %}"
    "{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture "
    "{{ image_count.value }}: {% endif %}<|vision_bos|><|IMAGE|><|vision_eos|>"
    "{% elif content['type'] == 'audio' or 'audio' in content or 'audio_url' in content %}"
    "{% set audio_count.value = audio_count.value + 1 %}{% if add_audio_id %}Audio "
    "{{ audio_count.value }}: {% endif %}<|audio_bos|><|AUDIO|><|audio_eos|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video "
    "{{ video_count.value }}: {% endif %}<|vision_bos|><|VIDEO|><|vision_eos|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

# Qwen/Qwen2.5-Omni-7B's preprocessor_config.json, with the VL fixture's pixel range.
PREPROCESSOR = {
    "processor_class": "Qwen2_5OmniProcessor",
    "feature_extractor_type": "WhisperFeatureExtractor",
    "feature_size": 128,
    "sampling_rate": 16000,
    "hop_length": 160,
    "n_fft": 400,
    "chunk_length": 300,
    "n_samples": 4800000,
    "nb_max_frames": 30000,
    "padding_side": "right",
    "padding_value": 0.0,
    "dither": 0.0,
    "return_attention_mask": True,
    "image_processor_type": "Qwen2VLImageProcessor",
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

SPOKEN = "A red square on a colored gradient."
CHAT_CASES = {
    "chat_image_audio": [{"role": "user", "content": [
        {"type": "image"}, {"type": "audio"},
        {"type": "text", "text": "What do you see and hear?"}]}],
    "chat_audio": [
        {"role": "system", "content": "You transcribe."},
        {"role": "user", "content": [{"type": "audio"}, {"type": "text", "text": "Words?"}]}],
}
CHAT_MEDIA = {"chat_image_audio": (["chat_image_a.png"], ["chat_audio.wav"]),
              "chat_audio": ([], ["chat_audio.wav"])}


def write_tokenizer():
    tok, decoder = vl.byte_level_tokenizer(ADDED)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    assert tok.token_to_id("<|AUDIO|>") == AUDIO and tok.token_to_id("<|IMAGE|>") == IMAGE
    tok.save(str(MODEL / "tokenizer.json"))
    (MODEL / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "Qwen2Tokenizer", "add_prefix_space": False,
         "added_tokens_decoder": decoder, "bos_token": None, "eos_token": "<|im_end|>",
         "pad_token": "<|endoftext|>", "unk_token": None, "errors": "replace",
         "model_max_length": 512, "split_special_tokens": False,
         "extra_special_tokens": {
             "image_token": "<|IMAGE|>", "audio_token": "<|AUDIO|>", "video_token": "<|VIDEO|>",
             "vision_bos_token": "<|vision_bos|>", "vision_eos_token": "<|vision_eos|>",
             "audio_bos_token": "<|audio_bos|>", "audio_eos_token": "<|audio_eos|>"},
         "chat_template": CHAT_TEMPLATE}, indent=2) + "\n")
    (MODEL / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2) + "\n")
    (MODEL / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": ENDOFTEXT, "eos_token_id": [IM_END, ENDOFTEXT],
         "pad_token_id": ENDOFTEXT, "transformers_version": transformers.__version__},
        indent=2) + "\n")


def write_audio():
    """espeak-ng's voice (22 050 Hz) resampled to 16 kHz by soxr, 16-bit PCM; made once, since
    another espeak-ng build may speak differently."""
    import soundfile as sf
    import soxr
    path = OUT / "chat_audio.wav"
    if path.exists():
        return
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.wav"
        subprocess.run(["espeak-ng", "-s", "200", "-w", str(raw), SPOKEN], check=True)
        x, rate = sf.read(raw, dtype="float32")
    y = soxr.resample(x, rate, 16000, quality="HQ")
    sf.write(path, y, 16000, subtype="PCM_16")


@torch.no_grad()
def chat_reference():
    import soundfile as sf
    from PIL import Image
    from transformers import (AutoImageProcessor, AutoTokenizer, Qwen2_5OmniProcessor,
                              Qwen2_5OmniThinkerForConditionalGeneration,
                              WhisperFeatureExtractor)
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    image_processor = AutoImageProcessor.from_pretrained(MODEL, backend="pil")
    feature_extractor = WhisperFeatureExtractor.from_pretrained(MODEL)
    # No video processor: it needs torchvision, which this environment leaves out.
    Qwen2_5OmniProcessor.check_argument_for_proper_class = lambda self, name, arg: None
    processor = Qwen2_5OmniProcessor(image_processor=image_processor, video_processor=None,
                                     feature_extractor=feature_extractor, tokenizer=tokenizer,
                                     chat_template=CHAT_TEMPLATE)
    model = Qwen2_5OmniThinkerForConditionalGeneration.from_pretrained(
        MODEL, dtype=torch.float32, attn_implementation="eager").eval()
    ref, meta = {}, {"transformers": transformers.__version__, "torch": torch.__version__}
    for case, messages in CHAT_CASES.items():
        text = vl.render_template(CHAT_TEMPLATE, messages)
        image_files, audio_files = CHAT_MEDIA[case]
        kwargs = {}
        if image_files:
            kwargs["images"] = [Image.open(VL / f).convert("RGB") for f in image_files]
        clips = [sf.read(OUT / f, dtype="float32")[0] for f in audio_files]
        kwargs["audio"] = clips
        inputs = processor(text=[text], return_tensors="pt", **kwargs)
        out = model.generate(**inputs, max_new_tokens=N_CHAT_GREEDY, do_sample=False,
                             eos_token_id=None, pad_token_id=ENDOFTEXT,
                             output_scores=True, return_dict_in_generate=True)
        toks = out.sequences[0, inputs["input_ids"].shape[1]:].tolist()
        top2 = torch.stack(out.scores)[:, 0].topk(2, dim=-1).values
        mask = inputs["feature_attention_mask"][0].bool()
        frames = int(mask.sum())
        ref[f"{case}_ids"] = inputs["input_ids"][0].to(torch.int32)
        ref[f"{case}_features"] = inputs["input_features"][0][:, :frames].contiguous()
        m = {"messages": messages, "images": image_files, "audio": audio_files, "text": text,
             "ids": inputs["input_ids"][0].tolist(), "audio_frames": frames,
             "audio_samples": [len(c) for c in clips], "greedy": toks,
             "greedy_text": tokenizer.decode(toks, skip_special_tokens=True),
             "greedy_min_top2_margin": float((top2[:, 0] - top2[:, 1]).min())}
        if image_files:
            ref[f"{case}_pixel_values"] = inputs["pixel_values"].contiguous()
            ref[f"{case}_grid_thw"] = inputs["image_grid_thw"].to(torch.int32).contiguous()
            m["image_grid_thw"] = inputs["image_grid_thw"].tolist()
        ref[f"{case}_greedy"] = torch.tensor(toks, dtype=torch.int32)
        meta[case] = m
        print(case, frames, m.get("image_grid_thw"), toks, m["greedy_min_top2_margin"])
    save_file(ref, OUT / "chat_reference.safetensors")
    (OUT / "chat_reference.json").write_text(json.dumps(meta, indent=1) + "\n")


def main():
    assert (MODEL / "config.json").exists(), "run gen_omni_fixtures.py first"
    write_tokenizer()
    write_audio()
    chat_reference()


if __name__ == "__main__":
    main()
