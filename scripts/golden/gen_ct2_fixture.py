#!/usr/bin/env python3
"""Generates the CTranslate2 Whisper fixture in tests/golden/fixtures/ct2/.

A random transformers WhisperForConditionalGeneration (seed 0, float16: d_model 64, 2 encoder
and 2 decoder layers of 2 heads, ffn 256, 80 mel bins, 96 source and 40 target positions, so
that nothing can pass by assuming tiny.en's 1500 and 448) with a hand-made byte-level BPE
tokenizer laid out as Whisper's is (bytes, a few merges, <|endoftext|>, <|startoftranscript|>,
two language tokens, the task and prompt tokens, <|notimestamps|>, then timestamp tokens), so
the vocabulary is 288 entries and the fixture stays small. Weights are drawn at std 0.5; two
layer norms keep their init (ones, zeros) so that CTranslate2 stores them as aliases.

The model is converted by CTranslate2's own converter, twice:
  whisper_tiny_random/ct2/        quantization none (the float16 tensors as they are)
  whisper_tiny_random/ct2_int8/   int8_float16 (int8 weights with per-row scales)
and the transformers directory the converter read is kept as the reference:
  whisper_tiny_random/hf/         config.json, generation_config.json, model.safetensors,
                                  tokenizer.json, tokenizer_config.json

Install: the goldens venv (scripts/golden/requirements.txt) plus
scripts/golden/requirements-ct2.txt. Regenerate (deterministic on CPU; overwrites the folder):
    .venv-goldens/bin/python scripts/golden/gen_ct2_fixture.py
"""

import json
import shutil
import tempfile
from pathlib import Path

import ctranslate2
import torch
import transformers
from ctranslate2.converters import TransformersConverter
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import WhisperConfig, WhisperForConditionalGeneration

OUT = Path(__file__).resolve().parents[2] / "tests/golden/fixtures/ct2/whisper_tiny_random"
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("Ġ", "a"), ("i", "n"), ("Ġ", "s")]
SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|de|>", "<|translate|>",
            "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>",
            "<|notimestamps|>"]
N_TIMESTAMPS = 16


def byte_level_alphabet():
    # GPT-2's bytes_to_unicode order, the one Whisper's vocabulary starts with.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def make_tokenizer(folder):
    vocab = {s: i for i, s in enumerate(byte_level_alphabet())}
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    bpe = models.BPE(vocab=vocab, merges=MERGES)
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    tok.add_tokens(["<|%.2f|>" % (i * 0.02) for i in range(N_TIMESTAMPS)])
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "WhisperTokenizer", "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>", "model_max_length": 1024,
        "additional_special_tokens": SPECIALS[1:]}, indent=2) + "\n")
    return tok


def main():
    torch.manual_seed(0)
    hf = OUT / "hf"
    shutil.rmtree(OUT, ignore_errors=True)
    hf.mkdir(parents=True)
    tok = make_tokenizer(hf)
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    eot, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    begin_suppress = [tok.token_to_id("Ġ"), eot]
    suppress = [1, 2, 7] + [ids[s] for s in SPECIALS[4:9]]
    config = WhisperConfig(
        vocab_size=tok.get_vocab_size(), num_mel_bins=80, d_model=64,
        encoder_layers=2, encoder_attention_heads=2, decoder_layers=2,
        decoder_attention_heads=2, encoder_ffn_dim=256, decoder_ffn_dim=256,
        max_source_positions=96, max_target_positions=40, activation_function="gelu",
        decoder_start_token_id=sot, bos_token_id=sot, eos_token_id=eot, pad_token_id=eot,
        begin_suppress_tokens=begin_suppress, suppress_tokens=suppress)
    model = WhisperForConditionalGeneration(config).eval()
    keep_init = ("model.encoder.layers.1.final_layer_norm.", "model.decoder.layer_norm.")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.startswith(keep_init):
                p.normal_(0.0, 0.5)
    model = model.half()
    gen = model.generation_config
    gen.alignment_heads = [[1, 0], [1, 1]]
    gen.begin_suppress_tokens, gen.suppress_tokens = begin_suppress, suppress
    gen.decoder_start_token_id, gen.bos_token_id = sot, sot
    gen.eos_token_id, gen.pad_token_id = eot, eot
    gen.no_timestamps_token_id = ids["<|notimestamps|>"]
    gen.prev_sot_token_id = ids["<|startofprev|>"]
    gen.forced_decoder_ids = [[1, ids["<|notimestamps|>"]]]
    gen.is_multilingual = False
    gen.max_initial_timestamp_index = 50
    gen.max_length = config.max_target_positions
    gen.return_timestamps = False
    model.save_pretrained(hf)

    for sub, quantization in (("ct2", None), ("ct2_int8", "int8_float16")):
        with tempfile.TemporaryDirectory() as tmp:
            # The converter refuses an existing output folder unless forced.
            TransformersConverter(str(hf), copy_files=["tokenizer.json"]).convert(
                str(Path(tmp) / sub), quantization=quantization)
            shutil.copytree(Path(tmp) / sub, OUT / sub)
    (OUT / "versions.json").write_text(json.dumps({
        "torch": torch.__version__, "transformers": transformers.__version__,
        "ctranslate2": ctranslate2.__version__}, indent=2) + "\n")


if __name__ == "__main__":
    main()
