#!/usr/bin/env python3
"""Generates tests/golden/fixtures/taef2/: a real photograph and what PyTorch computes for it
with the trained TAEF2 tiny autoencoder (../shared/data/models/taef2, MIT).

- chelsea_128.png: scikit-image's `chelsea.png` (Stefan van der Walt's cat, public domain,
  shipped in the scikit-image 0.26.0 wheel, which this script fetches with
  `pip download --no-deps`), centre-cropped to 256x256 and box-downscaled to 128x128.
- reference.safetensors: latents [1, 32, 16, 16] = encoder(image in [0, 1]) and
  decoded [1, 3, 128, 128] = decoder(latents) (unclamped), both float32.
- reference.json: the PSNR of clamp(decoded) against the image.

The network is built here with torch.nn from the architecture of taesd.py at
madebyollin/taesd 5cccb12 (Encoder/Decoder with use_midblock_gn for FLUX.2), which is not
vendored; the .pth files load into it with strict=True, so a wrong layer would fail here.
Weights are f16 in the files and run in f32.

    python scripts/golden/gen_taef2_fixtures.py [--taef2 ../shared/data/models/taef2]
"""

import argparse
import json
import math
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
from PIL import Image
from safetensors.torch import save_file

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "golden" / "fixtures" / "taef2"


def conv3(cin, cout, **kw):
    return nn.Conv2d(cin, cout, 3, padding=1, **kw)


class Clamp(nn.Module):
    def forward(self, x):
        return torch.tanh(x / 3) * 3


class Block(nn.Module):
    def __init__(self, gn):
        super().__init__()
        self.conv = nn.Sequential(conv3(64, 64), nn.ReLU(), conv3(64, 64), nn.ReLU(), conv3(64, 64))
        self.skip = nn.Identity()
        self.fuse = nn.ReLU()
        self.pool = (nn.Sequential(nn.Conv2d(64, 256, 1, bias=False), nn.GroupNorm(4, 256),
                                   nn.ReLU(), nn.Conv2d(256, 64, 1, bias=False)) if gn else None)

    def forward(self, x):
        if self.pool is not None:
            x = x + self.pool(x)
        return self.fuse(self.conv(x) + self.skip(x))


def encoder(latent):
    layers = [conv3(3, 64), Block(False)]
    for stage in range(3):
        layers += [conv3(64, 64, stride=2, bias=False)] + [Block(stage == 2) for _ in range(3)]
    return nn.Sequential(*layers, conv3(64, latent))


def decoder(latent):
    layers = [Clamp(), conv3(latent, 64), nn.ReLU()]
    for stage in range(3):
        layers += [Block(stage == 0) for _ in range(3)]
        layers += [nn.Upsample(scale_factor=2), conv3(64, 64, bias=False)]
    return nn.Sequential(*layers, Block(False), conv3(64, 3))


def photo():
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp,
                        "scikit-image==0.26.0"], check=True)
        wheel = next(Path(tmp).glob("scikit_image-0.26.0-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            z.extract("skimage/data/chelsea.png", tmp)
        im = Image.open(Path(tmp) / "skimage/data/chelsea.png").convert("RGB")
        im.load()
    w, h = im.size
    left, top = (w - 256) // 2, (h - 256) // 2
    return im.crop((left, top, left + 256, top + 256)).resize((128, 128), Image.BOX)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--taef2", default=str(REPO.parent / "shared/data/models/taef2"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    enc, dec = encoder(32), decoder(32)
    load = lambda f: torch.load(Path(args.taef2) / f, map_location="cpu", weights_only=True)
    enc.load_state_dict({k: v.float() for k, v in load("taef2_encoder.pth").items()}, strict=True)
    dec.load_state_dict({k: v.float() for k, v in load("taef2_decoder.pth").items()}, strict=True)
    OUT.mkdir(parents=True, exist_ok=True)
    im = photo()
    im.save(OUT / "chelsea_128.png")
    x = torch.from_numpy(np.asarray(im, dtype=np.float32) / 255.0).permute(2, 0, 1)[None]
    with torch.no_grad():
        latents = enc(x)
        decoded = dec(latents)
    mse = float(((decoded.clamp(0, 1) - x) ** 2).mean())
    save_file({"latents": latents.contiguous(), "decoded": decoded.contiguous()},
              OUT / "reference.safetensors")
    info = dict(psnr_db=10 * math.log10(1.0 / mse), torch=torch.__version__,
                source="skimage 0.26.0 data/chelsea.png, centre 256x256, box-downscaled to 128")
    (OUT / "reference.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info))


if __name__ == "__main__":
    main()
