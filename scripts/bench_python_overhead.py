#!/usr/bin/env python3
"""What the Python layer costs (issue 35): `quantserve bench throughput` against `LLM.generate`
over the same number of prompts of the same lengths, on a random-weight checkpoint of the
Qwen2.5-0.5B shape (`quantserve make-model --like qwen2.5-0.5b`, as scripts/bench_latency.sh
and bench_serve_sweep.sh make it, with the real Qwen2 tokenizer beside it). A benchmark, not a
test: it prints a markdown table of tokens/s for each side and their ratio.

Both sides run in this one invocation, alternating (CLI, Python, CLI, Python, ...), so that load
on a shared machine hits them alike; each repetition draws fresh prompts (seed + repetition), so
the prefix cache never serves one repetition from another. The CLI is the package's own
(quantserve/bin/quantserve, the same build as the extension module), so the ratio is the
Python layer's overhead and nothing else. Settings mirror bench throughput's: every prompt
submitted at once, temperature 1 and top_p 1 with request i seeded seed + i, ignore_eos, a
fixed output length, and a KV cache of exactly the tokens all requests need (its
generate_all); the model's load and the cache's allocation are outside the timing on both sides.

    PYTHONPATH=build-py/site .venv/bin/python scripts/bench_python_overhead.py
    PYTHONPATH=build-py/site .venv/bin/python scripts/bench_python_overhead.py \
        --num-prompts 8 --input-len 16 --output-len 16 --layers 2 --repetitions 2   # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import quantserve
from quantserve import LLM, SamplingParams

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOKENIZER_SRC = ROOT.parent / "shared" / "data" / "tokenizers" / "qwen2"
TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json")
BLOCK_SIZE = 16  # engine::EngineConfig's default, which both sides run with


def package_cli() -> str:
    return str(pathlib.Path(quantserve.__file__).parent / "bin" / "quantserve")


def cpu_model() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def make_model(cli: str, args) -> pathlib.Path:
    """bench-models/qwen2.5-0.5b-<dtype>[-<quantize>][-L<layers>], made once and reused."""
    name = f"qwen2.5-0.5b-{args.dtype}"
    if args.quantize:
        name += f"-{args.quantize}"
    if args.layers:
        name += f"-L{args.layers}"
    out = ROOT / "bench-models" / name
    if not (out / "config.json").is_file():
        cmd = [cli, "make-model", "--like", "qwen2.5-0.5b", "--dtype", args.dtype, "--out",
               str(out)]
        if args.quantize:
            cmd += ["--quantize", args.quantize]
        if args.layers:
            cmd += ["--layers", str(args.layers)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    for f in TOKENIZER_FILES:
        if not (out / f).is_file():
            shutil.copyfile(TOKENIZER_SRC / f, out / f)
    return out


def run_cli(cli: str, model: pathlib.Path, args, seed: int) -> dict:
    """One `bench throughput` run: its tokens/s from the JSON it writes and the output
    tokens/s from its report line."""
    with tempfile.TemporaryDirectory() as tmp:
        out_json = os.path.join(tmp, "throughput.json")
        proc = subprocess.run(
            [cli, "bench", "throughput", "--model", str(model), "--num-prompts",
             str(args.num_prompts), "--input-len", str(args.input_len), "--output-len",
             str(args.output_len), "--threads", str(args.threads), "--seed", str(seed),
             "--output-json", out_json],
            check=True, capture_output=True, text=True)
        with open(out_json) as f:
            report = json.load(f)
    m = re.search(r"([0-9.]+) output tokens/s", proc.stdout)
    if m is None:
        raise RuntimeError(f"bench throughput printed no output tokens/s:\n{proc.stdout}")
    return {"total": report["tokens_per_second"], "output": float(m.group(1)),
            "elapsed": report["elapsed_time"]}


def run_python(llm: LLM, vocab: int, args, seed: int) -> dict:
    """LLM.generate over the same number of prompts: random token ids of input_len (the CLI's
    random dataset also lands on exactly input_len tokens), bench throughput's sampling."""
    rng = random.Random(seed)
    prompts = [{"prompt_token_ids": [rng.randrange(vocab) for _ in range(args.input_len)]}
               for _ in range(args.num_prompts)]
    params = [SamplingParams(temperature=1.0, top_p=1.0, seed=seed + i, ignore_eos=True,
                             max_tokens=args.output_len) for i in range(args.num_prompts)]
    t0 = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - t0
    n_out = sum(len(o.outputs[0].token_ids) for o in outputs)
    n_in = sum(len(o.prompt_token_ids) for o in outputs)
    if n_out != args.num_prompts * args.output_len:
        raise RuntimeError(f"LLM.generate made {n_out} tokens, expected "
                           f"{args.num_prompts * args.output_len}")
    return {"total": (n_in + n_out) / elapsed, "output": n_out / elapsed, "elapsed": elapsed}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--threads", type=int, default=quantserve._core.default_threads())
    ap.add_argument("--dtype", default="bf16", help="make-model --dtype (bf16, f16, f32)")
    ap.add_argument("--quantize", default="", help="make-model --quantize, e.g. w4g128 (W4A16)")
    ap.add_argument("--layers", type=int, default=0, help="fewer layers, for a quick check")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds of both sides first")
    ap.add_argument("--cli", default=package_cli(), help="the quantserve binary (default: the "
                    "package's, the extension module's build)")
    args = ap.parse_args()

    model = make_model(args.cli, args)
    # bench throughput's engine: max_model_len the longest request, an f32 cache of exactly the
    # tokens every request needs plus one partial block each (generate_all; K and V of every
    # layer, engine::kv_cache_bytes_per_token).
    config = json.loads((model / "config.json").read_text())
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    per_token = 2 * 4 * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim
    n_tokens = (args.input_len + args.output_len + BLOCK_SIZE) * args.num_prompts
    kv_bytes = per_token * -(-n_tokens // BLOCK_SIZE) * BLOCK_SIZE
    llm = LLM(str(model), max_model_len=args.input_len + args.output_len, threads=args.threads,
              kv_cache_memory_bytes=kv_bytes)
    vocab = llm.get_tokenizer().vocab_size

    # An untimed round first: the checkpoint's pages into the page cache, the engine's first
    # allocations, for both sides.
    for _ in range(args.warmup):
        run_cli(args.cli, model, args, args.seed + 999)
        run_python(llm, vocab, args, args.seed + 999)
    cli_runs, py_runs = [], []
    for rep in range(args.repetitions):
        seed = args.seed + 1000 * rep
        cli_runs.append(run_cli(args.cli, model, args, seed))
        py_runs.append(run_python(llm, vocab, args, seed))
        print(f"repetition {rep + 1}/{args.repetitions}: bench throughput "
              f"{cli_runs[-1]['output']:.1f} output tok/s, LLM.generate "
              f"{py_runs[-1]['output']:.1f} output tok/s", file=sys.stderr)

    def stats(runs, key):
        values = [r[key] for r in runs]
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        return statistics.mean(values), sd

    print(f"CPU: {cpu_model()}, {args.threads} threads; model {model.name}; "
          f"{args.num_prompts} prompts x {args.input_len} in / {args.output_len} out, "
          f"{args.repetitions} repetitions each, alternating")
    print()
    print("| | total tokens/s | output tokens/s |")
    print("|---|---:|---:|")
    for name, runs in (("`quantserve bench throughput`", cli_runs),
                       ("`LLM.generate`", py_runs)):
        (t, tsd), (o, osd) = stats(runs, "total"), stats(runs, "output")
        print(f"| {name} | {t:.1f} ± {tsd:.1f} | {o:.1f} ± {osd:.1f} |")
    ratio_t = stats(py_runs, "total")[0] / stats(cli_runs, "total")[0]
    ratio_o = stats(py_runs, "output")[0] / stats(cli_runs, "output")[0]
    print(f"| ratio (Python / CLI) | {ratio_t:.3f} | {ratio_o:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
