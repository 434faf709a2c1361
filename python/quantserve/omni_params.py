"""OmniDiffusionSamplingParams with vLLM-Omni's names and defaults (vllm_omni/inputs/data.py),
mapped onto quantserve's pipelines' requests: FLUX.1's (src/diffusion/flux_pipeline.h, as
`quantserve generate-image` fills it) and Wan2.2's (src/diffusion/wan_pipeline.h, as `quantserve
generate-video` fills it). A vLLM-Omni parameter the pipeline cannot honour is a ValueError
naming it when it is set, never silently ignored: those no pipeline has when the parameters are
made, those only one family has (video settings on FLUX, true CFG on Wan) when Omni.generate
sees the model. Values the pipeline checks against the model (image size, frame count, sequence
length) are checked by Omni.generate before any image or video is made."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Optional

_UINT64 = 2**64

# Parameters vLLM-Omni has that no quantserve pipeline implements, with the value that means
# "not used".
_UNSUPPORTED = {
    "cfg_normalize": False,
    "guidance_rescale": 0.0,
    "generator": None,
    "latents": None,
    "sigmas": None,
    "timesteps": None,
    "lora_request": None,
    "lora_scale": 1.0,
    "return_trajectory_latents": False,
    "return_trajectory_decoded": False,
    "return_frames": False,
}

# What one family does not implement, with the values that mean "not used". FLUX makes one
# image (num_frames 1), Wan's CFG is guidance_scale (its pipelines have no true_cfg_scale).
_FAMILY_UNSUPPORTED = {
    "flux": {
        "guidance_scale_2": (None,),
        "num_frames": (None, 1),
        "fps": (None,),
        "boundary_ratio": (None,),
    },
    "wan": {
        "true_cfg_scale": (None,),
    },
}
_FAMILY_NAME = {"flux": "FLUX", "wan": "Wan2.2"}

# generate-video's --fps range (vision::VideoWriteOptions).
_MAX_FPS = 240

# diffusers' output types: PIL images, float32 numpy images in [0, 1], or the packed latents
# without the VAE decode.
_OUTPUT_TYPES = ("pil", "np", "latent")


def _positive_int(name, value, optional=False):
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    return int(value)


def _at(value, unused) -> bool:
    """`value` is `unused` (None, or a plain value compared with ==: an array or tensor has no
    single truth value)."""
    return value is unused or (isinstance(value, (bool, numbers.Number)) and unused is not None
                               and value == unused)


def _finite(name, value, optional=False):
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}.")
    return float(value)


@dataclass
class OmniDiffusionSamplingParams:
    """How to make one prompt's images or video. Defaults are vLLM-Omni's; those left at None
    take the pipeline's own. FLUX (diffusers' FluxPipeline): 50 steps, height and width
    default_sample_size x 8 (1024 for FLUX.1), guidance 3.5 unless guidance_scale is set
    (vLLM-Omni's guidance_scale_provided), true_cfg_scale 1 (off), max_sequence_length 512.
    Wan2.2 (`quantserve generate-video`'s defaults): 40 steps, 832 x 480, 81 frames, guidance 5.0
    unless set, guidance_scale_2 = guidance_scale, boundary_ratio from model_index.json (or
    Omni's), the model's fps (A14B 16, TI2V-5B 24), max_sequence_length 512. Image i of a prompt uses seed + i (seed None: a
    random one). num_images_per_prompt is diffusers' name for num_outputs_per_prompt. FLUX:
    true_cfg_scale > 1 with a negative prompt runs true classifier-free guidance; Wan:
    guidance_scale > 1 runs CFG with the negative prompt ("" when none)."""

    num_inference_steps: Optional[int] = None
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
    num_frames: Optional[int] = None
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
            if not _at(value, unused):
                raise ValueError(f"{name}={value!r} is not supported by quantserve's diffusion "
                                 "pipelines.")
        if self.extra_args:
            raise ValueError(f"extra_args {sorted(self.extra_args)} are not supported by "
                             "quantserve's diffusion pipelines.")
        if self.output_type not in _OUTPUT_TYPES:
            raise ValueError(f"output_type={self.output_type!r} is not supported: quantserve's "
                             "Omni returns 'pil' images, 'np' arrays or the 'latent' latents.")
        _positive_int("num_inference_steps", self.num_inference_steps, optional=True)
        _positive_int("num_outputs_per_prompt", self.num_outputs_per_prompt)
        _positive_int("height", self.height, optional=True)
        _positive_int("width", self.width, optional=True)
        _positive_int("num_frames", self.num_frames, optional=True)
        _positive_int("max_sequence_length", self.max_sequence_length, optional=True)
        if _positive_int("fps", self.fps, optional=True) is not None and self.fps > _MAX_FPS:
            raise ValueError(f"fps must be 1 to {_MAX_FPS}, got {self.fps!r}.")
        _finite("guidance_scale", self.guidance_scale)
        _finite("guidance_scale_2", self.guidance_scale_2, optional=True)
        _finite("true_cfg_scale", self.true_cfg_scale, optional=True)
        _finite("boundary_ratio", self.boundary_ratio, optional=True)
        if self.negative_prompt is not None and not isinstance(self.negative_prompt, str):
            raise ValueError(f"negative_prompt must be a string, got {self.negative_prompt!r}.")
        if self.seed is not None and (isinstance(self.seed, bool) or
                                      not isinstance(self.seed, numbers.Integral) or
                                      not 0 <= self.seed < _UINT64):
            raise ValueError(f"seed must be an integer in [0, 2**64), got {self.seed!r}.")

    def _check_for(self, family: str):
        """_check, then what the model's pipeline family ("flux" or "wan") does not do."""
        self._check()
        for name, unused in _FAMILY_UNSUPPORTED[family].items():
            value = getattr(self, name)
            if not any(_at(value, u) for u in unused):
                raise ValueError(f"{name}={value!r} is not supported by quantserve's "
                                 f"{_FAMILY_NAME[family]} pipeline.")
        if family == "wan" and self.num_outputs_per_prompt != 1:
            raise ValueError(
                f"num_outputs_per_prompt={self.num_outputs_per_prompt} is not supported by "
                "quantserve's Wan2.2 pipeline: it makes one video per prompt (pass the prompt "
                "again with another seed for more).")
