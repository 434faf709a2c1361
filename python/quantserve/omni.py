"""quantserve.Omni: vLLM-Omni's offline entry point (vllm_omni.entrypoints.omni.Omni) over
quantserve's engines. On a diffusers pipeline directory (model_index.json; today FLUX.1) it
runs the FLUX pipeline of `quantserve generate-image`, one image at a time with the GIL
released, and returns PIL images made from the very bytes that command writes to its PNG. On
a text checkpoint it delegates to quantserve.LLM."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Sequence
from typing import Any, Optional, Union

from . import _core
from .llm import LLM, _progress
from .omni_outputs import OmniRequestOutput
from .omni_params import OmniDiffusionSamplingParams
from .sampling_params import SamplingParams

# vLLM-Omni constructor arguments that change nothing on quantserve's CPU pipeline at their
# default; any other value is a ValueError naming the argument.
_DIFFUSION_AT_DEFAULT = {
    "parallel_config": None,
    "quantization": None,
    "quantization_config": None,
    "mode": "text-to-image",
    "enable_cpu_offload": False,
    "enable_layerwise_offload": False,
    "vae_use_slicing": False,
    "vae_use_tiling": False,
    "step_execution": False,
    "diffusion_load_format": "default",
    "model_class_name": None,
    "flow_shift": None,
    "boundary_ratio": None,
    "cache_backend": None,
    "cache_config": None,
}
# Accepted whatever their value: no graphs are captured, no checkpoint code runs, no stats.
_DIFFUSION_IGNORED = {"enforce_eager", "trust_remote_code", "log_stats", "disable_log_stats"}


def _image_from_rgb8(width: int, height: int, data):
    """A PIL image of `data`, uint8 RGB [height, width, 3] (a buffer; PIL copies it)."""
    try:
        from PIL import Image
    except ImportError as e:
        raise ImportError("quantserve.Omni returns PIL images: pip install pillow") from e
    return Image.frombytes("RGB", (width, height), data)


def _numpy(output_type: str):
    """numpy, or None when it is not installed and `output_type` does not need it."""
    try:
        import numpy
    except ImportError as e:
        if output_type == "pil":
            return None
        raise ImportError(f"output_type={output_type!r} returns numpy arrays: pip install "
                          "numpy") from e
    return numpy


def _image_output(rid, prompt, sp, runs, metrics) -> OmniRequestOutput:
    """One prompt's output from FluxCore.generate's (width, height, rgb8, rgb, latents) per
    image. Every array is a numpy view of the engine's buffer (np.asarray of the memoryview
    FluxCore hands over: no copy); PIL images are made from the same uint8 pixels."""
    np = _numpy(sp.output_type)
    decoded = runs[0][2] is not None
    image_arrays = [np.asarray(rgb8) for _, _, rgb8, _, _ in runs] if np and decoded else []
    latents = [np.asarray(z) for *_, z in runs] if np else None
    if sp.output_type == "pil":
        images = [_image_from_rgb8(w, h, rgb8) for w, h, rgb8, _, _ in runs]
    elif sp.output_type == "np":
        images = [np.asarray(rgb) for _, _, _, rgb, _ in runs]
    else:  # "latent": as diffusers' FluxPipeline, the images are the packed latents
        images = list(latents)
    return OmniRequestOutput(request_id=rid, final_output_type="image", images=images,
                             prompt=prompt, latents=latents, metrics=metrics,
                             image_arrays=image_arrays)


class Omni:
    """A model loaded for offline generation, with vLLM-Omni's names.

    model: a diffusers pipeline directory (model_index.json naming FluxPipeline), a text
    checkpoint directory, or a Hugging Face repo id of either found offline in the hub cache
    (at `revision`). threads: worker threads (None: one per core). For a text checkpoint every
    other keyword goes to quantserve.LLM."""

    def __init__(self, model: Optional[str] = None, *, revision: Optional[str] = None,
                 threads: Optional[int] = None, **kwargs: Any):
        if model is None:
            raise ValueError("Omni needs model=: a pipeline or checkpoint directory, or a "
                             "repo id in the Hugging Face cache.")
        model = os.fspath(model)
        self.model = model
        self._flux = None
        self._llm = None
        self._next_id = 0
        directory = _core.resolve_model_dir(model, revision or "")
        if not os.path.isfile(os.path.join(directory, "model_index.json")):
            self._llm = LLM(model, revision=revision, threads=threads, **kwargs)
            return
        for name, value in kwargs.items():
            if name in _DIFFUSION_IGNORED:
                continue
            if name not in _DIFFUSION_AT_DEFAULT:
                raise TypeError(f"Omni got an unexpected keyword argument '{name}'")
            if value != _DIFFUSION_AT_DEFAULT[name] and not (
                    name == "model_class_name" and value == "FluxPipeline"):
                raise ValueError(f"{name}={value!r} is not supported by quantserve's FLUX "
                                 "pipeline.")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                    or threads < 1):
            raise ValueError(f"threads must be a positive integer, got {threads!r}.")
        self._flux = _core.FluxCore.load(model=model, revision=revision or "",
                                         threads=threads or 0)

    # ----- public API -------------------------------------------------------------------

    def generate(self, prompts, sampling_params_list=None, *, use_tqdm: Union[bool, Any] = True
                 ) -> list[OmniRequestOutput]:
        """One OmniRequestOutput per prompt, in prompt order. prompts: a string, a dict
        {"prompt": str, "negative_prompt": str}, or a list of those. sampling_params_list: one
        OmniDiffusionSamplingParams for every prompt, a list holding one (vLLM-Omni's per-stage
        list of a one-stage pipeline), or a list with one per prompt; None: the defaults. A
        text model takes SamplingParams instead, as LLM.generate."""
        if self._llm is None and self._flux is None:
            raise ValueError("this Omni has been closed.")
        if self._llm is not None:
            return self._generate_text(prompts, sampling_params_list, use_tqdm)
        parsed = self._parse_prompts(prompts)
        params = self._params_for(parsed, sampling_params_list)
        # Every request is checked before the first image is made.
        requests = [self._request(p, sp) for p, sp in zip(parsed, params)]
        for (r, _), sp in zip(requests, params):
            self._flux.validate(**r)
            _numpy(sp.output_type)
        outputs = []
        with _progress(use_tqdm, len(requests)) as bar:
            for (prompt, _), sp, (r, seed) in zip(parsed, params, requests):
                rid = str(self._next_id)
                self._next_id += 1
                t0 = time.perf_counter()
                # As the server's n: image i uses seed + i.
                runs = [self._flux.generate(**r, seed=(seed + i) % 2**64,
                                            output_type=sp.output_type)
                        for i in range(sp.num_outputs_per_prompt)]
                metrics = {"generation_time_s": time.perf_counter() - t0, "seed": seed}
                outputs.append(_image_output(rid, prompt, sp, runs, metrics))
                bar.update(1)
        return outputs

    def close(self) -> None:
        """Frees the model now; the Omni cannot generate after this."""
        self._flux = None
        self._llm = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ----- diffusion requests -----------------------------------------------------------

    @staticmethod
    def _parse_prompts(prompts) -> list[tuple[str, Optional[str]]]:
        """(prompt, negative prompt or None) for each prompt."""
        if isinstance(prompts, (str, dict)):
            prompts = [prompts]
        if not isinstance(prompts, Sequence) or len(prompts) == 0:
            raise ValueError("prompts must be a string, a prompt dict, or a non-empty list of "
                             "them.")
        parsed = []
        for p in prompts:
            if isinstance(p, str):
                parsed.append((p, None))
                continue
            if not isinstance(p, dict) or not isinstance(p.get("prompt"), str):
                raise ValueError("a prompt must be a string or {'prompt': str, "
                                 f"'negative_prompt': str}}, got {p!r}.")
            extra = set(p) - {"prompt", "negative_prompt"}
            if extra:
                raise ValueError(f"prompt keys {sorted(extra)} are not supported by "
                                 "quantserve's FLUX pipeline (only 'prompt' and "
                                 "'negative_prompt').")
            negative = p.get("negative_prompt")
            if negative is not None and not isinstance(negative, str):
                raise ValueError(f"negative_prompt must be a string, got {negative!r}.")
            parsed.append((p["prompt"], negative))
        return parsed

    @staticmethod
    def _params_for(prompts, sampling_params_list) -> list[OmniDiffusionSamplingParams]:
        if sampling_params_list is None:
            return [OmniDiffusionSamplingParams()] * len(prompts)
        if isinstance(sampling_params_list, OmniDiffusionSamplingParams):
            return [sampling_params_list] * len(prompts)
        if isinstance(sampling_params_list, SamplingParams) or (
                isinstance(sampling_params_list, Sequence) and
                any(isinstance(s, SamplingParams) for s in sampling_params_list)):
            raise ValueError("a diffusion pipeline takes OmniDiffusionSamplingParams, not "
                             "SamplingParams.")
        if not isinstance(sampling_params_list, Sequence) or not sampling_params_list or not all(
                isinstance(s, OmniDiffusionSamplingParams) for s in sampling_params_list):
            raise ValueError("sampling_params_list must be an OmniDiffusionSamplingParams or a "
                             "list of them.")
        if len(sampling_params_list) == 1:
            return list(sampling_params_list) * len(prompts)
        if len(sampling_params_list) != len(prompts):
            raise ValueError("sampling_params_list must hold one OmniDiffusionSamplingParams, "
                             "or one per prompt.")
        return list(sampling_params_list)

    def _request(self, prompt, sp: OmniDiffusionSamplingParams) -> tuple[dict, int]:
        """generate-image's request (cmd_generate_image.cc) for one prompt, every default
        filled in: the keyword arguments of FluxCore.validate, and the seed."""
        sp._check()
        text, negative = prompt
        if negative is None:
            negative = sp.negative_prompt or ""
        size = self._flux.default_size
        request = {
            "prompt": text,
            "negative_prompt": negative,
            "width": sp.width or size,
            "height": sp.height or size,
            "steps": sp.num_inference_steps,
            # diffusers' FluxPipeline default, unless the caller gave one (vLLM-Omni's rule).
            "guidance_scale": sp.guidance_scale if sp.guidance_scale_provided else 3.5,
            "true_cfg_scale": 1.0 if sp.true_cfg_scale is None else sp.true_cfg_scale,
            "max_sequence_length": sp.max_sequence_length or 512,
        }
        return request, secrets.randbits(64) if sp.seed is None else sp.seed

    # ----- text models ------------------------------------------------------------------

    def _generate_text(self, prompts, sampling_params_list, use_tqdm):
        params = sampling_params_list
        if isinstance(params, OmniDiffusionSamplingParams) or (
                isinstance(params, Sequence) and
                any(isinstance(s, OmniDiffusionSamplingParams) for s in params)):
            raise ValueError(f"{self.model} is a text model: it takes SamplingParams, not "
                             "OmniDiffusionSamplingParams.")
        if isinstance(params, Sequence) and len(params) == 1:
            params = params[0]  # vLLM-Omni's per-stage list of a one-stage model
        outputs = self._llm.generate(prompts, params, use_tqdm=use_tqdm)
        return [OmniRequestOutput(request_id=o.request_id, stage_id=0, final_output_type="text",
                                  request_output=o, prompt=o.prompt) for o in outputs]
