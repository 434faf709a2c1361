#!/usr/bin/env python3
"""Runs the real `auto-round` tool (0.16.1) on stories260K with fixed calibration samples and
records what it reports, for tests/golden/autoround_tool_test.cc: per block the tuning loss at
iteration 0 (RTN) and the best loss with its iteration, and the KL(fp || quantized) of the
tool's fake-quantized model on fixed evaluation tokens.

Both tools must see exactly the same inputs, so the calibration samples and the evaluation
tokens are written out as token ids (stories260K's SentencePiece tokenizer, BOS first):
    <case>/calibration.jsonl   one {"input_ids": [...]} per sample (quantserve reads it as a
                               pre-tokenized --dataset, in file order)
    eval_tokens.json           {"seqlen": S, "tokens": [...]}: windows of S tokens
    <case>/reference.json      the tool's settings, per-block losses and KL
The model is models/stories260K itself (f32, real trained weights): its 172-wide MLP is not a
multiple of 32, so both tools keep gate/up/down 16-bit and quantize the 20 attention linears.

Tool settings: amp=False, so the tool tunes in f32 as quantserve does (its CPU default is
bf16 autocast); everything else at its defaults (lr 1/iters with linear decay, minmax_lr = lr,
best-loss snapshot, enable_quanted_input, seed 42).

The tool's reported loss is not the MSE per element: with its valid-token mask (the last
position of every sample is masked, calibration/llm.py) it takes MSELoss(mean) over all
B*S*H elements and then divides by the count of valid tokens B*(S-1) again
(sign_round/quantizer.py). reference.json stores the raw value and `mse`, the MSE over the
loss positions (B*(S-1)*H elements, what quantserve's tuner reports): mse = raw * B * S.

Install: the venv of scripts/golden/requirements.txt + requirements-quant.txt, plus
requirements-autoround-golden.txt (sentencepiece, for the tokenizer).
Regenerate (deterministic; overwrites):
    /work/venv-goldens/bin/python scripts/golden/gen_autoround_golden.py \
        --out tests/golden/fixtures/autoround_tool
"""

import argparse
import copy
import json
import logging
import re
import shutil
import tempfile
from pathlib import Path

import sentencepiece as spm
import torch
import transformers
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, models
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

import auto_round
from auto_round import AutoRound

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "stories260K"
# TinyStories training stories (../shared/data/SOURCES.md); only their token ids are committed.
CALIB_TEXT = REPO.parent / "shared" / "data" / "text" / "calibration" / "tiny.utf8"
EVAL_TEXT = REPO / "data" / "eval" / "tinystories-valid.txt.1000"
SEED = 42
EVAL_SEQLEN = 128
EVAL_WINDOWS = 8

# Full batch (nsamples == batch_size): every step sees every sample, so the tools' different
# batch orders (torch/random.shuffle vs our mt19937) cannot differ. The 16-sample case draws
# 8 of 16 per step and shows the effect of the order.
CASES = {
    "w4g32_sym_full_batch": dict(bits=4, group_size=32, sym=True, nsamples=8, batch_size=8,
                                 seqlen=128, iters=200),
    "w2g32_asym_full_batch": dict(bits=2, group_size=32, sym=False, nsamples=8, batch_size=8,
                                  seqlen=128, iters=200),
    "w4g32_sym_sampled": dict(bits=4, group_size=32, sym=True, nsamples=16, batch_size=8,
                              seqlen=128, iters=200),
    # stories260K with its tied head written out as lm_head.weight (tie_word_embeddings false,
    # same values; the tool refuses a tied head): lm_head is tuned after the blocks.
    "w4g32_sym_lm_head": dict(bits=4, group_size=32, sym=True, nsamples=8, batch_size=8,
                              seqlen=128, iters=200, quant_lm_head=True),
    # A Mixture of Experts made from stories260K (moe_model): every expert and the attention
    # linears tuned, the router kept 16-bit; the model is committed in <case>/model.
    "moe_w4g32_sym_full_batch": dict(bits=4, group_size=32, sym=True, nsamples=8, batch_size=8,
                                     seqlen=128, iters=200, moe=True),
}

# moe_model: stories260K's first MOE_LAYERS layers, each MLP split into MOE_EXPERTS experts
# of MOE_INTER of its 172 channels (expert e takes channels [e * MOE_STRIDE, + MOE_INTER)),
# top-2 routed by a random router.
MOE_LAYERS, MOE_EXPERTS, MOE_TOP_K, MOE_INTER, MOE_STRIDE = 2, 4, 2, 64, 36


def tokenizer_ids(sp, text):
    return [sp.bos_id()] + sp.encode(text)


def calibration_samples(sp, n, seqlen):
    """The first n stories of the calibration text with at least seqlen tokens, cut to
    seqlen. Stories whose last token repeats before it are skipped: the tool would mask
    trailing repeats as padding (calibration/llm.py) and quantserve would not."""
    text = CALIB_TEXT.read_text(encoding="utf-8")
    stories = [" ".join(s.split()) for s in text.split("<|endoftext|>") if s.strip()]
    out = []
    for story in stories:
        ids = tokenizer_ids(sp, story)
        if len(ids) < seqlen:
            continue
        ids = ids[:seqlen]
        if ids[-1] == ids[-2]:
            continue
        out.append(ids)
        if len(out) == n:
            return out
    raise SystemExit(f"{CALIB_TEXT}: fewer than {n} stories of {seqlen} tokens")


def eval_tokens(sp):
    ids = tokenizer_ids(sp, EVAL_TEXT.read_text(encoding="utf-8"))
    return ids[:EVAL_SEQLEN * EVAL_WINDOWS]


def no_pad_tokenizer():
    """The tool wants a tokenizer; with tensor inputs it only reads pad_token_id (None here,
    so no position is masked as padding and no attention mask is built)."""
    tk = Tokenizer(models.WordLevel(vocab={"<unk>": 0}, unk_token="<unk>"))
    return PreTrainedTokenizerFast(tokenizer_object=tk)


class LossLog(logging.Handler):
    """Collects the tool's per-block line "... loss iter 0: A -> iter k: B"."""
    PATTERN = re.compile(r"loss iter 0: ([0-9.e+-]+) -> iter (\d+): ([0-9.e+-]+)")

    def __init__(self):
        super().__init__()
        self.blocks = []

    def emit(self, record):
        m = self.PATTERN.search(record.getMessage())
        if m:
            self.blocks.append((float(m.group(1)), int(m.group(2)), float(m.group(3))))


def untied_model(out):
    """models/stories260K with its head as a tensor of its own (tests/common/untied_model.h
    does the same for quantserve)."""
    out.mkdir(parents=True, exist_ok=True)
    tensors = load_file(MODEL / "model.safetensors")
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((MODEL / "config.json").read_text())
    config["tie_word_embeddings"] = False
    (out / "config.json").write_text(json.dumps(config))
    for f in MODEL.iterdir():
        if f.name not in ("model.safetensors", "config.json") and f.is_file():
            shutil.copy(f, out / f.name)
    return out


def moe_model(out):
    """A Mixtral (Llama attention, block_sparse_moe with per-expert w1/w3/w2 as on the hub)
    upcycled from stories260K, so that its attention and experts carry trained weights and
    its routing depends on real text: layer i keeps stories260K's attention and norms; its
    MLP becomes MOE_EXPERTS experts, each a slice of the dense MLP's channels; the router is
    random (normal, std 0.5, seeded), which makes the top-2 choice vary from token to token.
    f32, tied embeddings as stories260K."""
    out.mkdir(parents=True, exist_ok=True)
    src = load_file(MODEL / "model.safetensors")
    g = torch.Generator().manual_seed(SEED)
    t = {"model.embed_tokens.weight": src["model.embed_tokens.weight"],
         "model.norm.weight": src["model.norm.weight"]}
    for i in range(MOE_LAYERS):
        p = f"model.layers.{i}."
        for name in ("input_layernorm", "post_attention_layernorm"):
            t[p + name + ".weight"] = src[p + name + ".weight"]
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            t[p + "self_attn." + name + ".weight"] = src[p + "self_attn." + name + ".weight"]
        gate, up = src[p + "mlp.gate_proj.weight"], src[p + "mlp.up_proj.weight"]
        down = src[p + "mlp.down_proj.weight"]
        m = p + "block_sparse_moe."
        t[m + "gate.weight"] = torch.randn(MOE_EXPERTS, gate.shape[1], generator=g) * 0.5
        for e in range(MOE_EXPERTS):
            ch = slice(e * MOE_STRIDE, e * MOE_STRIDE + MOE_INTER)
            t[m + f"experts.{e}.w1.weight"] = gate[ch].clone()
            t[m + f"experts.{e}.w3.weight"] = up[ch].clone()
            t[m + f"experts.{e}.w2.weight"] = down[:, ch].clone()
    save_file({k: v.contiguous() for k, v in t.items()}, out / "model.safetensors",
              metadata={"format": "pt"})
    c = json.loads((MODEL / "config.json").read_text())
    config = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
              "hidden_size": c["hidden_size"], "intermediate_size": MOE_INTER,
              "num_hidden_layers": MOE_LAYERS, "num_attention_heads": c["num_attention_heads"],
              "num_key_value_heads": c["num_key_value_heads"], "head_dim": c["head_dim"],
              "num_local_experts": MOE_EXPERTS, "num_experts_per_tok": MOE_TOP_K,
              "vocab_size": c["vocab_size"], "max_position_embeddings": c["max_position_embeddings"],
              "rms_norm_eps": c["rms_norm_eps"], "rope_theta": c["rope_theta"],
              "sliding_window": None, "tie_word_embeddings": True, "hidden_act": "silu",
              "bos_token_id": c["bos_token_id"], "eos_token_id": c["eos_token_id"],
              "torch_dtype": "float32", "router_aux_loss_coef": 0.0}
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return out


def load_fp(path=MODEL):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                attn_implementation="eager").eval()


@torch.no_grad()
def window_logits(model, tokens):
    out = []
    for w in range(0, len(tokens), EVAL_SEQLEN):
        out.append(model(input_ids=torch.tensor([tokens[w:w + EVAL_SEQLEN]])).logits[0].double())
    return out


def kl_mean(ref_logits, logits):
    """Mean KL(ref || model) over every position but each window's last (the positions that
    predict a token inside the window, as quantserve's eval scores them)."""
    total, count = 0.0, 0
    for r, q in zip(ref_logits, logits):
        lr, lq = torch.log_softmax(r[:-1], -1), torch.log_softmax(q[:-1], -1)
        total += (lr.exp() * (lr - lq)).sum().item()
        count += r.shape[0] - 1
    return total / count


def run_case(name, spec, sp, tokens, fp_logits, out_root):
    samples = calibration_samples(sp, spec["nsamples"], spec["seqlen"])
    head = spec.get("quant_lm_head", False)
    out = out_root / name
    tmp = Path(tempfile.mkdtemp())
    if spec.get("moe"):
        model_dir = moe_model(out / "model")
        fp_logits = window_logits(load_fp(model_dir), tokens)
    else:
        model_dir = untied_model(tmp / "untied") if head else MODEL
    model = load_fp(model_dir)
    handler = LossLog()
    logging.getLogger("autoround").addHandler(handler)
    ar = AutoRound(model, no_pad_tokenizer(), bits=spec["bits"], group_size=spec["group_size"],
                   sym=spec["sym"], dataset=[torch.tensor([s]) for s in samples],
                   iters=spec["iters"], nsamples=spec["nsamples"], seqlen=spec["seqlen"],
                   batch_size=spec["batch_size"], amp=False, device_map="cpu",
                   enable_torch_compile=False, seed=SEED, quant_lm_head=head)
    qmodel, _ = ar.quantize()
    logging.getLogger("autoround").removeHandler(handler)
    shutil.rmtree(tmp)
    n_blocks = model.config.num_hidden_layers
    assert len(handler.blocks) == n_blocks + head, handler.blocks
    qmodel = qmodel.float().eval()
    kl = kl_mean(fp_logits, window_logits(qmodel, tokens))
    scale = spec["batch_size"] * spec["seqlen"]
    blocks = [{"initial_raw": a, "best_raw": b, "best_iter": k,
               "initial_mse": a * scale, "best_mse": b * scale}
              for a, k, b in handler.blocks[:n_blocks]]
    # lm_head: the tool sums the squared error of each sample's masked logits and divides by
    # the count of valid tokens (quantize_layer_outside_block), so the MSE per logit over the
    # loss positions is raw / vocab.
    vocab = model.config.vocab_size
    for a, k, b in handler.blocks[n_blocks:]:
        blocks.append({"layer": "lm_head", "initial_raw": a, "best_raw": b, "best_iter": k,
                       "initial_mse": a / vocab, "best_mse": b / vocab})
    # What the tool quantized (the router and the head stay 16-bit).
    quantized = sorted(n for n, mod in qmodel.named_modules()
                       if getattr(mod, "bits", 16) < 16 and n.startswith("model.layers."))
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "calibration.jsonl", "w") as f:
        for s in samples:
            f.write(json.dumps({"input_ids": s}) + "\n")
    ref = {"tool": {"auto_round": auto_round.__version__, "torch": torch.__version__,
                    "transformers": transformers.__version__},
           "model": ("model (stories260K upcycled to a Mixtral, moe_model)" if spec.get("moe")
                     else "models/stories260K" + (" with its head untied" if head else "")),
           "settings": dict(spec, seed=SEED, amp=False),
           "quantized_layers": len(quantized),
           "blocks": blocks, "kl_mean": kl}
    (out / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    print(name, json.dumps(blocks), "kl", kl)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--case", action="append", help="only these cases")
    args = ap.parse_args()
    # One thread: on a loaded machine two OpenMP threads spin-wait on each other (a tiny
    # model gains nothing from them).
    torch.set_num_threads(1)
    sp = spm.SentencePieceProcessor(model_file=str(MODEL / "tokenizer.model"))
    tokens = eval_tokens(sp)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "eval_tokens.json").write_text(
        json.dumps({"seqlen": EVAL_SEQLEN, "tokens": tokens}) + "\n")
    fp_logits = window_logits(load_fp(), tokens)
    for name, spec in CASES.items():
        if args.case and name not in args.case:
            continue
        run_case(name, copy.deepcopy(spec), sp, tokens, fp_logits, args.out)


if __name__ == "__main__":
    main()
