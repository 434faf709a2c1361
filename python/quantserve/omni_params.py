"""OmniDiffusionSamplingParams with vLLM-Omni's names and defaults (vllm_omni/inputs/data.py),
mapped onto the FLUX pipeline's request (src/diffusion/flux_pipeline.h, as `quantserve
generate-image` fills it). A vLLM-Omni parameter the FLUX pipeline cannot honour is a ValueError
naming it when it is set, never silently ignored; values the pipeline checks against the model
(image size, sequence length) are checked by Omni.generate before any image is made."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Optional

_UINT64 = 2**64

# Parameters vLLM-Omni has that the FLUX pipeline does not implement, with the value that means
# "not used". (num_frames 1 and fps None: an image, not a video.)
_UNSUPPORTED = {
    "guidance_scale_2": None,
    "cfg_normalize": False,
    "guidance_rescale": 0.0,
    "num_frames": 1,
    "fps": None,
    "generator": None,
    "latents": None,
    "sigmas": None,
    "timesteps": None,
    "boundary_ratio": None,
    "lora_request": None,
    "lora_scale": 1.0,
    "return_trajectory_latents": False,
    "return_trajectory_decoded": False,
    "return_frames": False,
}


# diffusers' output types: PIL images, float32 numpy images in [0, 1], or the packed latents
# without the VAE decode.
_OUTPUT_TYPES = ("pil", "np", "latent")


def _positive_int(name, value, optional=False):
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    return int(value)


def _finite(name, value, optional=False):
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}.")
    return float(value)


@dataclass
class OmniDiffusionSamplingParams:
    """How to make one prompt's images. Defaults are vLLM-Omni's; those left at None take the
    pipeline's own (diffusers' FluxPipeline): height and width default_sample_size x 8 (1024
    for FLUX.1), guidance 3.5 unless guidance_scale is set (vLLM-Omni's guidance_scale_provided),
    true_cfg_scale 1 (off), max_sequence_length 512. Image i of a prompt uses seed + i (seed
    None: a random one). num_images_per_prompt is diffusers' name for num_outputs_per_prompt.
    true_cfg_scale > 1 with a negative prompt runs true classifier-free guidance."""

    num_inference_steps: int = 50
    guidance_scale: float = 0.0
    guidance_scale_provided: bool = False
    true_cfg_scale: Optional[float] = None
    negative_prompt: Optional[str] = None
    height: Optional[int] = None
    width: Optional[int] = None
    seed: Optional[int] = None
    num_outputs_per_prompt: int = 1
    num_images_per_prompt: Optional[int] = None
    max_sequence_length: Optional[int] = None
    output_type: str = "pil"
    extra_args: dict = field(default_factory=dict)
    guidance_scale_2: Optional[float] = None
    cfg_normalize: bool = False
    guidance_rescale: float = 0.0
    num_frames: int = 1
    fps: Optional[int] = None
    generator: Any = None
    latents: Any = None
    sigmas: Optional[list] = None
    timesteps: Optional[list] = None
    boundary_ratio: Optional[float] = None
    lora_request: Any = None
    lora_scale: float = 1.0
    return_trajectory_latents: bool = False
    return_trajectory_decoded: bool = False
    return_frames: bool = False

    def __post_init__(self):
        if self.num_images_per_prompt is not None:
            if self.num_outputs_per_prompt not in (1, self.num_images_per_prompt):
                raise ValueError(
                    "num_images_per_prompt and num_outputs_per_prompt name the same count; "
                    f"got {self.num_images_per_prompt} and {self.num_outputs_per_prompt}.")
            self.num_outputs_per_prompt = self.num_images_per_prompt
            self.num_images_per_prompt = None
        # As vLLM-Omni's request preparation: a guidance scale that is set counts as given.
        if self.guidance_scale:
            self.guidance_scale_provided = True
        self._check()

    def _check(self):
        """Every check that needs no model; run again by Omni.generate, since a dataclass's
        fields may be changed after it is made."""
        for name, unused in _UNSUPPORTED.items():
            value = getattr(self, name)
            # Compared only as plain values: an array or tensor has no single truth value.
            at_default = value is unused or (
                isinstance(value, (bool, numbers.Number)) and unused is not None and
                value == unused)
            if not at_default:
                raise ValueError(f"{name}={value!r} is not supported by quantserve's FLUX "
                                 "pipeline.")
        if self.extra_args:
            raise ValueError(f"extra_args {sorted(self.extra_args)} are not supported by "
                             "quantserve's FLUX pipeline.")
        if self.output_type not in _OUTPUT_TYPES:
            raise ValueError(f"output_type={self.output_type!r} is not supported: quantserve's "
                             "Omni returns 'pil' images, 'np' arrays or the 'latent' latents.")
        _positive_int("num_inference_steps", self.num_inference_steps)
        _positive_int("num_outputs_per_prompt", self.num_outputs_per_prompt)
        _positive_int("height", self.height, optional=True)
        _positive_int("width", self.width, optional=True)
        _positive_int("max_sequence_length", self.max_sequence_length, optional=True)
        _finite("guidance_scale", self.guidance_scale)
        _finite("true_cfg_scale", self.true_cfg_scale, optional=True)
        if self.negative_prompt is not None and not isinstance(self.negative_prompt, str):
            raise ValueError(f"negative_prompt must be a string, got {self.negative_prompt!r}.")
        if self.seed is not None and (isinstance(self.seed, bool) or
                                      not isinstance(self.seed, numbers.Integral) or
                                      not 0 <= self.seed < _UINT64):
            raise ValueError(f"seed must be an integer in [0, 2**64), got {self.seed!r}.")
