#!/usr/bin/env python3
"""Cross-checks `quantserve import gguf` with independent tools.

- Metadata: the `gguf` package (llama.cpp's reader) reads the llama.* keys; config.json must
  agree.
- Tensors: `gguf.quants.dequantize` dequantizes every tensor; after undoing
  convert_hf_to_gguf's Q/K row permutation (numpy), it must equal our model.safetensors
  (exactly for f32 output; for bf16, equal to the reference rounded to bf16 within one ulp).
- Tokenizer: HF `tokenizers` loads our tokenizer.json; `--token-fixture OUT` writes the ids it
  gives for a set of texts, which tests/golden/gguf_import_test.cc compares with ours.
"""
import argparse
import json
import struct

import gguf
import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = np.frombuffer(data[a:b], dtype=np.uint8)
        if info["dtype"] == "F32":
            arr = raw.view(np.float32)
        elif info["dtype"] == "BF16":
            arr = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            raise SystemExit(f"{name}: unexpected dtype {info['dtype']}")
        out[name] = arr.reshape(info["shape"])
    return out


def to_bf16(x):
    u = x.astype(np.float32).view(np.uint32)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000  # round to nearest even
    return u.view(np.float32)


def unpermute(w, n_head):
    # convert_hf_to_gguf: w.reshape(n_head, 2, rows // n_head // 2, cols).swapaxes(1, 2)
    rows, cols = w.shape
    return w.reshape(n_head, rows // n_head // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


HF = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}


def hf_name(name):
    if name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if name == "output_norm.weight":
        return "model.norm.weight"
    if name == "output.weight":
        return "lm_head.weight"
    _, layer, part, _ = name.split(".")
    return f"model.layers.{layer}.{HF[part]}.weight"


def field(r, key):
    f = r.fields[key]
    return f.contents() if hasattr(f, "contents") else f.parts[f.data[0]][0]


TEXTS = [
    "Hello world", " Hello world", "Hello World!", "The year 2024 had 366 days.",
    "   leading spaces\tand\ttabs\n\nnew paragraphs", "naïve café Äpfel 你好世界 🦙",
    "<|im_start|>user\nWhat is 12345 * 678?<|im_end|>\n", "don't can't I'm we'll they've",
    "def f(x):\n    return x**2  # square\n", "1,234.56 $100 3.14159",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--hf", required=True)
    ap.add_argument("--token-fixture")
    args = ap.parse_args()
    r = gguf.GGUFReader(args.gguf)
    cfg = json.load(open(f"{args.hf}/config.json"))
    checks = {
        "llama.embedding_length": "hidden_size", "llama.block_count": "num_hidden_layers",
        "llama.feed_forward_length": "intermediate_size",
        "llama.attention.head_count": "num_attention_heads",
        "llama.attention.head_count_kv": "num_key_value_heads",
        "llama.context_length": "max_position_embeddings",
        "llama.rope.freq_base": "rope_theta",
        "llama.attention.layer_norm_rms_epsilon": "rms_norm_eps",
    }
    for key, name in checks.items():
        if key in r.fields:
            want = float(field(r, key))
            assert abs(want - cfg[name]) <= 1e-6 * abs(want), (key, want, cfg[name])
    print(f"metadata: {len(checks)} llama.* keys agree with config.json")

    ours = read_safetensors(f"{args.hf}/model.safetensors")
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    types = {}
    for t in r.tensors:
        ref = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        ref = ref.reshape([int(d) for d in reversed(t.shape)])
        if ".attn_q." in t.name:
            ref = unpermute(ref, heads)
        elif ".attn_k." in t.name:
            ref = unpermute(ref, kv_heads)
        got = ours[hf_name(t.name)]
        assert got.shape == ref.shape, (t.name, got.shape, ref.shape)
        if cfg["torch_dtype"] == "float32":
            assert np.array_equal(got, ref), t.name
        else:
            # Both sides round f32 to bf16; allow one bf16 ulp for f16*scale products that
            # land exactly between two bf16 values after a different f32 rounding.
            diff = np.abs(got - to_bf16(ref))
            tol = np.abs(to_bf16(ref)) * 2.0**-7
            assert np.all(diff <= tol), (t.name, float(diff.max()))
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    print(f"tensors: {len(r.tensors)} match gguf.quants.dequantize ({types})")

    import os
    if not os.path.exists(f"{args.hf}/tokenizer.json"):
        print("tokenizer: tokenizer.model (SentencePiece), not checked here")
        return
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(f"{args.hf}/tokenizer.json")
    cases = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in TEXTS]
    print(f"tokenizer: HF tokenizers encodes {len(cases)} texts from our tokenizer.json")
    if args.token_fixture:
        with open(args.token_fixture, "w") as f:
            rows = ",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in cases)
            source = json.dumps("tokenizers " + __import__("tokenizers").__version__)
            f.write(f'{{"source": {source},\n "cases": [\n{rows}\n]}}\n')


if __name__ == "__main__":
    main()
