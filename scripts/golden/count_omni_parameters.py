#!/usr/bin/env python3
"""Parameter counts per part, as transformers builds the model from a config.json, for the
numbers tests/golden/inspect_multimodal_cli_test.cc and tests/unit/make_model_presets_test.cc
hold: a whole Qwen2.5-Omni (Qwen2_5OmniModel: thinker decoder, vision tower, audio tower,
talker, token2wav DiT and BigVGAN), an Omni thinker or a Qwen2.5-VL config. Built on the meta
device, so no weights are allocated.

    /work/.venv-goldens/bin/python scripts/golden/count_omni_parameters.py \
        tests/golden/fixtures/omni/qwen2_5_omni_7b_config/config.json
    build/quantserve make-model --like qwen2.5-vl-3b --layers 1 ... (or any config.json)
"""
import collections
import json
import sys

import torch
import transformers


def part_of(name):
    # transformers 5 nests the thinker's decoder as model.language_model, the towers beside it.
    for key, part in (("visual.", "vision tower"), ("audio_tower.", "audio tower"),
                      ("talker.", "talker"), ("code2wav_dit_model.", "token2wav DiT"),
                      ("code2wav_bigvgan_model.", "token2wav BigVGAN")):
        if key in name:
            return part
    return "decoder"


def main(path):
    config = json.load(open(path))
    arch = config["architectures"][0]
    if arch == "Qwen2_5OmniModel":
        cfg = transformers.Qwen2_5OmniConfig(**config)
        cls = transformers.Qwen2_5OmniForConditionalGeneration
    elif arch == "Qwen2_5OmniThinkerForConditionalGeneration":
        cfg = transformers.Qwen2_5OmniThinkerConfig(**config)
        cls = transformers.Qwen2_5OmniThinkerForConditionalGeneration
    else:
        cfg = transformers.Qwen2_5_VLConfig(**config)
        cls = transformers.Qwen2_5_VLForConditionalGeneration
    with torch.device("meta"):
        model = cls(cfg)
    counts = collections.Counter()
    for name, p in model.named_parameters():  # tied weights are listed once
        counts[part_of(name)] += p.numel()
    print(json.dumps({"transformers": transformers.__version__, "architecture": arch,
                      "parts": counts, "total": sum(counts.values())}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
