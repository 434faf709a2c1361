#!/usr/bin/env python3
"""Runs the real `auto-round` tool (0.16.1) on the tiny multimodal fixtures and records what it
writes, for tests/golden/vl_autoround_test.cc. Output: tests/golden/fixtures/vl_autoround/.

Models: tests/golden/fixtures/vl/qwen2_5_vl (Qwen2_5_VLForConditionalGeneration) and
tests/golden/fixtures/omni/qwen2_5_omni_thinker (Qwen2_5OmniThinkerForConditionalGeneration),
each copied to a temporary directory first. Scheme W4A16 with group_size 32 (the decoders are
64 wide with a 96-wide MLP; 128 divides neither), sym.

Two runs per model, the tool's two ways of making a W4A16 checkpoint:
  autoround   AutoRound(model, tokenizer, processor, ...) in process, the MLLM compressor with
              its defaults (quant_nontext_module=False: towers stay 16-bit): SignRound over the
              decoder blocks, ITERS iterations, NSAMPLES x SEQLEN calibration tokens in one batch,
              amp=False (f32, as quantserve's --disable_amp), text only: the token ids are given
              as one [NSAMPLES, SEQLEN] tensor, which the MLLM calibrator feeds to model(ids).
  rtn         the tool's model-free mode (iters=0, disable_opt_rtn=True, model_free=True): pure
              RTN, shard by shard, without building the model; what `auto-round --iters 0
              --disable_opt_rtn` runs on a model directory.
The processor the MLLM compressor insists on is the image processor alone: Qwen2_5_VLProcessor
needs a video processor, which needs torchvision; text-only calibration never calls it.

Written per model <m> (qwen2_5_vl, qwen2_5_omni_thinker):
  <m>_calibration.jsonl   the calibration samples as token ids, one {"input_ids": [...]} a line
                          (the fixture's byte-level tokenizer over the first bytes of
                          ../shared/data/text/calibration/tiny.utf8): quantserve's --dataset
  <m>_tool.json           per run: the quantization_config the tool wrote, every tensor of its
                          model.safetensors as name -> [dtype, shape], the files it wrote, and
                          for autoround the tool's per-block losses (iteration 0 = RTN, best)
  <m>_rtn_packed.safetensors  the rtn run's packed decoder tensors (qweight, qzeros, scales)
For Qwen2.5-VL also the autoround run's checkpoint, qwen2_5_vl_w4g32/ (weights and config; the
tokenizer and processor files are the source fixture's), and reference.safetensors +
reference.json: the tool's dequantized forward, i.e. transformers with auto-round's CPU "torch"
QuantLinear backend on that checkpoint in float32, for the "text" and "image" prompts of
fixtures/vl/reference.safetensors:
  <case>_ids [n] i32, <case>_positions [3, n] i32 (get_rope_index), <case>_rope_delta [1] i32,
  image_image_embeds [6, 64] (the tower's merged output; the tower is 16-bit, so it is the
  float model's), <case>_logits [n, 300], <case>_greedy [6] i32 and <case>_greedy_logits [6, 300]
  (one token per step over the KV cache), <case>_int8_sim_logits [n + 5, 300]: the same forward
  over the prompt and its continuation (teacher-forced) with every quantized linear's input
  rounded as quantserve's int kernels round it (blocks of 32, q = round(x * 127 / max|x|)), and
  <case>_int8_drift [1]: the largest logit change that rounding causes.

Install: the pins of scripts/golden/requirements.txt and requirements-quant.txt (auto-round),
nothing more. Regenerate (deterministic on CPU; overwrites):
    /work/.venv-goldens/bin/python scripts/golden/gen_vl_autoround_fixture.py
"""

import json
import logging
import re
import shutil
import tempfile
from pathlib import Path

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from tokenizers import Tokenizer

import auto_round
from auto_round import AutoRound

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests/golden/fixtures"
OUT = FIXTURES / "vl_autoround"
CALIB_TEXT = REPO.parent / "shared/data/text/calibration/tiny.utf8"
MODELS = {
    "qwen2_5_vl": FIXTURES / "vl/qwen2_5_vl",
    "qwen2_5_omni_thinker": FIXTURES / "omni/qwen2_5_omni_thinker",
}
BITS, GROUP, SYM = 4, 32, True
ITERS, NSAMPLES, SEQLEN, SEED = 4, 8, 32, 42
N_GREEDY = 6
# Files of the tool's output that are weights or configs (the rest it re-serialises from the
# tokenizer and processor, which quantserve copies unchanged).
CHECKPOINT_FILES = ("config.json", "quantization_config.json", "model.safetensors")
QUANT_SUFFIXES = (".qweight", ".qzeros", ".scales")


def calibration(model_dir):
    """NSAMPLES consecutive windows of SEQLEN tokens of the calibration text."""
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    text = CALIB_TEXT.read_text(encoding="utf-8")[:NSAMPLES * SEQLEN * 4]
    ids = tok.encode(text).ids
    assert len(ids) >= NSAMPLES * SEQLEN
    return [ids[i * SEQLEN:(i + 1) * SEQLEN] for i in range(NSAMPLES)]


class LossLog(logging.Handler):
    """The tool's per-block line "... loss iter 0: A -> iter k: B"."""
    PATTERN = re.compile(r"loss iter 0: ([0-9.e+-]+) -> iter (\d+): ([0-9.e+-]+)")

    def __init__(self):
        super().__init__()
        self.blocks = []

    def emit(self, record):
        m = self.PATTERN.search(record.getMessage())
        if m:
            self.blocks.append({"initial_raw": float(m.group(1)), "best_iter": int(m.group(2)),
                                "best_raw": float(m.group(3))})


def model_class(model_dir):
    arch = json.loads((model_dir / "config.json").read_text())["architectures"][0]
    return getattr(transformers, arch)


def describe(out_dir):
    """What the tool wrote: its quantization_config, tensors and files."""
    with safe_open(out_dir / "model.safetensors", "pt") as f:
        tensors = {k: [f.get_slice(k).get_dtype(), list(f.get_slice(k).get_shape())]
                   for k in sorted(f.keys())}
    qc = json.loads((out_dir / "config.json").read_text())["quantization_config"]
    return {"quantization_config": qc, "tensors": tensors,
            "files": sorted(p.name for p in out_dir.iterdir() if p.is_file())}


def run_autoround(src, samples, out_dir):
    from transformers import AutoImageProcessor, AutoTokenizer
    model = model_class(src).from_pretrained(src, dtype=torch.float32).eval()
    image_processor = AutoImageProcessor.from_pretrained(src)
    log = LossLog()
    logging.getLogger("autoround").addHandler(log)
    ar = AutoRound(model, AutoTokenizer.from_pretrained(src), processor=image_processor,
                   image_processor=image_processor, bits=BITS, group_size=GROUP, sym=SYM,
                   dataset=[torch.tensor(samples)], iters=ITERS, nsamples=NSAMPLES,
                   seqlen=SEQLEN, batch_size=NSAMPLES, amp=False, device_map="cpu",
                   enable_torch_compile=False, seed=SEED)
    ar.quantize_and_save(str(out_dir), format="auto_round")
    logging.getLogger("autoround").removeHandler(log)
    # The tool adds a folder named for the scheme.
    (saved,) = [p for p in out_dir.iterdir() if p.is_dir()]
    assert len(log.blocks) == 2, log.blocks
    return saved, log.blocks


def run_rtn(src, out_dir):
    ar = AutoRound(str(src), scheme="W4A16", group_size=GROUP, sym=SYM, iters=0,
                   disable_opt_rtn=True, model_free=True)
    ar.quantize_and_save(str(out_dir), format="auto_round")
    return out_dir


def load_reference(ckpt):
    """transformers + auto-round's torch backend on the tool's checkpoint, float32: the
    loader casts to the backend's f16, so the unquantized tensors are restored from the file
    and the buffers (RoPE inv_freq) from a fresh float32 model."""
    from transformers import AutoRoundConfig
    cls = model_class(ckpt)
    model = cls.from_pretrained(ckpt, dtype=torch.float32, device_map="cpu",
                                attn_implementation="eager",
                                quantization_config=AutoRoundConfig(backend="torch")).eval()
    torch.nn.Module.float(model)
    state = model.state_dict()
    on_disk = {}
    with safe_open(ckpt / "model.safetensors", "pt") as f:
        for k in f.keys():
            on_disk[k] = f.get_tensor(k)
    # The file keeps the checkpoint's names (model.layers.*), the module its own
    # (model.language_model.layers.*): match them by suffix.
    restored = 0
    with torch.no_grad():
        for key, target in state.items():
            file_key = key.replace("model.language_model.", "model.").replace(
                "model.visual.", "visual.")
            if file_key not in on_disk or not target.is_floating_point():
                continue
            target.copy_(on_disk[file_key].float())
            restored += 1
        fresh = dict(cls(model.config).float().named_buffers())
        for key, buf in model.named_buffers():
            if key in fresh and buf.is_floating_point() and key not in state:
                buf.copy_(fresh[key])
    qlinears = {n: m for n, m in model.named_modules() if hasattr(m, "qweight")}
    assert len(qlinears) == 14, sorted(qlinears)
    assert restored > 30, restored
    return model, qlinears


def int8_hooks(qlinears):
    """quantserve's int kernels' activation rounding on every quantized linear's input."""
    def fake_q(mod, args):
        x = args[0]
        xb = x.reshape(-1, x.shape[-1] // 32, 32)
        amax = xb.abs().amax(-1, keepdim=True)
        inv = torch.where(amax > 0, 127.0 / torch.where(amax > 0, amax, 1), 0)
        return ((torch.round(xb * inv) * (amax / 127.0)).reshape(x.shape),)
    return [m.register_forward_pre_hook(fake_q) for m in qlinears.values()]


@torch.no_grad()
def forward(model, ids, kwargs):
    types = (ids == 290).to(torch.int32)
    return model(input_ids=ids, mm_token_type_ids=types, **kwargs).logits[0].float()


@torch.no_grad()
def greedy(model, ids, kwargs):
    types = (ids == 290).to(torch.int32)
    out = model(input_ids=ids, mm_token_type_ids=types, use_cache=True, **kwargs)
    past, logits = out.past_key_values, [out.logits[0, -1]]
    toks = [int(logits[-1].argmax())]
    for _ in range(N_GREEDY - 1):
        nxt = torch.tensor([[toks[-1]]])
        out = model(input_ids=nxt, past_key_values=past, use_cache=True,
                    mm_token_type_ids=torch.zeros_like(nxt, dtype=torch.int32))
        past = out.past_key_values
        logits.append(out.logits[0, -1])
        toks.append(int(logits[-1].argmax()))
    return toks, torch.stack(logits).float()


def vl_reference(ckpt):
    model, qlinears = load_reference(ckpt)
    src = {}
    with safe_open(FIXTURES / "vl/reference.safetensors", "pt") as f:
        for k in f.keys():
            src[k] = f.get_tensor(k)
    ref, meta = {}, {}
    for case in ("text", "image"):
        ids = src[f"{case}_ids"].long()[None]
        kwargs = {}
        if case == "image":
            pv, grid = src["image0_pixel_values"], src["image0_grid_thw"].long()[None]
            kwargs = dict(pixel_values=pv, image_grid_thw=grid)
            with torch.no_grad():
                embeds = model.model.visual(pv, grid_thw=grid).pooler_output
            ref["image_image_embeds"] = embeds.float().contiguous()
            # The tower is 16-bit: its output is the float model's.
            assert torch.allclose(embeds, src["image_image_embeds"], atol=1e-5)
        logits = forward(model, ids, kwargs)
        toks, glogits = greedy(model, ids, kwargs)
        hooks = int8_hooks(qlinears)
        full = torch.cat([ids, torch.tensor([toks[:-1]])], 1)
        sim = forward(model, full, kwargs)
        for h in hooks:
            h.remove()
        exact = forward(model, full, kwargs)
        drift = float((sim - exact).abs().max())
        ref[f"{case}_ids"] = src[f"{case}_ids"]
        ref[f"{case}_positions"] = src[f"{case}_positions"]
        ref[f"{case}_rope_delta"] = src[f"{case}_rope_delta"]
        ref[f"{case}_logits"] = logits.contiguous()
        ref[f"{case}_greedy"] = torch.tensor(toks, dtype=torch.int32)
        ref[f"{case}_greedy_logits"] = glogits.contiguous()
        ref[f"{case}_int8_drift"] = torch.tensor([drift])
        ref[f"{case}_int8_sim_logits"] = sim.contiguous()
        top2 = glogits.topk(2, dim=-1).values
        meta[case] = {"greedy": toks, "int8_drift": drift,
                      "max_abs_logit": float(max(logits.abs().max(), glogits.abs().max())),
                      "greedy_min_top2_margin": float((top2[:, 0] - top2[:, 1]).min())}
        print(case, meta[case])
    save_file(ref, OUT / "reference.safetensors")
    return meta


def main():
    torch.manual_seed(0)
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    meta = {"versions": {"auto_round": auto_round.__version__, "torch": torch.__version__,
                         "transformers": transformers.__version__},
            "settings": {"bits": BITS, "group_size": GROUP, "sym": SYM, "iters": ITERS,
                         "nsamples": NSAMPLES, "seqlen": SEQLEN, "batch_size": NSAMPLES,
                         "amp": False, "seed": SEED}}
    for name, model_dir in MODELS.items():
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / name
            shutil.copytree(model_dir, src)
            samples = calibration(src)
            with open(OUT / f"{name}_calibration.jsonl", "w") as f:
                for s in samples:
                    f.write(json.dumps({"input_ids": s}) + "\n")
            saved, losses = run_autoround(src, samples, Path(tmp) / "autoround")
            tool = {"autoround": describe(saved), "rtn": None}
            tool["autoround"]["block_losses"] = losses
            rtn = run_rtn(src, Path(tmp) / "rtn")
            tool["rtn"] = describe(rtn)
            with safe_open(rtn / "model.safetensors", "pt") as f:
                packed = {k: f.get_tensor(k) for k in f.keys() if k.endswith(QUANT_SUFFIXES)}
            save_file(packed, OUT / f"{name}_rtn_packed.safetensors")
            (OUT / f"{name}_tool.json").write_text(json.dumps(tool, indent=1) + "\n")
            if name == "qwen2_5_vl":
                ckpt = OUT / "qwen2_5_vl_w4g32"
                ckpt.mkdir()
                for f in CHECKPOINT_FILES:
                    shutil.copy(saved / f, ckpt / f)
                # The source's own tokenizer and processor files (the tool re-serialises them).
                for f in model_dir.iterdir():
                    if f.name not in CHECKPOINT_FILES and f.is_file():
                        shutil.copy(f, ckpt / f.name)
                meta["qwen2_5_vl"] = vl_reference(saved)
    (OUT / "reference.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
