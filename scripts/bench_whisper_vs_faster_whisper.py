#!/usr/bin/env python3
"""Speed of `quantserve transcribe` against faster-whisper on the same machine, in the same run:
the speech table of docs/benchmarks.md (issue 31's acceptance).

Both transcribe one file greedily (temperature 0 only, best of 1, no VAD, the text so far as
each window's prompt) with the same thread count. Runs alternate (ours, then faster-whisper
float32, then int8, then ours again, ...) so that a neighbour's load hits every engine alike,
and the table gives the median. Only the transcription is timed, file decoding and features
included, model loading excluded:
  - faster-whisper: the models are loaded once and warmed up by one transcription; a run is
    `transcribe()` plus consuming its segments;
  - quantserve: one process per run transcribes the file twice and the second file's stderr
    line (`transcribe: FILE: X s of audio in Y s`) is the time, warm as faster-whisper's.

Usage (the goldens venv has faster-whisper; scripts/fetch_whisper.sh makes both folders):
    .venv-goldens/bin/python scripts/bench_whisper_vs_faster_whisper.py \\
        --ct2 ~/.cache/quantserve/whisper-tiny.en/ct2 \\
        --model f16=~/.cache/quantserve/whisper-tiny.en/hf [--model W8=DIR ...] \\
        [--file long.wav] [--threads 1,2] [--repeats 5] [--binary build/quantserve]
        [--other-binary OLD_BUILD/quantserve]
Each --model is LABEL=DIR (or DIR, labelled by its folder name), e.g. a `quantserve quantize`
output. --other-binary adds a row for the first model run by another build (before/after
a change, in the same run). The long file is the one scripts/check_whisper_transcribe.py --out DIR writes
(DIR/wavs/long_en-us_150.wav, 37.7 s).
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

FW_TYPES = ["float32", "int8"]
CPU_FLAGS = ["avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8"]


def cpu_description():
    """lscpu's model name, core count and the flags that pick kernels, for the table header."""
    out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    name = fields.get("Model name", "?").strip()
    flags = fields.get("Flags", "").split()
    have = [f for f in CPU_FLAGS if f in flags]
    lack = [f for f in CPU_FLAGS if f not in flags]
    return (f"{name}, {os.cpu_count()} logical CPUs; has {' '.join(have) or 'none of them'}; "
            f"lacks {' '.join(lack) or 'none'}")


def parse_model(spec):
    label, sep, path = spec.partition("=")
    if not sep:
        path, label = spec, Path(spec).expanduser().name
    return label, str(Path(path).expanduser())


def ours_once(binary, model, path, threads):
    """(seconds, text) of the second of two transcriptions of `path` in one process."""
    cmd = [binary, "transcribe", "--model", model, "--temperature", "0", "--threads",
           str(threads), str(path), str(path)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    times = re.findall(r"of audio in ([0-9.]+) s", r.stderr)
    if len(times) != 2:
        sys.exit(f"no timing line in quantserve's stderr:\n{r.stderr}")
    texts = [t for t in r.stdout.splitlines() if t.strip()]
    return float(times[1]), texts[-1].strip() if texts else ""


class FasterWhisper:
    def __init__(self, ct2, compute_type, threads, path):
        from faster_whisper import WhisperModel
        self.model = WhisperModel(ct2, device="cpu", compute_type=compute_type,
                                  cpu_threads=threads)
        self.path = str(path)
        self.once()  # warm-up: first-call allocations, caches

    def once(self):
        t0 = time.perf_counter()
        segments, _ = self.model.transcribe(self.path, beam_size=1, best_of=1, temperature=0.0,
                                            language="en", vad_filter=False)
        text = "".join(s.text for s in segments).strip()
        return time.perf_counter() - t0, text


def audio_seconds(path):
    from faster_whisper import decode_audio
    return len(decode_audio(str(path))) / 16000.0


def main():
    root = Path(__file__).resolve().parents[1]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ct2", required=True, help="the CTranslate2 Whisper folder")
    ap.add_argument("--model", action="append", required=True,
                    help="LABEL=DIR of a quantserve Whisper checkpoint (repeatable)")
    ap.add_argument("--file", default="/tmp/wcheck/wavs/long_en-us_150.wav")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--binary", default=str(root / "build/quantserve"))
    ap.add_argument("--other-binary", help="also run the first model with this build")
    args = ap.parse_args()
    path = Path(args.file)
    if not path.exists():
        sys.exit(f"{path} is missing: scripts/check_whisper_transcribe.py --out DIR writes it")
    models = [(label, d, args.binary) for label, d in map(parse_model, args.model)]
    if args.other_binary:
        models.insert(1, (f"{models[0][0]} ({args.other_binary})", models[0][1], args.other_binary))
    thread_counts = [int(t) for t in args.threads.split(",")]
    duration = audio_seconds(path)

    rows = []  # (threads, engine, label, median s, texts equal to fw float32)
    for threads in thread_counts:
        fw = {ct: FasterWhisper(args.ct2, ct, threads, path) for ct in FW_TYPES}
        times = {("fw", ct): [] for ct in FW_TYPES}
        times.update({("ours", label): [] for label, _, _ in models})
        texts = {}
        for rep in range(args.repeats):
            for label, model, binary in models:
                t, texts[("ours", label)] = ours_once(binary, model, path, threads)
                times[("ours", label)].append(t)
                for ct in FW_TYPES:  # one faster-whisper run after each of ours
                    if len(times[("fw", ct)]) <= rep:
                        t, texts[("fw", ct)] = fw[ct].once()
                        times[("fw", ct)].append(t)
            print(f"threads {threads}, run {rep + 1}/{args.repeats}: " +
                  ", ".join(f"{k[1]} {v[-1]:.2f} s" for k, v in times.items()), file=sys.stderr)
        for (engine, label), ts in times.items():
            rows.append((threads, engine, label, statistics.median(ts),
                         texts[(engine, label)] == texts[("fw", "float32")]))
        del fw

    print(f"\n{path.name}: {duration:.1f} s of audio; {args.repeats} runs each, median; "
          f"{cpu_description()}\n")
    print("| threads | engine | weights | median s | audio s / s | vs fw float32 | vs fw int8 "
          "| text = fw float32 |")
    print("|---|---|---|---|---|---|---|---|")
    for threads, engine, label, t, same in rows:
        base = {r[2]: r[3] for r in rows if r[0] == threads and r[1] == "fw"}
        name = "faster-whisper" if engine == "fw" else "quantserve"
        print(f"| {threads} | {name} | {label} | {t:.3f} | {duration / t:.1f} | "
              f"{base['float32'] / t:.2f}x | {base['int8'] / t:.2f}x | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
