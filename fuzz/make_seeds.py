#!/usr/bin/env python3
"""fuzz: writes the seed corpora (fuzz/seeds/<target>/) from the real files in this tree and,
where present, in ../shared/data. Seeds are cut down to what exercises a parser (a vocabulary
prefix, one quantized module, a tiny llama2.c model), so the committed corpora stay small.
Run again after adding fixtures; scripts/fuzz.sh minimizes what the fuzzers add."""
import json
import os
import struct
import sys
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("QS_SHARED_DATA_DIR", os.path.join(ROOT, "..", "shared", "data"))
OUT = os.path.join(ROOT, "fuzz", "seeds")
SEP = b"\n%%%%\n"  # fuzz_util.h kSeparator
FIX = os.path.join(ROOT, "tests", "golden", "fixtures")


def read(path):
    with open(path, "rb") as f:
        return f.read()


ONLY = set(sys.argv[1:])  # make_seeds.py [TARGET...]: write only these targets' seeds


def seed(target, name, data):
    if ONLY and target not in ONLY:
        return
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
    gguf_seeds()
    ct2_seeds()
    openai_seeds()
    chat_content_seeds()
    image_seeds()
    images_request_seeds()
    sound_file_seeds()
    transcriptions_request_seeds()
    return 0


# GGUF (gguf.h): little-endian; strings are a u64 length and bytes; arrays an element type, a
# u64 count and the elements; tensor data offsets are relative to the aligned data section.
GGUF_SCALAR = {"u32": (4, "<I"), "i32": (5, "<i"), "f32": (6, "<f"), "bool": (7, "<?"),
               "u64": (10, "<Q")}


def gguf_str(text):
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def gguf_value(kind, value):
    """(type id, bytes) of a value; kind is a scalar name, "str", or ("arr", elem kind)."""
    if kind == "str":
        return 8, gguf_str(value)
    if isinstance(kind, tuple):
        t, _ = gguf_value(kind[1], value[0]) if value else (GGUF_SCALAR[kind[1]][0], b"")
        body = b"".join(gguf_value(kind[1], v)[1] for v in value)
        return 9, struct.pack("<IQ", t, len(value)) + body
    t, fmt = GGUF_SCALAR[kind]
    return t, struct.pack(fmt, value)


def gguf(kvs, tensors, align=32):
    """kvs: list of (key, kind, value); tensors: list of (name, ne, ggml type, bytes)."""
    if align != 32:
        kvs = kvs + [("general.alignment", "u32", align)]
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, kind, value in kvs:
        t, b = gguf_value(kind, value)
        out += gguf_str(key) + struct.pack("<I", t) + b
    blobs, off = b"", 0
    for name, ne, ggml_type, data in tensors:
        out += gguf_str(name) + struct.pack(f"<I{len(ne)}QIQ", len(ne), *ne, ggml_type, off)
        blobs += data + b"\0" * (-len(data) % align)
        off = len(blobs)
    return out + b"\0" * (-len(out) % align) + blobs


# ggml types: (id, values per block, bytes per block); block bytes are filled with a pattern
# whose f16 scales are small finite numbers (every other byte below 0x3c).
GGML = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20),
        "Q8_0": (8, 32, 34), "Q4_K": (12, 256, 144), "Q6_K": (14, 256, 210), "BF16": (30, 1, 2)}


def ggml_tensor(name, ne, type_name, salt):
    t, block, nbytes = GGML[type_name]
    n = 1
    for d in ne:
        n *= d
    size = n // block * nbytes
    return (name, ne, t, bytes(((i * 7 + salt) % 0x3b) if i % 2 else (i * 13 + salt) % 256
                               for i in range(size)))


def gguf_seeds():
    """A one-layer Llama with every importable tensor type and a byte-level BPE vocabulary
    (the first tokens of the real gpt-2 vocabulary when ../shared/data has it), and a
    SentencePiece ("llama") vocabulary with scores and no weights."""
    hidden, ffn, heads, kv_heads, vocab = 32, 256, 2, 1, 64
    head_dim = hidden // heads
    tokens = [bytes([b]).decode("latin-1") for b in range(ord("a"), ord("a") + vocab - 8)]
    tokens = ["<|endoftext|>"] + tokens + ["he", "ll", "hell", "hello", " w", "or", "ld"]
    merges = ["h e", "l l", "he ll", "hell o", "o r", "l d"]
    kvs = [("general.architecture", "str", "llama"), ("general.name", "str", "tiny"),
           ("llama.block_count", "u32", 1), ("llama.context_length", "u32", 64),
           ("llama.embedding_length", "u32", hidden), ("llama.feed_forward_length", "u32", ffn),
           ("llama.attention.head_count", "u32", heads),
           ("llama.attention.head_count_kv", "u32", kv_heads),
           ("llama.attention.layer_norm_rms_epsilon", "f32", 1e-5),
           ("llama.rope.freq_base", "f32", 10000.0),
           ("llama.rope.dimension_count", "u32", head_dim),
           ("tokenizer.ggml.model", "str", "gpt2"), ("tokenizer.ggml.pre", "str", "smollm"),
           ("tokenizer.ggml.tokens", ("arr", "str"), tokens),
           ("tokenizer.ggml.token_type", ("arr", "i32"), [3] + [1] * (len(tokens) - 1)),
           ("tokenizer.ggml.merges", ("arr", "str"), merges),
           ("tokenizer.ggml.bos_token_id", "u32", 0), ("tokenizer.ggml.eos_token_id", "u32", 0),
           ("tokenizer.ggml.padding_token_id", "u32", 0xFFFFFFFF),
           ("tokenizer.ggml.add_bos_token", "bool", False),
           ("tokenizer.chat_template", "str",
            "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}")]
    kv_dim = kv_heads * head_dim
    layer = [("attn_norm", [hidden], "F32"), ("attn_q", [hidden, hidden], "F32"),
             ("attn_k", [hidden, kv_dim], "Q4_1"), ("attn_v", [hidden, kv_dim], "Q8_0"),
             ("attn_output", [hidden, hidden], "F16"), ("ffn_norm", [hidden], "F32"),
             ("ffn_gate", [hidden, ffn], "Q4_0"), ("ffn_up", [hidden, ffn], "BF16"),
             ("ffn_down", [ffn, hidden], "Q4_K")]
    tensors = [ggml_tensor("token_embd.weight", [hidden, vocab], "F16", 1)]
    tensors += [ggml_tensor(f"blk.0.{n}.weight", ne, t, i + 2) for i, (n, ne, t) in
                enumerate(layer)]
    tensors.append(ggml_tensor("output_norm.weight", [hidden], "F32", 20))
    seed("gguf", "llama_tied", gguf(kvs, tensors))
    q6k = [t if t[0] != "blk.0.ffn_down.weight" else
           ggml_tensor("blk.0.ffn_down.weight", [ffn, hidden], "Q6_K", 30) for t in tensors]
    seed("gguf", "llama_q6k_output", gguf(kvs, q6k + [ggml_tensor(
        "output.weight", [hidden, vocab], "Q8_0", 31)], align=64))
    gpt2 = shared("tokenizers", "llama.cpp-vocab", "ggml-vocab-gpt-2.gguf")
    spm = shared("tokenizers", "llama.cpp-vocab", "ggml-vocab-llama-spm.gguf")
    if gpt2:
        real = gguf_read_strings(read(gpt2), ["tokenizer.ggml.tokens", "tokenizer.ggml.merges"])
        kept = real["tokenizer.ggml.tokens"][:600]
        ok = set(kept)
        merges = [m for m in real["tokenizer.ggml.merges"][:600]
                  if all(p in ok for p in m.split(" ")) and m.replace(" ", "") in ok]
        vocab_only = [kv for kv in kvs if not kv[0].startswith(("llama.", "tokenizer.ggml.t",
                                                                "tokenizer.ggml.m"))]
        seed("gguf", "gpt2_vocab", gguf(vocab_only + [
            ("tokenizer.ggml.tokens", ("arr", "str"), kept),
            ("tokenizer.ggml.merges", ("arr", "str"), merges)], []))
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    pieces += ["\u2581", "\u2581t", "he", "\u2581the", "\u2581a", "\u2581w", "or", "ld"]
    if spm:
        real = gguf_read_strings(read(spm), ["tokenizer.ggml.tokens"])["tokenizer.ggml.tokens"]
        pieces += [p for p in real[259:400] if p not in pieces]
    types = [2, 3, 3] + [6] * 256 + [1] * (len(pieces) - 259)
    seed("gguf", "spm_vocab", gguf([
        ("general.architecture", "str", "llama"), ("tokenizer.ggml.model", "str", "llama"),
        ("tokenizer.ggml.tokens", ("arr", "str"), pieces),
        ("tokenizer.ggml.scores", ("arr", "f32"), [-float(i) for i in range(len(pieces))]),
        ("tokenizer.ggml.token_type", ("arr", "i32"), types),
        ("tokenizer.ggml.bos_token_id", "u32", 1), ("tokenizer.ggml.eos_token_id", "u32", 2),
        ("tokenizer.ggml.unknown_token_id", "u32", 0),
        ("tokenizer.ggml.add_space_prefix", "bool", True)], []))


def gguf_read_strings(b, keys):
    """The string arrays `keys` of a GGUF file (enough of a reader for the seeds)."""
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    pos = 24
    n_kv = struct.unpack_from("<Q", b, 16)[0]
    out = {}

    def string(pos):
        n = struct.unpack_from("<Q", b, pos)[0]
        return b[pos + 8:pos + 8 + n].decode("utf-8", "replace"), pos + 8 + n

    def skip(t, pos):
        if t == 8:
            return string(pos)
        return None, pos + sizes[t]

    for _ in range(n_kv):
        key, pos = string(pos)
        t = struct.unpack_from("<I", b, pos)[0]
        pos += 4
        if t != 9:
            _, pos = skip(t, pos)
            continue
        et, n = struct.unpack_from("<IQ", b, pos)
        pos += 12
        values = []
        for _ in range(n):
            v, pos = skip(et, pos)
            values.append(v)
        if key in keys:
            out[key] = values
    return out


# CTranslate2 model.bin (io/ct2_model.h): a u32 version, strings as a u16 length counting a
# NUL, then the bytes and the NUL; each variable's name, rank, u32 dims, dtype id, byte count
# and bytes; then the aliases. A WhisperSpec of d_model 4 with one layer a side, f32 and with
# one int8 weight, next to a tokenizer.json holding the added tokens the importer reads.
def ct2_str(text):
    return struct.pack("<H", len(text) + 1) + text.encode() + b"\0"


def ct2_model(variables, aliases, spec="WhisperSpec"):
    out = struct.pack("<I", 6) + ct2_str(spec) + struct.pack("<II", 3, len(variables))
    for name, shape, dtype, data in variables:
        out += ct2_str(name) + struct.pack(f"<B{len(shape)}I", len(shape), *shape)
        out += struct.pack("<BI", dtype, len(data)) + data
    out += struct.pack("<I", len(aliases))
    return out + b"".join(ct2_str(a) + ct2_str(t) for a, t in aliases)


def ct2_seeds():
    d, ffn, vocab = 4, 8, 12

    def f32(name, *shape):
        n = 1
        for x in shape:
            n *= x
        return (name, shape, 0, struct.pack(f"<{n}f", *[(i % 5) * 0.25 - 0.5 for i in range(n)]))

    def linear(prefix, rows, cols, parts=1):
        return [f32(prefix + "/weight", parts * rows, cols), (prefix + "/bias", (parts * rows,), 0,
                struct.pack(f"<{parts * rows}f", *[0.0 if 0 < i // rows < 2 else 0.5
                                                   for i in range(parts * rows)]))]

    def norm(prefix):
        return [f32(prefix + "/gamma", d), f32(prefix + "/beta", d)]

    v = [f32("encoder/conv1/weight", d, 2, 3), f32("encoder/conv1/bias", d),
         f32("encoder/conv2/weight", d, d, 3), f32("encoder/conv2/bias", d),
         f32("encoder/position_encodings/encodings", 3, d), ("encoder/num_heads", (), 2,
         struct.pack("<h", 2))] + norm("encoder/layer_norm")
    for side in ("encoder", "decoder"):
        layer = side + "/layer_0/"
        v += norm(layer + "self_attention/layer_norm")
        v += linear(layer + "self_attention/linear_0", d, d, 3)
        v += linear(layer + "self_attention/linear_1", d, d)
        if side == "decoder":
            v += norm(layer + "attention/layer_norm") + linear(layer + "attention/linear_0", d, d)
            v += [f32(layer + "attention/linear_1/weight", 2 * d, d), (layer +
                  "attention/linear_1/bias", (2 * d,), 0, struct.pack(f"<{2 * d}f", *[0.0] * 2 * d))]
            v += linear(layer + "attention/linear_2", d, d)
        v += norm(layer + "ffn/layer_norm") + linear(layer + "ffn/linear_0", ffn, d)
        v += linear(layer + "ffn/linear_1", d, ffn)
    v += [f32("decoder/embeddings/weight", vocab, d), f32("decoder/position_encodings/encodings",
          5, d), ("decoder/num_heads", (), 2, struct.pack("<h", 2)),
          ("decoder/activation", (), 1, b"\3"), ("decoder/pre_norm", (), 1, b"\1")]
    v += norm("decoder/layer_norm")
    names = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|translate|>",
             "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>",
             "<|notimestamps|>", "<|0.00|>"]
    tokenizer = json.dumps({"added_tokens": [{"id": 2 + i, "content": t, "special": True}
                                             for i, t in enumerate(names)]}).encode()
    config = json.dumps({"alignment_heads": [[0, 1]], "suppress_ids": [1],
                         "suppress_ids_begin": [2]}).encode()
    tied = [("decoder/projection/weight", "decoder/embeddings/weight")]
    seed("ct2", "whisper_f32", ct2_model(v, tied) + SEP + tokenizer + SEP + config)
    int8 = [(n, s, 1, bytes(range(len(data) // 4))) if n == "encoder/conv2/weight" else
            (n, s, t, data) for n, s, t, data in v]
    int8.append(("encoder/conv2/weight_scale", (d,), 0, struct.pack(f"<{d}f", *[2.0] * d)))
    seed("ct2", "whisper_int8", ct2_model(int8, tied) + SEP + tokenizer + SEP)


def openai_seeds():
    """Request bodies of each endpoint, as the OpenAI client and vLLM's tests send them."""
    bodies = {
        "completions": [
            {"model": "stories", "prompt": "Once upon a time", "max_tokens": 8},
            {"prompt": ["a", "b"], "n": 2, "temperature": 0.5, "top_p": 0.9, "top_k": 5,
             "stop": ["\n", "."], "seed": 7, "logprobs": 2, "echo": True},
            {"prompt": [1, 2, 3], "stream": True,
             "stream_options": {"include_usage": True, "continuous_usage_stats": True},
             "min_tokens": 2, "ignore_eos": True, "stop_token_ids": [2]},
            {"prompt": [[1, 5], [1, 6]], "max_tokens": 4, "repetition_penalty": 1.2,
             "presence_penalty": 0.5, "frequency_penalty": -0.5, "min_p": 0.1,
             "skip_special_tokens": False, "include_stop_str_in_output": True, "user": "u"},
        ],
        "chat": [
            {"model": "stories", "messages": [{"role": "user", "content": "Hi"}]},
            {"messages": [{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                          {"role": "assistant", "content": "Hello"},
                          {"role": "user", "content": "Again"}],
             "max_completion_tokens": 5, "logprobs": True, "top_logprobs": 3, "n": 2},
            {"messages": [{"role": "user", "content": "x"}], "max_tokens": 3, "stream": True,
             "add_generation_prompt": False, "continue_final_message": True,
             "chat_template_kwargs": {"enable_thinking": False}, "tools": None},
        ],
        "tokenize": [{"prompt": "Once upon a time", "add_special_tokens": True},
                     {"messages": [{"role": "user", "content": "Hi"}],
                      "return_token_strs": True}],
        "detokenize": [{"tokens": [1, 400, 401, 2]}],
    }
    for endpoint, cases in bodies.items():
        for i, body in enumerate(cases):
            seed("openai_request", f"{endpoint}_{i}",
                 endpoint.encode() + SEP + json.dumps(body).encode())
    seed("openai_request", "all_endpoints", b'{"prompt": "hi", "tokens": [1]}')


def chat_content_seeds():
    """Chat messages with content parts: text, a real image as a data URL, a clip as input_audio
    and audio_url, and the refusals."""
    import base64
    image = base64.b64encode(read(os.path.join(FIX, "vl", "chat_image_a.png"))).decode()
    # 0.1 s of a 16 kHz 16-bit mono ramp as a WAV.
    pcm = b"".join(struct.pack("<h", (i * 37) % 2000 - 1000) for i in range(1600))
    wav = (b"RIFF" + struct.pack("<I", 36 + len(pcm)) + b"WAVEfmt " +
           struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16) + b"data" +
           struct.pack("<I", len(pcm)) + pcm)
    clip = base64.b64encode(wav).decode()

    def user(*parts):
        return [{"role": "user", "content": list(parts)}]

    def image_url(url):
        return {"type": "image_url", "image_url": {"url": url}}
    cases = {
        "text_parts": user({"type": "text", "text": "a"}, {"type": "text", "text": "b"}),
        "image_data_url": [{"role": "system", "content": "s"}] + user(
            {"type": "text", "text": "Look:"}, image_url("data:image/png;base64," + image)),
        "two_images": user(image_url("data:image/png;base64," + image),
                           image_url("data:;base64," + image), {"type": "text", "text": "?"}),
        "refused_urls": user(image_url("https://x/a.png"), image_url("file:///etc/passwd"),
                             image_url("data:image/png,raw"), image_url("data:;base64,@@")),
        "other_parts": user({"type": "video_url", "video_url": {"url": "data:,"}},
                            {"type": "unknown"}, {"type": "image_url", "image_url": {}}),
        "image_and_audio": user(image_url("data:image/png;base64," + image),
                                {"type": "input_audio",
                                 "input_audio": {"data": clip, "format": "wav"}},
                                {"type": "audio_url",
                                 "audio_url": {"url": "data:audio/wav;base64," + clip}},
                                {"type": "text", "text": "?"}),
        "bad_audio": user({"type": "input_audio", "input_audio": {"data": "@@", "format": "wav"}},
                          {"type": "input_audio", "input_audio": {"data": clip, "format": "../x"}},
                          {"type": "audio_url", "audio_url": {"url": "https://x/a.wav"}}),
    }
    for name, messages in cases.items():
        seed("chat_content", name, json.dumps(messages).encode())
    seed("chat_content", "base64", b"aGVsbG8gd29ybGQ=")
    seed("chat_content", "template", b"{% for c in message['content'] %}{% endfor %}")


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(
        ">I", zlib.crc32(kind + data) & 0xffffffff)


def png(width, height, ctype, depth, extra=b""):
    """A minimal PNG: every row filter 0, pixel bytes counting up."""
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[ctype]
    row = (width * channels * depth + 7) // 8
    raw = b"".join(b"\0" + bytes((y * 7 + x) % 3 if ctype == 3 else (y * 40 + x * 9) % 256
                                  for x in range(row)) for y in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, depth, ctype, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra +
            png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b""))


def image_seeds():
    """The image pipeline's parsers, from the tiny FLUX.1 fixture (tests/golden/fixtures/flux)."""
    flux = os.path.join(FIX, "flux", "tiny_pipeline")
    prompts = [b"a photograph of an astronaut riding a horse", b"A  Cat's  HAT, 3 dogs!",
               "caf\u00e9 \u2581 <|endoftext|> \U0001f600".encode()]
    clip = read(os.path.join(flux, "tokenizer", "tokenizer.json"))
    j = json.loads(clip)
    vocab = json.dumps(j["model"]["vocab"]).encode()
    merges = b"#version: 0.2\n" + b"\n".join(
        (" ".join(m) if isinstance(m, list) else m).encode() for m in j["model"]["merges"])
    for i, p in enumerate(prompts):
        seed("clip_tokenizer", f"tokenizer_json_{i}", clip + SEP + SEP + SEP + p)
    seed("clip_tokenizer", "vocab_merges", SEP + vocab + SEP + merges + SEP + prompts[1])
    t5 = read(os.path.join(flux, "tokenizer_2", "tokenizer.json"))
    for i, p in enumerate(prompts[:2] + [b"\xe2\x96\x81 x\t\ty", b"\xff\xfe"]):
        seed("unigram_tokenizer", f"t5_{i}", t5 + SEP + p)
    for name in ("dev.png", "cfg.png"):
        seed("png", name[:-4], read(os.path.join(FIX, "flux", name)))
    # The other colour types and depths libpng converts (grey, grey+alpha, palette, RGBA,
    # 16-bit), 3x2 pixels each, with a gAMA chunk on one.
    for name, ctype, depth, extra in [("grey", 0, 8, b""), ("grey_alpha", 4, 8, b""),
                                      ("palette", 3, 8, png_chunk(b"PLTE", bytes(range(9)))),
                                      ("rgba", 6, 8, b""), ("rgb16", 2, 16, b""),
                                      ("grey2_gamma", 0, 2, png_chunk(b"gAMA", struct.pack(
                                          ">I", 45455)))]:
        seed("png", name, png(3, 2, ctype, depth, extra))
    files = ["model_index.json", "scheduler/scheduler_config.json", "transformer/config.json",
             "vae/config.json", "text_encoder/config.json", "text_encoder_2/config.json",
             "tokenizer/tokenizer.json", "tokenizer_2/tokenizer.json"]
    request = json.dumps({"prompt": "a red cube", "width": 16, "height": 16, "steps": 1,
                          "max_sequence_length": 8, "seed": 7}).encode()
    cfg = json.dumps({"prompt": "x", "negative_prompt": "y", "true_cfg_scale": 2.0,
                      "width": 8, "height": 8, "steps": 2, "max_sequence_length": 4}).encode()
    # The JSON configs in full (the tokenizers left to the fixture: their own targets fuzz them),
    # and each file alone with the rest taken from the fixture.
    configs = [read(os.path.join(flux, f)) for f in files[:6]]
    seed("flux_pipeline", "configs", SEP.join(configs + [b"", b"", request]))
    seed("flux_pipeline", "configs_cfg", SEP.join(configs + [b"", b"", cfg]))
    for i, f in enumerate(files[:6]):
        parts = [b""] * len(files) + [request]
        parts[i] = configs[i]
        seed("flux_pipeline", f.replace("/", "_").replace(".json", ""), SEP.join(parts))


def images_request_seeds():
    """POST /v1/images/generations bodies: the fields of vLLM-Omni's ImageGenerationRequest."""
    bodies = [
        {"prompt": "a red cube"},
        {"prompt": "a red cube", "model": "tiny-flux", "n": 2, "size": "32x16", "seed": 7,
         "num_inference_steps": 2, "response_format": "b64_json", "user": "u"},
        {"prompt": "x", "negative_prompt": "y", "true_cfg_scale": 2.5, "guidance_scale": 5,
         "max_sequence_length": 64, "size": "16x16", "response_format": "file"},
        {"prompt": "x", "size": "30x32", "quality": "hd", "style": "vivid", "extra": [1]},
        {"prompt": "x", "n": 11, "size": "1024x", "response_format": "url"},
    ]
    for i, body in enumerate(bodies):
        seed("images_request", f"body_{i}", json.dumps(body).encode())


def wav(rate, channels, bits, frames, tag=1):
    """A canonical WAV of a ramp; tag 1 is PCM, 3 IEEE float."""
    block = channels * bits // 8
    if tag == 3:
        data = struct.pack(f"<{frames * channels}f", *[(i % 64) / 32 - 1 for i in
                                                        range(frames * channels)])
    else:
        data = bytes((i * 37) % 256 for i in range(frames * block))
    fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * block, block, bits)
    body = b"WAVEfmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack(
        "<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def sound_file_seeds():
    """Uploads: small WAVs of each encoding and rate path, and the audio fixtures' compressed
    files (OGG/Vorbis, MP3, stereo FLAC at 22.05 kHz)."""
    seed("sound_file", "pcm16_16k", wav(16000, 1, 16, 400))
    seed("sound_file", "pcm24_44k_stereo", wav(44100, 2, 24, 300))
    seed("sound_file", "pcm8_8k", wav(8000, 1, 8, 300))
    seed("sound_file", "float_48k", wav(48000, 1, 32, 300, tag=3))
    for name in ("hello_16k.ogg", "hello_16k.mp3", "fox_22050_stereo.flac"):
        seed("sound_file", name.replace(".", "_"), read(os.path.join(FIX, "audio", name)))


def multipart(fields, boundary="qsfuzz"):
    """A multipart/form-data body: fields are (name, value bytes, filename or None)."""
    out = b""
    for name, value, filename in fields:
        disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out += f"--{boundary}\r\nContent-Disposition: {disp}\r\n".encode()
        if filename:
            out += b"Content-Type: audio/wav\r\n"
        out += b"\r\n" + value + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


def transcriptions_request_seeds():
    """Uploads to /v1/audio/transcriptions: an empty header part means the default
    multipart content type with the boundary "qsfuzz"."""
    sep = b"\n%%%%\n"
    clip = wav(16000, 1, 16, 3200)  # 0.2 s
    seed("transcriptions_request", "json", sep + multipart([("file", clip, "a.wav"),
                                                              ("model", b"whisper", None)]))
    for fmt in ("text", "verbose_json", "srt", "vtt"):
        seed("transcriptions_request", fmt, sep + multipart(
            [("file", clip, "a.wav"), ("response_format", fmt.encode(), None),
             ("temperature", b"0.2", None), ("language", b"en", None)]))
    seed("transcriptions_request", "no_file", sep + multipart([("model", b"whisper", None)]))
    seed("transcriptions_request", "json_body", b"application/json" + sep + b'{"file": 1}')
    seed("transcriptions_request", "other_boundary",
         b"multipart/form-data; boundary=xyz" + sep + multipart([("file", clip, "b.wav")], "xyz"))


if __name__ == "__main__":
    sys.exit(main())
