#!/usr/bin/env python3
"""Re-checks tests/golden/fixtures/hf/* with an independent numpy forward pass.

Reads each fixture the way an engine must (its own safetensors parser, config.json in both
the classic and the transformers-5 style, llama3 rope scaling, GQA, qkv bias, q/k norm,
explicit head_dim, tied embeddings), computes in float64 and compares with the transformers
logits in logits.bin and with the greedy tokens in reference.json. Needs only numpy:
    .venv-goldens/bin/python scripts/golden/check_numpy.py [fixture ...]
Exits non-zero when any fixture disagrees.
"""

import json
import math
import struct
import sys
from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "golden" / "fixtures" / "hf"
ATOL = 1e-4


def load_safetensors(path):
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        buf = data[begin:end]
        if info["dtype"] == "F32":
            a = np.frombuffer(buf, "<f4")
        elif info["dtype"] == "F16":
            a = np.frombuffer(buf, "<f2")
        elif info["dtype"] == "BF16":  # bf16 is the top half of an f32
            a = (np.frombuffer(buf, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{path}: {name}: unsupported dtype {info['dtype']}")
        out[name] = a.astype(np.float64).reshape(info["shape"])
    return out


def rope_params(cfg):
    """(theta, scaling dict or None) from either config style."""
    if "rope_parameters" in cfg:
        rp = dict(cfg["rope_parameters"])
        theta = rp.pop("rope_theta")
        return theta, None if rp.get("rope_type", "default") == "default" else rp
    return cfg.get("rope_theta", 10000.0), cfg.get("rope_scaling")


def inv_frequencies(head_dim, theta, scaling):
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if scaling is None:
        return inv
    assert scaling["rope_type"] == "llama3", scaling
    # Llama 3.1 rule: keep short wavelengths, divide long ones by factor, blend between.
    factor = scaling["factor"]
    lo, hi = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_ctx = scaling["original_max_position_embeddings"]
    out = []
    for f in inv:
        wavelen = 2 * math.pi / f
        if wavelen < old_ctx / hi:
            out.append(f)
        elif wavelen > old_ctx / lo:
            out.append(f / factor)
        else:
            smooth = (old_ctx / wavelen - lo) / (hi - lo)
            out.append((1 - smooth) * f / factor + smooth * f)
    return np.array(out)


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rotate(x, cos, sin):  # x [heads, seq, head_dim], HF "rotate_half" pairing (i, i + d/2)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + np.concatenate([-x2, x1], -1) * sin


class Model:
    def __init__(self, directory):
        cfg = json.loads((directory / "config.json").read_text())
        self.w = load_safetensors(directory / "model.safetensors")
        self.n_layers = cfg["num_hidden_layers"]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv = cfg["num_key_value_heads"]
        self.head_dim = cfg.get("head_dim") or cfg["hidden_size"] // self.n_heads
        self.eps = cfg["rms_norm_eps"]
        theta, scaling = rope_params(cfg)
        self.inv_freq = inv_frequencies(self.head_dim, theta, scaling)
        self.lm_head = self.w.get("lm_head.weight")
        if cfg.get("tie_word_embeddings", False):
            assert self.lm_head is None, "tied checkpoint should not store lm_head.weight"
            self.lm_head = self.w["model.embed_tokens.weight"]

    def linear(self, x, name):
        y = x @ self.w[name + ".weight"].T
        bias = self.w.get(name + ".bias")
        return y if bias is None else y + bias

    def forward(self, ids):  # -> logits [len(ids), vocab]
        n = len(ids)
        x = self.w["model.embed_tokens.weight"][ids]  # [n, hidden]
        angles = np.arange(n)[:, None] * self.inv_freq[None, :]  # [n, head_dim/2]
        cos = np.cos(np.concatenate([angles, angles], -1))
        sin = np.sin(np.concatenate([angles, angles], -1))
        causal = np.triu(np.full((n, n), -np.inf), 1)
        for i in range(self.n_layers):
            p = f"model.layers.{i}."
            h = rms_norm(x, self.w[p + "input_layernorm.weight"], self.eps)
            q = self.linear(h, p + "self_attn.q_proj").reshape(n, self.n_heads, -1)
            k = self.linear(h, p + "self_attn.k_proj").reshape(n, self.n_kv, -1)
            v = self.linear(h, p + "self_attn.v_proj").reshape(n, self.n_kv, -1)
            if p + "self_attn.q_norm.weight" in self.w:  # Qwen3: per-head norm before rope
                q = rms_norm(q, self.w[p + "self_attn.q_norm.weight"], self.eps)
                k = rms_norm(k, self.w[p + "self_attn.k_norm.weight"], self.eps)
            q = rotate(q.transpose(1, 0, 2), cos, sin)  # [heads, n, head_dim]
            k = rotate(k.transpose(1, 0, 2), cos, sin)
            v = v.transpose(1, 0, 2)
            group = self.n_heads // self.n_kv
            k, v = np.repeat(k, group, 0), np.repeat(v, group, 0)
            scores = q @ k.transpose(0, 2, 1) / math.sqrt(self.head_dim) + causal
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            attn = (scores / scores.sum(-1, keepdims=True)) @ v  # [heads, n, head_dim]
            x = x + self.linear(attn.transpose(1, 0, 2).reshape(n, -1), p + "self_attn.o_proj")
            h = rms_norm(x, self.w[p + "post_attention_layernorm.weight"], self.eps)
            gate = self.linear(h, p + "mlp.gate_proj")
            act = gate / (1 + np.exp(-gate)) * self.linear(h, p + "mlp.up_proj")
            x = x + self.linear(act, p + "mlp.down_proj")
        return rms_norm(x, self.w["model.norm.weight"], self.eps) @ self.lm_head.T


def check(directory):
    ref = json.loads((directory / "reference.json").read_text())
    blob = (directory / ref["logits_file"]).read_bytes()
    model = Model(directory)
    worst, ok = 0.0, True
    for p in ref["prompts"]:
        ids = p["input_ids"]
        want = np.frombuffer(blob, "<f4", count=math.prod(p["prompt_logits"]["shape"]),
                             offset=p["prompt_logits"]["offset_bytes"])
        got = model.forward(ids)
        worst = max(worst, float(np.abs(got - want.reshape(got.shape)).max()))
        seq = list(ids)
        for _ in p["greedy_new_tokens"]:  # full recompute per step: no cache to get wrong
            seq.append(int(model.forward(seq)[-1].argmax()))
        if seq[len(ids):] != p["greedy_new_tokens"]:
            ok = False
            print(f"{directory.name}: greedy {seq[len(ids):]} != {p['greedy_new_tokens']}")
    ok = ok and worst < ATOL
    print(f"{directory.name}: max |numpy - transformers| = {worst:.2e} "
          f"{'ok' if ok else 'MISMATCH'}")
    return ok


def main():
    names = sys.argv[1:] or sorted(d.name for d in FIXTURES.iterdir() if d.is_dir())
    results = [check(FIXTURES / name) for name in names]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
