"""quantserve.Omni on the tiny Wan2.2 pipelines (tests/golden/fixtures/wan) against `quantserve
generate-video`: the frames equal the command's PNG frames byte for byte for the same settings
(T2V-A14B with two experts, I2V-A14B from a PIL image, a path or an RGBA image, TI2V-5B with and
without one), a request's unset parameters take the command's defaults, save_video writes the
command's very MP4, the numpy views, and every refusal (bad frame counts and sizes, a missing
image, modes a pipeline cannot run, parameters Wan does not have) is a ValueError, with the
command's message where the command refuses the same thing. The Omni keeps working after each."""

import filecmp
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time

import numpy as np  # test dependencies (python/requirements-test.txt)
import pytest
from PIL import Image

import quantserve
from quantserve import Omni, OmniDiffusionSamplingParams

from conftest import ROOT, THREADS, cli_error, run_cli
from test_omni import FLUX_DIR

WAN = ROOT / "tests" / "golden" / "fixtures" / "wan"
T2V = WAN / "t2v_a14b" / "pipeline"
I2V = WAN / "i2v_a14b" / "pipeline"
TI2V = WAN / "ti2v_5b" / "pipeline"
I2V_IMAGE = WAN / "i2v_a14b" / "resize_input.png"  # 50 x 38: resized to the video's 32 x 32
TI2V_IMAGE = WAN / "ti2v_5b" / "i2v_input.png"
PROMPT = "a photograph of an astronaut riding a horse"
NEGATIVE = "blurry, low quality, watermark"


def small(**kw):
    """A 32 x 32, 9-frame, 4-step request (the fixtures' size)."""
    args = dict(num_inference_steps=4, height=32, width=32, num_frames=9, max_sequence_length=16,
                seed=7)
    args.update(kw)
    return OmniDiffusionSamplingParams(**args)


SMALL_FLAGS = ("--steps", 4, "--height", 32, "--width", 32, "--num-frames", 9,
               "--max-sequence-length", 16)


def cli_frames(tmp_path, model, *args, prompt=PROMPT):
    """The RGB bytes of each of generate-video's PNG frames for `args`."""
    out = tmp_path / f"frames_{len(list(tmp_path.iterdir()))}"
    run_cli("generate-video", "--model", model, "--prompt", prompt, "--threads", THREADS,
            "--frames-dir", out, *args)
    names = sorted(os.listdir(out))
    assert names == [f"frame_{i:04d}.png" for i in range(len(names))]
    frames = []
    for name in names:
        with Image.open(out / name) as image:
            assert image.mode == "RGB"
            frames.append(image.tobytes())
    return frames


def pixels(output):
    """The RGB bytes of each PIL frame of a video output."""
    assert output.final_output_type == "video"
    assert all(isinstance(i, Image.Image) and i.mode == "RGB" for i in output.images)
    return [i.tobytes() for i in output.images]


def is_a_view(arr):
    return arr.base is not None and not arr.flags.owndata


@pytest.fixture(scope="module")
def t2v():
    return Omni(model=str(T2V), threads=THREADS)


@pytest.fixture(scope="module")
def i2v():
    return Omni(model=str(I2V), threads=THREADS)


def still_works(omni):
    out = omni.generate(PROMPT, small(num_inference_steps=1), use_tqdm=False)
    assert len(out[0].images) == 9


def test_t2v_frames_equal_generate_video(t2v, tmp_path):
    out = t2v.generate({"prompt": PROMPT, "negative_prompt": NEGATIVE},
                       small(guidance_scale=5.0, guidance_scale_2=4.0), use_tqdm=False)
    (video,) = out
    expected = cli_frames(tmp_path, T2V, *SMALL_FLAGS, "--seed", 7, "--guidance-scale", 5,
                          "--guidance-scale-2", 4, "--negative-prompt", NEGATIVE)
    assert len(expected) == 9
    assert pixels(video) == expected
    assert len(set(expected)) > 1 and len(set(expected[0])) > 16  # moving, not constant
    assert video.prompt == PROMPT and video.metrics["seed"] == 7 and video.fps == 16
    # The uint8 video: the PIL frames' bytes, viewing the engine's buffer without a copy.
    assert video.frames.dtype == np.uint8 and video.frames.shape == (9, 32, 32, 3)
    assert is_a_view(video.frames)
    assert [f.tobytes() for f in video.frames] == expected
    assert len(video.image_arrays) == 9 and video.image_arrays[3].base is not None
    # guidance_scale_2 is the low-noise expert's: another value, other frames.
    other = t2v.generate({"prompt": PROMPT, "negative_prompt": NEGATIVE},
                         small(guidance_scale=5.0, guidance_scale_2=1.0), use_tqdm=False)
    assert pixels(other[0]) != expected


def test_unset_parameters_take_generate_videos_defaults(t2v, tmp_path):
    # Steps (40), guidance (5.0, and guidance_scale_2 = guidance_scale), max_sequence_length
    # (512) and the empty negative prompt: the command's defaults, frame for frame.
    out = t2v.generate(PROMPT, OmniDiffusionSamplingParams(height=32, width=32, num_frames=9,
                                                           seed=11), use_tqdm=False)
    assert pixels(out[0]) == cli_frames(tmp_path, T2V, "--height", 32, "--width", 32,
                                        "--num-frames", 9, "--seed", 11)
    # Width and height: a size the pipeline refuses shows the other side's default in the
    # message ("got 40x480"), which must be the command's.
    for given, flag in (("width", "--width"), ("height", "--height")):
        with pytest.raises(ValueError) as info:
            t2v.generate(PROMPT, OmniDiffusionSamplingParams(**{given: 40}), use_tqdm=False)
        assert str(info.value) == cli_error("generate-video", "--model", T2V, "--prompt", PROMPT,
                                            flag, 40, "--out", tmp_path / "x.mp4")
    # Every default against the one `generate-video --help` prints.
    proc = run_cli("generate-video", "--help")
    help_text = proc.stdout + proc.stderr
    shown = dict(re.findall(r"--([a-z0-9-]+) VALUE.*\(default ([0-9.]+)\)", help_text))
    defaults = quantserve.omni._WAN_DEFAULTS
    assert {k: float(v) for k, v in defaults.items()} == {
        "width": float(shown["width"]), "height": float(shown["height"]),
        "num_frames": float(shown["num-frames"]), "steps": float(shown["steps"]),
        "guidance_scale": float(shown["guidance-scale"]),
        "max_sequence_length": float(shown["max-sequence-length"])}
    # No fixed --fps default: the model's own rate, as generate-video (A14B 16, TI2V-5B 24).
    assert "fps" not in shown


def test_flow_shift_and_boundary_ratio(t2v, tmp_path):
    args = (*SMALL_FLAGS, "--seed", 3)
    plain = pixels(t2v.generate(PROMPT, small(seed=3), use_tqdm=False)[0])
    shifted = cli_frames(tmp_path, T2V, *args, "--flow-shift", 7)
    with Omni(model=str(T2V), threads=THREADS, flow_shift=7.0) as omni:
        assert pixels(omni.generate(PROMPT, small(seed=3), use_tqdm=False)[0]) == shifted
    assert shifted != plain
    ratio = cli_frames(tmp_path, T2V, *args, "--boundary-ratio", 0.5)
    assert ratio != plain
    # As an Omni keyword (every request) and as a sampling parameter (one request).
    with Omni(model=str(T2V), threads=THREADS, boundary_ratio=0.5, mode="text-to-video",
              model_class_name="WanPipeline") as omni:
        assert pixels(omni.generate(PROMPT, small(seed=3), use_tqdm=False)[0]) == ratio
    assert pixels(t2v.generate(PROMPT, small(seed=3, boundary_ratio=0.5),
                               use_tqdm=False)[0]) == ratio
    with pytest.raises(ValueError) as info:
        t2v.generate(PROMPT, small(boundary_ratio=1.5), use_tqdm=False)
    assert str(info.value) == cli_error("generate-video", "--model", T2V, "--prompt", PROMPT,
                                        *SMALL_FLAGS, "--boundary-ratio", 1.5, "--out",
                                        tmp_path / "x.mp4")


def test_i2v_from_a_pil_image_a_path_and_bytes(i2v, tmp_path):
    expected = cli_frames(tmp_path, I2V, *SMALL_FLAGS, "--seed", 7, "--guidance-scale-2", 3,
                          "--negative-prompt", NEGATIVE, "--image", I2V_IMAGE)
    params = small(guidance_scale_2=3.0, negative_prompt=NEGATIVE)
    with Image.open(I2V_IMAGE) as image:
        from_pil = i2v.generate({"prompt": PROMPT, "multi_modal_data": {"image": image},
                                 "modalities": ["video"]}, params, use_tqdm=False)
    assert pixels(from_pil[0]) == expected
    from_path = i2v.generate({"prompt": PROMPT, "multi_modal_data": {"image": I2V_IMAGE}},
                             params, use_tqdm=False)
    assert pixels(from_path[0]) == expected
    from_bytes = i2v.generate({"prompt": PROMPT,
                               "multi_modal_data": {"image": I2V_IMAGE.read_bytes()}},
                              params, use_tqdm=False)
    assert pixels(from_bytes[0]) == expected
    # The video follows the image: the same image mirrored, another video (in this tiny
    # pipeline the image moves pixels by up to 19 levels, in 8 frames of 9).
    with Image.open(I2V_IMAGE) as image:
        mirrored = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    assert pixels(i2v.generate({"prompt": PROMPT, "multi_modal_data": {"image": mirrored}},
                               params, use_tqdm=False)[0]) != expected


def test_i2v_rgba_image_drops_alpha_as_the_command(i2v, tmp_path):
    with Image.open(I2V_IMAGE) as image:
        rgba = image.convert("RGBA")
    alpha = np.random.default_rng(0).integers(0, 256, (rgba.height, rgba.width), np.uint8)
    rgba.putalpha(Image.fromarray(alpha))
    rgba.save(tmp_path / "rgba.png")
    out = i2v.generate({"prompt": PROMPT, "multi_modal_data": {"image": rgba}}, small(),
                       use_tqdm=False)
    assert pixels(out[0]) == cli_frames(tmp_path, I2V, *SMALL_FLAGS, "--seed", 7, "--image",
                                        tmp_path / "rgba.png")


def test_i2v_without_an_image_is_the_commands_error(i2v, tmp_path):
    expected = cli_error("generate-video", "--model", I2V, "--prompt", PROMPT, *SMALL_FLAGS,
                         "--out", tmp_path / "x.mp4")
    assert "needs an image" in expected
    with pytest.raises(ValueError) as info:
        i2v.generate(PROMPT, small(), use_tqdm=False)
    assert isinstance(info.value, quantserve.InvalidArgumentError)
    assert str(info.value) == expected
    # Checked for every prompt before the first video is made.
    with Image.open(I2V_IMAGE) as image:
        with pytest.raises(ValueError, match="needs an image"):
            i2v.generate([{"prompt": PROMPT, "multi_modal_data": {"image": image}}, PROMPT],
                         small(), use_tqdm=False)
    # A file that is not an image: the command's message, naming it.
    bad = tmp_path / "corrupt.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with pytest.raises(ValueError) as info:
        i2v.generate({"prompt": PROMPT, "multi_modal_data": {"image": str(bad)}}, small(),
                     use_tqdm=False)
    assert str(info.value) == cli_error("generate-video", "--model", I2V, "--prompt", PROMPT,
                                        *SMALL_FLAGS, "--image", bad, "--out",
                                        tmp_path / "x.mp4")
    with pytest.raises(FileNotFoundError, match="no-such.png"):
        i2v.generate({"prompt": PROMPT, "multi_modal_data": {"image": tmp_path / "no-such.png"}},
                     small(), use_tqdm=False)
    with pytest.raises(ValueError, match="multi_modal_data keys \\['video'\\]"):
        i2v.generate({"prompt": PROMPT, "multi_modal_data": {"video": []}}, small(),
                     use_tqdm=False)
    with pytest.raises(ValueError, match="must be a PIL image"):
        i2v.generate({"prompt": PROMPT, "multi_modal_data": {"image": 3}}, small(),
                     use_tqdm=False)
    with Image.open(I2V_IMAGE) as image:
        assert len(i2v.generate({"prompt": PROMPT, "multi_modal_data": {"image": image}},
                                small(num_inference_steps=1), use_tqdm=False)[0].images) == 9


def test_ti2v_with_and_without_an_image(tmp_path):
    with Omni(model=str(TI2V), threads=THREADS) as omni:
        text = omni.generate(PROMPT, small(), use_tqdm=False)
        assert pixels(text[0]) == cli_frames(tmp_path, TI2V, *SMALL_FLAGS, "--seed", 7)
        with Image.open(TI2V_IMAGE) as image:
            framed = omni.generate({"prompt": PROMPT, "multi_modal_data": {"image": image}},
                                   small(), use_tqdm=False)
        assert pixels(framed[0]) == cli_frames(tmp_path, TI2V, *SMALL_FLAGS, "--seed", 7,
                                               "--image", TI2V_IMAGE)
        assert pixels(framed[0]) != pixels(text[0])
        # TI2V-5B's own frame rate (A14B's is 16), as generate-video and the server default.
        assert text[0].fps == 24
    # mode="image-to-video" makes the image every prompt's duty.
    with Omni(model=str(TI2V), threads=THREADS, mode="image-to-video") as omni:
        with pytest.raises(ValueError, match="prompt 1 has no image"):
            omni.generate([{"prompt": PROMPT, "multi_modal_data": {"image": TI2V_IMAGE}},
                           PROMPT], small(), use_tqdm=False)


def test_modes(t2v):
    with pytest.raises(ValueError, match="mode='text-to-image' cannot run on WanPipeline"):
        Omni(model=str(T2V), mode="text-to-image")
    with pytest.raises(ValueError, match="mode='image-to-video' cannot run on WanPipeline: it "
                                         "is a text-to-video pipeline"):
        Omni(model=str(T2V), mode="image-to-video")
    with pytest.raises(ValueError, match="mode='text-to-video' cannot run on "
                                         "WanImageToVideoPipeline"):
        Omni(model=str(I2V), mode="text-to-video")
    with pytest.raises(ValueError, match="model_class_name='FluxPipeline'"):
        Omni(model=str(T2V), model_class_name="FluxPipeline")
    with pytest.raises(ValueError, match="vae_use_tiling"):
        Omni(model=str(T2V), vae_use_tiling=True)
    with pytest.raises(ValueError, match="flow_shift must be a number"):
        Omni(model=str(T2V), flow_shift="5")
    # The FLUX pipeline makes images, and takes no video settings.
    with pytest.raises(ValueError, match="mode='text-to-video' is not supported by "
                                         "quantserve's FLUX pipeline"):
        Omni(model=str(FLUX_DIR), mode="text-to-video")
    with pytest.raises(ValueError, match="flow_shift"):
        Omni(model=str(FLUX_DIR), flow_shift=3.0)
    Omni(model=str(FLUX_DIR), mode="text-to-image").close()
    still_works(t2v)


@pytest.mark.parametrize("kwargs, flags", [
    ({"num_frames": 10}, ("--num-frames", 10)),
    ({"width": 33}, ("--width", 33)),
    ({"height": 40}, ("--height", 40)),
    ({"num_inference_steps": 1001}, ("--steps", 1001)),
])
def test_values_the_pipeline_refuses(t2v, tmp_path, kwargs, flags):
    args = dict(height=32, width=32, num_frames=9, max_sequence_length=16, seed=7)
    args.update(kwargs)
    cli = {"--height": 32, "--width": 32, "--num-frames": 9, "--max-sequence-length": 16}
    cli[flags[0]] = flags[1]
    expected = cli_error("generate-video", "--model", T2V, "--prompt", PROMPT,
                         *[x for kv in cli.items() for x in kv], "--out", tmp_path / "x.mp4")
    made = t2v._next_id  # a request id is taken by each video made
    with pytest.raises(ValueError) as info:
        # The bad request second: nothing is made before every request is checked.
        t2v.generate([PROMPT, PROMPT], [small(), OmniDiffusionSamplingParams(**args)],
                     use_tqdm=False)
    assert isinstance(info.value, quantserve.InvalidArgumentError)
    assert str(info.value) == expected
    assert t2v._next_id == made
    still_works(t2v)


@pytest.mark.parametrize("kwargs, name", [
    ({"true_cfg_scale": 4.0}, "true_cfg_scale"),
    ({"num_outputs_per_prompt": 2}, "num_outputs_per_prompt"),
])
def test_parameters_wan_does_not_have(t2v, kwargs, name):
    with pytest.raises(ValueError, match=f"{name}=.* is not supported by quantserve's Wan2.2 "
                                         "pipeline"):
        t2v.generate(PROMPT, small(**kwargs), use_tqdm=False)
    still_works(t2v)


@pytest.mark.parametrize("kwargs, name", [
    ({"fps": 0}, "fps"),
    ({"fps": 241}, "fps must be 1 to 240"),
    ({"fps": 2.5}, "fps"),
    ({"num_frames": 0}, "num_frames"),
    ({"guidance_scale_2": float("inf")}, "guidance_scale_2"),
    ({"boundary_ratio": "high"}, "boundary_ratio"),
])
def test_bad_video_parameter(kwargs, name):
    # Refused when the parameters are made, whatever the model.
    with pytest.raises(ValueError, match=name):
        OmniDiffusionSamplingParams(**kwargs)


def test_save_video_is_generate_videos_mp4(t2v, tmp_path):
    cli_mp4 = tmp_path / "cli.mp4"
    run_cli("generate-video", "--model", T2V, "--prompt", PROMPT, *SMALL_FLAGS, "--seed", 7,
            "--threads", THREADS, "--out", cli_mp4)
    (video,) = t2v.generate(PROMPT, small(), use_tqdm=False)
    assert video.save_video(tmp_path / "py.mp4") == str(tmp_path / "py.mp4")
    assert filecmp.cmp(cli_mp4, tmp_path / "py.mp4", shallow=False)
    assert quantserve._core.encode_mp4(video.frames, fps=16) == cli_mp4.read_bytes()
    # The request's fps, or save_video's.
    (fast,) = t2v.generate(PROMPT, small(fps=24), use_tqdm=False)
    fast.save_video(tmp_path / "24.mp4")
    video.save_video(tmp_path / "8.mp4", fps=8)
    # A folder that is not there: write_mp4's error, and no file.
    with pytest.raises(FileNotFoundError, match="does not exist"):
        video.save_video(tmp_path / "no" / "x.mp4")
    with pytest.raises(ValueError, match="fps must be from 1 to 240"):
        video.save_video(tmp_path / "x.mp4", fps=0)
    assert not (tmp_path / "x.mp4").exists()
    if shutil.which("ffprobe") is None:
        pytest.skip("ffprobe is not installed: the MP4s were checked against the command's only")
    for name, rate in (("py.mp4", "16/1"), ("24.mp4", "24/1"), ("8.mp4", "8/1")):
        probe = subprocess.run(
            ["ffprobe", "-v", "error", "-select_streams", "v:0", "-count_frames",
             "-show_entries", "stream=codec_name,width,height,r_frame_rate,nb_read_frames",
             "-of", "json", str(tmp_path / name)], capture_output=True, text=True, check=True)
        (stream,) = json.loads(probe.stdout)["streams"]
        assert stream == {"codec_name": "h264", "width": 32, "height": 32,
                          "r_frame_rate": rate, "nb_read_frames": "9"}, name


def test_save_images_writes_the_frames(t2v, tmp_path):
    (video,) = t2v.generate(PROMPT, small(), use_tqdm=False)
    names = video.save_images(tmp_path / "frames")
    assert len(names) == 9
    for name, frame in zip(names, video.frames):
        with Image.open(name) as saved:
            assert np.array_equal(np.asarray(saved), frame)


def test_np_and_latent_outputs(t2v):
    (pil,) = t2v.generate(PROMPT, small(), use_tqdm=False)
    (arr,) = t2v.generate(PROMPT, small(output_type="np"), use_tqdm=False)
    assert len(arr.images) == 9
    assert all(f.dtype == np.float32 and f.shape == (32, 32, 3) for f in arr.images)
    assert is_a_view(arr.images[0])
    stack = np.stack(arr.images)
    assert stack.min() >= 0 and stack.max() <= 1
    assert np.array_equal((stack * 255).round().astype(np.uint8), pil.frames)
    assert np.array_equal(arr.frames, pil.frames)
    (lat,) = t2v.generate(PROMPT, small(output_type="latent"), use_tqdm=False)
    assert lat.frames is None and lat.image_arrays == []
    (z,) = lat.images
    assert lat.latents[0] is z
    # [z_dim, (frames - 1) / 4 + 1, height / 8, width / 8] for this 16-channel VAE.
    assert z.dtype == np.float32 and z.shape == (16, 3, 4, 4) and is_a_view(z)
    assert np.array_equal(z, pil.latents[0])
    # The pipeline's VAE on them (WanCore.decode, generate's second half): the pil run's frames.
    width, height, n, rgb8, rgb, _ = t2v._wan.decode(z, 9, 32, 32)
    assert (width, height, n) == (32, 32, 9)
    assert np.array_equal(np.asarray(rgb8), pil.frames)
    with pytest.raises(ValueError, match="no video to save"):
        lat.save_video("x.mp4")


def test_ctrl_c_cancels_between_steps(t2v, python_sigint):
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    t0 = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            # About 0.3 s a step on two cores (the 32 x 32 video takes under 1 ms).
            t2v.generate(PROMPT, small(num_inference_steps=1000, height=256, width=256,
                                       num_frames=81, output_type="latent"), use_tqdm=False)
    finally:
        timer.cancel()
    assert time.monotonic() - t0 < 10  # 1000 steps take minutes
    still_works(t2v)


def test_closed(tmp_path):
    omni = Omni(model=str(T2V), threads=THREADS)
    omni.close()
    with pytest.raises(ValueError, match="closed"):
        omni.generate(PROMPT, small())
