#!/usr/bin/env python3
"""Generates tests/golden/fixtures/omni_full/: full Qwen2.5-Omni checkpoints (the layout of
Qwen/Qwen2.5-Omni-7B and Intel/Qwen2.5-Omni-7B-int4-AutoRound: thinker.*, talker.*,
token2wav.* in one directory) whose thinker is exactly the tiny thinker fixture
../omni/qwen2_5_omni_thinker, for tests/golden/omni_full_checkpoint_test.cc.

qwen2_5_omni/      a transformers 5.23 Qwen2_5OmniForConditionalGeneration saved by
                   save_pretrained (max_shard_size 400 KB, so the directory is sharded with a
                   model.safetensors.index.json, as the 7B is, and no file nears 1 MB): its
                   thinker holds the thinker fixture's weights (load_state_dict, strict), its
                   talker (one layer, hidden 16) and token2wav (a DiT of one layer, hidden 16,
                   and a BigVGAN of one upsampling stage of 8 channels) are as small as their
                   configs allow, drawn at random. Beside the weights: the thinker fixture's
                   tokenizer, chat template, processor and generation files, and a spk_dict.pt
                   (one speaker's token2wav conditioning, as the hub's checkpoints carry it:
                   transformers' from_pretrained of the full model insists on the file).
qwen2_5_omni_w4g32/  that checkpoint in the layout auto-round 0.16.1 writes for W4A16 (group 32,
                   sym, auto_round:auto_gptq): thinker.model.layers.*'s linears replaced by the
                   real tool's packed tensors of those very weights (its model-free RTN of the
                   thinker fixture, ../vl_autoround/qwen2_5_omni_thinker_rtn_packed.safetensors),
                   and the quantization_config it wrote there with every module name under
                   "thinker." (see build_w4); towers, lm_head, talker and token2wav stay f32.
                   Not the tool's own run on the full model, because that produces no packed
                   weights here: its qwen2_5_omni block handler looks for
                   thinker.model.layers, which transformers 5.23's module tree calls
                   thinker.model.language_model.layers, so it finds no block; given the blocks
                   by hand (to_quant_block_names) its RTN logs every decoder linear as
                   quantized but writes them as f32 .weight. The same side files.
reference.safetensors (float32 unless noted):
  text_ids [n] i32                    a text prompt
  text_logits [n, 300], text_greedy [6] i32, text_greedy_logits [6, 300]
                                      the 16-bit full model's thinker (transformers), one
                                      greedy token per step over the cache
  audio_logits [n, 300], audio_greedy [6] i32     the same on ../omni/reference.safetensors'
                                      audio prompt (its two clips' features), which must equal
                                      that file's (same weights; checked here)
  w4_<case>_logits, w4_<case>_greedy, w4_<case>_greedy_logits   the tool's dequantized forward
                                      of qwen2_5_omni_w4g32 (transformers with auto-round's
                                      torch QuantLinear, float32), cases text and audio
  w4_<case>_int8_sim_logits [n + 5, 300], w4_<case>_int8_drift [1]   that forward over the
                                      prompt and its continuation with every quantized
                                      linear's input rounded as quantserve's int kernels round
                                      it (blocks of 32, q = round(x * 127 / max|x|)), and the
                                      largest logit change that rounding causes
reference.json: versions, settings, the tensor names save_pretrained and the tool wrote (by
prefix), the quantization_config the tool wrote, and per case the greedy tokens, int8 drift,
largest logit and smallest top-2 gap.

Install: the pins of scripts/golden/requirements.txt and requirements-quant.txt. Regenerate
(deterministic on CPU; overwrites):
    /work/.venv-goldens/bin/python scripts/golden/gen_omni_full_fixture.py
"""

import json
import math
import shutil
import tempfile
from pathlib import Path

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import (Qwen2_5OmniConfig, Qwen2_5OmniForConditionalGeneration,
                          Qwen2_5OmniThinkerForConditionalGeneration)

import auto_round

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests/golden/fixtures"
THINKER = FIXTURES / "omni/qwen2_5_omni_thinker"
THINKER_REF = FIXTURES / "omni/reference.safetensors"
# The real auto-round 0.16.1's W4A16 of the thinker fixture (gen_vl_autoround_fixture.py).
TOOL_JSON = FIXTURES / "vl_autoround/qwen2_5_omni_thinker_tool.json"
TOOL_PACKED = FIXTURES / "vl_autoround/qwen2_5_omni_thinker_rtn_packed.safetensors"
OUT = FIXTURES / "omni_full"
FULL, W4 = OUT / "qwen2_5_omni", OUT / "qwen2_5_omni_w4g32"
SIDE_FILES = ("tokenizer.json", "tokenizer_config.json", "preprocessor_config.json",
              "generation_config.json")
SHARD = "400KB"
BITS, GROUP, SYM = 4, 32, True
N_GREEDY = 6
TEXT_IDS = [1, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100, 33, 10, 65]

# The talker and token2wav as small as their configs allow. The talker's vocabulary is the
# thinker's (300) so that its token ids (the thinker's placeholders) are inside it.
TALKER = dict(vocab_size=300, embedding_size=64, hidden_size=16, intermediate_size=16,
              num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
              max_position_embeddings=512,
              rope_parameters={"rope_type": "default", "mrope_section": [1, 1, 2],
                               "rope_theta": 1000000.0},
              audio_token_index=292, image_token_index=290, video_token_index=291,
              vision_start_token_id=288, vision_end_token_id=289, audio_start_token_id=293,
              audio_end_token_id=294, tts_codec_start_token_id=10, tts_codec_end_token_id=11,
              tts_codec_pad_token_id=12, tts_codec_mask_token_id=13, tts_text_start_token_id=280,
              tts_text_end_token_id=281, tts_text_pad_token_id=282)
DIT = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, ff_mult=1, emb_dim=8,
           head_dim=8, block_size=4, look_ahead_layers=[0], look_backward_layers=[0], repeats=2,
           num_embeds=16, mel_dim=8, enc_emb_dim=8, enc_dim=8, enc_channels=[8, 8, 8, 8, 24],
           enc_kernel_sizes=[5, 3, 3, 3, 1], enc_dilations=[1, 2, 3, 4, 1],
           enc_attention_channels=4, enc_res2net_scale=2, enc_se_channels=4)
BIGVGAN = dict(mel_dim=8, upsample_initial_channel=8, resblock_kernel_sizes=[3],
               resblock_dilation_sizes=[[1, 3, 5]], upsample_rates=[2], upsample_kernel_sizes=[4])


def names_by_prefix(ckpt):
    """Every tensor name of a (sharded) checkpoint directory, grouped by first component."""
    index = ckpt / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) \
        if index.exists() else ["model.safetensors"]
    out = {}
    for f in files:
        with safe_open(ckpt / f, "pt") as s:
            for k in s.keys():
                out.setdefault(k.split(".")[0], []).append(k)
    return {k: sorted(v) for k, v in sorted(out.items())}, files


def copy_side_files(dst):
    for f in SIDE_FILES:
        shutil.copy(THINKER / f, dst / f)


def write_speakers(dst):
    """spk_dict.pt, as the hub's checkpoints carry it (transformers' from_pretrained of the
    full model insists on it): one speaker's token2wav conditioning at the tiny shapes."""
    gen = torch.Generator().manual_seed(99)
    torch.save({"Chelsie": {"cond": torch.randn(1, DIT["enc_emb_dim"], generator=gen),
                            "ref_mel": torch.randn(1, 4, DIT["mel_dim"], generator=gen),
                            "bos_token": TALKER["tts_text_start_token_id"]}},
               dst / "spk_dict.pt")


def build_full():
    """The full model with the thinker fixture's weights; talker and token2wav random."""
    thinker = Qwen2_5OmniThinkerForConditionalGeneration.from_pretrained(
        THINKER, dtype=torch.float32).eval()
    config = Qwen2_5OmniConfig(thinker_config=thinker.config.to_dict(), talker_config=TALKER,
                               token2wav_config=dict(dit_config=DIT, bigvgan_config=BIGVGAN))
    torch.manual_seed(7)
    full = Qwen2_5OmniForConditionalGeneration(config).float().eval()
    gen = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for name, p in full.named_parameters():
            if not name.startswith("thinker."):
                p.copy_(1.0 / math.sqrt(max(p[0].numel(), 1)) *
                        torch.randn(p.shape, generator=gen))
    full.thinker.load_state_dict(thinker.state_dict(), strict=True)
    return full


@torch.no_grad()
def greedy(thinker, ids, kwargs):
    """Prompt logits, then one token per step over the cache (the prompt's forward gets the
    attention mask, so the model computes its 3-D positions and keeps their delta)."""
    thinker.model.rope_deltas = None
    out = thinker(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True, **kwargs)
    logits, past, rows = out.logits[0].float(), out.past_key_values, [out.logits[0, -1]]
    toks = [int(rows[-1].argmax())]
    for _ in range(N_GREEDY - 1):
        o = thinker(input_ids=torch.tensor([[toks[-1]]]), past_key_values=past, use_cache=True)
        past = o.past_key_values
        rows.append(o.logits[0, -1])
        toks.append(int(rows[-1].argmax()))
    return logits, toks, torch.stack(rows).float()


def audio_case(ref):
    """../omni/reference.safetensors' audio prompt: its ids and the clips as one padded batch."""
    feats = [ref["clip0_features"], ref["clip1_features"]]
    lens = [f.shape[1] for f in feats]
    batch = torch.zeros(2, 128, max(lens))
    mask = torch.zeros(2, max(lens), dtype=torch.long)
    for i, f in enumerate(feats):
        batch[i, :, :lens[i]] = f
        mask[i, :lens[i]] = 1
    return ref["audio_ids"].long()[None], dict(input_features=batch, feature_attention_mask=mask)


def int8_hooks(qlinears):
    """quantserve's int kernels' activation rounding on every quantized linear's input."""
    def fake_q(mod, args):
        x = args[0]
        xb = x.reshape(-1, x.shape[-1] // 32, 32)
        amax = xb.abs().amax(-1, keepdim=True)
        inv = torch.where(amax > 0, 127.0 / torch.where(amax > 0, amax, 1), 0)
        return ((torch.round(xb * inv) * (amax / 127.0)).reshape(x.shape),)
    return [m.register_forward_pre_hook(fake_q) for m in qlinears.values()]


def load_w4_reference(ckpt):
    """transformers + auto-round's torch backend on the tool's checkpoint, float32: the loader
    casts to the backend's f16, so the unquantized tensors are restored from the files and the
    buffers (RoPE inv_freq) from a fresh float32 model."""
    from transformers import AutoRoundConfig
    model = Qwen2_5OmniForConditionalGeneration.from_pretrained(
        ckpt, dtype=torch.float32, device_map="cpu",
        quantization_config=AutoRoundConfig(backend="torch")).eval()
    torch.nn.Module.float(model)
    _, files = names_by_prefix(ckpt)
    on_disk = {}
    for f in files:
        with safe_open(ckpt / f, "pt") as s:
            for k in s.keys():
                on_disk[k] = s.get_tensor(k)
    state = model.state_dict()
    restored = set()
    # The files keep the checkpoint's names, the modules transformers 5.23's tree.
    renames = (("thinker.model.language_model.", "thinker.model."),
               ("thinker.model.audio_tower.", "thinker.audio_tower."),
               ("thinker.model.visual.", "thinker.visual."))
    with torch.no_grad():
        for key, target in state.items():
            file_key = key
            for a, b in renames:
                file_key = file_key.replace(a, b)
            if file_key not in on_disk or not target.is_floating_point():
                continue
            target.copy_(on_disk[file_key].float())
            restored.add(file_key)
        fresh = dict(Qwen2_5OmniForConditionalGeneration(model.config).float().named_buffers())
        for key, buf in model.named_buffers():
            if key in fresh and buf.is_floating_point() and key not in state:
                buf.copy_(fresh[key])
    qlinears = {n: m for n, m in model.named_modules() if hasattr(m, "qweight")}
    assert len(qlinears) == 14, sorted(qlinears)
    assert all(n.startswith("thinker.model.") for n in qlinears), sorted(qlinears)
    # Every float tensor of the files is back at full precision (the packed ones are ints).
    missed = [k for k, t in on_disk.items() if t.is_floating_point() and k not in restored
              and not k.endswith(".scales")]
    assert not missed, missed
    return model, qlinears


def build_w4(full_dir, out_dir):
    """The tool's W4A16 thinker re-rooted as the full model stores it: every shard of
    `full_dir` with thinker.model.layers.*'s linears replaced by the tool's packed tensors of
    those same weights (TOOL_PACKED: its model-free RTN, g32 sym, auto_round:auto_gptq), and
    the quantization_config it wrote for the thinker with every module name under
    "thinker.": block_name_to_quantize as the tool writes it (its module name and the
    checkpoint's, "thinker.model.language_model.layers,thinker.model.layers": the names its
    qwen2_5_omni block handler gives, under transformers 5.23's module tree), extra_config's
    exact names (towers, lm_head) likewise."""
    tool = json.loads(TOOL_JSON.read_text())["rtn"]["quantization_config"]
    packed = {}
    with safe_open(TOOL_PACKED, "pt") as f:
        for k in f.keys():
            packed["thinker." + k] = f.get_tensor(k)
    modules = {k.rsplit(".", 1)[0] for k in packed}
    assert len(modules) == 14, sorted(modules)
    index = json.loads((full_dir / "model.safetensors.index.json").read_text())
    out_dir.mkdir()
    weight_map, total = {}, 0
    for shard in sorted(set(index["weight_map"].values())):
        tensors = {}
        with safe_open(full_dir / shard, "pt") as f:
            for k in f.keys():
                if k.endswith(".weight") and k[:-len(".weight")] in modules:
                    continue
                tensors[k] = f.get_tensor(k)
        if shard == sorted(set(index["weight_map"].values()))[0]:
            tensors.update(packed)
        save_file(tensors, out_dir / shard, metadata={"format": "pt"})
        for k, t in tensors.items():
            weight_map[k] = shard
            total += t.numel() * t.element_size()
    (out_dir / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))},
        indent=2) + "\n")
    qc = dict(tool)
    blocks = [b.strip() for b in tool["block_name_to_quantize"].split(",")]
    assert blocks == ["model.layers"], blocks
    qc["block_name_to_quantize"] = "thinker.model.language_model.layers,thinker.model.layers"
    qc["extra_config"] = {"thinker." + k: v for k, v in tool["extra_config"].items()}
    config = json.loads((full_dir / "config.json").read_text())
    config["quantization_config"] = qc
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out_dir / "quantization_config.json").write_text(json.dumps(qc, indent=2) + "\n")
    copy_side_files(out_dir)
    shutil.copy(full_dir / "spk_dict.pt", out_dir / "spk_dict.pt")


@torch.no_grad()
def main():
    # Everything but the README, which is written by hand.
    OUT.mkdir(parents=True, exist_ok=True)
    for d in (FULL, W4):
        shutil.rmtree(d, ignore_errors=True)
    full = build_full()
    with tempfile.TemporaryDirectory() as tmp:
        full.save_pretrained(tmp, max_shard_size=SHARD)
        FULL.mkdir()
        for f in Path(tmp).iterdir():
            if f.name != "generation_config.json":
                shutil.copy(f, FULL / f.name)
    copy_side_files(FULL)
    write_speakers(FULL)
    full_names, full_files = names_by_prefix(FULL)
    assert set(full_names) == {"thinker", "talker", "token2wav"}, list(full_names)

    thinker_ref = {}
    with safe_open(THINKER_REF, "pt") as f:
        for k in f.keys():
            thinker_ref[k] = f.get_tensor(k)
    model = Qwen2_5OmniForConditionalGeneration.from_pretrained(
        FULL, dtype=torch.float32, attn_implementation="eager").eval()
    thinker = model.thinker
    ref, meta = {}, {"versions": {"auto_round": auto_round.__version__,
                                  "torch": torch.__version__,
                                  "transformers": transformers.__version__},
                     "settings": {"bits": BITS, "group_size": GROUP, "sym": SYM, "iters": 0,
                                  "disable_opt_rtn": True, "max_shard_size": SHARD}}
    text_ids = torch.tensor([TEXT_IDS])
    audio_ids, audio_kwargs = audio_case(thinker_ref)
    cases = {"text": (text_ids, {}), "audio": (audio_ids, audio_kwargs)}
    for case, (ids, kwargs) in cases.items():
        logits, toks, glogits = greedy(thinker, ids, kwargs)
        ref[f"{case}_ids"] = ids[0].to(torch.int32)
        ref[f"{case}_logits"] = logits.contiguous()
        ref[f"{case}_greedy"] = torch.tensor(toks, dtype=torch.int32)
        ref[f"{case}_greedy_logits"] = glogits.contiguous()
    # The same weights as the thinker fixture: its reference, to the bit or nearly.
    assert torch.allclose(ref["audio_logits"], thinker_ref["audio_logits"], atol=1e-5)
    assert ref["audio_greedy"].tolist() == thinker_ref["audio_greedy"].tolist()
    meta["full"] = {"files": full_files,
                    "tensors": {k: len(v) for k, v in full_names.items()},
                    "first_names": {k: v[:3] for k, v in full_names.items()}}
    del model, thinker, full

    build_w4(FULL, W4)
    w4_names, w4_files = names_by_prefix(W4)
    qc = json.loads((W4 / "config.json").read_text()).get("quantization_config")
    meta["w4"] = {"files": w4_files, "tensors": {k: len(v) for k, v in w4_names.items()},
                  "quantization_config": qc,
                  "packed": sorted(n for v in w4_names.values() for n in v
                                   if n.endswith(".qweight"))}
    model, qlinears = load_w4_reference(W4)
    thinker = model.thinker
    for case, (ids, kwargs) in cases.items():
        logits, toks, glogits = greedy(thinker, ids, kwargs)
        full_ids = torch.cat([ids, torch.tensor([toks[:-1]])], 1)
        hooks = int8_hooks(qlinears)
        thinker.model.rope_deltas = None
        sim = thinker(input_ids=full_ids, attention_mask=torch.ones_like(full_ids),
                      **kwargs).logits[0].float()
        for h in hooks:
            h.remove()
        thinker.model.rope_deltas = None
        exact = thinker(input_ids=full_ids, attention_mask=torch.ones_like(full_ids),
                        **kwargs).logits[0].float()
        drift = float((sim - exact).abs().max())
        ref[f"w4_{case}_logits"] = logits.contiguous()
        ref[f"w4_{case}_greedy"] = torch.tensor(toks, dtype=torch.int32)
        ref[f"w4_{case}_greedy_logits"] = glogits.contiguous()
        ref[f"w4_{case}_int8_sim_logits"] = sim.contiguous()
        ref[f"w4_{case}_int8_drift"] = torch.tensor([drift])
        top2 = glogits.topk(2, dim=-1).values
        meta[f"w4_{case}"] = {
            "greedy": toks, "int8_drift": drift,
            "max_abs_logit": float(max(logits.abs().max(), glogits.abs().max())),
            "greedy_min_top2_margin": float((top2[:, 0] - top2[:, 1]).min())}
        print(case, meta[f"w4_{case}"])
    save_file(ref, OUT / "reference.safetensors")
    (OUT / "reference.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
