#!/usr/bin/env python3
"""Generates the Qwen2.5-Omni thinker reference fixture in tests/golden/fixtures/omni/.

qwen2_5_omni_thinker/ is a random-init transformers Qwen2_5OmniThinkerForConditionalGeneration
saved by save_pretrained: a Qwen2 decoder under M-RoPE (hidden 64, 2 layers, 4 heads over 2 KV
heads, sections 2/3/3, vocabulary 300 with <|AUDIO|> 292, <|audio_bos|> 293, <|audio_eos|>
294 and the vision ids of tests/golden/fixtures/vl), Qwen2.5-VL's vision tower at the VL
fixture's shapes, and the audio tower (Whisper-like: 128 mel bins, d_model 32, 2 layers of 2
heads, n_window 8, so attention stays inside chunks of 16 frames, output 64). Weights are
drawn as gen_vl_fixtures.py draws them.

reference.safetensors (float32 unless noted):
  clip<i>_features [128, L_i]        random log-mel frames of two clips (L = 50 and 37: three
                                     and a half chunks, two and a third)
  clip<i>_embeds [k_i, 64]           the audio tower's output per clip
  audio_ids [n] i32                  a prompt: text, <|audio_bos|> <|AUDIO|> x k0 <|audio_eos|>,
                                     text, the second clip likewise, text
  audio_positions [3, n] i32, audio_rope_delta [1] i32     get_rope_index
  audio_logits [n, vocab]            logits of every prompt position
  audio_greedy [6] i32, audio_greedy_logits [6, vocab]     one step at a time over the cache

tmrope_reference.safetensors (and tmrope_reference.json: ids, greedy tokens, delta, the
smallest top-2 logit margin of the greedy steps, the audio-in-video layout), TMRoPE's
vision prompts, each through the model's own forward (positions from get_rope_index inside it,
given the attention mask) and as get_rope_index returns them:
  image0_pixel_values [8, 1176], image0_grid_thw [3] i32     an image of 2 x 4 patches
  video0_pixel_values [24, 1176], video0_grid_thw [3] i32    a video of 3 x 2 x 4 patches
  clip2_features [128, 220]          a 4.4 s clip (55 embeddings: more than one 2 s chunk)
  image0_embeds [2, 64], video0_embeds [6, 64], clip2_embeds [55, 64]   the towers' output
  <case>_second_per_grid [1]         video_second_per_grid
  <case>_ids, _positions [3, n], _rope_delta, _logits, _greedy, _greedy_logits   as above
for three cases: "image" (<|vision_bos|> <|IMAGE|> x 2 <|vision_eos|> between text), "video"
(<|vision_bos|> <|VIDEO|> x 6 <|vision_eos|>, 0.58 s a temporal patch: float32 truncation gives
temporal ticks 0, 14, 29 where exact arithmetic gives 28) and "audio_in_video" (the video at
1.8 s a temporal patch with clip 2 as its sound track, use_audio_in_video: <|vision_bos|>
<|audio_bos|>, then the video's and the clip's placeholders interleaved in 2 s chunks as
Qwen2_5OmniProcessor.replace_video_with_audio_token lays them out, then <|audio_eos|>
<|vision_eos|>).

The model directory is written through a scratch directory so that files other scripts keep
there (gen_omni_chat_fixtures.py's tokenizer and generation config) stay as they are.

Install: the pins of scripts/golden/requirements.txt. Regenerate (deterministic on CPU):
    python scripts/golden/gen_omni_fixtures.py
"""

import json
import math
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import torch
import transformers
from safetensors.torch import save_file
from transformers import (Qwen2_5OmniThinkerConfig,
                          Qwen2_5OmniThinkerForConditionalGeneration)

OUT = Path(__file__).resolve().parents[2] / "tests/golden/fixtures/omni"
AUDIO, AUDIO_BOS, AUDIO_EOS = 292, 293, 294
VISION_BOS, VISION_EOS, IMAGE, VIDEO = 288, 289, 290, 291
N_GREEDY = 6


def reinit(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("ln_q.weight") or \
                    name.endswith("norm1.weight") or name.endswith("norm2.weight") or \
                    name.endswith("ln_post.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name or "audio_bos_eos_token" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            else:
                fan_in = p[0].numel() if p.dim() > 2 else p.shape[-1]
                p.copy_(1.5 / math.sqrt(fan_in) * torch.randn(p.shape, generator=gen))


def tokens_for(frames):
    after_conv = (frames - 1) // 2 + 1
    return (after_conv - 2) // 2 + 1


@torch.no_grad()
def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(4321)
    config = Qwen2_5OmniThinkerConfig(
        audio_config=dict(num_mel_bins=128, encoder_layers=2, encoder_attention_heads=2,
                          encoder_ffn_dim=64, d_model=32, n_window=8, output_dim=64,
                          max_source_positions=1500),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=2,
                           out_hidden_size=64, patch_size=14, spatial_merge_size=2,
                           temporal_patch_size=2, window_size=56, fullatt_block_indexes=[1],
                           in_channels=3),
        text_config=dict(vocab_size=300, hidden_size=64, intermediate_size=96,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, rms_norm_eps=1e-6,
                         tie_word_embeddings=False,
                         rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3],
                                          "rope_theta": 1000000.0}),
        audio_token_index=AUDIO, image_token_index=290, video_token_index=291,
        audio_start_token_id=AUDIO_BOS, audio_end_token_id=AUDIO_EOS,
        vision_start_token_id=288, vision_end_token_id=289)
    config._attn_implementation = "eager"
    model = Qwen2_5OmniThinkerForConditionalGeneration(config).eval()
    reinit(model, gen)
    model_dir = OUT / "qwen2_5_omni_thinker"
    model_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        model.save_pretrained(scratch)
        for f in Path(scratch).iterdir():
            if f.name != "generation_config.json" or not (model_dir / f.name).exists():
                shutil.copy(f, model_dir / f.name)
    model = Qwen2_5OmniThinkerForConditionalGeneration.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager").eval()

    lens = [50, 37]
    feats = [torch.randn(128, n, generator=gen) * 0.8 for n in lens]
    ref = {}
    for i, f in enumerate(feats):
        out = model.model.audio_tower(f, feature_lens=torch.tensor([lens[i]]))
        emb = out.last_hidden_state
        assert emb.shape[0] == tokens_for(lens[i]), (emb.shape, tokens_for(lens[i]))
        ref[f"clip{i}_features"] = f.contiguous()
        ref[f"clip{i}_embeds"] = emb.contiguous()
    k = [tokens_for(n) for n in lens]
    ids = ([1, 17, 42] + [AUDIO_BOS] + [AUDIO] * k[0] + [AUDIO_EOS] + [99, 7] + [AUDIO_BOS] +
           [AUDIO] * k[1] + [AUDIO_EOS] + [123, 55])
    ids = torch.tensor([ids])
    meta = {"transformers": transformers.__version__, "torch": torch.__version__,
            "clip_frames": lens, "clip_tokens": k}
    # With no image or video, Qwen2.5-Omni's TMRoPE counts audio tokens like text.
    pos, delta = model.model.get_rope_index(ids, attention_mask=torch.ones_like(ids),
                                            audio_seqlens=torch.tensor(lens))
    # Features of several clips come as one padded batch in transformers' processor; here
    # each clip is its own row of a [clips, 128, max L] batch with the mask saying its length.
    batch = torch.zeros(2, 128, max(lens))
    mask = torch.zeros(2, max(lens), dtype=torch.long)
    for i, f in enumerate(feats):
        batch[i, :, :lens[i]] = f
        mask[i, :lens[i]] = 1
    kwargs = dict(input_features=batch, feature_attention_mask=mask)
    logits = model(input_ids=ids, **kwargs).logits[0]
    out = model(input_ids=ids, use_cache=True, **kwargs)
    past, rows = out.past_key_values, [out.logits[0, -1]]
    toks = [int(rows[-1].argmax())]
    for _ in range(N_GREEDY - 1):
        o = model(input_ids=torch.tensor([[toks[-1]]]), past_key_values=past, use_cache=True)
        past = o.past_key_values
        rows.append(o.logits[0, -1])
        toks.append(int(rows[-1].argmax()))
    glogits = torch.stack(rows)
    ref.update({
        "audio_ids": ids[0].to(torch.int32),
        "audio_positions": pos[:, 0].to(torch.int32).contiguous(),
        "audio_rope_delta": delta.reshape(-1)[:1].to(torch.int32),
        "audio_logits": logits.contiguous(),
        "audio_greedy": torch.tensor(toks, dtype=torch.int32),
        "audio_greedy_logits": glogits.contiguous(),
    })
    top2 = glogits.topk(2, dim=-1).values
    meta.update({"ids": ids[0].tolist(), "greedy": toks, "rope_delta": int(delta.reshape(-1)[0]),
                 "greedy_min_top2_margin": float((top2[:, 0] - top2[:, 1]).min())})
    print(meta)
    save_file(ref, OUT / "reference.safetensors")
    (OUT / "reference.json").write_text(json.dumps(meta, indent=1) + "\n")
    tmrope_reference(model, gen)


def greedy_steps(model, ids, **kwargs):
    """The prompt's logits, then one token per step over the cache. The prompt's forward gets
    the attention mask, so that the model computes its 3-D positions (get_rope_index) and keeps
    their delta for the steps, which pass no mask and so take cache length + delta."""
    model.model.rope_deltas = None
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True, **kwargs)
    logits, past, rows = out.logits[0], out.past_key_values, [out.logits[0, -1]]
    delta = model.model.rope_deltas
    toks = [int(rows[-1].argmax())]
    for _ in range(N_GREEDY - 1):
        o = model(input_ids=torch.tensor([[toks[-1]]]), past_key_values=past, use_cache=True)
        past = o.past_key_values
        rows.append(o.logits[0, -1])
        toks.append(int(rows[-1].argmax()))
    return logits, delta, toks, torch.stack(rows)


def audio_in_video_placeholders(grid, seconds, n_audio):
    """The processor's own layout of a video with its sound track (its
    replace_video_with_audio_token on the grid, seconds per temporal patch and clip length),
    as ids."""
    from transformers import Qwen2_5OmniProcessor
    proc = SimpleNamespace(video_processor=SimpleNamespace(merge_size=2),
                           audio_bos_token="B", audio_eos_token="E", video_token="V",
                           audio_token="A")
    proc.get_chunked_index = lambda idx, n: Qwen2_5OmniProcessor.get_chunked_index(proc, idx, n)
    text = Qwen2_5OmniProcessor.replace_video_with_audio_token(
        proc, {"video_grid_thw": [grid.tolist()], "video_second_per_grid": [seconds]}, 0,
        {"num_audio_tokens": [n_audio]}, 0, position_id_per_seconds=25, seconds_per_chunk=2)
    return [{"B": AUDIO_BOS, "E": AUDIO_EOS, "V": VIDEO, "A": AUDIO}[c] for c in text]


@torch.no_grad()
def tmrope_reference(model, gen):
    """Images, a video and a video with its audio: TMRoPE's positions and the forward."""
    image_grid, video_grid = torch.tensor([1, 2, 4]), torch.tensor([3, 2, 4])
    image_pixels = torch.randn(int(image_grid.prod()), 3 * 2 * 14 * 14, generator=gen)
    video_pixels = torch.randn(int(video_grid.prod()), 3 * 2 * 14 * 14, generator=gen)
    clip_frames = 220
    clip = torch.randn(128, clip_frames, generator=gen) * 0.8
    n_image, n_video = int(image_grid.prod()) // 4, int(video_grid.prod()) // 4
    n_audio = tokens_for(clip_frames)
    ref = {"image0_pixel_values": image_pixels, "image0_grid_thw": image_grid.to(torch.int32),
           "video0_pixel_values": video_pixels, "video0_grid_thw": video_grid.to(torch.int32),
           "clip2_features": clip.contiguous()}
    meta = {"transformers": transformers.__version__, "torch": torch.__version__}
    ref["image0_embeds"] = model.model.visual(
        image_pixels, grid_thw=image_grid[None]).pooler_output.contiguous()
    ref["video0_embeds"] = model.model.visual(
        video_pixels, grid_thw=video_grid[None]).pooler_output.contiguous()
    ref["clip2_embeds"] = model.model.audio_tower(
        clip, feature_lens=torch.tensor([clip_frames])).last_hidden_state.contiguous()
    assert ref["clip2_embeds"].shape[0] == n_audio
    for case in ("image", "video", "audio_in_video"):
        kwargs, rope = {}, {}
        if case == "image":
            span = [VISION_BOS] + [IMAGE] * n_image + [VISION_EOS]
            kwargs = dict(pixel_values=image_pixels, image_grid_thw=image_grid[None])
            rope = dict(image_grid_thw=image_grid[None])
        else:
            seconds = 0.58 if case == "video" else 1.8
            spg = torch.tensor([seconds])
            kwargs = dict(pixel_values_videos=video_pixels, video_grid_thw=video_grid[None],
                          video_second_per_grid=spg)
            rope = dict(video_grid_thw=video_grid[None], second_per_grids=spg)
            ref[f"{case}_second_per_grid"] = spg
            if case == "video":
                span = [VISION_BOS] + [VIDEO] * n_video + [VISION_EOS]
            else:
                span = ([VISION_BOS] + audio_in_video_placeholders(video_grid, seconds, n_audio) +
                        [VISION_EOS])
                kwargs.update(input_features=clip[None],
                              feature_attention_mask=torch.ones(1, clip_frames, dtype=torch.long),
                              use_audio_in_video=True)
                rope.update(use_audio_in_video=True, audio_seqlens=torch.tensor([clip_frames]))
                meta["audio_in_video_layout"] = "".join(
                    {VIDEO: "V", AUDIO: "A"}.get(t, "|") for t in span)
        ids = torch.tensor([[1, 17, 42] + span + [99, 7, 123]])
        pos, delta = model.model.get_rope_index(ids, attention_mask=torch.ones_like(ids), **rope)
        logits, forward_delta, toks, glogits = greedy_steps(model, ids, **kwargs)
        assert torch.equal(forward_delta, delta), (forward_delta, delta)
        ref.update({
            f"{case}_ids": ids[0].to(torch.int32),
            f"{case}_positions": pos[:, 0].to(torch.int32).contiguous(),
            f"{case}_rope_delta": delta.reshape(-1)[:1].to(torch.int32),
            f"{case}_logits": logits.contiguous(),
            f"{case}_greedy": torch.tensor(toks, dtype=torch.int32),
            f"{case}_greedy_logits": glogits.contiguous(),
        })
        top2 = glogits.topk(2, dim=-1).values
        meta[case] = {"ids": ids[0].tolist(), "greedy": toks,
                      "rope_delta": int(delta.reshape(-1)[0]),
                      "greedy_min_top2_margin": float((top2[:, 0] - top2[:, 1]).min())}
        print(case, meta[case], pos[:, 0].tolist())
    save_file(ref, OUT / "tmrope_reference.safetensors")
    (OUT / "tmrope_reference.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
