#!/usr/bin/env python3
"""Generates the vision input fixtures in tests/golden/fixtures/vision/ (see its README.md).

Small synthetic images (smooth gradients, rings and hard edges: the bicubic's overshoot and
JPEG's ringing both show) are saved by Pillow as PNG, JPEG and WebP, plus the odd cases
(alpha, a palette with tRNS, 16-bit, greyscale and CMYK JPEG, EXIF orientations), and a PNG
whose header claims 30000x30000 pixels. References, all from Pillow and transformers:
  - <image>.decoded.png: Image.open, ImageOps.exif_transpose, then transformers'
    convert_to_rgb (alpha composited over white): the RGB the processor starts from;
    <image>.decoded_drop.png for the images with alpha: exif_transpose then convert("RGB"),
    as transformers' load_image does. Stored as PNG (lossless; 8-bit RGB PNG is the one case
    whose decoding is checked against raw bytes first, <image>.decoded.rgb for two images);
  - <case>.resized.png: the decoded image resized by Pillow's BICUBIC to smart_resize's size;
  - <case>.pixel_values.f32: Qwen2VLImageProcessor (use_fast=False, the PIL backend) on the
    exif-transposed image: every row for one case, rows 0-3 (the first merge group) and the
    last row for the others, to keep the folder small; reference.json holds the grids, the
    shapes, the rows kept and the sum and absolute sum of the whole array (f64).

Install (into the venv of scripts/golden/requirements.txt):
    .venv-goldens/bin/pip install --no-deps -r scripts/golden/requirements-vision.txt
Regenerate (byte-for-byte reproducible with the pinned Pillow):
    .venv-goldens/bin/python scripts/golden/gen_vision_fixtures.py --out tests/golden/fixtures/vision
"""

import argparse
import json
import struct
import zlib
from pathlib import Path

import numpy as np
import PIL
from PIL import Image, ImageOps
from transformers import AutoImageProcessor
from transformers.image_transforms import convert_to_rgb

# Qwen2.5-VL-7B-Instruct's preprocessor_config.json (image fields), and a variant with a small
# max_pixels given through "size", so that a 300x200 photo is really shrunk (by about 2.1).
QWEN25_VL = {
    "min_pixels": 3136,
    "max_pixels": 12845056,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2_5_VLProcessor",
}
SMALL = {k: v for k, v in QWEN25_VL.items() if k not in ("min_pixels", "max_pixels")}
SMALL.update({"size": {"shortest_edge": 3136, "longest_edge": 28 * 28 * 20}, "resample": 3,
              "rescale_factor": 0.00392156862745098, "do_resize": True})
CONFIGS = {"qwen2_5_vl": QWEN25_VL, "small": SMALL}

# case -> (image file, config); the first keeps every row of pixel_values.
CASES = {
    "tiny_20x20": ("tiny_20x20.png", "qwen2_5_vl"),
    "gradient_64x48": ("gradient_64x48.png", "qwen2_5_vl"),
    "odd_100x37": ("odd_100x37.png", "qwen2_5_vl"),
    "photo_300x200": ("photo_300x200.jpg", "small"),
    "alpha_40x30": ("alpha_40x30.png", "qwen2_5_vl"),
    "lossless_48x40": ("lossless_48x40.webp", "small"),
    "lossy_alpha_64x48": ("lossy_alpha_64x48.webp", "qwen2_5_vl"),
    "grey_30x20": ("grey_30x20.jpg", "qwen2_5_vl"),
    "orient6_40x24": ("orient6_40x24.jpg", "qwen2_5_vl"),
}
FULL_CASE = "tiny_20x20"
RAW_DECODED = ["gradient_64x48.png", "odd_100x37.png"]


def scene(width, height, seed):
    """uint8 [h, w, 3]: gradients, rings and a hard-edged box, different per seed."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    rng = np.random.default_rng(seed)
    cx, cy = rng.uniform(0.3, 0.7) * width, rng.uniform(0.3, 0.7) * height
    r = np.hypot(x - cx, y - cy)
    img = np.stack([
        255 * x / max(width - 1, 1),
        127.5 + 127.5 * np.sin(r / rng.uniform(2.0, 5.0)),
        255 * y / max(height - 1, 1),
    ], axis=-1)
    x0, y0 = int(width * 0.2), int(height * 0.25)
    img[y0:y0 + height // 3, x0:x0 + width // 4] = rng.integers(0, 256, 3)
    return np.clip(np.round(img), 0, 255).astype(np.uint8)


def exif_bytes(orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def make_images(out):
    """Writes every input image; returns {file: notes for the README}."""
    made = {}

    def save(name, im, **kw):
        im.save(out / name, **kw)
        made[name] = im.mode

    save("tiny_20x20.png", Image.fromarray(scene(20, 20, 1)))
    save("gradient_64x48.png", Image.fromarray(scene(64, 48, 2)))
    save("odd_100x37.png", Image.fromarray(scene(100, 37, 3)))
    save("photo_300x200.jpg", Image.fromarray(scene(300, 200, 4)), quality=90)
    save("progressive_90x60.jpg", Image.fromarray(scene(90, 60, 11)), quality=85,
         progressive=True)
    rgba = np.dstack([scene(40, 30, 5), np.linspace(0, 255, 40 * 30).reshape(30, 40)])
    save("alpha_40x30.png", Image.fromarray(rgba.astype(np.uint8), "RGBA"))
    save("lossless_48x40.webp", Image.fromarray(scene(48, 40, 6)), lossless=True)
    lossy = np.dstack([scene(64, 48, 7), 255 - np.linspace(0, 255, 64 * 48).reshape(48, 64)])
    save("lossy_alpha_64x48.webp", Image.fromarray(lossy.astype(np.uint8), "RGBA"), quality=80)
    save("grey_30x20.jpg", Image.fromarray(scene(30, 20, 8)[:, :, 1], "L"), quality=90)
    save("cmyk_24x16.jpg", Image.fromarray(scene(24, 16, 9)).convert("CMYK"), quality=95)
    save("orient6_40x24.jpg", Image.fromarray(scene(40, 24, 10)), quality=92,
         exif=exif_bytes(6))
    save("orient8_20x12.webp", Image.fromarray(scene(20, 12, 12)), lossless=True,
         exif=exif_bytes(8))
    pal = Image.fromarray(scene(16, 12, 13)).quantize(colors=8)
    save("palette_trns_16x12.png", pal, transparency=3)
    grey16 = (np.arange(16 * 12).reshape(12, 16) * 5).astype(np.uint16)  # 0..955: clipped
    save("grey16_16x12.png", Image.fromarray(grey16))
    rgb16 = scene(16, 12, 14).astype(np.uint16) * 257 + 3  # high byte = the 8-bit scene
    write_png16_rgb(out / "rgb16_16x12.png", rgb16)
    made["rgb16_16x12.png"] = "RGB;16"
    la = np.dstack([scene(16, 12, 15)[:, :, 0], np.full((12, 16), 128)]).astype(np.uint8)
    save("grey_alpha_16x12.png", Image.fromarray(la, "LA"))
    for k in range(2, 9):
        save(f"orient{k}_5x3.png", Image.fromarray(scene(5, 3, 20 + k)), exif=exif_bytes(k))
    write_huge_header(out / "huge_header_30000x30000.png")
    return made


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(
        ">I", zlib.crc32(kind + data) & 0xffffffff)


def write_png16_rgb(path, rgb16):
    """Pillow cannot write 16-bit RGB; a plain PNG writer (filter 0 rows) can."""
    h, w, _ = rgb16.shape
    raw = b"".join(b"\0" + rgb16[y].astype(">u2").tobytes() for y in range(h))
    ihdr = struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) +
                     png_chunk(b"IDAT", zlib.compress(raw, 9)) + png_chunk(b"IEND", b""))


def write_huge_header(path):
    """A valid IHDR claiming 30000x30000 RGB and one byte of IDAT: refused from the header."""
    ihdr = struct.pack(">IIBBBBB", 30000, 30000, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) +
                     png_chunk(b"IDAT", zlib.compress(b"\0")) + png_chunk(b"IEND", b""))


def opened(path):
    im = Image.open(path)
    im.load()
    return ImageOps.exif_transpose(im)


def save_rgb_png(out, name, array):
    Image.fromarray(np.ascontiguousarray(array, dtype=np.uint8), "RGB").save(out / name)
    return name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    made = make_images(out)
    for cfg_name, cfg in CONFIGS.items():
        (out / cfg_name).mkdir(exist_ok=True)
        (out / cfg_name / "preprocessor_config.json").write_text(json.dumps(cfg, indent=2) + "\n")

    ref = {"pillow": PIL.__version__, "images": {}, "cases": {}}
    for name in made:
        im = opened(out / name)
        entry = {"width": im.width, "height": im.height, "mode": made[name]}
        stem = name.rsplit(".", 1)[0]
        white = convert_to_rgb(im, return_numpy=True)
        entry["decoded"] = save_rgb_png(out, f"{stem}.decoded.png", white)
        drop = np.array(im.convert("RGB"))
        if not np.array_equal(drop, white):
            entry["decoded_drop"] = save_rgb_png(out, f"{stem}.decoded_drop.png", drop)
        if name in RAW_DECODED:
            (out / f"{stem}.decoded.rgb").write_bytes(white.tobytes())
            entry["decoded_raw"] = f"{stem}.decoded.rgb"
        ref["images"][name] = entry

    for case, (name, cfg_name) in CASES.items():
        proc = AutoImageProcessor.from_pretrained(out / cfg_name, use_fast=False)
        assert type(proc).__name__ == "Qwen2VLImageProcessorPil", type(proc).__name__
        im = opened(out / name)
        feats = proc(images=im, return_tensors="np")
        pv = np.asarray(feats["pixel_values"], dtype=np.float32)
        grid = [int(v) for v in feats["image_grid_thw"][0]]
        height, width = grid[1] * proc.patch_size, grid[2] * proc.patch_size
        rgb = Image.fromarray(convert_to_rgb(im, return_numpy=True), "RGB")
        resized = np.array(rgb.resize((width, height), resample=Image.Resampling.BICUBIC))
        rows = list(range(pv.shape[0])) if case == FULL_CASE else [0, pv.shape[0] - 1]
        (out / f"{case}.pixel_values.f32").write_bytes(
            np.ascontiguousarray(pv[rows], dtype="<f4").tobytes())
        ref["cases"][case] = {
            "image": name, "config": cfg_name, "image_grid_thw": grid,
            "resized": save_rgb_png(out, f"{case}.resized.png", resized),
            "resized_height": height, "resized_width": width,
            "pixel_values": f"{case}.pixel_values.f32", "shape": list(pv.shape), "rows": rows,
            "sum": float(pv.astype(np.float64).sum()),
            "abs_sum": float(np.abs(pv.astype(np.float64)).sum()),
        }
    (out / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")


if __name__ == "__main__":
    main()
