#!/usr/bin/env python3
"""Checks `quantserve import ct2` on a real Whisper model with two independent runtimes.

The imported Hugging Face folder is loaded by transformers (AutoProcessor, which must give a
WhisperProcessor, and WhisperForConditionalGeneration in float32); the original CTranslate2
folder by faster-whisper (compute_type float32). One espeak-ng sentence, resampled to 16 kHz
mono by sox, is transcribed greedily without timestamps.

The two front ends do not compute the same log-mel (faster-whisper's numpy STFT pads the
audio its own way: up to 0.7 apart on the same samples), and tiny.en on synthetic speech is
unsure enough for that to change words. So the check that compares the models gives both the
same features: each front end's features go through transformers' generate() and through
faster-whisper's CTranslate2 model (its prompt and suppression), and the texts must be equal
for both. faster-whisper's own end-to-end transcribe() is printed for information.

Run by hand in the goldens venv (scripts/golden/requirements-ct2.txt), after
scripts/fetch_whisper.sh:
    .venv-goldens/bin/python scripts/check_whisper_import.py \\
        --ct2 ~/.cache/quantserve/whisper-tiny.en/ct2 --hf ~/.cache/quantserve/whisper-tiny.en/hf
"""
import argparse
import subprocess
import sys
import tempfile
import wave
from pathlib import Path

import numpy as np

SENTENCE = "The quick brown fox jumps over the lazy dog near the river bank."


def speech(text, workdir):
    raw, wav = Path(workdir) / "espeak.wav", Path(workdir) / "speech16k.wav"
    subprocess.run(["espeak-ng", "-w", str(raw), text], check=True)
    subprocess.run(["sox", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(wav)], check=True)
    with wave.open(str(wav)) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    return pcm.astype(np.float32) / 32768.0


class Transformers:
    def __init__(self, hf_dir):
        import torch
        from transformers import AutoProcessor, WhisperForConditionalGeneration, WhisperProcessor

        self.torch = torch
        self.processor = AutoProcessor.from_pretrained(hf_dir)
        assert isinstance(self.processor, WhisperProcessor), type(self.processor)
        self.model = WhisperForConditionalGeneration.from_pretrained(
            hf_dir, dtype=torch.float32).eval()

    def features(self, audio):
        return self.processor(audio, sampling_rate=16000, return_tensors="np").input_features

    def text(self, features):
        with self.torch.no_grad():
            ids = self.model.generate(self.torch.from_numpy(features), num_beams=1,
                                      do_sample=False)
        return self.processor.batch_decode(ids, skip_special_tokens=True)[0].strip()


class FasterWhisper:
    def __init__(self, ct2_dir):
        from faster_whisper import WhisperModel
        from faster_whisper.tokenizer import Tokenizer

        self.model = WhisperModel(ct2_dir, device="cpu", compute_type="float32")
        self.tokenizer = Tokenizer(self.model.hf_tokenizer, self.model.model.is_multilingual,
                                   task="transcribe", language="en")

    def features(self, audio):
        # As transcribe() makes its first 30 s window: the whole clip, padded to 3000 frames.
        f = self.model.feature_extractor(audio)[:, :3000]
        return np.pad(f, ((0, 0), (0, 3000 - f.shape[1])))[None].astype(np.float32)

    def text(self, features):
        import ctranslate2

        prompt = list(self.tokenizer.sot_sequence) + [self.tokenizer.no_timestamps]
        result = self.model.model.generate(
            ctranslate2.StorageView.from_array(np.ascontiguousarray(features)), [prompt],
            beam_size=1, suppress_blank=True, suppress_tokens=[-1], max_length=448)
        ids = [t for t in result[0].sequences_ids[0] if t < self.tokenizer.eot]
        return self.tokenizer.decode(ids).strip()

    def transcribe(self, audio):
        # One greedy pass: no temperature fallback, no previous-text prompt, no VAD.
        segments, _ = self.model.transcribe(
            audio, beam_size=1, temperature=0.0, without_timestamps=True,
            condition_on_previous_text=False, vad_filter=False,
            compression_ratio_threshold=None, log_prob_threshold=None, no_speech_threshold=None)
        return "".join(s.text for s in segments).strip()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ct2", required=True, help="the original CTranslate2 folder")
    p.add_argument("--hf", required=True, help="what `quantserve import ct2` wrote")
    p.add_argument("--text", default=SENTENCE, help="the sentence espeak-ng speaks")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        audio = speech(args.text, tmp)
    print(f"audio: {len(audio) / 16000:.2f} s of espeak-ng: {args.text!r}")
    hf, fw = Transformers(args.hf), FasterWhisper(args.ct2)
    failed = False
    for front_end in (hf, fw):
        features = front_end.features(audio)
        ours, ref = hf.text(features), fw.text(features)
        name = type(front_end).__name__
        print(f"{name} features -> transformers on the import: {ours!r}")
        print(f"{name} features -> faster-whisper's model:     {ref!r}")
        failed |= ours != ref
    print(f"faster-whisper transcribe() end to end (not compared): {fw.transcribe(audio)!r}")
    if failed:
        print("MISMATCH", file=sys.stderr)
        return 1
    print("OK: equal transcriptions from the same features")
    return 0


if __name__ == "__main__":
    sys.exit(main())
