#!/usr/bin/env python3
"""Replays a sample of the fuzzers' inputs through the quantserve command line: each input is
planted, as the fuzz target reads it, into a copy of the in-tree fixture checkpoint (or passed
to `import gguf` / `import llama2c` / `import ct2`, or into a copy of the tiny FLUX.1 pipeline for
`generate-image`), and the command is run. Inputs come from fuzz/regressions
(inputs that once crashed a parser), fuzz/seeds, and build-san/corpus when a local campaign
left one; each seed is also replayed cut to half its length, which makes most of them
malformed. For every run it prints the exit code and the first error line.

The promise checked (--check, exit 1 when broken): no run dies from a signal or a sanitizer
report, and every run that fails exits 1 with an error line naming the file it planted (or,
for files that are well formed but disagree with the rest of the checkpoint, the checkpoint
or the config.json field they contradict).

  scripts/replay_findings_cli.py [--binary build/quantserve] [--per-target N] [--check]"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "tests", "golden", "fixtures", "quant", "llama_gptq_w4g128")
SEP = b"\n%%%%\n"  # fuzz/fuzz_util.h kSeparator
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
                   "tokenizer.model"]

# target -> (files its parts become, files of the fixture removed first). The files are those
# the fuzz target writes (fuzz/*_fuzz.cc); None marks a part that is no file (the text and ids
# a tokenizer target encodes and decodes).
CHECKPOINT_TARGETS = {
    "safetensors": (["model.safetensors"], []),
    "checkpoint_index": (["model.safetensors.index.json", "model-00001-of-00002.safetensors",
                          "model-00002-of-00002.safetensors"], ["model.safetensors"]),
    "model_config": (["config.json"], []),
    "quant_config": (["config.json", "quantization_config.json", "quantize_config.json"],
                     ["quantization_config.json"]),
    "generation_config": (["generation_config.json"], []),
    "tokenizer_json": (["tokenizer.json", "tokenizer_config.json", None, None], TOKENIZER_FILES),
    "vocab_merges": (["vocab.json", "merges.txt", "tokenizer_config.json", None, None],
                     TOKENIZER_FILES),
    "tiktoken": (["tokenizer.model", "tokenizer_config.json", None, None], TOKENIZER_FILES),
    "sentencepiece": (["tokenizer.model", "tokenizer_config.json", None, None], TOKENIZER_FILES),
    # quantization_config + "n k" + the module's tensors: the tensors become the checkpoint.
    "quant_layouts": ([None, None, "model.safetensors"], []),
}
IMPORT_TARGETS = ["gguf", "llama2c", "ct2"]
# The image pipeline's targets, planted into a copy of the tiny FLUX.1 pipeline and run through
# `generate-image`: target -> the files its parts become (an empty part keeps the fixture's).
FLUX = os.path.join(ROOT, "tests", "golden", "fixtures", "flux", "tiny_pipeline")
PIPELINE_TARGETS = {
    "flux_pipeline": ["model_index.json", "scheduler/scheduler_config.json",
                      "transformer/config.json", "vae/config.json", "text_encoder/config.json",
                      "text_encoder_2/config.json", "tokenizer/tokenizer.json",
                      "tokenizer_2/tokenizer.json", None],
    "clip_tokenizer": ["tokenizer/tokenizer.json", "tokenizer/vocab.json", "tokenizer/merges.txt",
                       None],
    "unigram_tokenizer": ["tokenizer_2/tokenizer.json", None],
}
CRASH = re.compile(r"AddressSanitizer|UndefinedBehaviorSanitizer|runtime error:|LeakSanitizer|"
                   r"terminate called|Segmentation fault|Aborted")


def sample(target, per_target):
    """(label, bytes) of the inputs to replay for `target`, at most per_target per source."""
    out = []
    for kind in ("regressions", "seeds"):
        d = os.path.join(ROOT, "fuzz", kind, target)
        names = sorted(os.listdir(d)) if os.path.isdir(d) else []
        step = max(1, len(names) // per_target)
        for name in names[::step][:per_target]:
            with open(os.path.join(d, name), "rb") as f:
                data = f.read()
            out.append((f"{kind}/{target}/{name}", data))
            if kind == "seeds":
                out.append((f"{kind}/{target}/{name} (first half)", data[:len(data) // 2]))
    corpus = os.path.join(ROOT, "build-san", "corpus", target)
    if os.path.isdir(corpus):
        names = sorted(os.listdir(corpus))
        for name in names[::max(1, len(names) // per_target)][:per_target]:
            with open(os.path.join(corpus, name), "rb") as f:
                out.append((f"build-san/corpus/{target}/{name}", f.read()))
    return out


def plant(target, data, work):
    """Writes the input where the CLI reads it; returns (command arguments, planted names)."""
    parts = data.split(SEP)
    if target in CHECKPOINT_TARGETS:
        files, remove = CHECKPOINT_TARGETS[target]
        model = os.path.join(work, "model")
        shutil.copytree(FIXTURE, model)
        for name in remove:
            if os.path.exists(os.path.join(model, name)):
                os.remove(os.path.join(model, name))
        planted = []
        for i, name in enumerate(files):
            # The last file takes the rest, as fuzz::split does; empty parts are absent files.
            part = SEP.join(parts[i:]) if i == len(files) - 1 else (parts[i] if i < len(parts)
                                                                    else b"")
            if name is None or not part:
                continue
            with open(os.path.join(model, name), "wb") as f:
                f.write(part)
            planted.append(name)
        # A file that is well formed but disagrees with the others (a config or tokenizer of
        # another model) is reported against the checkpoint directory with the tensors
        # involved, or against config.json's field it contradicts.
        return ["generate", "--model", model, "--prompt", "hi", "--max-tokens", "2",
                "--temperature", "0", "--threads", "1"], planted + [model + ":", "config.json"]
    if target in PIPELINE_TARGETS:
        files = PIPELINE_TARGETS[target]
        model = os.path.join(work, "pipeline")
        shutil.copytree(FLUX, model)
        planted = []
        for i, name in enumerate(files):
            part = SEP.join(parts[i:]) if i == len(files) - 1 else (parts[i] if i < len(parts)
                                                                    else b"")
            if name is None:
                continue
            if not part:
                # As the fuzz targets do: CLIP's vocab.json + merges.txt are read when its
                # tokenizer.json is absent; other empty parts keep the fixture's file.
                if target == "clip_tokenizer" and name.endswith("tokenizer.json"):
                    os.remove(os.path.join(model, name))
                continue
            with open(os.path.join(model, name), "wb") as f:
                f.write(part)
            planted.append(name)
        # A config that loads but does not fit the weights or the other components is reported
        # against its component folder or the pipeline directory.
        dirs = {name.split("/")[0] for name in planted if "/" in name}
        return ["generate-image", "--model", model, "--prompt", "a red cube", "--width", "16",
                "--height", "16", "--steps", "1", "--max-sequence-length", "8", "--threads", "1",
                "--out", os.path.join(work, "out.png")], \
            planted + [model + "/" + d for d in dirs] + [model + ":"]
    out = os.path.join(work, "out")
    if target == "gguf":
        with open(os.path.join(work, "model.gguf"), "wb") as f:
            f.write(data)
        return ["import", "gguf", "--gguf", os.path.join(work, "model.gguf"), "--out", out], \
            ["model.gguf"]
    if target == "ct2":
        planted = []
        three = parts[:2] + [SEP.join(parts[2:])]  # fuzz::split(…, 3): the last takes the rest
        for name, part in zip(["model.bin", "tokenizer.json", "config.json"], three):
            if part or name != "config.json":
                with open(os.path.join(work, name), "wb") as f:
                    f.write(part)
                planted.append(name)
        return ["import", "ct2", "--model", work, "--out", out], planted + [work + ":"]
    bins = [parts[0], SEP.join(parts[1:])]
    for name, part in zip(["model.bin", "tokenizer.bin"], bins):
        with open(os.path.join(work, name), "wb") as f:
            f.write(part)
    return ["import", "llama2c", "--checkpoint", os.path.join(work, "model.bin"), "--tokenizer",
            os.path.join(work, "tokenizer.bin"), "--out", out], ["model.bin", "tokenizer.bin"]


def first_error_line(output):
    lines = [line for line in output.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("quantserve"):
            return line
    return lines[-1] if lines else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "quantserve"))
    ap.add_argument("--per-target", type=int, default=3)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=1",
               UBSAN_OPTIONS="print_stacktrace=1")
    broken, rejected, total = [], 0, 0
    for target in list(CHECKPOINT_TARGETS) + IMPORT_TARGETS + list(PIPELINE_TARGETS):
        for label, data in sample(target, args.per_target):
            with tempfile.TemporaryDirectory(prefix="qs_replay_cli_") as work:
                cmd, planted = plant(target, data, work)
                try:
                    r = subprocess.run([args.binary] + cmd, capture_output=True, timeout=120,
                                       env=env)
                    output = (r.stdout + r.stderr).decode("utf-8", "replace")
                    code = r.returncode
                except subprocess.TimeoutExpired:
                    output, code = "timed out after 120 s", "timeout"
            total += 1
            line = first_error_line(output) if code != 0 else "(accepted)"
            print(f"{target:17} {label[:60]:60} exit {code}: {line[:200]}")
            problem = None
            if code == "timeout" or code < 0 or code >= 128 or CRASH.search(output):
                problem = "crashed or hung"
            elif code != 0:
                rejected += 1
                if code != 1:
                    problem = f"exit {code}, expected 1"
                elif not any(name in line for name in planted):
                    problem = f"the error names none of {planted}"
            if problem:
                broken.append(f"{label}: {problem}\n{output[-2000:]}")
    print(f"{total} inputs, {rejected} rejected, {total - rejected} accepted, "
          f"{len(broken)} broken promises")
    for b in broken:
        print("BROKEN:", b, file=sys.stderr)
    if args.check and (broken or rejected == 0):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
