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

Install: the pins of scripts/golden/requirements.txt. Regenerate (deterministic on CPU):
    python scripts/golden/gen_omni_fixtures.py
"""

import json
import math
import shutil
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file
from transformers import (Qwen2_5OmniThinkerConfig,
                          Qwen2_5OmniThinkerForConditionalGeneration)

OUT = Path(__file__).resolve().parents[2] / "tests/golden/fixtures/omni"
AUDIO, AUDIO_BOS, AUDIO_EOS = 292, 293, 294
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
    if model_dir.exists():
        shutil.rmtree(model_dir)
    model.save_pretrained(model_dir)
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


if __name__ == "__main__":
    main()
