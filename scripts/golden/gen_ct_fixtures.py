#!/usr/bin/env python3
"""Generates the compressed-tensors (FP8 / INT8 W8A8) reference fixtures in
tests/golden/fixtures/quant/llama_ct_*.

Each fixture is the tiny random-init Llama base of gen_quant_fixtures.py (same construction,
same seed as its llama_autoround_w4g128_sym, so the float weights are identical), saved as a
BF16 checkpoint, quantized by the real tool, llm-compressor's `oneshot` with a
`QuantizationModifier` (presets FP8, FP8_DYNAMIC, FP8_BLOCK, W8A8, and two custom
config_groups schemes for static int8 activations), and saved in compressed-tensors' compressed
format. Next to the checkpoint (see fixtures/quant/README.md):
  - logits.bin + reference.json: the quantized checkpoint loaded by transformers'
    compressed-tensors integration (CPU, float32), every quantized linear's input
    quantize-dequantized as the config declares with vLLM's formulas (ActQuant below);
  - logits_weight_only.bin: the same model with activation quantization off;
  - logits_tool_forward.bin: the model as transformers runs it unmodified (compressed-tensors'
    own input fake-quantization, which differs from vLLM's for dynamic int8: amax / 127.5);
  - dequant.bin: the tool's own dequantized weight of two linears.

Install (into the venv of scripts/golden/requirements.txt; see requirements-ct.txt):
    .venv-goldens/bin/pip install --no-deps -r scripts/golden/requirements-ct.txt

Regenerate (deterministic; overwrites the fixture directories):
    .venv-goldens/bin/python scripts/golden/gen_ct_fixtures.py --out tests/golden/fixtures/quant
"""

import argparse
import json
import math
import shutil
import tempfile
from pathlib import Path

import numpy as np
import safetensors
import torch
import transformers
from datasets import Dataset
from safetensors import safe_open
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    AutoModelForCausalLM,
    GenerationConfig,
    LlamaConfig,
    PreTrainedTokenizerFast,
)

import compressed_tensors
import llmcompressor
from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
from llmcompressor import oneshot
from llmcompressor.modifiers.quantization import QuantizationModifier

REPO = Path(__file__).resolve().parents[2]
CALIB_TEXT = REPO.parent / "shared" / "data" / "text" / "calibration" / "tiny.utf8"

# As in gen_quant_fixtures.py (kept in step by hand: that module imports auto-round, which
# llm-compressor's pins exclude, so it is mirrored rather than imported).
BOS_ID = 1
EOS_ID = 2
N_NEW_TOKENS = 8
PROMPT_LENGTHS = [1, 6, 20]
N_CALIB = 8
CALIB_SEQLEN = 64
DEQUANT_MODULES = ["model.layers.0.self_attn.o_proj", "model.layers.1.self_attn.k_proj"]
# The seed gen_quant_fixtures.py gives its first Llama fixture (2000 + index 0).
BASE_SEED = 2000
FP8_MAX = 448.0  # E4M3 (OCP fp8, torch.float8_e4m3fn) largest finite value


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


def float_model(seed):
    """gen_quant_fixtures.py's float_model("llama", seed), line for line."""
    config = LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=None,
                         max_position_embeddings=256, tie_word_embeddings=False,
                         hidden_size=128, intermediate_size=384, vocab_size=256,
                         rms_norm_eps=1e-5, rope_theta=10000.0)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.config.architectures = [type(model).__name__]
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                p.copy_(2.0 * torch.randn(p.shape, generator=gen))
            elif name.startswith("lm_head"):
                p.copy_(6.0 / math.sqrt(p.shape[1]) * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.7 / math.sqrt(p.shape[1]) * torch.randn(p.shape, generator=gen))
    return model.eval()


def int8_args(strategy, dynamic, symmetric=True):
    return QuantizationArgs(num_bits=8, type="int", strategy=strategy, dynamic=dynamic,
                            symmetric=symmetric)


def w8a8_static(symmetric):
    """INT8 weights per channel (sym) + static per-tensor int8 activations (calibrated)."""
    return {"group_0": QuantizationScheme(
        targets=["Linear"], weights=int8_args("channel", False),
        input_activations=int8_args("tensor", False, symmetric))}


# name -> the QuantizationModifier's scheme: a preset name or custom config_groups.
FIXTURES = {
    "llama_ct_fp8_tensor": dict(scheme="FP8"),
    "llama_ct_fp8_dynamic": dict(scheme="FP8_DYNAMIC"),
    "llama_ct_fp8_block": dict(scheme="FP8_BLOCK"),
    "llama_ct_w8a8_int8_dynamic": dict(scheme="W8A8"),
    "llama_ct_w8a8_int8_static": dict(config_groups=lambda: w8a8_static(True)),
    "llama_ct_w8a8_int8_asym": dict(config_groups=lambda: w8a8_static(False)),
}


def quantize_with_llmcompressor(spec, out, seed):
    """The float base saved as a BF16 checkpoint (as a hub model would be), loaded back in
    BF16 (oneshot reads the model's config from its path), quantized by oneshot on the
    calibration bytes, saved compressed."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        float_model(seed).to(torch.bfloat16).save_pretrained(src)
        byte_tokenizer().save_pretrained(src)
        model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16,
                                                     attn_implementation="eager")
        if "scheme" in spec:
            recipe = QuantizationModifier(targets="Linear", scheme=spec["scheme"],
                                          ignore=["lm_head"])
        else:
            recipe = QuantizationModifier(config_groups=spec["config_groups"](),
                                          ignore=["lm_head"])
        ids = [list(s.encode("ascii")) for s in calibration_strings()]
        calib = Dataset.from_dict({"input_ids": ids,
                                   "attention_mask": [[1] * len(i) for i in ids]})
        oneshot(model=model, tokenizer=byte_tokenizer(), dataset=calib, recipe=recipe,
                num_calibration_samples=N_CALIB, max_seq_length=CALIB_SEQLEN,
                shuffle_calibration_samples=False, batch_size=1)
        model.save_pretrained(out, save_compressed=True)
    byte_tokenizer().save_pretrained(out)
    for p in out.iterdir():
        p.chmod(0o644)  # safetensors writes model.safetensors as 0600


def quantized_linears(model):
    return {name: m for name, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and getattr(m, "quantization_scheme", None)}


def set_tool_quantization(model, enabled):
    """compressed-tensors' own switch for its forward's quantize-dequantize of inputs
    (lifecycle/forward.py set_forward_quantized: `module.quantization_enabled`)."""
    for m in quantized_linears(model).values():
        m.quantization_enabled = enabled


def stored_dequant(f, name, weight_args):
    """W [n, k] in float32 from the stored tensors: code * scale (per tensor, per channel or
    per block, the last blocks partial), exact in f32 (8-bit code times a bf16 scale)."""
    w = f.get_tensor(name + ".weight").float()
    s = f.get_tensor(name + ".weight_scale").float()
    n, k = w.shape
    if weight_args.strategy == "tensor":
        return w * s.reshape(())
    if weight_args.strategy == "channel":
        return w * s.reshape(n, 1)
    assert weight_args.strategy == "block", weight_args.strategy
    bn, bk = weight_args.block_structure
    assert s.shape == (math.ceil(n / bn), math.ceil(k / bk)), (name, s.shape)
    return w * s.repeat_interleave(bn, 0).repeat_interleave(bk, 1)[:n, :k]


def load_reference(out):
    """transformers' compressed-tensors integration on the checkpoint (default route: weights
    left compressed, decompressed by compressed-tensors on the first forward), float32.
    Checks that every unquantized tensor and every decompressed weight equals the file."""
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, device_map="cpu",
                                                 attn_implementation="eager").eval()
    with torch.no_grad():
        model(input_ids=torch.tensor([[BOS_ID]]))  # decompresses the weights
    qlin = quantized_linears(model)
    assert len(qlin) == 7 * model.config.num_hidden_layers, sorted(qlin)
    state = model.state_dict()
    with safe_open(out / "model.safetensors", "pt") as f:
        for name, m in qlin.items():
            assert m.weight.dtype == torch.float32, (name, m.weight.dtype)
            assert torch.equal(m.weight.data,
                               stored_dequant(f, name, m.quantization_scheme.weights)), name
        for key in f.keys():
            if key.rsplit(".", 1)[0] not in qlin:
                assert torch.equal(state[key], f.get_tensor(key).float()), key
    return model


def _rne(x):
    return torch.round(x)  # round half to even, like CUDA's nearbyint / rint


class ActQuant:
    """Quantize-dequantize of every quantized linear's input as the checkpoint declares, with
    vLLM's formulas (its CompressedTensorsW8A8Fp8 / W8A8Int8 schemes, all in float32), applied
    as a pre-hook with the tool's own input QDQ switched off:
      fp8 static per tensor:   x' = fp8(clamp(x / s, +-448)) * s, s = stored input_scale;
      fp8 dynamic per token or per group of 128: the same with s = max(amax / 448,
                               1 / (448 * 512)) over the token (group);
      int8 static sym:         q = clamp(rne(x / s), -128, 127), x' = q * s;
      int8 static asym:        q = clamp(rne(x / s) + z, -128, 127), x' = (q - z) * s,
                               z = stored input_zero_point;
      int8 dynamic sym per token: s = amax / 127 (compressed-tensors' own forward uses
                               amax / 127.5 there, see logits_tool_forward.bin)."""

    def __init__(self, model):
        self.model = model

    @staticmethod
    def qdq(mod, args):
        x = args[0]
        a = mod.quantization_scheme.input_activations
        if a.dynamic:
            assert a.strategy in ("token", "group"), a.strategy
            span = a.group_size if a.strategy == "group" else x.shape[-1]
            xb = x.unflatten(-1, (x.shape[-1] // span, span))
            amax = xb.abs().amax(-1, keepdim=True)
            if a.type == "float":
                s = torch.clamp(amax / FP8_MAX, min=1.0 / (FP8_MAX * 512.0))
                xq = torch.clamp(xb / s, -FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).float() * s
            else:
                assert a.symmetric
                s = amax / 127.0
                safe = torch.where(s > 0, s, 1.0)
                xq = torch.where(s > 0, torch.clamp(_rne(xb / safe), -128, 127) * s, 0.0)
            return (xq.flatten(-2),)
        assert a.strategy == "tensor", a.strategy
        s = mod.input_scale.reshape(())
        if a.type == "float":
            return (torch.clamp(x / s, -FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).float() * s,)
        z = mod.input_zero_point.reshape(()).float() if not a.symmetric else 0.0
        q = torch.clamp(_rne(x / s) + z, -128, 127)
        return ((q - z) * s,)

    def __enter__(self):
        set_tool_quantization(self.model, False)
        self.hooks = [m.register_forward_pre_hook(self.qdq)
                      for m in quantized_linears(self.model).values()]

    def __exit__(self, *exc):
        for h in self.hooks:
            h.remove()
        set_tool_quantization(self.model, True)


class WeightOnly:
    """The tool's forward with its input QDQ off: decompressed weights, float32 activations."""

    def __init__(self, model):
        self.model = model

    def __enter__(self):
        set_tool_quantization(self.model, False)

    def __exit__(self, *exc):
        set_tool_quantization(self.model, True)


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
        return None
    assert new == logits.argmax(-1).tolist(), "generate did not pick argmax of raw logits"
    top2 = logits.topk(2, dim=-1).values
    return new, logits, float((top2[:, 0] - top2[:, 1]).min())


@torch.no_grad()
def forward_logits(model, ids):
    return model(input_ids=torch.tensor([ids])).logits[0].float()  # [len(ids), vocab]


def scheme_summary(qc):
    g = qc["config_groups"]["group_0"]
    w, a = g["weights"], g["input_activations"]
    return {"format": g["format"],
            "weights": f"{w['type']}{w['num_bits']} {w['strategy']}"
                       + (f" {w['block_structure']}" if w["block_structure"] else "")
                       + (" sym" if w["symmetric"] else " asym"),
            "input_activations": f"{a['type']}{a['num_bits']} {a['strategy']}"
                                 + (f" g{a['group_size']}" if a["group_size"] else "")
                                 + (" dynamic" if a["dynamic"] else " static")
                                 + (" sym" if a["symmetric"] else " asym")}


def make_fixture(name, spec, out_root, seed):
    out = out_root / name
    if out.exists():
        shutil.rmtree(out)
    quantize_with_llmcompressor(spec, out, BASE_SEED)
    GenerationConfig(bos_token_id=BOS_ID, eos_token_id=EOS_ID).save_pretrained(out)
    original = float_model(BASE_SEED).state_dict()

    ref = load_reference(out)
    qlinears = quantized_linears(ref)
    with safe_open(out / "model.safetensors", "pt") as f:
        tensors = {k: [list(f.get_slice(k).get_shape()), f.get_slice(k).get_dtype()]
                   for k in sorted(f.keys())}
    qc = json.loads((out / "config.json").read_text())["quantization_config"]

    dequant_blob = bytearray()
    dequant = {}
    for mname in DEQUANT_MODULES:
        mod = qlinears[mname]
        w = mod.weight.detach().numpy().astype("<f4")  # the tool's decompressed weight
        dequant[mname] = {"offset_bytes": len(dequant_blob), "shape": list(w.shape),
                          "weight_scale_shape": list(mod.weight_scale.shape)}
        dequant_blob += w.tobytes()
        # Sanity: 8-bit quantization of the float weight (fp8: ~2-4% relative RMS error,
        # int8 per channel: ~0.5%); a wrong scale layout would be ~100%.
        ow = original[mname + ".weight"].to(torch.bfloat16).float()
        rel = float((torch.from_numpy(w) - ow).norm() / ow.norm())
        assert rel < 0.06, (mname, rel)
        print(f"{name}: {mname} tool dequant vs bf16 float weight: relative RMS error {rel:.4f}")

    vocab = ref.config.vocab_size
    blobs = {"act": bytearray(), "wo": bytearray(), "tool": bytearray()}

    def put(which, t):
        arr = t.numpy().astype("<f4")
        entry = {"offset_bytes": len(blobs[which]), "shape": list(arr.shape)}
        blobs[which] += arr.tobytes()
        return entry

    rng = np.random.default_rng(seed)
    prompts, drifts, tool_diffs, max_logit = [], [], [], 0.0
    for n in PROMPT_LENGTHS:
        # Keep the random prompt whose greedy path (under ActQuant) is most robust against the
        # difference between the activation-quantized and the weight-only forward.
        best = None
        for attempt in range(24):
            ids = rng.integers(3, vocab, size=n).tolist()
            if n > 1:
                ids[0] = BOS_ID
            with ActQuant(ref):
                res = greedy(ref, ids)
            if res is None:
                continue
            new, gen_logits, margin = res
            if EOS_ID in new or BOS_ID in new or len(set(new)) < 4:
                continue
            with ActQuant(ref):
                act_full = forward_logits(ref, ids + new)
            with WeightOnly(ref):
                wo_full = forward_logits(ref, ids + new)
            drift = float((act_full - wo_full).abs().max())
            if best is None or margin / drift > best[3] / best[4]:
                best = (ids, new, gen_logits, margin, drift, attempt)
        ids, new, gen_logits, margin, drift, attempt = best
        drifts.append(drift)
        with ActQuant(ref):
            logits = forward_logits(ref, ids)
            full = forward_logits(ref, ids + new)
        with WeightOnly(ref):
            wo_logits = forward_logits(ref, ids)
            wo_full = forward_logits(ref, ids + new)
            wo_greedy = greedy(ref, ids)
        tool_full = forward_logits(ref, ids + new)
        tool_diff = float((tool_full - full).abs().max())
        tool_diffs.append(tool_diff)
        max_logit = max(max_logit, float(logits.abs().max()), float(gen_logits.abs().max()))
        # KV-cache decode vs one full forward: equal to float32 noise without activation
        # quantization; with it, a static scale can flip one code at a rounding boundary.
        decode_diff = float((full[len(ids) - 1:-1] - gen_logits).abs().max())
        with WeightOnly(ref):
            wo_new, wo_gen_logits, _ = wo_greedy
            wo_decode = forward_logits(ref, ids + wo_new)[len(ids) - 1:-1]
        assert float((wo_decode - wo_gen_logits).abs().max()) < 1e-4
        entry = {"input_ids": ids,
                 "prompt_logits": put("act", logits),
                 "greedy_logits": put("act", gen_logits),
                 "greedy_new_tokens": new,
                 "greedy_min_top2_margin": margin,
                 "prompt_argmax": logits.argmax(-1).tolist(),
                 # Teacher-forced over prompt + greedy_new_tokens (rows 0..n-1 pair with
                 # prompt_logits, row n-1+s with greedy step s).
                 "weight_only_logits": put("wo", wo_full[:-1]),
                 "weight_only_greedy_new_tokens": wo_greedy[0],
                 "weight_only_drift": drift,
                 "tool_forward_logits": put("tool", tool_full[:-1]),
                 "tool_forward_diff": tool_diff,
                 "decode_vs_full_forward": decode_diff}
        assert float((wo_full[:n] - wo_logits).abs().max()) < 1e-4
        prompts.append(entry)
        print(f"{name}: prompt {n:3d} (attempt {attempt}) greedy {new} margin {margin:.4f} "
              f"act-vs-weight-only {drift:.4f} tool-forward-vs-vllm {tool_diff:.2e} "
              f"max|logit| {float(logits.abs().max()):.2f} cache-vs-full {decode_diff:.1e} "
              f"weight-only greedy {'same' if wo_greedy[0] == new else wo_greedy[0]}")

    (out / "logits.bin").write_bytes(bytes(blobs["act"]))
    (out / "logits_weight_only.bin").write_bytes(bytes(blobs["wo"]))
    (out / "logits_tool_forward.bin").write_bytes(bytes(blobs["tool"]))
    (out / "dequant.bin").write_bytes(bytes(dequant_blob))
    reference = {
        "generator": "scripts/golden/gen_ct_fixtures.py",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "safetensors": safetensors.__version__,
                     "compressed_tensors": compressed_tensors.__version__,
                     "llmcompressor": llmcompressor.__version__},
        "architecture": type(ref).__name__,
        "seed": BASE_SEED,
        "prompt_seed": seed,
        "made_by": "llmcompressor.oneshot QuantizationModifier "
                   + (f"scheme={spec['scheme']}" if "scheme" in spec else "config_groups"),
        "quantization_config": qc,
        "scheme": scheme_summary(qc),
        "reference_backend": "transformers CompressedTensorsHfQuantizer (dequantize=False), "
                             "compressed-tensors decompressed weights, float32",
        "activation_semantics": "vllm",
        "compute_dtype": "float32",
        "vocab_size": vocab,
        "tensors": tensors,
        "logits_file": "logits.bin",
        "logits_semantics": "every quantized linear's input quantize-dequantized as declared "
                            "(vLLM formulas, see README), weights as stored",
        "weight_only_file": "logits_weight_only.bin",
        "weight_only_semantics": "same model, activations not quantized",
        "tool_forward_file": "logits_tool_forward.bin",
        "tool_forward_semantics": "transformers + compressed-tensors forward as shipped "
                                  "(its own input fake-quantization)",
        "logits_encoding": "float32 little-endian, row-major",
        "weight_only_drift": max(drifts),
        "tool_forward_diff": max(tool_diffs),
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
    args = parser.parse_args()
    torch.set_num_threads(1)
    for i, name in enumerate(FIXTURES):
        if not args.names or name in args.names:
            make_fixture(name, FIXTURES[name], args.out.resolve(), seed=3000 + i)


if __name__ == "__main__":
    main()
