#!/usr/bin/env python3
"""Generates the quantized-checkpoint reference fixtures in tests/golden/fixtures/quant/.

Each fixture is a tiny random-init Llama or Qwen3 model quantized by the real tool, the
`auto-round` package (formats auto_round sym/asym, auto_gptq, auto_awq; 4 and 8 bits; groups
128, 32 and -1), plus one GPTQ v1 act-order (desc_act) checkpoint built by hand with
auto-round's own GPTQ packer class. Next to the checkpoint: reference.json + logits.bin in the
format of tests/golden/fixtures/hf (see fixtures/quant/README.md), computed by transformers
running the *quantized* checkpoint through auto-round's CPU "torch" QuantLinear backend, and
dequant.bin: the tool's own dequantized weight of two linears per fixture.

Install (into the venv of scripts/golden/requirements.txt; see requirements-quant.txt):
    .venv-goldens/bin/pip install --no-deps -r scripts/golden/requirements-quant.txt

Regenerate (deterministic; overwrites the fixture directories):
    .venv-goldens/bin/python scripts/golden/gen_quant_fixtures.py --out tests/golden/fixtures/quant
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import safetensors
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    GenerationConfig,
    LlamaConfig,
    PreTrainedTokenizerFast,
    Qwen3Config,
    Qwen3MoeConfig,
)

import auto_round
from auto_round import AutoRound
from auto_round_extension.torch.qlinear_torch_zp import QuantLinear as GptqV1QuantLinear
from transformers import AutoRoundConfig

REPO = Path(__file__).resolve().parents[2]
# For the quantserve-made fixtures (--quantserve overrides).
QUANTSERVE = REPO / "build" / "quantserve"
QUANTSERVE_PATH = [QUANTSERVE]
CALIB_TEXT = REPO.parent / "shared" / "data" / "text" / "calibration" / "tiny.utf8"

BOS_ID = 1
EOS_ID = 2
N_NEW_TOKENS = 8
PROMPT_LENGTHS = [1, 6, 20]
# Calibration: byte-level tokens of the first N_CALIB * CALIB_SEQLEN bytes of tiny.utf8.
N_CALIB = 8
CALIB_SEQLEN = 64
# Linears whose dequantized weight (as the tool computes it) is stored in dequant.bin.
QUANT_SUFFIXES = (".qweight", ".qzeros", ".scales", ".g_idx")
DEQUANT_MODULES = ["model.layers.0.self_attn.o_proj", "model.layers.1.self_attn.k_proj"]
# And, for MoE fixtures, an expert's (transformers holds it inside a fused 3-D tensor).
DEQUANT_EXPERTS = ["model.layers.0.mlp.experts.2.up_proj"]

COMMON = dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=None,
              max_position_embeddings=256, tie_word_embeddings=False)

# Dims: every quantized k and n is a multiple of 32 (auto-round keeps others in 16 bits).
# auto-round's CPU backends need k % group == 0 (or k < group), so the Llama base (k in
# {128, 384}) takes group 128, and the Qwen3 base (k in {64, 128, 192}: 64 and 192 are not
# multiples of 128) takes groups 32 and -1.
BASES = {
    "llama": lambda: LlamaConfig(
        **COMMON, hidden_size=128, intermediate_size=384, vocab_size=256, rms_norm_eps=1e-5,
        rope_theta=10000.0),
    # head_dim 32 != hidden / heads: q_proj [128, 64], o_proj [64, 128].
    "qwen3": lambda: Qwen3Config(
        **COMMON, hidden_size=64, intermediate_size=192, head_dim=32, vocab_size=256,
        rms_norm_eps=1e-6, rope_theta=1000000.0, attention_bias=False,
        use_sliding_window=False, max_window_layers=2),
    # Every linear square ([128, 128]: MHA, ffn = hidden) for the act-order fixture: the one
    # auto-round CPU path that applies a g_idx (auto_round_extension's torch QuantLinear
    # forward) slices the [G, n] scales by input columns, which is only right when n == k.
    "llama_square": lambda: LlamaConfig(
        **{**COMMON, "num_key_value_heads": 4}, hidden_size=128, intermediate_size=128,
        vocab_size=256, rms_norm_eps=1e-5, rope_theta=10000.0),
    # Mixture of Experts: Qwen3-MoE, 4 experts of 64 columns, top-2 renormalised; layer 1 keeps
    # a dense ffn (mlp_only_layers) so both MLP kinds are quantized in one checkpoint.
    "qwen3_moe": lambda: Qwen3MoeConfig(
        **COMMON, hidden_size=64, intermediate_size=192, moe_intermediate_size=64,
        num_experts=4, num_experts_per_tok=2, norm_topk_prob=True, mlp_only_layers=[1],
        head_dim=32, vocab_size=256, rms_norm_eps=1e-6, rope_theta=1000000.0,
        attention_bias=False, use_sliding_window=False),
}

# name -> (base, how it is made). "format" is auto-round's export format; iters 0 = RTN
# (auto-round's optimized RTN), iters > 0 = a short SignRound tuning on the calibration text.
FIXTURES = {
    "llama_autoround_w4g128_sym": dict(base="llama", format="auto_round", bits=4,
                                       group_size=128, sym=True, iters=3),
    "llama_autoround_w4g128_asym": dict(base="llama", format="auto_round", bits=4,
                                        group_size=128, sym=False, iters=3),
    "qwen3_autoround_w8g32_sym": dict(base="qwen3", format="auto_round", bits=8, group_size=32,
                                      sym=True, iters=2),
    "qwen3_autoround_w8g32_asym": dict(base="qwen3", format="auto_round", bits=8, group_size=32,
                                       sym=False, iters=0),
    "llama_gptq_w4g128": dict(base="llama", format="auto_gptq", bits=4, group_size=128,
                              sym=True, iters=0),
    "qwen3_gptq_w8_channel": dict(base="qwen3", format="auto_gptq", bits=8, group_size=-1,
                                  sym=True, iters=2),
    "qwen3_awq_w4g32": dict(base="qwen3", format="auto_awq", bits=4, group_size=32, sym=False,
                            iters=2),
    "llama_awq_w4g128_sym": dict(base="llama", format="auto_awq", bits=4, group_size=128,
                                 sym=True, iters=0),
    "llama_gptq_w4g32_desc_act": dict(base="llama_square", format="hand_gptq_desc_act",
                                      bits=4, group_size=32, sym=True, iters=0),
    # Written by `quantserve quantize` (AutoRound, a few iterations on the same calibration
    # bytes as token ids) in each --format, and loaded here through the same transformers +
    # auto-round CPU loaders: the interoperability check of our exporter.
    "llama_quantserve_auto_round_w4g128": dict(base="llama", format="quantserve:auto_round",
                                               bits=4, group_size=128, sym=True, iters=4),
    "llama_quantserve_auto_round_w4g128_asym": dict(base="llama", format="quantserve:auto_round",
                                                    bits=4, group_size=128, sym=False, iters=4),
    "llama_quantserve_auto_gptq_w4g128": dict(base="llama", format="quantserve:auto_gptq",
                                              bits=4, group_size=128, sym=True, iters=4),
    "llama_quantserve_auto_awq_w4g128": dict(base="llama", format="quantserve:auto_awq",
                                             bits=4, group_size=128, sym=False, iters=4),
    # Last, so that the fixtures above keep their seeds (2000 + position).
    "qwen3_moe_autoround_w4g32_sym": dict(base="qwen3_moe", format="auto_round", bits=4,
                                          group_size=32, sym=True, iters=2),
}


def byte_tokenizer():
    """A 256-token byte-level tokenizer (id = byte value), so calibration text fits vocab 256."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs, extra = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + extra)
            extra += 1
    vocab = {chr(c): b for b, c in zip(bs, cs)}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tk.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tk)


def calibration_strings():
    """N_CALIB strings of exactly CALIB_SEQLEN bytes (ASCII slices, so bytes == tokens)."""
    text = CALIB_TEXT.read_bytes()
    out, pos = [], 0
    while len(out) < N_CALIB:
        chunk = text[pos:pos + CALIB_SEQLEN]
        pos += CALIB_SEQLEN
        if all(b < 128 for b in chunk):
            out.append(chunk.decode("ascii"))
    return out


def float_model(base, seed):
    config = BASES[base]()
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    # What a checkpoint from the hub carries (from_config leaves it unset, and auto-round
    # writes the config as it finds it).
    model.config.architectures = [type(model).__name__]
    gen = torch.Generator().manual_seed(seed)
    # Not HF's init (std 0.02 gives flat logits). Unlike gen_hf_fixtures.py, the blocks are
    # kept weaker than the residual stream (linears 0.7/sqrt(in), embeddings 2.0) and the head
    # stronger (6/sqrt(in)): that keeps logits decisive (top-2 gaps ~1-2) while the logit drift
    # from int8-rounding the linears' inputs stays ~0.06, about 20x below the typical gap
    # (with gen_hf_fixtures.py's scales the two were of the same size, and greedy paths could
    # not be compared).
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                p.copy_(2.0 * torch.randn(p.shape, generator=gen))
            elif name.startswith("lm_head"):
                p.copy_(6.0 / math.sqrt(p.shape[1]) * torch.randn(p.shape, generator=gen))
            else:  # [out, in], or fused experts [E, out, in]
                p.copy_(0.7 / math.sqrt(p.shape[-1]) * torch.randn(p.shape, generator=gen))
    return model.eval()


def expected_quant_linears(config):
    """q, k, v, o and the MLP's gate, up, down per layer; an MoE layer has each expert's."""
    experts = getattr(config, "num_experts", 0)
    sparse = [experts > 0 and i not in (config.mlp_only_layers or [])
              for i in range(config.num_hidden_layers)]
    return sum(4 + 3 * (experts if s else 1) for s in sparse)


def float_weight(state, module):
    """The float model's weight of `module`, an expert's sliced out of the fused
    experts.gate_up_proj [E, 2I, H] (gate rows first) / experts.down_proj [E, H, I]."""
    if module + ".weight" in state:
        return state[module + ".weight"]
    prefix, rest = module.split(".experts.")
    e, proj = rest.split(".")
    if proj == "down_proj":
        return state[prefix + ".experts.down_proj"][int(e)]
    gate_up = state[prefix + ".experts.gate_up_proj"][int(e)]
    half = gate_up.shape[0] // 2
    return gate_up[:half] if proj == "gate_proj" else gate_up[half:]


def quantize_with_autoround(model, spec, out, seed):
    # auto-round 0.16 refuses 8-bit asym in GPTQ-layout formats because vLLM's kernels serve
    # W8 GPTQ symmetric only; the checkpoint itself (packing "auto_round", true zeros) is well
    # defined and is what the issue asks us to load, so lift the check for that fixture.
    if spec["bits"] == 8 and not spec["sym"]:
        os.environ["AR_ALLOW_W8_ASYM"] = "1"
    else:
        os.environ.pop("AR_ALLOW_W8_ASYM", None)
    ar = AutoRound(model, byte_tokenizer(), bits=spec["bits"], group_size=spec["group_size"],
                   sym=spec["sym"], dataset=calibration_strings(), iters=spec["iters"],
                   nsamples=N_CALIB, seqlen=CALIB_SEQLEN, batch_size=N_CALIB,
                   device_map="cpu", enable_torch_compile=False, seed=seed)
    with tempfile.TemporaryDirectory() as tmp:
        ar.quantize_and_save(output_dir=tmp, format=spec["format"])
        # auto-round writes into a sub-directory named after the scheme (e.g. w4g128/).
        written = [p.parent for p in Path(tmp).rglob("config.json")]
        assert len(written) == 1, written
        shutil.copytree(written[0], out)


def quantize_with_quantserve(model, spec, out, seed):
    """`quantserve quantize` on the float model saved as a BF16 checkpoint, with the same
    calibration bytes as the auto-round fixtures given as token ids (a pre-tokenized .jsonl:
    byte tokenizer, id = byte)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        model.save_pretrained(src, safe_serialization=True)
        cfg = json.loads((src / "config.json").read_text())
        with safe_open(src / "model.safetensors", "pt") as f:
            tensors = {k: f.get_tensor(k).to(torch.bfloat16).contiguous() for k in f.keys()}
        save_file(tensors, str(src / "model.safetensors"), metadata={"format": "pt"})
        cfg["dtype"] = "bfloat16"
        (src / "config.json").write_text(json.dumps(cfg, indent=2))
        byte_tokenizer().save_pretrained(src)
        calib = Path(tmp) / "calibration.jsonl"
        calib.write_text("".join(json.dumps({"input_ids": list(s.encode("ascii"))}) + "\n"
                                 for s in calibration_strings()))
        cmd = [str(QUANTSERVE_PATH[0]), "quantize", "--model", str(src), "--output_dir", str(out),
               "--bits", str(spec["bits"]), "--group_size", str(spec["group_size"]),
               "--sym" if spec["sym"] else "--asym", "--iters", str(spec["iters"]),
               "--nsamples", str(N_CALIB), "--seqlen", str(CALIB_SEQLEN),
               "--batch_size", str(N_CALIB), "--seed", str(seed), "--dataset", str(calib),
               "--format", spec["format"].split(":")[1], "--threads", "1"]
        subprocess.run(cmd, check=True)
    # Our loader and the reference restore the float tensors from the file: the generation
    # config is written below like every fixture's.


def make_desc_act_gptq(model, spec, out, seed):
    """GPTQ v1 with act-order: each linear's input columns are quantized in a random order
    `perm`, group j holding columns perm[j*gs:(j+1)*gs], so g_idx[perm[i]] = i // gs is a
    permutation of groups (what GPTQ desc_act writes). RTN, classic GPTQ sym: scale =
    max|w| * 2 / 15, zero 8. The packing is auto-round's GPTQ v1 QuantLinear.pack (qzeros hold
    zero - 1): called once with per-column scales for qweight (its packer expands groups
    contiguously, so one call per column gives the act-order codes) and once on the permuted
    weight with the real groups for scales/qzeros."""
    bits, gs = spec["bits"], spec["group_size"]
    maxq = 2 ** bits - 1
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, mod in model.named_modules():
        if not (isinstance(mod, torch.nn.Linear) and ".layers." in name):
            continue
        w = mod.weight.data.float()  # [n, k]
        n, k = w.shape
        perm = torch.randperm(k, generator=gen)
        g_idx = torch.empty(k, dtype=torch.int32)
        g_idx[perm] = torch.arange(k, dtype=torch.int32) // gs
        wp = w[:, perm].reshape(n, k // gs, gs)
        scales = (wp.abs().amax(-1) * 2 / maxq).clamp(min=1e-5).half().float()  # [n, G]
        zeros = torch.full_like(scales, (maxq + 1) // 2, dtype=torch.int32)
        # qweight: group size 1 with per-column scale/zero.
        per_col = GptqV1QuantLinear(bits, 1, k, n, bias=False)
        per_col.pack(mod, scales[:, g_idx.long()], zeros[:, g_idx.long()])
        # scales / qzeros: the permuted weight, contiguous groups of gs.
        grouped = GptqV1QuantLinear(bits, gs, k, n, bias=False)
        permuted = torch.nn.Linear(k, n, bias=False)
        permuted.weight.data = w[:, perm].clone()
        grouped.pack(permuted, scales, zeros)
        tensors[f"{name}.qweight"] = per_col.qweight.contiguous()
        tensors[f"{name}.qzeros"] = grouped.qzeros.contiguous()
        tensors[f"{name}.scales"] = grouped.scales.contiguous()
        tensors[f"{name}.g_idx"] = g_idx
    for name, p in model.named_parameters():
        if not (name.endswith(".weight") and name[:-7] + ".qweight" in tensors):
            tensors[name] = p.data.to(torch.bfloat16).contiguous()
    out.mkdir(parents=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config["dtype"] = "bfloat16"
    config["quantization_config"] = {
        "quant_method": "gptq", "bits": bits, "group_size": gs, "sym": True,
        "desc_act": True, "static_groups": False, "true_sequential": True,
        "damp_percent": 0.01, "checkpoint_format": "gptq", "lm_head": False,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    byte_tokenizer().save_pretrained(out)


def reference_backend(qc):
    """auto-round's CPU backend for a checkpoint. GPTQ layouts: "torch" (auto_round_extension
    QuantLinear: unpack, scale * (u - zero), matmul in the activation dtype). AWQ layouts:
    its torch backend does not take them, so "ark" (auto-round-lib's CPU kernel); in float32 it
    reproduces an independent AWQ unpack exactly on the identity and to 3e-6 on random inputs
    (checked when this generator was written)."""
    awq = qc["quant_method"] == "awq" or qc.get("packing_format") == "auto_round:auto_awq"
    return "ark" if awq else "torch"


def load_reference(out, spec):
    """transformers + auto-round's CPU backend (reference_backend) on the quantized checkpoint,
    as a float32 model."""
    load_dir = out
    tmp = None
    if spec["format"] == "hand_gptq_desc_act":
        # auto-round refuses desc_act configs outright ("non-dummy g_idx"), although its torch
        # GPTQ v1 QuantLinear can apply a g_idx (below). Load a copy whose config says
        # desc_act false.
        tmp = tempfile.TemporaryDirectory()
        load_dir = Path(tmp.name) / "ckpt"
        shutil.copytree(out, load_dir)
        cfg = json.loads((load_dir / "config.json").read_text())
        cfg["quantization_config"]["desc_act"] = False
        (load_dir / "config.json").write_text(json.dumps(cfg))
    qc = json.loads((out / "config.json").read_text())["quantization_config"]
    ark = reference_backend(qc) == "ark"
    model = AutoModelForCausalLM.from_pretrained(
        load_dir, dtype=torch.float32, device_map="cpu", attn_implementation="eager",
        quantization_config=AutoRoundConfig(backend=reference_backend(qc))).eval()
    if tmp is not None:
        tmp.cleanup()
    # auto-round's loader casts the whole model to its backend's compute dtype (f16 for the
    # torch backend), which would round the bf16 embeddings/norms and make the reference
    # an f16 one. The reference is float32: upcast (the f16 scales stay exact) and restore the
    # unquantized tensors from the file, then check everything equals what is on disk.
    torch.nn.Module.float(model)  # PreTrainedModel.float() refuses quantized models
    state = model.state_dict()
    with torch.no_grad(), safe_open(out / "model.safetensors", "pt") as f:
        for key in f.keys():
            # The ark backend repacks qweight/qzeros/scales into its own buffers.
            if key in state and not (ark and key.endswith(QUANT_SUFFIXES)):
                on_disk = f.get_tensor(key)
                target = state[key]
                if target.is_floating_point():
                    target.copy_(on_disk.float())
                assert torch.equal(target, on_disk.to(target.dtype)), key
        # Buffers not in the file (RoPE inv_freq) went through f16 too; take them from a
        # fresh float32 model of the same config.
        fresh = dict(AutoModelForCausalLM.from_config(model.config, dtype=torch.float32)
                     .named_buffers())
        for key, buf in model.named_buffers():
            if key not in state and key in fresh and buf.is_floating_point():
                buf.copy_(fresh[key])
        if spec["format"] == "hand_gptq_desc_act":
            # auto-round builds its GPTQ QuantLinear without a g_idx buffer (the file's g_idx
            # is dropped as unexpected). The same class's forward applies a g_idx buffer when
            # it has one (scales[g_idx] * (u - zeros[g_idx])), so give it the stored one.
            for name, m in quant_linears(model).items():
                m.register_buffer("g_idx", f.get_tensor(name + ".g_idx"))
    return model


def readable_json(obj):
    def one(v):
        return json.dumps(v, separators=(", ", ": "))

    lines = []
    for k, v in obj.items():
        if isinstance(v, dict) and k in ("tensors", "dequant"):
            inner = ",\n".join(f"    {one(kk)}: {one(vv)}" for kk, vv in v.items())
            lines.append(f"  {one(k)}: {{\n{inner}\n  }}")
        elif isinstance(v, list) and k == "prompts":
            inner = ",\n".join(f"    {one(e)}" for e in v)
            lines.append(f"  {one(k)}: [\n{inner}\n  ]")
        else:
            lines.append(f"  {one(k)}: {one(v)}")
    text = "{\n" + ",\n".join(lines) + "\n}\n"
    assert json.loads(text) == obj
    return text


def greedy(model, ids):
    gc = GenerationConfig(do_sample=False, max_new_tokens=N_NEW_TOKENS, min_new_tokens=0,
                          eos_token_id=None, pad_token_id=0, output_logits=True,
                          return_dict_in_generate=True, temperature=None, top_p=None,
                          top_k=None)
    out = model.generate(torch.tensor([ids]), generation_config=gc)
    new = out.sequences[0, len(ids):].tolist()
    logits = torch.stack([l[0] for l in out.logits]).float()  # [N_NEW_TOKENS, vocab]
    if len(new) < N_NEW_TOKENS:
        # generate() still stops at the model's eos; such a prompt is skipped.
        return None
    assert new == logits.argmax(-1).tolist(), "generate did not pick argmax of raw logits"
    top2 = logits.topk(2, dim=-1).values
    return new, logits, float((top2[:, 0] - top2[:, 1]).min())


@torch.no_grad()
def forward_logits(model, ids):
    return model(input_ids=torch.tensor([ids])).logits[0].float()  # [len(ids), vocab]


def quant_linears(model):
    return {name: m for name, m in model.named_modules()
            if hasattr(m, "qweight") and hasattr(m, "scales")}


@torch.no_grad()
def tool_dequant(mod, k):
    """The tool's own dequantized W [n, k]: its forward on the identity (x @ W^T with x = I
    is exact: one non-zero product per output)."""
    eye = torch.eye(k, dtype=torch.float32)
    return mod(eye).t().contiguous()


class Int8Activations:
    """Context in which every quantized linear's input is rounded as our int kernels round it
    (kernels/qmatrix.h quantize_acts): per row, blocks of 32 inputs (taken in stable-sorted
    g_idx order for act-order weights), q = round-half-even(x * (127 / max|x|)), x ~ q * d with
    d = max|x| / 127, all in float32. The weights are untouched."""

    def __init__(self, model):
        self.model = model

    @staticmethod
    def fake_q(mod, args):
        x = args[0]
        g_idx = getattr(mod, "g_idx", None)
        order = None
        if g_idx is not None and not torch.equal(g_idx, torch.sort(g_idx).values):
            order = torch.argsort(g_idx, stable=True)
            x = x[..., order]
        xb = x.reshape(-1, x.shape[-1] // 32, 32)
        amax = xb.abs().amax(-1, keepdim=True)
        inv = torch.where(amax > 0, 127.0 / torch.where(amax > 0, amax, 1), 0)
        xq = (torch.round(xb * inv) * (amax / 127.0)).reshape(x.shape)
        if order is not None:
            xq = xq[..., torch.argsort(order)]
        return (xq,)

    def __enter__(self):
        self.hooks = [m.register_forward_pre_hook(self.fake_q)
                      for m in quant_linears(self.model).values()]

    def __exit__(self, *exc):
        for h in self.hooks:
            h.remove()


@torch.no_grad()
def int8_drift(model, ids):
    """Max |logit change| over every position of `ids` under Int8Activations."""
    exact = forward_logits(model, ids)
    with Int8Activations(model):
        approx = forward_logits(model, ids)
    return float((approx - exact).abs().max())


def make_fixture(name, spec, out_root, seed):
    out = out_root / name
    if out.exists():
        shutil.rmtree(out)
    model = float_model(spec["base"], seed)
    original = {k: v.clone() for k, v in model.state_dict().items()}
    if spec["format"] == "hand_gptq_desc_act":
        make_desc_act_gptq(model, spec, out, seed)
    elif spec["format"].startswith("quantserve:"):
        quantize_with_quantserve(model, spec, out, seed)
    else:
        quantize_with_autoround(model, spec, out, seed)
    GenerationConfig(bos_token_id=BOS_ID, eos_token_id=EOS_ID).save_pretrained(out)

    ref = load_reference(out, spec)
    qlinears = quant_linears(ref)
    assert len(qlinears) == expected_quant_linears(ref.config), sorted(qlinears)
    backends = sorted({f"{type(m).__module__}.{type(m).__name__}" for m in qlinears.values()})
    with safe_open(out / "model.safetensors", "pt") as f:
        tensors = {k: [list(f.get_slice(k).get_shape()), f.get_slice(k).get_dtype()]
                   for k in sorted(f.keys())}
        if spec["format"] == "hand_gptq_desc_act":
            for mname, m in qlinears.items():
                assert torch.equal(m.g_idx, f.get_tensor(mname + ".g_idx")), mname

    vocab = ref.config.vocab_size
    blob = bytearray()
    dequant_blob = bytearray()
    dequant = {}
    moe = getattr(ref.config, "num_experts", 0) > 0
    for mname in DEQUANT_MODULES + (DEQUANT_EXPERTS if moe else []):
        mod = qlinears[mname]
        k = mod.infeatures if hasattr(mod, "infeatures") else mod.in_features
        w = tool_dequant(mod, k).numpy().astype("<f4")
        dequant[mname] = {"offset_bytes": len(dequant_blob), "shape": list(w.shape),
                          "scales_dtype": str(mod.scales.dtype).removeprefix("torch.")}
        dequant_blob += w.tobytes()
        # Sanity: the tool's weight is a quantization of the float one (4 bits: ~10% relative
        # RMS error, 8 bits: ~0.5%); a packing mistake (e.g. a wrong act-order g_idx) is ~100%.
        want = float_weight(original, mname)
        rel = float((torch.from_numpy(w) - want).norm() / want.norm())
        assert rel < (0.2 if spec["bits"] == 4 else 0.02), (mname, rel)
        print(f"{name}: {mname} tool dequant vs float weight: relative RMS error {rel:.4f}")

    rng = np.random.default_rng(seed)
    prompts, drifts, max_logit = [], [], 0.0
    for n in PROMPT_LENGTHS:
        # Of several random prompts, keep the one whose greedy path is most robust to the
        # int8 activation rounding of our kernels: the largest ratio of its smallest top-2
        # margin to the logit drift that rounding causes along prompt + continuation.
        best = None
        for attempt in range(24):
            ids = rng.integers(3, vocab, size=n).tolist()
            if n > 1:
                ids[0] = BOS_ID
            res = greedy(ref, ids)
            if res is None:
                continue
            new, gen_logits, margin = res
            if EOS_ID in new or BOS_ID in new or len(set(new)) < 4:
                continue
            drift = int8_drift(ref, ids + new)
            if best is None or margin / drift > best[3] / best[4]:
                best = (ids, new, gen_logits, margin, drift, attempt)
        ids, new, gen_logits, margin, drift, attempt = best
        drifts.append(drift)
        logits = forward_logits(ref, ids)
        max_logit = max(max_logit, float(logits.abs().max()), float(gen_logits.abs().max()))
        full = forward_logits(ref, ids + new)
        decode_diff = float((full[len(ids) - 1:-1] - gen_logits).abs().max())
        assert decode_diff < 1e-4, decode_diff
        entry = {"input_ids": ids}
        for key, t in (("prompt_logits", logits), ("greedy_logits", gen_logits)):
            arr = t.numpy().astype("<f4")
            entry[key] = {"offset_bytes": len(blob), "shape": list(arr.shape)}
            blob += arr.tobytes()
        # The same forward with Int8Activations over prompt + continuation (teacher-forced):
        # rows 0..n-1 pair with prompt_logits, rows n-1.. with greedy_logits.
        with Int8Activations(ref):
            sim = forward_logits(ref, ids + new)[:-1].numpy().astype("<f4")
        entry["int8_sim_logits"] = {"offset_bytes": len(blob), "shape": list(sim.shape)}
        blob += sim.tobytes()
        entry["greedy_new_tokens"] = new
        entry["greedy_min_top2_margin"] = margin
        entry["int8_activation_drift"] = drift
        entry["prompt_argmax"] = logits.argmax(-1).tolist()
        prompts.append(entry)
        print(f"{name}: prompt {n:3d} (attempt {attempt}) greedy {new} margin {margin:.4f} "
              f"int8 drift {drift:.4f} max|logit| {float(logits.abs().max()):.2f} "
              f"cache-vs-full {decode_diff:.1e}")
    print(f"{name}: backend {backends}")

    (out / "logits.bin").write_bytes(bytes(blob))
    (out / "dequant.bin").write_bytes(bytes(dequant_blob))
    qc = json.loads((out / "config.json").read_text())["quantization_config"]
    reference = {
        "generator": "scripts/golden/gen_quant_fixtures.py",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "safetensors": safetensors.__version__,
                     "auto_round": auto_round.__version__},
        "architecture": type(ref).__name__,
        "seed": seed,
        "made_by": spec["format"],
        "iters": spec["iters"],
        "quantization_config": qc,
        "reference_backend": backends,
        "compute_dtype": "float32",
        "vocab_size": vocab,
        "tensors": tensors,
        "logits_file": "logits.bin",
        "logits_encoding": "float32 little-endian, row-major",
        "int8_activation_drift": max(drifts),
        "max_abs_logit": max_logit,
        "greedy": {"max_new_tokens": N_NEW_TOKENS, "do_sample": False, "eos": "disabled",
                   "logits": "raw model output at each decode step, before any processor"},
        "dequant_file": "dequant.bin",
        "dequant": dequant,
        "prompts": prompts,
    }
    (out / "reference.json").write_text(readable_json(reference))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="fixtures to make (default: all)")
    parser.add_argument("--out", type=Path, default=REPO / "tests/golden/fixtures/quant")
    parser.add_argument("--quantserve", type=Path, default=QUANTSERVE,
                        help="the quantserve binary for the quantserve:* fixtures")
    args = parser.parse_args()
    QUANTSERVE_PATH[0] = args.quantserve.resolve()
    torch.set_num_threads(1)
    for i, name in enumerate(FIXTURES):
        if not args.names or name in args.names:
            make_fixture(name, FIXTURES[name], args.out.resolve(), seed=2000 + i)


if __name__ == "__main__":
    main()
