"""quantserve.Omni on the shipped tiny FLUX pipeline against `quantserve generate-image`: the
seed's snippet gives the command's pixels, n images per prompt, negative prompts and true CFG,
parameter errors as ValueError with the command's message, a missing model, Ctrl-C between
steps, and a text checkpoint delegated to LLM. The interpreter and the loaded pipeline keep
working after each error."""

import os
import signal
import threading
import time

import pytest
from PIL import Image  # a test dependency (python/requirements-test.txt)

import quantserve
from quantserve import LLM, Omni, OmniDiffusionSamplingParams, SamplingParams

from conftest import MODEL_DIR, ROOT, THREADS, cli_error, run_cli

FLUX_DIR = ROOT / "tests" / "golden" / "fixtures" / "flux" / "tiny_pipeline"
PROMPT = "a photo of a cat"


def small(**kw):
    args = dict(num_inference_steps=4, guidance_scale=3.5, height=64, width=64, seed=42)
    args.update(kw)
    return OmniDiffusionSamplingParams(**args)


def cli_pixels(tmp_path, *args, name="cli.png"):
    """The RGB bytes of generate-image's PNG for the snippet's settings plus `args`."""
    out = tmp_path / name
    run_cli("generate-image", "--model", FLUX_DIR, "--prompt", PROMPT, "--steps", 4,
            "--guidance-scale", 3.5, "--height", 64, "--width", 64, "--threads", THREADS,
            "--out", out, *args)
    with Image.open(out) as image:
        assert image.mode == "RGB"
        return image.tobytes()


def pixels(image):
    assert image.mode == "RGB" and image.size == (64, 64)
    return image.tobytes()


@pytest.fixture(scope="module")
def omni():
    return Omni(model=str(FLUX_DIR), threads=THREADS)


def still_works(omni):
    out = omni.generate(PROMPT, small(num_inference_steps=1), use_tqdm=False)
    assert len(out[0].images) == 1


def test_snippet_equals_generate_image(tmp_path):
    # The seed's snippet, verbatim apart from the import and the model directory, run in a
    # fresh directory (and back out of it: the CLI's PYTHONPATH may be relative).
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        omni = Omni(model=str(FLUX_DIR))
        outputs = omni.generate("a photo of a cat", OmniDiffusionSamplingParams(
            num_inference_steps=4, guidance_scale=3.5, height=64, width=64, seed=42))
        outputs[0].images[0].save("out.png")
    finally:
        os.chdir(cwd)

    with Image.open(tmp_path / "out.png") as saved:
        got = pixels(saved)
    expected = cli_pixels(tmp_path, "--seed", 42)
    assert got == expected
    assert len(set(got)) > 16  # a real picture, not a constant
    assert outputs[0].final_output_type == "image"
    assert outputs[0].prompt == "a photo of a cat"
    assert outputs[0].metrics["seed"] == 42
    omni.close()
    with pytest.raises(ValueError, match="closed"):
        omni.generate("x", small())


def test_images_per_prompt_and_prompt_lists(omni, tmp_path):
    out = omni.generate([PROMPT, PROMPT], small(seed=7, num_images_per_prompt=3),
                        use_tqdm=False)
    assert len(out) == 2 and out[0].request_id != out[1].request_id
    assert [len(o.images) for o in out] == [3, 3]
    got = [pixels(i) for i in out[0].images]
    assert len(set(got)) == 3  # image i uses seed + i
    assert [pixels(i) for i in out[1].images] == got
    assert got[1] == cli_pixels(tmp_path, "--seed", 8)
    alias = omni.generate(PROMPT, small(seed=7, num_outputs_per_prompt=2), use_tqdm=False)
    assert [pixels(i) for i in alias[0].images] == got[:2]
    # One parameter set per prompt.
    per_prompt = omni.generate([PROMPT, PROMPT], [small(seed=7), small(seed=9)], use_tqdm=False)
    assert pixels(per_prompt[0].images[0]) == got[0]
    assert pixels(per_prompt[1].images[0]) == got[2]


def test_negative_prompt_and_true_cfg(omni, tmp_path):
    negative = "blurry, dark"
    expected = cli_pixels(tmp_path, "--seed", 5, "--negative-prompt", negative,
                          "--true-cfg-scale", 4)
    in_dict = omni.generate({"prompt": PROMPT, "negative_prompt": negative},
                            small(seed=5, true_cfg_scale=4.0), use_tqdm=False)
    in_params = omni.generate(PROMPT, small(seed=5, true_cfg_scale=4.0,
                                            negative_prompt=negative), use_tqdm=False)
    assert pixels(in_dict[0].images[0]) == expected
    assert pixels(in_params[0].images[0]) == expected
    plain = omni.generate(PROMPT, small(seed=5), use_tqdm=False)
    assert pixels(plain[0].images[0]) != expected
    # Without a negative prompt true_cfg_scale changes nothing (one branch, as diffusers).
    no_negative = omni.generate(PROMPT, small(seed=5, true_cfg_scale=4.0), use_tqdm=False)
    assert pixels(no_negative[0].images[0]) == pixels(plain[0].images[0])


def test_guidance_default_is_the_pipelines(omni):
    # guidance_scale left at vLLM-Omni's 0.0 means "not given": diffusers' 3.5.
    unset = omni.generate(PROMPT, small(guidance_scale=0.0), use_tqdm=False)
    given = omni.generate(PROMPT, small(guidance_scale=3.5), use_tqdm=False)
    other = omni.generate(PROMPT, small(guidance_scale=7.0), use_tqdm=False)
    assert pixels(unset[0].images[0]) == pixels(given[0].images[0])
    assert pixels(other[0].images[0]) != pixels(given[0].images[0])


@pytest.mark.parametrize("kwargs, name", [
    ({"cfg_normalize": True}, "cfg_normalize"),
    ({"sigmas": [1.0, 0.5]}, "sigmas"),
    ({"extra_args": {"x": 1}}, "extra_args"),
    ({"output_type": "pt"}, "output_type"),
    ({"num_inference_steps": 0}, "num_inference_steps"),
    ({"height": -64}, "height"),
    ({"seed": -1}, "seed"),
    ({"guidance_scale": float("nan")}, "guidance_scale"),
    ({"num_images_per_prompt": 2, "num_outputs_per_prompt": 3}, "num_images_per_prompt"),
])
def test_bad_parameter(omni, kwargs, name):
    with pytest.raises(ValueError, match=name):
        OmniDiffusionSamplingParams(**kwargs)
    still_works(omni)


@pytest.mark.parametrize("kwargs, name", [
    ({"num_frames": 9}, "num_frames"),
    ({"fps": 16}, "fps"),
    ({"guidance_scale_2": 2.0}, "guidance_scale_2"),
    ({"boundary_ratio": 0.9}, "boundary_ratio"),
])
def test_video_parameter_on_flux(omni, kwargs, name):
    # Wan2.2's parameters (tests/python/test_omni_video.py): valid, but not FLUX's.
    with pytest.raises(ValueError, match=f"{name}=.* is not supported by quantserve's FLUX"):
        omni.generate(PROMPT, small(**kwargs), use_tqdm=False)
    omni.generate(PROMPT, small(num_inference_steps=1, num_frames=1), use_tqdm=False)
    still_works(omni)


def test_parameter_the_pipeline_refuses(omni, tmp_path):
    # A size that is not a multiple of 4 (this tiny VAE's 2x scale times the 2x2 packing):
    # the pipeline's own check and message, before any image of the batch is made.
    with pytest.raises(ValueError) as info:
        omni.generate([PROMPT, PROMPT], [small(), small(height=62)], use_tqdm=False)
    assert isinstance(info.value, quantserve.InvalidArgumentError)
    assert str(info.value) == cli_error("generate-image", "--model", FLUX_DIR, "--prompt",
                                        PROMPT, "--height", 62, "--width", 64, "--steps", 4,
                                        "--out", tmp_path / "x.png")
    with pytest.raises(ValueError, match="OmniDiffusionSamplingParams, not SamplingParams"):
        omni.generate(PROMPT, SamplingParams(), use_tqdm=False)
    with pytest.raises(ValueError, match="multi_modal_data"):
        omni.generate({"prompt": PROMPT, "multi_modal_data": {}}, use_tqdm=False)
    with pytest.raises(ValueError, match="one per prompt"):
        omni.generate([PROMPT] * 3, [small(), small()], use_tqdm=False)
    still_works(omni)


def test_constructor_arguments(omni):
    with pytest.raises(ValueError, match="vae_use_tiling"):
        Omni(model=str(FLUX_DIR), vae_use_tiling=True)
    with pytest.raises(TypeError, match="no_such_argument"):
        Omni(model=str(FLUX_DIR), no_such_argument=1)
    with pytest.raises(ValueError, match="threads"):
        Omni(model=str(FLUX_DIR), threads=0)
    Omni(model=str(FLUX_DIR), enforce_eager=True, model_class_name="FluxPipeline").close()
    still_works(omni)


def test_missing_model(omni, tmp_path):
    missing = tmp_path / "no-such-pipeline"
    with pytest.raises(FileNotFoundError) as info:
        Omni(model=str(missing))
    assert isinstance(info.value, quantserve.NotFoundError)
    assert str(info.value) == cli_error("generate-image", "--model", missing, "--prompt", "x",
                                        "--out", tmp_path / "x.png")
    still_works(omni)


def test_wrong_pipeline_class(omni, tmp_path):
    broken = tmp_path / "pipeline"
    broken.mkdir()
    (broken / "model_index.json").write_text('{"_class_name": "StableDiffusionPipeline"}')
    with pytest.raises(NotImplementedError) as info:
        Omni(model=str(broken))
    assert str(info.value) == cli_error("generate-image", "--model", broken, "--prompt", "x",
                                        "--out", tmp_path / "x.png")
    still_works(omni)


def test_save_images(omni, tmp_path):
    out = omni.generate(PROMPT, small(num_images_per_prompt=2), use_tqdm=False)[0]
    names = out.save_images(tmp_path / "dir")
    assert names == [str(tmp_path / "dir" / f"{out.request_id}_{i}.png") for i in range(2)]
    files = out.save_images(tmp_path / "img.png")
    assert files == [str(tmp_path / "img_0.png"), str(tmp_path / "img_1.png")]
    for name, image in zip(files, out.images):
        with Image.open(name) as saved:
            assert pixels(saved) == pixels(image)


def test_ctrl_c_cancels_between_steps(omni, python_sigint):
    # A run of thousands of steps, interrupted as a user's Ctrl-C would (SIGINT to the process):
    # it stops after the step under way, and the pipeline is usable again.
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    t0 = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            omni.generate(PROMPT, small(num_inference_steps=1000), use_tqdm=False)
    finally:
        timer.cancel()
    assert time.monotonic() - t0 < 5  # 1000 steps would take ten seconds or more
    still_works(omni)


def test_text_checkpoint_delegates_to_llm():
    omni = Omni(model=str(MODEL_DIR), threads=THREADS)
    greedy = SamplingParams(temperature=0, max_tokens=16)
    out = omni.generate(["Once upon a time", "The cat"], greedy, use_tqdm=False)
    llm = LLM(str(MODEL_DIR), threads=THREADS)
    expected = llm.generate(["Once upon a time", "The cat"], greedy, use_tqdm=False)
    assert [o.final_output_type for o in out] == ["text", "text"]
    assert [o.outputs[0].text for o in out] == [e.outputs[0].text for e in expected]
    assert out[0].request_output.outputs[0].token_ids == expected[0].outputs[0].token_ids
    assert [o.images for o in out] == [[], []]
    # vLLM-Omni's per-stage list of a one-stage model.
    assert omni.generate("The cat", [greedy], use_tqdm=False)[0].outputs[0].text == \
        expected[1].outputs[0].text
    with pytest.raises(ValueError, match="text model"):
        omni.generate("The cat", small(), use_tqdm=False)
    with pytest.raises(ValueError, match="no images"):
        out[0].save_images("x.png")
