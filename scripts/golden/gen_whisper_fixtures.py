#!/usr/bin/env python3
"""Generates the Whisper reference fixture in tests/golden/fixtures/whisper/.

tiny_random/ is a random-init transformers WhisperForConditionalGeneration saved as an
ordinary model directory (config.json, model.safetensors, generation_config.json) at small
shapes: d_model 64, 2 encoder and 2 decoder layers of 4 heads, ffn 96, 80 mel bins, 100
source positions (200 input frames: a 2 s window instead of 30 s, which transformers accepts
when max_source_positions says so), 24 target positions. Its vocabulary is Whisper's layout in
small: the 256 byte-level tokens, <|endoftext|> 256, <|startoftranscript|> 257, the task and
prompt tokens, <|notimestamps|> 263, then 36 timestamps <|0.00|> .. <|0.70|> (300 in all),
in a tokenizer.json written here; preprocessor_config.json says 2 s windows, so
`quantserve transcribe` and `serve` run end to end on it (the text is random). The weights are
drawn with std 0.5 instead of the init's 0.02 (which gives near-constant logits and a greedy text of one repeated token) so that every
stage changes what comes after it.

reference.safetensors holds what transformers computes in float32:
  features [1, 80, 200]            the encoder's input (uniform in [-1, 1.5])
  encoder_out [1, 100, 64]         encoder last_hidden_state
  prompt_ids [1, 5] i32            a decoder prompt
  prompt_logits [1, 5, 300]        logits of every prompt position (causal self-attention,
                                   cross-attention over encoder_out)
  greedy_ids [1, 12] i32           the prompt and 7 greedy tokens, each chosen from the logits
                                   of a one-token step over the KV cache (use_cache=True)
  step_logits [1, 7, 300]          the logits that predicted those 7 tokens (full forward)

Install: the pins of scripts/golden/requirements.txt. Regenerate (deterministic on CPU;
overwrites tests/golden/fixtures/whisper/):
    python scripts/golden/gen_whisper_fixtures.py
"""

import json
import shutil
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file
from transformers import WhisperConfig, WhisperForConditionalGeneration

OUT = Path(__file__).resolve().parents[2] / "tests/golden/fixtures/whisper"
SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|translate|>", "<|transcribe|>",
            "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>"]
N_TIMESTAMPS = 36
VOCAB = 256 + len(SPECIALS) + N_TIMESTAMPS
EOS, BOS = 256, 257  # <|endoftext|>, <|startoftranscript|> (decoder_start)
WINDOW_SECONDS = 2


def write_tokenizer(model_dir):
    """GPT-2's byte-level BPE over single bytes (no merges) with Whisper's added tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    # GPT-2's printable stand-in of each byte: printable Latin-1 bytes are themselves, the
    # rest map to U+0100 onwards in byte order.
    keep = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
    others = [b for b in range(256) if b not in keep]
    char = {b: chr(b) for b in keep}
    char.update({b: chr(256 + i) for i, b in enumerate(others)})
    vocab = {char[b]: b for b in range(256)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    timestamps = [f"<|{i * 0.02:.2f}|>" for i in range(N_TIMESTAMPS)]
    tok.add_tokens(timestamps)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    tok.save(str(model_dir / "tokenizer.json"))
    (model_dir / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "WhisperTokenizer", "bos_token": "<|endoftext|>",
         "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}, indent=2) + "\n")
    (model_dir / "preprocessor_config.json").write_text(json.dumps(
        {"feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 80,
         "sampling_rate": 16000, "hop_length": 160, "n_fft": 400,
         "chunk_length": WINDOW_SECONDS, "n_samples": WINDOW_SECONDS * 16000,
         "nb_max_frames": WINDOW_SECONDS * 100, "padding_value": 0.0,
         "return_attention_mask": False}, indent=2) + "\n")


def main():
    torch.manual_seed(0)
    config = WhisperConfig(
        vocab_size=VOCAB,
        num_mel_bins=80,
        d_model=64,
        encoder_layers=2,
        encoder_attention_heads=4,
        decoder_layers=2,
        decoder_attention_heads=4,
        encoder_ffn_dim=96,
        decoder_ffn_dim=96,
        max_source_positions=WINDOW_SECONDS * 50,
        max_target_positions=24,
        activation_function="gelu",
        decoder_start_token_id=BOS,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=EOS,
        suppress_tokens=[1, 2, 3],
        begin_suppress_tokens=[32, EOS],
        tie_word_embeddings=True,
    )
    model = WhisperForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("embed_positions.weight") and "encoder" in name:
                continue  # the sinusoids transformers fills in; Whisper never trains them
            if p.dim() >= 2:
                p.normal_(0.0, 0.5)
            elif name.endswith("layer_norm.weight"):
                p.uniform_(0.8, 1.2)
            else:
                p.normal_(0.0, 0.05)

    model_dir = OUT / "tiny_random"
    if model_dir.exists():
        shutil.rmtree(model_dir)
    model.save_pretrained(model_dir, safe_serialization=True)
    write_tokenizer(model_dir)

    features = torch.rand(1, 80, WINDOW_SECONDS * 100) * 2.5 - 1.0
    prompt = torch.tensor([[BOS, 72, 101, 108, 263]], dtype=torch.long)
    with torch.no_grad():
        enc = model.model.encoder(features).last_hidden_state
        out = model(input_features=features, decoder_input_ids=prompt)
        prompt_logits = out.logits
        # Greedy continuation with the KV cache, one token per step, as a server decodes.
        past, cur, generated = None, prompt, []
        for _ in range(7):
            o = model(encoder_outputs=(enc,), decoder_input_ids=cur, past_key_values=past,
                      use_cache=True)
            past = o.past_key_values
            cur = o.logits[:, -1, :].argmax(-1, keepdim=True)
            generated.append(cur)
        # Logits after each greedy token, for the step after the prompt onwards.
        greedy = torch.cat([prompt] + generated, dim=1)
        full = model(input_features=features, decoder_input_ids=greedy).logits
    save_file(
        {
            "features": features.contiguous(),
            "encoder_out": enc.contiguous(),
            "prompt_ids": prompt.to(torch.int32),
            "prompt_logits": prompt_logits.contiguous(),
            "greedy_ids": greedy.to(torch.int32),
            "step_logits": full[:, prompt.shape[1] - 1:-1, :].contiguous(),
        },
        OUT / "reference.safetensors",
    )
    (OUT / "reference.json").write_text(
        json.dumps(
            {
                "transformers": transformers.__version__,
                "torch": torch.__version__,
                "prompt_ids": prompt[0].tolist(),
                "greedy_ids": greedy[0].tolist(),
            },
            indent=2,
        )
        + "\n"
    )
    print("wrote", OUT)


if __name__ == "__main__":
    main()
