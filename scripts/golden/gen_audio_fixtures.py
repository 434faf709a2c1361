#!/usr/bin/env python3
"""Generates the audio front end's fixtures in tests/golden/fixtures/audio/ (see its README.md).

Speech comes from espeak-ng (1.51) and is converted by sox (14.4.2, dither off so the 16-bit
samples are deterministic); the MP3 is written by soundfile's bundled libsndfile (LAME).
References, from the samples as soundfile reads them (libsndfile's float read: s / 32768):
  - <clip>.hf<n_mels>.f32: transformers' WhisperFeatureExtractor, numpy path (torch is in the
    venv, so its torch path is switched off), padded to 30 s; only the first
    ceil(len / 160) + 10 frames are kept (the rest are all padding, at the floor value);
  - <clip>.fw<n_mels>.f32: faster-whisper's FeatureExtractor(waveform, padding=160), whole;
  - fox_22050_stereo.soxr16k.f32: the FLAC's channels averaged (float32), resampled
    22050 -> 16000 Hz by python-soxr (libsoxr 0.1.3, quality "HQ");
  - reference.json: each file's rate, channels and frame count, the arrays' shapes, and
    librosa's Slaney mel filter banks (80 and 128 bins) in sparse form (each row's first
    nonzero bin and its nonzero weights), f64.

Install (into the venv of scripts/golden/requirements.txt):
    .venv-goldens/bin/pip install --no-deps -r scripts/golden/requirements-audio.txt
Regenerate (needs espeak-ng and sox on PATH; the OGG and MP3 streams carry a random serial
number, so their bytes change from run to run, everything else is reproducible):
    .venv-goldens/bin/python scripts/golden/gen_audio_fixtures.py --out tests/golden/fixtures/audio
"""

import argparse
import json
import math
import re
import subprocess
import tempfile
from pathlib import Path

import faster_whisper.feature_extractor as fw_fe
import librosa
import numpy as np
import soundfile as sf
import soxr
import transformers.models.whisper.feature_extraction_whisper as hf_fe

# name -> (espeak-ng voice, words per minute, text)
SPEECH = {
    "hello": ("en-us", 170, "Hello world, this is a test."),
    "fox": ("en-gb", 160, "The quick brown fox."),
}
PAD_FRAMES = 10
TRIM = ["silence", "1", "0.01", "0.1%", "reverse", "silence", "1", "0.01", "0.1%", "reverse"]
STEREO_SECONDS = "0.8"


def run(*cmd):
    subprocess.run(cmd, check=True)


def speak(name, tmp):
    voice, wpm, text = SPEECH[name]
    raw = tmp / f"{name}_raw.wav"  # espeak-ng's own rate, 22050 Hz mono 16-bit
    run("espeak-ng", "-v", voice, "-s", str(wpm), "-w", str(raw), text)
    # The silence espeak-ng puts around the speech, trimmed to keep the fixtures small.
    path = tmp / f"{name}_22050.wav"
    run("sox", "-D", str(raw), str(path), *TRIM)
    return path


def write_f32(out, name, array):
    a = np.ascontiguousarray(array, dtype="<f4")
    (out / name).write_bytes(a.tobytes())
    return {"file": name, "shape": list(a.shape)}


def hf_features(samples, n_mels):
    # transformers picks its torch path when torch imports; the numpy path is the reference.
    hf_fe.is_torch_available = lambda: False
    fe = hf_fe.WhisperFeatureExtractor(feature_size=n_mels)
    return fe(samples, sampling_rate=16000, return_tensors="np")["input_features"][0]


def sparse_bank(n_mels):
    bank = librosa.filters.mel(sr=16000, n_fft=400, n_mels=n_mels, fmin=0.0, fmax=8000.0,
                               htk=False, norm="slaney", dtype=np.float64)
    first, weights = [], []
    for row in bank:
        nz = np.nonzero(row)[0]
        first.append(int(nz[0]))
        weights.append([float(w) for w in row[nz[0]:nz[-1] + 1]])
    return {"n_fft": 400, "sample_rate": 16000, "first": first, "weights": weights}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    ref = {"files": {}, "features": {}, "resampled": {}, "mel_banks": {}}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        hello, fox = speak("hello", tmp), speak("fox", tmp)
        run("sox", "-D", str(hello), "-r", "16000", "-c", "1", "-b", "16",
            str(out / "hello_16k.wav"))
        run("sox", "-D", str(fox), "-r", "16000", "-c", "1", "-b", "16", str(out / "fox_16k.wav"))
        # Two different channels, so that the mean is not either of them; its first 0.8 s.
        run("sox", "-D", str(fox), "-c", "2", str(out / "fox_22050_stereo.flac"),
            "remix", "1v0.9", "1v-0.4", "trim", "0", STEREO_SECONDS)
        run("sox", "-D", str(out / "hello_16k.wav"), "-C", "0", str(out / "hello_16k.ogg"))
    hello16, _ = sf.read(out / "hello_16k.wav", dtype="float32")
    sf.write(out / "hello_16k.mp3", hello16, 16000, format="MP3", subtype="MPEG_LAYER_III")

    for f in ["hello_16k.wav", "fox_16k.wav", "fox_22050_stereo.flac", "hello_16k.ogg",
              "hello_16k.mp3"]:
        info = sf.info(out / f)
        frames = len(sf.read(out / f, dtype="float32")[0])
        ref["files"][f] = {"sample_rate": info.samplerate, "channels": info.channels,
                           "frames": frames}

    for clip, n_mels, kinds in [("hello_16k.wav", 80, ("hf", "fw")), ("fox_16k.wav", 128, ("hf",))]:
        samples, _ = sf.read(out / clip, dtype="float32")
        stem = clip.split(".")[0]
        if "hf" in kinds:
            keep = math.ceil(len(samples) / 160) + PAD_FRAMES
            full = hf_features(samples, n_mels)
            assert full.shape == (n_mels, 3000)
            # Frames past `keep` are padding; the test checks they sit at the floor.
            assert np.all(full[:, keep:] == full.min())
            entry = write_f32(out, f"{stem}.hf{n_mels}.f32", full[:, :keep])
            entry.update(clip=clip, n_mels=n_mels, total_frames=3000, floor=float(full.min()))
            ref["features"][f"{stem}.hf{n_mels}"] = entry
        if "fw" in kinds:
            feats = fw_fe.FeatureExtractor(feature_size=n_mels)(samples, padding=160)
            entry = write_f32(out, f"{stem}.fw{n_mels}.f32", feats)
            entry.update(clip=clip, n_mels=n_mels, padding=160)
            ref["features"][f"{stem}.fw{n_mels}"] = entry

    stereo, rate = sf.read(out / "fox_22050_stereo.flac", dtype="float32")
    mono = stereo.mean(axis=1, dtype=np.float32)
    resampled = soxr.resample(mono, rate, 16000, quality="HQ")
    entry = write_f32(out, "fox_22050_stereo.soxr16k.f32", resampled)
    entry.update(clip="fox_22050_stereo.flac", from_rate=rate, to_rate=16000,
                 resampler=f"python-soxr {soxr.__version__} HQ")
    ref["resampled"]["fox_22050_stereo"] = entry

    for n_mels in (80, 128):
        ref["mel_banks"][str(n_mels)] = sparse_bank(n_mels)
    ref["versions"] = {"librosa": librosa.__version__, "soxr": soxr.__version__,
                       "transformers": hf_fe.__name__.split(".")[0] + " " +
                       __import__("transformers").__version__,
                       "faster_whisper": __import__("faster_whisper").__version__,
                       "numpy": np.__version__}
    # One line per list of numbers (the banks' rows, shapes) keeps the file small and readable.
    text = re.sub(r"\[[-0-9.e,\s]+\]", lambda m: "".join(m.group(0).split()).replace(",", ", "),
                  json.dumps(ref, indent=1))
    (out / "reference.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
