#!/usr/bin/env python3
"""Reference values of the real Whisper tiny.en from transformers, for
tests/golden/whisper_tiny_en_test.cc (which runs when scripts/fetch_whisper.sh has imported
the model into ~/.cache/quantserve/whisper-tiny.en/hf, and says it skipped otherwise).

On tests/golden/fixtures/audio/hello_16k.wav, with the imported directory loaded in float32
(its float16 weights upcast, as quantserve computes):
  features [80, 3000]      WhisperFeatureExtractor (not stored: the test computes its own and
                           the front end's tests hold it to this extractor within 1.2e-7)
  encoder_rows [100, 384]  encoder last_hidden_state, rows 0..99 (the speech and the start
                           of the padding)
  sot_logits [51864]       decoder logits at <|startoftranscript|>
  greedy_ids [n] i32       generate(): the prompt's greedy tokens with timestamps, as
                           transformers decodes this clip (return_timestamps=True)

Usage:
    .venv-goldens/bin/python scripts/golden/gen_whisper_tiny_en_reference.py \
        [--model ~/.cache/quantserve/whisper-tiny.en/hf]
Writes tests/golden/fixtures/whisper/tiny_en_reference.safetensors and .json.
"""

import argparse
import json
from pathlib import Path

import soundfile as sf
import torch
import transformers
from safetensors.torch import save_file
from transformers import WhisperForConditionalGeneration, WhisperProcessor

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests/golden/fixtures/whisper"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(Path.home() / ".cache/quantserve/whisper-tiny.en/hf"))
    args = ap.parse_args()
    proc = WhisperProcessor.from_pretrained(args.model)
    model = WhisperForConditionalGeneration.from_pretrained(args.model,
                                                            dtype=torch.float32).eval()
    audio, rate = sf.read(ROOT / "tests/golden/fixtures/audio/hello_16k.wav", dtype="float32")
    assert rate == 16000
    feats = proc.feature_extractor(audio, sampling_rate=16000, return_tensors="pt").input_features
    sot = model.generation_config.decoder_start_token_id
    with torch.no_grad():
        enc = model.model.encoder(feats).last_hidden_state
        logits = model(encoder_outputs=(enc,), decoder_input_ids=torch.tensor([[sot]])).logits
        gen = model.generate(feats, return_timestamps=True, do_sample=False, num_beams=1)
    save_file(
        {
            "encoder_rows": enc[0, :100].contiguous(),
            "sot_logits": logits[0, 0].contiguous(),
            "greedy_ids": gen[0].to(torch.int32).contiguous(),
        },
        OUT / "tiny_en_reference.safetensors",
    )
    (OUT / "tiny_en_reference.json").write_text(json.dumps({
        "transformers": transformers.__version__, "torch": torch.__version__,
        "clip": "tests/golden/fixtures/audio/hello_16k.wav",
        "greedy_ids": gen[0].tolist(),
        "text": proc.batch_decode(gen, skip_special_tokens=True)[0],
    }, indent=2) + "\n")
    print(proc.batch_decode(gen, skip_special_tokens=True)[0], gen[0].tolist())


if __name__ == "__main__":
    main()
