#!/usr/bin/env python3
"""Generates the video input fixtures in tests/golden/fixtures/video/ (see its README.md).

Two small synthetic clips (a colour ramp with a square moving across it, 64x48) are encoded
by PyAV (which bundles its own FFmpeg, not Debian's):
  - pattern_h264.mp4: H.264 (libx264, yuv420p, B-frames on), 20 frames at 10 fps, with a
    2 s AAC mono track at 22050 Hz (a 440 Hz tone);
  - pattern_rgb.mov: PNG frames (rgb24, lossless), 13 frames at 6 fps, no audio;
  - tone_audio_only.m4a: an MP4 holding only 0.25 s of AAC (a container with no video).
References, all from PyAV and transformers 5.23's Qwen2VLVideoProcessor:
  - <clip>.frames.u8: every frame PyAV decodes, to_ndarray("rgb24"), [n, 48, 64, 3];
  - processor cases: the clip decoded by transformers' read_video_pyav (every frame, its
    VideoMetadata), then the video processor with do_sample_frames and fps (or every frame),
    as its _decode_and_sample_videos samples an array video. reference.json holds the sampled
    indices, video_grid_thw, second_per_grid_ts as Qwen2_5_VLProcessor computes it
    (temporal_patch_size / metadata.sampled_fps), the sum and absolute sum of pixel_values_videos
    (f64), and <case>.pixel_values.f32 holds either every row or rows 0-3 and the last;
  - sampling.json: Qwen2VLVideoProcessor.sample_frames on many (frames, fps) metadata;
  - resize.bin / resize.json: torchvision's uint8 BICUBIC resize (antialias, the video
    processor's resize) of seeded random images, input and output bytes;
  - pattern_h264.audio_16k.f32: the audio track decoded by PyAV and resampled to 16 kHz mono
    float by av.AudioResampler (libswresample's defaults).

Install (into the venv of scripts/golden/requirements.txt):
    .venv-goldens/bin/pip install --no-deps -r scripts/golden/requirements-video.txt
Regenerate:
    .venv-goldens/bin/python scripts/golden/gen_video_fixtures.py --out tests/golden/fixtures/video
"""

import argparse
import json
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import torch
import torchvision.transforms.v2.functional as tvF
from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
from transformers.video_utils import VideoMetadata, read_video_pyav

WIDTH, HEIGHT = 64, 48

# Qwen2.5-VL-7B-Instruct ships only preprocessor_config.json; transformers builds its video
# processor from that file, so these pixel limits are the ones its videos get.
QWEN25_VL = {"min_pixels": 3136, "max_pixels": 12845056}
CONFIGS = {
    "qwen2_5_vl": QWEN25_VL,
    "class_defaults": {},  # size 128*28*28 .. 28*28*768: each 64x48 frame grows to 280x392
    # max_video_tokens small enough that the per-frame cap binds: 8 frames share 5644 pixels.
    "capped": {"min_pixels": 784, "max_pixels": 12845056, "max_video_tokens": 8},
}

# case -> (clip, config, fps or None for every frame, cap_pixels_per_frame, keep every row)
CASES = {
    "rgb_fps2": ("pattern_rgb.mov", "qwen2_5_vl", 2.0, False, True),
    "rgb_all_frames": ("pattern_rgb.mov", "qwen2_5_vl", None, False, False),
    "rgb_class_defaults": ("pattern_rgb.mov", "class_defaults", 2.0, False, False),
    "rgb_capped": ("pattern_rgb.mov", "capped", 4.0, True, False),
    "h264_fps2": ("pattern_h264.mp4", "qwen2_5_vl", 2.0, False, True),
}


def frame_rgb(k, n):
    """Frame k of n: a horizontal red ramp, a vertical blue ramp shifting with k, and a bright
    square crossing the frame (hard edges, so that chroma subsampling and ringing show)."""
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH]
    img = np.zeros((HEIGHT, WIDTH, 3), np.uint8)
    img[..., 0] = (x * 255 // (WIDTH - 1)).astype(np.uint8)
    img[..., 1] = ((k * 255) // max(n - 1, 1))
    img[..., 2] = (((y + 3 * k) % HEIGHT) * 255 // (HEIGHT - 1)).astype(np.uint8)
    sx = (k * 3) % (WIDTH - 12)
    sy = 8 + (k % 5) * 4
    img[sy:sy + 12, sx:sx + 12] = (250, 240, 30)
    return img


def encode_h264(path, n_frames=20, fps=10):
    with av.open(str(path), "w", format="mp4") as out:
        v = out.add_stream("libx264", rate=fps)
        v.width, v.height, v.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        v.codec_context.thread_count = 1  # one thread: the same bytes every run
        v.options = {"crf": "18", "preset": "medium"}
        a = out.add_stream("aac", rate=22050, layout="mono")
        for k in range(n_frames):
            frame = av.VideoFrame.from_ndarray(frame_rgb(k, n_frames), format="rgb24")
            for p in v.encode(frame):
                out.mux(p)
        for p in v.encode():
            out.mux(p)
        n = 22050 * n_frames // fps
        t = np.arange(n) / 22050.0
        tone = (0.4 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)
        for start in range(0, n, 1024):
            chunk = tone[start:start + 1024]
            af = av.AudioFrame.from_ndarray(chunk[None, :], format="fltp", layout="mono")
            af.sample_rate = 22050
            af.pts = start
            af.time_base = Fraction(1, 22050)
            for p in a.encode(af):
                out.mux(p)
        for p in a.encode():
            out.mux(p)


def encode_audio_only(path, seconds=0.25, rate=16000):
    with av.open(str(path), "w", format="mp4") as out:
        a = out.add_stream("aac", rate=rate, layout="mono")
        n = int(rate * seconds)
        tone = (0.3 * np.sin(2 * np.pi * 440.0 * np.arange(n) / rate)).astype(np.float32)
        for start in range(0, n, 1024):
            af = av.AudioFrame.from_ndarray(tone[None, start:start + 1024], format="fltp",
                                            layout="mono")
            af.sample_rate, af.pts, af.time_base = rate, start, Fraction(1, rate)
            for p in a.encode(af):
                out.mux(p)
        for p in a.encode():
            out.mux(p)


def encode_png_mov(path, n_frames=13, fps=6):
    with av.open(str(path), "w", format="mov") as out:
        v = out.add_stream("png", rate=fps)
        v.width, v.height, v.pix_fmt = WIDTH, HEIGHT, "rgb24"
        for k in range(n_frames):
            frame = av.VideoFrame.from_ndarray(frame_rgb(k, n_frames), format="rgb24")
            for p in v.encode(frame):
                out.mux(p)
        for p in v.encode():
            out.mux(p)


def decode_all(path):
    with av.open(str(path)) as c:
        return np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])


def audio_16k(path):
    with av.open(str(path)) as c:
        resampler = av.AudioResampler(format="flt", layout="mono", rate=16000)
        chunks = []
        for frame in c.decode(audio=0):
            for r in resampler.resample(frame):
                chunks.append(r.to_ndarray().reshape(-1))
        for r in resampler.resample(None):
            chunks.append(r.to_ndarray().reshape(-1))
    return np.concatenate(chunks).astype("<f4")


def sampling_cases():
    """sample_frames over (total frames, video fps, target fps or num_frames, frame limits)."""
    proc = Qwen2VLVideoProcessor()
    cases = []
    for total in (1, 2, 3, 4, 5, 7, 13, 20, 29, 30, 61, 97, 100, 301, 1000, 1801, 9000):
        for video_fps in (6.0, 10.0, 23.976023976023978, 25.0, 29.97002997002997, 30.0, 60.0):
            for fps in (0.5, 1.0, 2.0, 3.0):
                cases.append({"total": total, "video_fps": video_fps, "fps": fps})
    for total in (9, 48, 100):
        for num in (4, 5, 8, 16):
            cases.append({"total": total, "video_fps": 30.0, "num_frames": num})
    cases.append({"total": 1000, "video_fps": 30.0, "fps": 2.0, "min_frames": 8, "max_frames": 16})
    cases.append({"total": 1000, "video_fps": 30.0, "fps": 2.0, "max_frames": 33})
    cases.append({"total": 30, "video_fps": 30.0, "fps": 2.0, "min_frames": 10})
    cases.append({"total": 30, "video_fps": 30.0, "fps": 2.0, "temporal_patch_size": 3})
    for c in cases:
        meta = VideoMetadata(total_num_frames=c["total"], fps=c["video_fps"])
        kw = {k: c[k] for k in ("min_frames", "max_frames", "temporal_patch_size") if k in c}
        if "num_frames" in c:
            kw["num_frames"] = c["num_frames"]
            kw["fps"] = None
        else:
            kw["fps"] = c["fps"]
        try:
            c["indices"] = [int(i) for i in proc.sample_frames(meta, **kw)]
        except (ValueError, ZeroDivisionError) as e:
            c["error"] = type(e).__name__
    return cases


def resize_cases(out):
    rng = np.random.default_rng(7)
    sizes = [(48, 64, 56, 84), (48, 64, 56, 56), (37, 53, 28, 84), (90, 120, 56, 84),
             (30, 20, 84, 56), (48, 64, 48, 84), (48, 64, 84, 64), (200, 13, 56, 28)]
    blob = bytearray()
    index = []
    for h, w, nh, nw in sizes:
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        t = torch.from_numpy(img).permute(2, 0, 1).contiguous()[None]
        r = tvF.resize(t, [nh, nw], interpolation=tvF.InterpolationMode.BICUBIC, antialias=True)
        res = r[0].permute(1, 2, 0).contiguous().numpy()
        index.append({"height": h, "width": w, "out_height": nh, "out_width": nw,
                      "input_offset": len(blob), "output_offset": len(blob) + img.size})
        blob += img.tobytes() + res.tobytes()
    (out / "resize.bin").write_bytes(bytes(blob))
    return index


def run_case(out, name, clip, cfg_name, fps, cap, keep_all):
    video, metadata = read_video_pyav(str(out / clip), sample_indices_fn=lambda metadata, **kw:
                                      np.arange(metadata.total_num_frames))
    proc = Qwen2VLVideoProcessor(**CONFIGS[cfg_name])
    kwargs = {"do_sample_frames": fps is not None, "return_metadata": True,
              "cap_pixels_per_frame": cap}
    if fps is not None:
        kwargs["fps"] = fps
    meta = VideoMetadata(total_num_frames=metadata.total_num_frames, fps=metadata.fps,
                         duration=metadata.duration, width=metadata.width,
                         height=metadata.height)
    res = proc(videos=[video], video_metadata=[meta], **kwargs)
    pv = res["pixel_values_videos"].numpy().astype("<f4")
    grid = [int(x) for x in res["video_grid_thw"][0]]
    md = res["video_metadata"][0]
    indices = md.frames_indices if md.frames_indices is not None else range(len(video))
    rows = list(range(pv.shape[0])) if keep_all else [0, 1, 2, 3, pv.shape[0] - 1]
    pv[rows].tofile(out / f"{name}.pixel_values.f32")
    return {"clip": clip, "config": cfg_name, "fps": fps, "cap_pixels_per_frame": cap,
            "indices": [int(i) for i in indices], "grid_thw": grid,
            "second_per_grid_ts": proc.temporal_patch_size / md.sampled_fps,
            "shape": list(pv.shape), "rows": rows,
            "sum": float(pv.astype(np.float64).sum()),
            "abs_sum": float(np.abs(pv.astype(np.float64)).sum())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    out = Path(ap.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    encode_h264(out / "pattern_h264.mp4")
    encode_png_mov(out / "pattern_rgb.mov")
    encode_audio_only(out / "tone_audio_only.m4a")
    ref = {"pyav": av.__version__, "ffmpeg": {k: list(v) for k, v in av.library_versions.items()},
           "clips": {}, "configs": CONFIGS, "cases": {}}
    for clip in ("pattern_h264.mp4", "pattern_rgb.mov"):
        frames = decode_all(out / clip)
        frames.astype(np.uint8).tofile(out / f"{Path(clip).stem}.frames.u8")
        with av.open(str(out / clip)) as c:
            s = c.streams.video[0]
            ref["clips"][clip] = {
                "frames": int(s.frames), "decoded_frames": int(frames.shape[0]),
                "average_rate": float(s.average_rate), "width": s.width, "height": s.height,
                "duration_s": float(s.frames / s.average_rate),
                "codec": s.codec_context.name, "has_audio": len(c.streams.audio) > 0}
    pcm = audio_16k(out / "pattern_h264.mp4")
    pcm.tofile(out / "pattern_h264.audio_16k.f32")
    ref["clips"]["pattern_h264.mp4"]["audio_16k_samples"] = int(pcm.size)
    for name, (clip, cfg, fps, cap, keep_all) in CASES.items():
        ref["cases"][name] = run_case(out, name, clip, cfg, fps, cap, keep_all)
    (out / "sampling.json").write_text(json.dumps(sampling_cases()) + "\n")
    (out / "resize.json").write_text(json.dumps(resize_cases(out), indent=1) + "\n")
    (out / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")


if __name__ == "__main__":
    main()
