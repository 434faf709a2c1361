#!/usr/bin/env python3
"""Times the real `auto-round` tool (0.16.1) quantizing one checkpoint, for the speed
comparison of scripts/bench_quantize_vs_autoround.sh (docs/quantization.md, "Speed").

Both tools must tune on the same tokens, so this script also writes the calibration samples:
    --write-calibration FILE   tokenizes the shipped calibration text (data/calibration/c4.utf8,
                               one document per line) with the model's tokenizer, keeps the
                               first --nsamples documents of at least --seqlen tokens, cut to
                               --seqlen, and writes one {"input_ids": [...]} per line (quantserve
                               reads it as a pre-tokenized --dataset, in file order);
                               --concatenate cuts the documents end to end instead when too
                               few are that long (reading the text again if it runs out)
    --calibration FILE         runs AutoRound on those samples and prints one JSON line:
                               load and quantize wall seconds, blocks, seconds per block,
                               the tool's settings.
Tool settings: its CPU defaults (bf16 autocast, `amp=True`, which is how a user runs it),
unless --disable-amp; everything else as the flags say; no export (the timing is of tuning,
which is what quantserve's summary line times too).

Install: the venv of scripts/golden/requirements.txt + requirements-quant.txt
(`pip install --no-deps -r ...`), as for gen_autoround_golden.py.
"""

import argparse
import json
import resource
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import auto_round
from auto_round import AutoRound


def write_calibration(args):
    tok = AutoTokenizer.from_pretrained(args.model)
    kept = []
    with open(args.text, encoding="utf-8") as f:
        for line in f:
            ids = tok(line.strip(), add_special_tokens=False)["input_ids"]
            if len(ids) >= args.seqlen:
                kept.append(ids[: args.seqlen])
            if len(kept) == args.nsamples:
                break
    if len(kept) < args.nsamples and args.concatenate:
        # Too few long documents (the shipped text has 9 of >= 2048 tokens): the whole text's
        # tokens, documents end to end, cut into seqlen pieces.
        # A text shorter than nsamples x seqlen tokens is read again from its start (the
        # shipped 330 KB holds about 78k tokens of SmolLM2's vocabulary, the tool's default
        # 128 x 2048 needs 262k): repeated samples time the same as fresh ones.
        with open(args.text, encoding="utf-8") as f:
            docs = [tok(line.strip(), add_special_tokens=False)["input_ids"] for line in f]
        stream, kept = [], []
        while len(kept) < args.nsamples:
            for ids in docs:
                stream += ids
                while len(stream) >= args.seqlen and len(kept) < args.nsamples:
                    kept.append(stream[: args.seqlen])
                    stream = stream[args.seqlen:]
    if len(kept) < args.nsamples:
        raise SystemExit(f"{args.text}: only {len(kept)} samples of {args.seqlen} tokens")
    with open(args.write_calibration, "w", encoding="utf-8") as f:
        for ids in kept:
            f.write(json.dumps({"input_ids": ids}) + "\n")


def run(args):
    torch.set_num_threads(args.threads)
    with open(args.calibration, encoding="utf-8") as f:
        samples = [json.loads(line)["input_ids"] for line in f if line.strip()]
    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16)
    t1 = time.perf_counter()
    ar = AutoRound(model, tok, bits=args.bits, group_size=args.group_size, sym=True,
                   dataset=[torch.tensor([s]) for s in samples], iters=args.iters,
                   nsamples=args.nsamples, seqlen=args.seqlen, batch_size=args.batch_size,
                   amp=not args.disable_amp, device_map="cpu", enable_torch_compile=False,
                   seed=42)
    ar.quantize()
    t2 = time.perf_counter()
    blocks = model.config.num_hidden_layers
    print(json.dumps({
        "tool": f"auto-round {auto_round.__version__}", "torch": torch.__version__,
        "threads": args.threads, "amp": not args.disable_amp, "blocks": blocks,
        "iters": args.iters, "nsamples": args.nsamples, "seqlen": args.seqlen,
        "batch_size": args.batch_size, "load_s": round(t1 - t0, 2),
        "quantize_s": round(t2 - t1, 2), "s_per_block": round((t2 - t1) / blocks, 2),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--text", default="data/calibration/c4.utf8")
    p.add_argument("--write-calibration")
    p.add_argument("--calibration")
    p.add_argument("--bits", type=int, default=4)
    p.add_argument("--group-size", type=int, default=128)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--nsamples", type=int, default=32)
    p.add_argument("--seqlen", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--disable-amp", action="store_true")
    p.add_argument("--concatenate", action="store_true",
                   help="with --write-calibration: fill from the text's documents end to end "
                        "when too few are --seqlen tokens long")
    args = p.parse_args()
    if args.write_calibration:
        write_calibration(args)
    elif args.calibration:
        run(args)
    else:
        p.error("give --write-calibration FILE or --calibration FILE")


if __name__ == "__main__":
    main()
