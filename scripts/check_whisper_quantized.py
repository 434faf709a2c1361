#!/usr/bin/env python3
"""Does a Whisper directory written by `quantserve quantize` load elsewhere? Loads it with
transformers' WhisperForConditionalGeneration through auto-round's quantization support
(quant_method "auto-round": importing auto_round first registers its backends; auto-round
0.16 no longer exports AutoRoundConfig, which transformers itself now defines), counts the
block linears that became auto-round QuantLinear modules, and transcribes one espeak-ng WAV
greedily (num_beams 1, no sampling). Prints that text next to `quantserve transcribe
--temperature 0` on the same directory and WAV, with each one's word error rate against the
sentence spoken. Exits non-zero when a model does not load or a block linear of a quantized one
stayed dense (a 16-bit --model, e.g. the source, is a reference row).

Usage (the goldens venv has transformers, auto-round and torch; espeak-ng and sox speak):
    .venv-goldens/bin/python scripts/check_whisper_quantized.py \
        --model ~/.cache/quantserve/whisper-tiny.en/hf --model ~/.cache/quantserve/whisper-tiny.en/w8 \
        --model ~/.cache/quantserve/whisper-tiny.en/w4g32 [--binary build/quantserve]
"""

import argparse
import json
import subprocess
import sys
import tempfile
import wave
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_whisper_transcribe import speak, wer  # noqa: E402

SENTENCE = "Can you tell me how to get to the nearest post office?"


def read_wav(path):
    with wave.open(str(path)) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        import numpy as np

        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype("float32") / 32768


def transformers_text(model_dir, audio):
    import auto_round  # noqa: F401  (registers auto-round's inference backends with transformers)
    import torch
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    model = WhisperForConditionalGeneration.from_pretrained(model_dir, device_map="cpu",
                                                            dtype=torch.float32)
    quantized = dense = 0
    for name, module in model.named_modules():
        if ".layers." not in name or not name.split(".")[-1].endswith(("proj", "fc1", "fc2")):
            continue
        if type(module).__name__ == "Linear":
            dense += 1
        else:
            quantized += 1
    kind = {type(m).__name__ for n, m in model.named_modules() if n.endswith(".fc1")}
    processor = WhisperProcessor.from_pretrained(model_dir)
    features = processor(audio, sampling_rate=16000, return_tensors="pt").input_features
    with torch.no_grad():
        ids = model.generate(features, do_sample=False, num_beams=1, max_new_tokens=128)
    text = processor.batch_decode(ids, skip_special_tokens=True)[0].strip()
    return text, quantized, dense, sorted(kind)


def quantserve_text(binary, model_dir, wav):
    out = subprocess.run([binary, "transcribe", "--model", str(model_dir), "--response-format",
                          "json", "--temperature", "0", "--threads", "2", str(wav)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["text"].strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--binary", default=str(Path(__file__).resolve().parents[1] / "build/quantserve"))
    args = ap.parse_args()
    wav = speak(Path(tempfile.mkdtemp(prefix="qs-whisper-q-")), "post_office", "en-us", 160, 0,
                SENTENCE)
    audio = read_wav(wav)
    failures = 0
    print(f"spoken ({wav.name}, espeak-ng en-us 160 wpm): {SENTENCE}")
    print("| model | loads in transformers | QuantLinear / dense block linears | transformers text "
          "| WER | quantserve text | WER |")
    print("|---|---|---|---|---|---|---|")
    for m in args.model:
        name = Path(m).name
        ours = quantserve_text(args.binary, m, wav)
        try:
            text, quantized, dense, kind = transformers_text(m, audio)
            loads = "yes (" + ", ".join(kind) + ")"
        except Exception as e:  # report why, then go on with the next model
            text, quantized, dense, loads = "-", 0, 0, f"no: {type(e).__name__}: {e}"
            failures += 1
        # A 16-bit directory may be given as the reference row: only quantized ones must be packed.
        config = json.loads((Path(m) / "config.json").read_text())
        if dense and "quantization_config" in config:
            failures += 1
        print(f"| {name} | {loads} | {quantized} / {dense} | {text} | "
              f"{wer(SENTENCE, text) if text != '-' else float('nan'):.3f} | {ours} | "
              f"{wer(SENTENCE, ours):.3f} |")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
