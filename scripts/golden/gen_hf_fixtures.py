#!/usr/bin/env python3
"""Generates the transformers reference fixtures in tests/golden/fixtures/hf/.

Each fixture is a tiny random-init causal LM saved as a normal Hugging Face directory
(config.json, model.safetensors, generation_config.json) plus reference.json and logits.bin:
the float32 logits transformers computes for every position of several prompts, and its
greedy continuations. The format is documented in tests/golden/fixtures/hf/README.md.

Install (CPU only; the default torch wheel would pull ~3 GB of CUDA wheels):
    python3 -m venv .venv-goldens
    .venv-goldens/bin/pip install --no-deps -r scripts/golden/requirements.txt
The torch wheel still links the CUDA runtime at import time. requirements.txt carries only
the CUDA libraries the cpp-kernels image lacks; the rest (cudart, cublas, cudnn, ...) load
from the image's /usr/local/cuda. Nothing runs on a GPU. On a machine without that toolkit,
install the same pins without --no-deps (pip then fetches the full CUDA wheel set).

Regenerate (deterministic; overwrites the fixture directories):
    .venv-goldens/bin/python scripts/golden/gen_hf_fixtures.py
"""

import argparse
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import safetensors
import torch
import transformers
from safetensors import safe_open
from transformers import (
    AutoModelForCausalLM,
    GenerationConfig,
    LlamaConfig,
    MistralConfig,
    MixtralConfig,
    Qwen2Config,
    Qwen2MoeConfig,
    Qwen3Config,
    Qwen3MoeConfig,
)

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "golden" / "fixtures" / "hf"

BOS_ID = 1
EOS_ID = 2
N_NEW_TOKENS = 12
PROMPT_LENGTHS = [1, 5, 17, 40]
# An engine computing in f32 differs from torch by ~1e-5 in the logits; a greedy step whose
# top-2 gap is below this could flip, so prompts with such steps are re-drawn.
MIN_GREEDY_MARGIN = 2e-3
# A continuation with fewer distinct tokens than this tests little beyond one fixed point.
MIN_DISTINCT_NEW_TOKENS = 5
# MoE: the k-th and (k+1)-th router probabilities of every token must differ by at least this,
# so that f32 rounding cannot swap an expert in or out (the engine's choices are compared).
MIN_ROUTER_MARGIN = 1e-4

COMMON = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    bos_token_id=BOS_ID,
    eos_token_id=EOS_ID,
    pad_token_id=None,
)

# name -> how to build it. "config_style": "classic" rewrites config.json the way most hub
# checkpoints ship it (top-level rope_theta, rope_scaling, torch_dtype); "v5" keeps what
# transformers 5 writes (rope_parameters, dtype). The engine has to read both.
FIXTURES = {
    "llama_gqa_untied": dict(
        config=lambda: LlamaConfig(
            **COMMON, vocab_size=256, intermediate_size=128, rms_norm_eps=1e-5,
            rope_theta=10000.0, max_position_embeddings=256, tie_word_embeddings=False),
        weights_dtype=torch.float32, config_style="classic"),
    "llama_tied": dict(
        config=lambda: LlamaConfig(
            **COMMON, vocab_size=320, intermediate_size=144, rms_norm_eps=1e-6,
            rope_theta=500000.0, max_position_embeddings=256, tie_word_embeddings=True),
        weights_dtype=torch.float32, config_style="v5"),
    "llama3_rope_scaling": dict(
        # head_dim 16, theta 1e4: wavelengths 6.3 (kept), 19.9 and 62.8 (smoothed), rest
        # > 64 (divided by factor), so all three branches of the llama3 rule are exercised.
        config=lambda: LlamaConfig(
            **COMMON, vocab_size=256, intermediate_size=128, rms_norm_eps=1e-5,
            rope_theta=10000.0, max_position_embeddings=512, tie_word_embeddings=False,
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
        weights_dtype=torch.float32, config_style="classic",
        prompt_lengths=PROMPT_LENGTHS + [90]),
    "mistral": dict(
        config=lambda: MistralConfig(
            **COMMON, vocab_size=256, intermediate_size=160, rms_norm_eps=1e-5,
            rope_theta=1000000.0, max_position_embeddings=256, sliding_window=None,
            tie_word_embeddings=False),
        weights_dtype=torch.float32, config_style="classic"),
    "qwen2_tied": dict(
        config=lambda: Qwen2Config(
            **COMMON, vocab_size=256, intermediate_size=176, rms_norm_eps=1e-6,
            rope_theta=1000000.0, max_position_embeddings=256, tie_word_embeddings=True,
            use_sliding_window=False, max_window_layers=2),
        weights_dtype=torch.float32, config_style="classic"),
    "qwen3_untied": dict(
        # head_dim 32 != hidden/heads (16): q_proj is [128, 64], o_proj is [64, 128].
        config=lambda: Qwen3Config(
            **COMMON, vocab_size=256, intermediate_size=160, head_dim=32, rms_norm_eps=1e-6,
            rope_theta=1000000.0, max_position_embeddings=256, tie_word_embeddings=False,
            attention_bias=False, use_sliding_window=False, max_window_layers=2),
        weights_dtype=torch.float32, config_style="classic"),
    "llama_bf16": dict(
        config=lambda: LlamaConfig(
            **COMMON, vocab_size=256, intermediate_size=128, rms_norm_eps=1e-5,
            rope_theta=10000.0, max_position_embeddings=256, tie_word_embeddings=False),
        weights_dtype=torch.bfloat16, config_style="classic"),
    "qwen2_f16": dict(
        config=lambda: Qwen2Config(
            **COMMON, vocab_size=256, intermediate_size=128, rms_norm_eps=1e-6,
            rope_theta=1000000.0, max_position_embeddings=256, tie_word_embeddings=False,
            use_sliding_window=False, max_window_layers=2),
        weights_dtype=torch.float16, config_style="v5"),
    # Mixture-of-Experts. Qwen3-MoE: q/k-norm attention, 8 experts, top-2 renormalised, and
    # layer 1 kept dense by mlp_only_layers (so both MLP kinds sit in one model).
    "qwen3_moe": dict(
        config=lambda: Qwen3MoeConfig(
            **dict(COMMON, num_hidden_layers=3), vocab_size=256, intermediate_size=96,
            moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
            mlp_only_layers=[1], head_dim=32, rms_norm_eps=1e-6, rope_theta=1000000.0,
            max_position_embeddings=256, tie_word_embeddings=False),
        weights_dtype=torch.float32, config_style="classic"),
    # Qwen2-MoE: q/k/v bias, 6 experts, top-3 not renormalised, and the sigmoid-gated shared
    # expert.
    "qwen2_moe": dict(
        config=lambda: Qwen2MoeConfig(
            **COMMON, vocab_size=256, intermediate_size=96, moe_intermediate_size=24,
            shared_expert_intermediate_size=80, num_experts=6, num_experts_per_tok=3,
            norm_topk_prob=False, rms_norm_eps=1e-6, rope_theta=1000000.0,
            max_position_embeddings=256, tie_word_embeddings=True, use_sliding_window=False),
        weights_dtype=torch.float32, config_style="v5"),
    # Mixtral: block_sparse_moe.experts.E.w1/w2/w3 names, 4 experts, top-2, bf16 on disk.
    "mixtral": dict(
        config=lambda: MixtralConfig(
            **COMMON, vocab_size=256, intermediate_size=48, num_local_experts=4,
            num_experts_per_tok=2, rms_norm_eps=1e-5, rope_theta=1000000.0,
            max_position_embeddings=256, sliding_window=None, tie_word_embeddings=False),
        weights_dtype=torch.bfloat16, config_style="classic"),
}


def reinit_weights(model, gen):
    """HF init (std 0.02) gives near-flat logits; use scales that make argmax decisive."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):  # input/post-attention/final/q/k norms
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            else:  # Linear [out, in] or fused experts [E, out, in]: 1.5/sqrt(in) keeps
                # activations O(1) but not tiny
                p.copy_(1.5 / math.sqrt(p.shape[-1]) * torch.randn(p.shape, generator=gen))


EXPERT_KEY = re.compile(
    r"(model\.layers\.\d+\.)(?:mlp|block_sparse_moe)\.experts\.(\d+)\."
    r"(gate_proj|up_proj|down_proj|w1|w3|w2)\.weight")


def loaded_tensor(state, key):
    """The tensor a checkpoint key became in the loaded model. transformers 5 saves experts one
    by one (experts.E.gate_proj / Mixtral's w1, w3, w2) but holds them fused per layer:
    gate_up_proj [E, 2I, H] (gate rows first) and down_proj [E, H, I]."""
    m = EXPERT_KEY.fullmatch(key)
    if m is None:
        return state[key.replace("block_sparse_moe.gate.", "mlp.gate.")]
    prefix, e, proj = m.group(1), int(m.group(2)), m.group(3)
    if proj in ("down_proj", "w2"):
        return state[prefix + "mlp.experts.down_proj"][e]
    gate_up = state[prefix + "mlp.experts.gate_up_proj"][e]
    half = gate_up.shape[0] // 2
    return gate_up[:half] if proj in ("gate_proj", "w1") else gate_up[half:]


def rewrite_config(path, style):
    cfg = json.loads(path.read_text())
    if style == "classic":
        rope = cfg.pop("rope_parameters")
        cfg["rope_theta"] = rope.pop("rope_theta")
        cfg["rope_scaling"] = None if rope["rope_type"] == "default" else rope
        cfg["torch_dtype"] = cfg.pop("dtype")
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def readable_json(obj):
    """One line per top-level key, and per tensor / prompt, so diffs stay reviewable."""
    def one(v):
        return json.dumps(v, separators=(", ", ": "))

    lines = []
    for k, v in obj.items():
        if isinstance(v, dict) and k == "tensors":
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
        # generate() still stops at the config's eos; such a prompt is re-drawn anyway.
        assert new[-1] == EOS_ID, f"generation stopped early without eos: {new}"
        return new, logits, 0.0
    assert new == logits.argmax(-1).tolist(), "generate did not pick argmax of raw logits"
    top2 = logits.topk(2, dim=-1).values
    return new, logits, float((top2[:, 0] - top2[:, 1]).min())


@torch.no_grad()
def forward_logits(model, ids):
    return model(input_ids=torch.tensor([ids])).logits[0].float()  # [len(ids), vocab]


@torch.no_grad()
def router_top_k(model, ids):
    """Each MoE layer's chosen experts for every prompt token, largest first, and the smallest
    gap between the k-th and (k+1)-th probability (inf for a model without MoE layers)."""
    k = getattr(model.config, "num_experts_per_tok", None)
    if k is None:
        return None, math.inf
    out = model(input_ids=torch.tensor([ids]), output_router_logits=True)
    choices, margin = [], math.inf
    for logits in out.router_logits:  # one [len(ids), n_experts] per MoE layer
        probs = torch.softmax(logits.float(), dim=-1)
        top = probs.topk(min(k + 1, probs.shape[-1]), dim=-1)
        choices.append(top.indices[:, :k].tolist())
        if top.values.shape[-1] > k:
            margin = min(margin, float((top.values[:, k - 1] - top.values[:, k]).min()))
    return choices, margin


def make_fixture(name, spec, seed):
    out = OUT_DIR / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)

    config = spec["config"]()
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    gen = torch.Generator().manual_seed(seed)
    reinit_weights(model, gen)
    model = model.to(spec["weights_dtype"]).eval()
    model.save_pretrained(out)
    GenerationConfig(bos_token_id=BOS_ID, eos_token_id=EOS_ID).save_pretrained(out)
    rewrite_config(out / "config.json", spec["config_style"])

    # The reference runs on what is on disk, upcast to f32, so the files and the numbers
    # cannot disagree (this also checks that transformers reads the rewritten config).
    ref = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32,
                                               attn_implementation="eager").eval()
    with safe_open(out / "model.safetensors", "pt") as f:
        tensors = {k: [list(f.get_slice(k).get_shape()), f.get_slice(k).get_dtype()]
                   for k in sorted(f.keys())}
        for k in f.keys():
            on_disk = f.get_tensor(k).float()
            assert torch.equal(on_disk, loaded_tensor(ref.state_dict(), k)), \
                f"{name}: {k} reloaded differently"
    if config.tie_word_embeddings:
        assert "lm_head.weight" not in tensors
        assert ref.lm_head.weight.data_ptr() == ref.model.embed_tokens.weight.data_ptr()

    vocab = config.vocab_size
    rng = np.random.default_rng(seed)
    blob = bytearray()
    prompts = []
    for n in spec.get("prompt_lengths", PROMPT_LENGTHS):
        for attempt in range(100):
            # Longer prompts start with BOS like real ones; the 1-token prompt is drawn too.
            ids = rng.integers(3, vocab, size=n).tolist()
            if n > 1:
                ids[0] = BOS_ID
            new, gen_logits, margin = greedy(ref, ids)
            routes, router_margin = router_top_k(ref, ids + new)
            if (margin >= MIN_GREEDY_MARGIN and EOS_ID not in new and BOS_ID not in new
                    and len(set(new)) >= MIN_DISTINCT_NEW_TOKENS
                    and router_margin >= MIN_ROUTER_MARGIN):
                break
        else:
            raise RuntimeError(f"{name}: no prompt of length {n} gives a decisive greedy path")
        logits = forward_logits(ref, ids)
        # The KV-cached decode must agree with one full forward over prompt + continuation.
        full = forward_logits(ref, ids + new)
        # (Bit equality is not expected: different shapes take different summation orders.)
        decode_diff = float((full[len(ids) - 1:-1] - gen_logits).abs().max())
        prefix_diff = float((full[:len(ids)] - logits).abs().max())
        assert max(decode_diff, prefix_diff) < 1e-4, (decode_diff, prefix_diff)
        entry = {"input_ids": ids}
        for key, t in (("prompt_logits", logits), ("greedy_logits", gen_logits)):
            arr = t.numpy().astype("<f4")
            entry[key] = {"offset_bytes": len(blob), "shape": list(arr.shape)}
            blob += arr.tobytes()
        entry["greedy_new_tokens"] = new
        entry["greedy_min_top2_margin"] = margin
        entry["prompt_argmax"] = logits.argmax(-1).tolist()
        if routes is not None:
            # Over prompt + greedy continuation, so decode steps are checked too:
            # [moe_layer][token][k].
            entry["router_top_k"] = routes
            entry["router_min_kth_margin"] = router_margin
        prompts.append(entry)
        print(f"{name}: prompt {n:3d} tokens (attempt {attempt}), greedy {new}, "
              f"margin {margin:.4f}, logits std {logits.std():.2f}, "
              f"cache/prefix vs full diff {decode_diff:.1e}/{prefix_diff:.1e}")

    (out / "logits.bin").write_bytes(bytes(blob))
    reference = {
        "generator": "scripts/golden/gen_hf_fixtures.py",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "safetensors": safetensors.__version__},
        "architecture": type(ref).__name__,
        "seed": seed,
        "weights_dtype": str(spec["weights_dtype"]).removeprefix("torch."),
        "compute_dtype": "float32",
        "config_style": spec["config_style"],
        "vocab_size": vocab,
        "tensors": tensors,
        "logits_file": "logits.bin",
        "logits_encoding": "float32 little-endian, row-major",
        "greedy": {"max_new_tokens": N_NEW_TOKENS, "do_sample": False, "eos": "disabled",
                   "logits": "raw model output at each decode step, before any processor"},
        "prompts": prompts,
    }
    (out / "reference.json").write_text(readable_json(reference))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="fixtures to make (default: all)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for i, name in enumerate(FIXTURES):
        if not args.names or name in args.names:
            make_fixture(name, FIXTURES[name], seed=1000 + i)


if __name__ == "__main__":
    main()
