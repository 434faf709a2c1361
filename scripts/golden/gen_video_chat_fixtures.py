#!/usr/bin/env python3
"""Records transformers' processors and models end to end on chat messages holding a video, for
the tiny Qwen2.5-VL (tests/golden/fixtures/vl/qwen2_5_vl) and Qwen2.5-Omni thinker
(tests/golden/fixtures/omni/qwen2_5_omni_thinker) fixtures.

The video is tests/golden/fixtures/video/pattern_rgb.mov (13 lossless 64 x 48 frames at 6 fps,
made by gen_video_fixtures.py), decoded by transformers' read_video_pyav and sampled by the
checkpoint's video processor at 2 frames a second, as vLLM's Qwen2.5-VL / Omni processors ask.
"omni_video_audio" is pattern_h264.mp4 with its AAC track as the video's sound
(use_audio_in_video: the track decoded apart, as vLLM passes it, PyAV's 16 kHz resampling in
pattern_h264.audio_16k.f32), its placeholders interleaved in 2 s chunks by the processor; its
case also stores the track's masked input_features, and samples at 1 frame a second
(mm_processor_kwargs {"fps": 1}, 2 s a temporal patch) after a short system message of its
own, to fit the tiny model's 512 positions.

Writes tests/golden/fixtures/video/chat_reference.json / .safetensors, per case ("vl_video",
"omni_video"): the template's text, the processor's ids (<|video_pad|> / <|VIDEO|> widened),
pixel_values_videos (every row, or for the Omni case's 1120 the first four and the last, with
the sum and absolute sum of all), video_grid_thw, second_per_grid_ts, eight greedy tokens of generate()
and their text.

Install: the pins of scripts/golden/requirements.txt and requirements-video.txt (PyAV,
torchvision). Run after gen_vl_fixtures.py, gen_omni_fixtures.py, gen_omni_chat_fixtures.py
and gen_video_fixtures.py:
    python scripts/golden/gen_video_chat_fixtures.py
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests/golden/fixtures"
OUT = FIX / "video"
CLIP = OUT / "pattern_rgb.mov"
N_GREEDY = 8
ENDOFTEXT = 256

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_omni_chat_fixtures as omni_chat  # noqa: E402
import gen_vl_fixtures as vl  # noqa: E402

# case: (model, chat template, processor, clip, its sound track as the video's audio)
CASES = {
    "vl_video": (FIX / "vl/qwen2_5_vl", vl.CHAT_TEMPLATE, "vl", CLIP, False),
    "omni_video": (FIX / "omni/qwen2_5_omni_thinker", omni_chat.CHAT_TEMPLATE, "omni", CLIP,
                   False),
    "omni_video_audio": (FIX / "omni/qwen2_5_omni_thinker", omni_chat.CHAT_TEMPLATE, "omni",
                         OUT / "pattern_h264.mp4", True),
}
MESSAGES = [{"role": "user", "content": [
    {"type": "video"}, {"type": "text", "text": "What moves?"}]}]
# A short system message of its own keeps the Omni template's long default one (170 byte-level
# tokens here) out, so that the video with its sound fits the tiny model's 512 positions.
SOUND_MESSAGES = [{"role": "system", "content": "Watch."}] + MESSAGES


@torch.no_grad()
def main():
    from transformers import (AutoImageProcessor, AutoTokenizer, Qwen2_5_VLForConditionalGeneration,
                              Qwen2_5_VLProcessor, Qwen2_5OmniProcessor,
                              Qwen2_5OmniThinkerForConditionalGeneration, WhisperFeatureExtractor)
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
    from transformers.video_utils import VideoMetadata, read_video_pyav
    ref, out = {}, {"transformers": transformers.__version__, "torch": torch.__version__}
    for case, (model_dir, template, kind, clip, with_sound) in CASES.items():
        frames, md = read_video_pyav(str(clip), sample_indices_fn=lambda metadata, **kw:
                                     np.arange(metadata.total_num_frames))
        meta = VideoMetadata(total_num_frames=md.total_num_frames, fps=md.fps,
                             duration=md.duration, width=md.width, height=md.height)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        image_processor = AutoImageProcessor.from_pretrained(model_dir, backend="pil")
        video_processor = Qwen2VLVideoProcessor.from_pretrained(model_dir)
        messages = SOUND_MESSAGES if with_sound else MESSAGES
        text = vl.render_template(template, messages)
        if kind == "vl":
            processor = Qwen2_5_VLProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                            video_processor=video_processor,
                                            chat_template=template)
            model = Qwen2_5_VLForConditionalGeneration.from_pretrained(
                model_dir, dtype=torch.float32, attn_implementation="eager").eval()
        else:
            processor = Qwen2_5OmniProcessor(
                image_processor=image_processor, video_processor=video_processor,
                feature_extractor=WhisperFeatureExtractor.from_pretrained(model_dir),
                tokenizer=tokenizer, chat_template=template)
            model = Qwen2_5OmniThinkerForConditionalGeneration.from_pretrained(
                model_dir, dtype=torch.float32, attn_implementation="eager").eval()
        kwargs = {}
        if with_sound:
            # The track as vLLM hands it over, decoded apart: PyAV's 16 kHz resampling of it
            # (gen_video_fixtures.py), the video's one audio slot.
            sound = np.fromfile(OUT / "pattern_h264.audio_16k.f32", dtype="<f4")
            kwargs = dict(audio=[sound], audio_from_video_indices=[0], load_audio_from_video=True)
        # With its sound, at 1 frame a second (mm_processor_kwargs {"fps": 1}): 4 frames (the
        # processor's minimum) of 10 s, 2 s a temporal patch, so that the two streams interleave
        # over two chunks.
        fps = 1.0 if with_sound else 2.0
        inputs = processor(text=[text], videos=[frames], video_metadata=[meta], fps=fps,
                           do_sample_frames=True, return_tensors="pt", **kwargs)
        inputs.pop("video_metadata", None)
        gen_kwargs = {"use_audio_in_video": True} if with_sound else {}
        if with_sound:
            mask = inputs["feature_attention_mask"][0].bool()
            ref[f"{case}_features"] = inputs["input_features"][0][:, :int(mask.sum())].contiguous()
        res = model.generate(**inputs, **gen_kwargs, max_new_tokens=N_GREEDY, do_sample=False,
                             eos_token_id=None, pad_token_id=ENDOFTEXT, output_scores=True,
                             return_dict_in_generate=True)
        toks = res.sequences[0, inputs["input_ids"].shape[1]:].tolist()
        top2 = torch.stack(res.scores)[:, 0].topk(2, dim=-1).values
        seconds = inputs.get("second_per_grid_ts", inputs.get("video_second_per_grid"))
        ref[f"{case}_ids"] = inputs["input_ids"][0].to(torch.int32)
        pv = inputs["pixel_values_videos"]
        # The Omni processor's video size makes 1120 rows (5 MB): keep the first four and the
        # last, and the sums of all of them.
        rows = list(range(pv.shape[0])) if pv.shape[0] <= 64 else [0, 1, 2, 3, pv.shape[0] - 1]
        ref[f"{case}_pixel_values"] = pv[rows].contiguous()
        ref[f"{case}_grid_thw"] = inputs["video_grid_thw"].to(torch.int32).contiguous()
        ref[f"{case}_greedy"] = torch.tensor(toks, dtype=torch.int32)
        out[case] = {"model": str(model_dir.relative_to(ROOT)), "video": clip.name, "fps": fps,
                     "use_audio_in_video": with_sound, "messages": messages,
                     "text": text, "ids": inputs["input_ids"][0].tolist(),
                     "video_grid_thw": inputs["video_grid_thw"].tolist(),
                     "second_per_grid_ts": [float(x) for x in torch.as_tensor(seconds).reshape(-1)],
                     "pixel_rows": rows, "pixel_values_shape": list(pv.shape),
                     "pixel_sum": float(pv.double().sum()),
                     "pixel_abs_sum": float(pv.double().abs().sum()),
                     "greedy": toks, "greedy_text": tokenizer.decode(toks, skip_special_tokens=True),
                     "greedy_min_top2_margin": float((top2[:, 0] - top2[:, 1]).min())}
        print(case, out[case]["video_grid_thw"], out[case]["second_per_grid_ts"], toks,
              out[case]["greedy_min_top2_margin"])
    save_file(ref, OUT / "chat_reference.safetensors")
    (OUT / "chat_reference.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
