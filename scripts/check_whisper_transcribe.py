#!/usr/bin/env python3
"""quantserve transcribe against faster-whisper on espeak-ng speech: the acceptance table of
docs/audio.md.

Speaks the utterances below with espeak-ng (several voices and rates), mixes some with white
noise by sox (-R: the same noise every run), joins six sentences into one file longer than
30 s, resamples all to 16 kHz mono 16-bit, then transcribes each file twice, greedily
(temperature 0 only, best of 1, no VAD):
  - faster-whisper on the CTranslate2 folder (compute_type float32, beam_size 1);
  - `quantserve transcribe --response-format verbose_json --temperature 0` on the imported
    HF directory (and on each extra --model given, e.g. quantized copies).
It prints a markdown table (text of each, exact match, largest timestamp difference, word
error rate against the sentence spoken) and exits non-zero when a text differs or a
timestamp is more than 0.02 s off (for the first --model; extra models are only scored).

Usage (the goldens venv has faster-whisper; scripts/fetch_whisper.sh makes both folders):
    .venv-goldens/bin/python scripts/check_whisper_transcribe.py \
        --ct2 ~/.cache/quantserve/whisper-tiny.en/ct2 --model ~/.cache/quantserve/whisper-tiny.en/hf \
        [--model W8_DIR --model W4G32_DIR] [--binary build/quantserve] [--out DIR] [--threads 2]
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "The weather today is sunny with a light breeze from the west.",
    "I would like to book a table for two people at seven o'clock.",
    "Quantization makes large language models smaller and faster.",
    "She sells sea shells by the sea shore.",
    "The train to London leaves from platform nine in ten minutes.",
    "Can you tell me how to get to the nearest post office?",
    "My favourite colour is blue, but I also like green.",
    "Open the window, it is getting very warm in here.",
]
# (voice, words per minute, noise amplitude or 0)
STYLES = [("en-us", 160, 0), ("en-gb", 140, 0), ("en-us", 200, 0.02), ("en-gb-x-rp", 175, 0.05)]


def run(*cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def make_utterances(out: Path):
    """Writes the WAVs; returns [(name, path, text)]."""
    out.mkdir(parents=True, exist_ok=True)
    items = []
    k = 0
    for i, text in enumerate(SENTENCES):
        for j in range(2):  # two styles per sentence: 20 utterances
            voice, wpm, noise = STYLES[(i + j) % len(STYLES)]
            name = f"u{k:02d}_{voice}_{wpm}" + (f"_noise{noise}" if noise else "")
            items.append((name, speak(out, name, voice, wpm, noise, text), text))
            k += 1
    long_text = " ".join(SENTENCES)  # every sentence: about 45 s
    items.append(("long_en-us_150", speak(out, "long_en-us_150", "en-us", 150, 0, long_text),
                  long_text))
    return items


def speak(out: Path, name, voice, wpm, noise, text):
    raw = out / f"{name}.raw.wav"
    path = out / f"{name}.wav"
    run("espeak-ng", "-v", voice, "-s", str(wpm), "-w", str(raw), text)
    if noise:
        mixed = out / f"{name}.mix.wav"
        dur = run("soxi", "-D", str(raw), capture_output=True, text=True).stdout.strip()
        noise_path = out / f"{name}.noise.wav"
        run("sox", "-R", "-n", "-r", "22050", "-c", "1", "-b", "16", str(noise_path), "synth", dur,
            "whitenoise", "vol", str(noise))
        run("sox", "-m", str(raw), str(noise_path), str(mixed))
        noise_path.unlink()
        raw.unlink()
        raw = mixed
    run("sox", "-D", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(path))
    raw.unlink()
    return path


def normalize(text):
    text = text.lower().replace("'", "")
    return re.sub(r"[^a-z0-9 ]+", " ", text).split()


def wer(ref, hyp):
    r, h = normalize(ref), normalize(hyp)
    d = list(range(len(h) + 1))
    for i in range(1, len(r) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(h) + 1):
            cur = d[j]
            d[j] = min(d[j] + 1, d[j - 1] + 1, prev + (r[i - 1] != h[j - 1]))
            prev = cur
    return d[len(h)] / max(len(r), 1)


def faster_whisper_segments(ct2_dir, path, threads):
    from faster_whisper import WhisperModel

    global _FW
    if "_FW" not in globals():
        _FW = WhisperModel(str(ct2_dir), device="cpu", compute_type="float32",
                           cpu_threads=threads)
    segs, _ = _FW.transcribe(str(path), beam_size=1, best_of=1, temperature=0.0,
                             language="en", vad_filter=False)
    return [(s.start, s.end, s.text) for s in segs]


def ours_segments(binary, model, path, threads):
    out = run(binary, "transcribe", "--model", str(model), "--response-format", "verbose_json",
              "--temperature", "0", "--threads", str(threads), str(path),
              capture_output=True, text=True).stdout
    v = json.loads(out)
    return [(s["start"], s["end"], s["text"]) for s in v["segments"]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ct2", required=True)
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--binary", default=str(Path(__file__).resolve().parents[1] / "build/quantserve"))
    ap.add_argument("--out", default=None, help="where the WAVs go (default: a temp folder)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    wav_dir = Path(args.out or tempfile.mkdtemp(prefix="qs-whisper-"))
    items = make_utterances(wav_dir)
    failures = 0
    header = "| file | spoken | faster-whisper | quantserve | same | max dt (s) | WER fw | WER ours |"
    extra = [Path(m).name for m in args.model[1:]]
    for e in extra:
        header += f" WER {e} |"
    print(header)
    print("|" + "---|" * (8 + len(extra)))
    totals = [0.0] * (2 + len(extra))
    for name, path, text in items:
        fw = faster_whisper_segments(args.ct2, path, args.threads)
        ours = ours_segments(args.binary, args.model[0], path, args.threads)
        fw_text = "".join(s[2] for s in fw).strip()
        our_text = "".join(s[2] for s in ours).strip()
        same = fw_text == our_text
        dt = max((max(abs(a[0] - b[0]), abs(a[1] - b[1])) for a, b in zip(fw, ours)), default=0.0)
        if len(fw) != len(ours):
            dt = float("inf")
        ok = same and dt <= 0.02 + 1e-9
        failures += not ok
        w = [wer(text, fw_text), wer(text, our_text)]
        for m in args.model[1:]:
            w.append(wer(text, "".join(s[2] for s in ours_segments(args.binary, m, path,
                                                                   args.threads))))
        totals = [t + x for t, x in zip(totals, w)]
        row = (f"| {name} | {text} | {fw_text} | {our_text} | {'yes' if same else '**no**'} | "
               f"{dt:.3f} | {w[0]:.3f} | {w[1]:.3f} |")
        for x in w[2:]:
            row += f" {x:.3f} |"
        print(row, flush=True)
    n = len(items)
    print(f"\nmean WER over {n} files: faster-whisper {totals[0] / n:.4f}, quantserve "
          f"{totals[1] / n:.4f}" + "".join(f", {e} {t / n:.4f}" for e, t in zip(extra, totals[2:])))
    print(f"{n - failures} of {n} equal to faster-whisper (text exact, timestamps within 0.02 s)")
    print(f"WAVs in {wav_dir}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
