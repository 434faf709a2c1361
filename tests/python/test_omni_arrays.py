"""Omni's numpy outputs on the shipped tiny FLUX pipeline: the uint8 arrays beside the PIL images
(`image_arrays`), output_type "np" (diffusers' float32 images in [0, 1]) and "latent" (the final
packed latents, no VAE decode). Every array must be a view of the engine's buffer (it does not
own its data: no copy was made), hold the pixels of the PIL image, and the latents must decode,
through the pipeline's own decoder, to the very image a "pil" run makes."""

import json

import numpy as np  # a test dependency (python/requirements-test.txt), optional for the package
import pytest
from PIL import Image

from quantserve import Omni, OmniDiffusionSamplingParams

from conftest import THREADS
from test_omni import FLUX_DIR, PROMPT, small


@pytest.fixture(scope="module")
def omni():
    return Omni(model=str(FLUX_DIR), threads=THREADS)


def is_a_view(arr):
    """The array borrows memory another object owns (the engine's capsule): no copy."""
    return arr.base is not None and not arr.flags.owndata


def packed_shape(height, width):
    """FluxPipeline's packed latents: one token per 2 x 2 patch of the VAE's latent grid, of
    4 x latent_channels values. The VAE scales by 2 ** (len(block_out_channels) - 1) (8 for
    FLUX.1, 2 for the tiny pipeline), so a token covers a (2 x scale)-pixel square."""
    vae = json.loads((FLUX_DIR / "vae" / "config.json").read_text())
    transformer = json.loads((FLUX_DIR / "transformer" / "config.json").read_text())
    unit = 2 * 2 ** (len(vae["block_out_channels"]) - 1)
    assert transformer["in_channels"] == 4 * vae["latent_channels"]
    return ((height // unit) * (width // unit), transformer["in_channels"])


def test_image_arrays_are_the_pil_pixels_without_a_copy(omni):
    out = omni.generate(PROMPT, small(num_images_per_prompt=2), use_tqdm=False)[0]
    assert len(out.image_arrays) == len(out.images) == 2
    for image, arr in zip(out.images, out.image_arrays):
        assert isinstance(image, Image.Image)
        assert arr.dtype == np.uint8 and arr.shape == (64, 64, 3)
        assert is_a_view(arr)
        assert np.array_equal(arr, np.asarray(image))
    assert not np.array_equal(out.image_arrays[0], out.image_arrays[1])  # seed + i
    # The array lives on after the output and the pipeline are gone (the capsule owns it).
    arr = out.image_arrays[0].copy()
    kept = out.image_arrays[0]
    del out
    assert np.array_equal(kept, arr)


def test_np_output_is_diffusers_float_image(omni):
    pil = omni.generate(PROMPT, small(), use_tqdm=False)[0]
    out = omni.generate(PROMPT, small(output_type="np"), use_tqdm=False)[0]
    (image,) = out.images
    assert isinstance(image, np.ndarray)
    assert image.dtype == np.float32 and image.shape == (64, 64, 3)
    assert is_a_view(image)
    assert image.min() >= 0.0 and image.max() <= 1.0
    # diffusers' numpy_to_pil: (image * 255).round() as uint8, the PNG's (and PIL image's) bytes.
    assert np.array_equal((image * 255).round().astype(np.uint8), np.asarray(pil.images[0]))
    assert np.array_equal(out.image_arrays[0], np.asarray(pil.images[0]))


def test_latent_output_skips_the_decoder_and_decodes_to_the_image(omni, tmp_path):
    pil = omni.generate(PROMPT, small(), use_tqdm=False)[0]
    out = omni.generate(PROMPT, small(output_type="latent"), use_tqdm=False)[0]
    assert out.image_arrays == []  # nothing was decoded
    (latents,) = out.images  # diffusers' FluxPipeline puts latents in .images
    assert out.latents[0] is latents
    assert latents.dtype == np.float32 and latents.shape == packed_shape(64, 64) == (256, 16)
    assert is_a_view(latents)
    # The decode-run's latents are the same numbers: the latent run is that run, stopped early.
    assert np.array_equal(latents, pil.latents[0])
    # Decoding them with the pipeline's decoder (FluxCore.decode, the second half of
    # FluxPipeline::generate) gives the pil run's image exactly.
    width, height, rgb8, rgb, _ = omni._flux.decode(latents, 64, 64)
    assert (width, height) == (64, 64)
    assert np.array_equal(np.asarray(rgb8), np.asarray(pil.images[0]))
    with pytest.raises(ValueError, match="holds latents, not images"):
        out.save_images(tmp_path / "x.png")
    with pytest.raises(ValueError, match=r"latents must be \[n_img, 16\]"):
        omni._flux.decode(np.zeros((256, 8), np.float32), 64, 64)
    with pytest.raises(ValueError, match="the latents hold 4096 values; 32x32 needs"):
        omni._flux.decode(latents, 32, 32)


def test_save_images_of_np_output(omni, tmp_path):
    out = omni.generate(PROMPT, small(output_type="np"), use_tqdm=False)[0]
    (name,) = out.save_images(tmp_path / "np.png")
    with Image.open(name) as saved:
        assert np.array_equal(np.asarray(saved), out.image_arrays[0])


def test_unknown_output_type():
    with pytest.raises(ValueError, match="output_type='pt' is not supported"):
        OmniDiffusionSamplingParams(output_type="pt")
