#!/usr/bin/env python3
"""fuzz: writes the seed corpora (fuzz/seeds/<target>/) from the real files in this tree and,
where present, in ../shared/data. Seeds are cut down to what exercises a parser (a vocabulary
prefix, one quantized module, a tiny llama2.c model), so the committed corpora stay small.
Run again after adding fixtures; scripts/fuzz.sh minimizes what the fuzzers add."""
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("QS_SHARED_DATA_DIR", os.path.join(ROOT, "..", "shared", "data"))
OUT = os.path.join(ROOT, "fuzz", "seeds")
SEP = b"\n%%%%\n"  # fuzz_util.h kSeparator
FIX = os.path.join(ROOT, "tests", "golden", "fixtures")


def read(path):
    with open(path, "rb") as f:
        return f.read()


def seed(target, name, data):
    os.makedirs(os.path.join(OUT, target), exist_ok=True)
    with open(os.path.join(OUT, target, name), "wb") as f:
        f.write(data)


def shared(*parts):
    path = os.path.join(SHARED, *parts)
    return path if os.path.exists(path) else None


def safetensors(tensors, metadata=None, pad=True):
    """tensors: list of (name, dtype, shape, bytes)."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def read_safetensors(path):
    b = read(path)
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    out = {}
    for name, v in header.items():
        if name != "__metadata__":
            s, e = v["data_offsets"]
            out[name] = (v["dtype"], v["shape"], b[8 + n + s:8 + n + e])
    return out


def fixture_dirs(kind):
    base = os.path.join(FIX, kind)
    return sorted(os.path.join(base, d) for d in os.listdir(base)
                  if os.path.isdir(os.path.join(base, d)))


def main():
    quant = fixture_dirs("quant")
    # safetensors: one real quantized module per fixture, plus edge layouts.
    for d in quant:
        t = read_safetensors(os.path.join(d, "model.safetensors"))
        small = [(k, *v) for k, v in t.items() if ".layers.0.self_attn.k_proj." in k]
        seed("safetensors", os.path.basename(d), safetensors(small, {"format": "pt"}))
    seed("safetensors", "dtypes", safetensors(
        [(n, dt, [2], b"\x01" * (2 * sz)) for n, dt, sz in
         [("a", "F32", 4), ("b", "F16", 2), ("c", "BF16", 2), ("d", "F8_E4M3", 1),
          ("e", "F8_E5M2", 1), ("f", "I8", 1), ("g", "U8", 1), ("h", "I16", 2), ("i", "I32", 4),
          ("j", "I64", 8), ("k", "BOOL", 1)]]))
    seed("safetensors", "unaligned", safetensors([("u", "U8", [3], b"abc"),
                                                   ("w", "F32", [1], b"\0\0\x80?")], pad=False))
    seed("safetensors", "empty", safetensors([("z", "F32", [0, 4], b"")]))

    # checkpoint index: two shards split from a real fixture.
    t = read_safetensors(os.path.join(quant[0], "model.safetensors"))
    names = sorted(k for k in t if "norm" in k)
    shard1 = [(k, *t[k]) for k in names[:2]]
    shard2 = [(k, *t[k]) for k in names[2:4]]
    weight_map = {k: "model-00001-of-00002.safetensors" for k in names[:2]}
    weight_map.update({k: "model-00002-of-00002.safetensors" for k in names[2:4]})
    index = json.dumps({"metadata": {"total_size": 2048}, "weight_map": weight_map}).encode()
    seed("checkpoint_index", "two_shards",
         index + SEP + safetensors(shard1) + SEP + safetensors(shard2))

    # config.json of every architecture, generation_config.json, quantization_config.
    for kind in ("hf", "quant"):
        for d in fixture_dirs(kind):
            name = kind + "_" + os.path.basename(d)
            seed("model_config", name, read(os.path.join(d, "config.json")))
            seed("generation_config", name, read(os.path.join(d, "generation_config.json")))
            qc = os.path.join(d, "quantization_config.json")
            seed("quant_config", name, read(os.path.join(d, "config.json")) +
                 (SEP + read(qc) if os.path.exists(qc) else b""))

    # Quantized layouts: each fixture's down_proj with its scheme and shape.
    for d in quant:
        config = json.loads(read(os.path.join(d, "config.json")))
        qc_path = os.path.join(d, "quantization_config.json")
        qc = json.loads(read(qc_path)) if os.path.exists(qc_path) else config["quantization_config"]
        t = read_safetensors(os.path.join(d, "model.safetensors"))
        prefix = "model.layers.0.mlp.down_proj."
        module = [(k[len(prefix):], *v) for k, v in t.items() if k.startswith(prefix)]
        shape = f"{config['hidden_size']} {config['intermediate_size']}".encode()
        seed("quant_layouts", os.path.basename(d),
             json.dumps(qc).encode() + SEP + shape + SEP + safetensors(module))

    # Tokenizers.
    for d in quant[:1] + [q for q in quant if "qwen3" in q][:1]:
        seed("tokenizer_json", os.path.basename(d),
             read(os.path.join(d, "tokenizer.json")) + SEP +
             read(os.path.join(d, "tokenizer_config.json")) + SEP + "Hello, wörld! 123 <s>".encode()
             + SEP + b"\x01\x00\x02\x00\x10\x00")
    text = "The quick brown fox, 1234 ünïcode 你好 <|im_end|>\n".encode()
    qwen = shared("tokenizers", "qwen2")
    if qwen:
        vocab = json.loads(read(os.path.join(qwen, "vocab.json")))
        keep = {k: v for k, v in vocab.items() if v < 600}
        merges = [m for m in read(os.path.join(qwen, "merges.txt")).decode().split("\n")[1:]
                  if m and "".join(m.split(" ")) in keep][:300]
        seed("vocab_merges", "qwen2_prefix",
             json.dumps(keep, ensure_ascii=False).encode() + SEP +
             ("#version: 0.2\n" + "\n".join(merges) + "\n").encode() + SEP +
             read(os.path.join(qwen, "tokenizer_config.json")) + SEP + text + SEP + b"\x05\x01")
        seed("chat_template", "qwen2.5_from_shared",
             read(os.path.join(qwen, "Qwen-Qwen2.5-7B-Instruct.jinja")))
    llama3 = shared("tokenizers", "llama3", "tokenizer.model")
    if llama3:
        lines = read(llama3).split(b"\n")[:2000]
        seed("tiktoken", "llama3_prefix", b"\n".join(lines) + b"\n" + SEP + b"{}" + SEP + text)
    tok512 = shared("models", "tok512.bin")
    spm = os.environ.get("QS_SPM_SEED")  # tokenizer.model that `quantserve import` wrote
    if spm and os.path.exists(spm):
        seed("sentencepiece", "tok512_imported", read(spm) + SEP +
             b'{"add_bos_token": true}' + SEP + text + SEP + b"\x03\x00\x40\x01")

    # Chat templates: the golden templates with their cases' messages, and jinja cases.
    ct = os.path.join(FIX, "chat_templates")
    goldens = json.loads(read(os.path.join(ct, "goldens.json")))["cases"]
    for i, case in enumerate(goldens[::6]):
        seed("chat_template", f"golden_{i}", read(os.path.join(ct, case["template"])) + SEP +
             json.dumps(case["messages"]).encode() + SEP +
             json.dumps(case.get("extra_context") or {}).encode())
    for i, case in enumerate(json.loads(read(os.path.join(ct, "jinja_cases.json")))["cases"]):
        seed("chat_template", f"case_{i}", case["template"].encode() + SEP +
             json.dumps(case.get("context", {}).get("msgs", [])).encode() + SEP +
             json.dumps(case.get("context", {})).encode())

    # llama2.c: a tiny model in run.c's layout (dim 8, hidden 16, 2 layers, 2 heads, 1 kv
    # head, vocab 32, seq 4), then the real tok512.bin tokenizer.
    dim, hidden, layers, heads, kv, vocab, seq = 8, 16, 2, 2, 1, 32, 4
    hs = dim // heads
    n = (vocab * dim + layers * dim + layers * dim * dim * 2 + layers * dim * kv * hs * 2 +
         layers * dim + layers * dim * hidden * 3 + dim + seq * hs)  # freq_cis real + imag
    floats = struct.pack(f"<{n}f", *[((i * 37) % 17 - 8) / 16 for i in range(n)])
    model = struct.pack("<7i", dim, hidden, layers, heads, kv, vocab, seq) + floats
    seed("llama2c", "tiny_shared_classifier", model + SEP + (read(tok512) if tok512 else b""))
    wcls = struct.pack(f"<{vocab * dim}f", *[0.5] * (vocab * dim))
    seed("llama2c", "tiny_wcls", struct.pack("<7i", dim, hidden, layers, heads, kv, -vocab, seq)
         + floats + wcls + SEP)
    return 0


if __name__ == "__main__":
    sys.exit(main())
