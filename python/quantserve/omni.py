"""quantserve.Omni: vLLM-Omni's offline entry point (vllm_omni.entrypoints.omni.Omni) over
quantserve's engines. On a diffusers pipeline directory (model_index.json) it runs the pipeline
its class names: FLUX.1 as `quantserve generate-image` does, Wan2.2 (text or image to video) as
`quantserve generate-video` does, one image or video at a time with the GIL released, and
returns PIL images made from the very bytes those commands write to their PNGs. On a text
checkpoint it delegates to quantserve.LLM."""

from __future__ import annotations

import json
import numbers
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
# default; any other value is a ValueError naming the argument. (mode, model_class_name,
# flow_shift and boundary_ratio are Omni's own on a Wan2.2 pipeline: _wan_options.)
_DIFFUSION_AT_DEFAULT = {
    "parallel_config": None,
    "quantization": None,
    "quantization_config": None,
    "mode": None,
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

# `quantserve generate-video`'s defaults (src/apps/cmd_generate_video.cc), which a Wan2.2
# request takes for every parameter left at None.
_WAN_DEFAULTS = {
    "width": 832,
    "height": 480,
    "num_frames": 81,
    "steps": 40,
    "guidance_scale": 5.0,
    "max_sequence_length": 512,
}
_VIDEO_MODES = ("text-to-video", "image-to-video")


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


def _first_frame(multi_modal_data):
    """The image of a prompt's multi_modal_data as WanCore takes it: a PIL image becomes
    (width, height, RGB bytes) after convert("RGB") (alpha dropped, as diffusers' load_image and
    generate-video's --image do); a path (str or os.PathLike) or the bytes of an encoded image
    are read by the engine as generate-video reads --image."""
    if multi_modal_data is None:
        return None
    if not isinstance(multi_modal_data, dict):
        raise ValueError(f"multi_modal_data must be a dict, got {multi_modal_data!r}.")
    extra = set(multi_modal_data) - {"image"}
    if extra:
        raise ValueError(f"multi_modal_data keys {sorted(extra)} are not supported by "
                         "quantserve's Wan2.2 pipeline (only 'image', the first frame).")
    image = multi_modal_data.get("image")
    if image is None:
        return None
    if isinstance(image, (bytes, bytearray)):
        return bytes(image)
    if isinstance(image, (str, os.PathLike)):
        return os.fspath(image)
    try:
        from PIL import Image
    except ImportError:
        Image = None
    if Image is not None and isinstance(image, Image.Image):
        rgb = image if image.mode == "RGB" else image.convert("RGB")
        return (rgb.width, rgb.height, rgb.tobytes())
    raise ValueError("multi_modal_data['image'] must be a PIL image, a file path or the bytes "
                     f"of an encoded image, got {type(image).__name__}.")


def _video_output(rid, prompt, sp, run, fps, metrics) -> OmniRequestOutput:
    """One prompt's output from WanCore.generate's (width, height, frames, rgb8, rgb, latents).
    vLLM-Omni's video outputs carry the video in `images` (its text_to_video example takes a
    list of frames or one [frames, height, width, 3] array from there and hands it to diffusers'
    export_to_video); here `images` is always a list with one entry per frame: PIL images made
    from generate-video's PNG bytes, float32 [height, width, 3] arrays in [0, 1] for "np" (views
    of one [frames, height, width, 3] buffer), or the one latents array for "latent". `frames`
    is the uint8 video and `image_arrays` its frames, views of the engine's buffer."""
    width, height, n_frames, rgb8, rgb, latents = run
    np = _numpy(sp.output_type)
    frames = np.asarray(rgb8) if np is not None and rgb8 is not None else None
    z = [np.asarray(latents)] if np is not None else None
    if sp.output_type == "pil":
        # One frame's bytes at a time out of the flat view: PIL copies each.
        flat = memoryview(rgb8).cast("B")
        size = width * height * 3
        images = [_image_from_rgb8(width, height, flat[i * size:(i + 1) * size])
                  for i in range(n_frames)]
    elif sp.output_type == "np":
        images = list(np.asarray(rgb))
    else:  # "latent": the final latents [z_dim, T, h, w], as diffusers' output_type="latent"
        images = list(z)
    return OmniRequestOutput(request_id=rid, final_output_type="video", images=images,
                             prompt=prompt, latents=z, metrics=metrics,
                             image_arrays=list(frames) if frames is not None else [],
                             frames=frames, fps=fps, _video_rgb8=rgb8)


class Omni:
    """A model loaded for offline generation, with vLLM-Omni's names.

    model: a diffusers pipeline directory (model_index.json naming FluxPipeline, WanPipeline or
    WanImageToVideoPipeline), a text checkpoint directory, or a Hugging Face repo id of either
    found offline in the hub cache (at `revision`). threads: worker threads (None: one per
    core). On a Wan2.2 pipeline, mode ("text-to-video" or "image-to-video"; None: what the
    pipeline does), flow_shift (None: scheduler_config.json's) and boundary_ratio (None:
    model_index.json's) are generate-video's --flow-shift and --boundary-ratio for every
    request. For a text checkpoint every other keyword goes to quantserve.LLM."""

    def __init__(self, model: Optional[str] = None, *, revision: Optional[str] = None,
                 threads: Optional[int] = None, **kwargs: Any):
        if model is None:
            raise ValueError("Omni needs model=: a pipeline or checkpoint directory, or a "
                             "repo id in the Hugging Face cache.")
        model = os.fspath(model)
        self.model = model
        self._flux = None
        self._wan = None
        self._llm = None
        self._next_id = 0
        directory = _core.resolve_model_dir(model, revision or "")
        if not os.path.isfile(os.path.join(directory, "model_index.json")):
            self._llm = LLM(model, revision=revision, threads=threads, **kwargs)
            return
        family = _core.pipeline_family(directory)
        if family == "wan":
            kwargs = self._wan_options(directory, kwargs)
        for name, value in kwargs.items():
            if name in _DIFFUSION_IGNORED:
                continue
            if name not in _DIFFUSION_AT_DEFAULT:
                raise TypeError(f"Omni got an unexpected keyword argument '{name}'")
            if value != _DIFFUSION_AT_DEFAULT[name] and not (
                    name == "model_class_name" and value == "FluxPipeline") and not (
                    name == "mode" and value == "text-to-image"):
                raise ValueError(f"{name}={value!r} is not supported by quantserve's FLUX "
                                 "pipeline.")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                    or threads < 1):
            raise ValueError(f"threads must be a positive integer, got {threads!r}.")
        if family == "wan":
            self._wan = _core.WanCore.load(model=model, revision=revision or "",
                                           threads=threads or 0)
            self._check_mode()
        else:
            self._flux = _core.FluxCore.load(model=model, revision=revision or "",
                                             threads=threads or 0)

    def _wan_options(self, directory, kwargs) -> dict:
        """Takes the keywords a Wan2.2 pipeline gives a meaning to out of `kwargs` (the rest
        are checked as for FLUX) into self._mode, self._flow_shift, self._boundary_ratio."""
        kwargs = dict(kwargs)
        with open(os.path.join(directory, "model_index.json"), encoding="utf-8") as f:
            class_name = json.load(f).get("_class_name")
        mode = kwargs.pop("mode", None)
        if mode is not None and mode not in _VIDEO_MODES:
            raise ValueError(f"mode={mode!r} cannot run on {class_name} (Wan2.2), which makes "
                             "videos: use mode 'text-to-video' or 'image-to-video', or leave it "
                             "unset.")
        named = kwargs.pop("model_class_name", None)
        if named is not None and named != class_name:
            raise ValueError(f"model_class_name={named!r}, but {directory}/model_index.json "
                             f"names {class_name}.")
        self._mode = mode
        self._class_name = class_name
        for name in ("flow_shift", "boundary_ratio"):
            value = kwargs.pop(name, None)
            if value is not None and (isinstance(value, bool) or
                                      not isinstance(value, numbers.Real)):
                raise ValueError(f"{name} must be a number, got {value!r}.")
            setattr(self, "_" + name, None if value is None else float(value))
        return kwargs

    def _check_mode(self):
        """mode against what the loaded pipeline can do (I2V-A14B needs an image, T2V-A14B
        takes none)."""
        if self._mode == "text-to-video" and self._wan.needs_image:
            raise ValueError(f"mode='text-to-video' cannot run on {self._class_name}: it is an "
                             "image-to-video pipeline (every prompt needs "
                             "multi_modal_data={'image': ...}).")
        if self._mode == "image-to-video" and not self._wan.takes_image:
            raise ValueError(f"mode='image-to-video' cannot run on {self._class_name}: it is a "
                             "text-to-video pipeline and takes no image.")

    # ----- public API -------------------------------------------------------------------

    def generate(self, prompts, sampling_params_list=None, *, use_tqdm: Union[bool, Any] = True
                 ) -> list[OmniRequestOutput]:
        """One OmniRequestOutput per prompt, in prompt order. prompts: a string, a dict
        {"prompt": str, "negative_prompt": str}, or a list of those; for a Wan2.2 pipeline the
        dict may also hold multi_modal_data={"image": PIL image, path or encoded bytes} (the
        first frame of image to video) and modalities=["video"]. sampling_params_list: one
        OmniDiffusionSamplingParams for every prompt, a list holding one (vLLM-Omni's per-stage
        list of a one-stage pipeline), or a list with one per prompt; None: the defaults. A
        text model takes SamplingParams instead, as LLM.generate."""
        if self._llm is None and self._flux is None and self._wan is None:
            raise ValueError("this Omni has been closed.")
        if self._llm is not None:
            return self._generate_text(prompts, sampling_params_list, use_tqdm)
        if self._wan is not None:
            return self._generate_video(prompts, sampling_params_list, use_tqdm)
        parsed = self._parse_prompts(prompts, video=False)
        params = self._params_for(parsed, sampling_params_list)
        # Every request is checked before the first image is made.
        requests = [self._request(p, sp) for p, sp in zip(parsed, params)]
        for (r, _), sp in zip(requests, params):
            self._flux.validate(**r)
            _numpy(sp.output_type)
        outputs = []
        with _progress(use_tqdm, len(requests)) as bar:
            for (prompt, _, _), sp, (r, seed) in zip(parsed, params, requests):
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

    def _generate_video(self, prompts, sampling_params_list, use_tqdm):
        parsed = self._parse_prompts(prompts, video=True)
        params = self._params_for(parsed, sampling_params_list)
        # Every request (its image prepared) is checked before the first video is made.
        requests = [self._video_request(i, p, sp)
                    for i, (p, sp) in enumerate(zip(parsed, params))]
        for (r, image, _), sp in zip(requests, params):
            self._wan.validate(**r, image=image)
            _numpy(sp.output_type)
        outputs = []
        with _progress(use_tqdm, len(requests)) as bar:
            for (prompt, _, _), sp, (r, image, seed) in zip(parsed, params, requests):
                rid = str(self._next_id)
                self._next_id += 1
                t0 = time.perf_counter()
                run = self._wan.generate(**r, seed=seed, image=image,
                                         output_type=sp.output_type)
                metrics = {"generation_time_s": time.perf_counter() - t0, "seed": seed}
                fps = self._wan.default_fps if sp.fps is None else sp.fps
                outputs.append(_video_output(rid, prompt, sp, run, fps, metrics))
                bar.update(1)
        return outputs

    def close(self) -> None:
        """Frees the model now; the Omni cannot generate after this."""
        self._flux = None
        self._wan = None
        self._llm = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ----- diffusion requests -----------------------------------------------------------

    @staticmethod
    def _parse_prompts(prompts, video: bool) -> list[tuple[str, Optional[str], Any]]:
        """(prompt, negative prompt or None, first frame or None) for each prompt. Only a video
        pipeline takes vLLM-Omni's multi_modal_data={"image": ...} (and its example's
        modalities=["video"])."""
        if isinstance(prompts, (str, dict)):
            prompts = [prompts]
        if not isinstance(prompts, Sequence) or len(prompts) == 0:
            raise ValueError("prompts must be a string, a prompt dict, or a non-empty list of "
                             "them.")
        keys = {"prompt", "negative_prompt"}
        if video:
            keys |= {"multi_modal_data", "modalities"}
        pipeline = "Wan2.2" if video else "FLUX"
        parsed = []
        for p in prompts:
            if isinstance(p, str):
                parsed.append((p, None, None))
                continue
            if not isinstance(p, dict) or not isinstance(p.get("prompt"), str):
                raise ValueError("a prompt must be a string or {'prompt': str, "
                                 f"'negative_prompt': str}}, got {p!r}.")
            extra = set(p) - keys
            if extra:
                raise ValueError(f"prompt keys {sorted(extra)} are not supported by "
                                 f"quantserve's {pipeline} pipeline (only "
                                 f"{', '.join(repr(k) for k in sorted(keys))}).")
            negative = p.get("negative_prompt")
            if negative is not None and not isinstance(negative, str):
                raise ValueError(f"negative_prompt must be a string, got {negative!r}.")
            modalities = p.get("modalities")
            if modalities is not None and list(modalities) != ["video"]:
                raise ValueError(f"modalities={modalities!r}: a Wan2.2 pipeline makes "
                                 "['video'].")
            parsed.append((p["prompt"], negative, _first_frame(p.get("multi_modal_data"))))
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
        sp._check_for("flux")
        text, negative, _ = prompt
        if negative is None:
            negative = sp.negative_prompt or ""
        size = self._flux.default_size
        request = {
            "prompt": text,
            "negative_prompt": negative,
            "width": sp.width or size,
            "height": sp.height or size,
            # vLLM-Omni's default.
            "steps": sp.num_inference_steps or 50,
            # diffusers' FluxPipeline default, unless the caller gave one (vLLM-Omni's rule).
            "guidance_scale": sp.guidance_scale if sp.guidance_scale_provided else 3.5,
            "true_cfg_scale": 1.0 if sp.true_cfg_scale is None else sp.true_cfg_scale,
            "max_sequence_length": sp.max_sequence_length or 512,
        }
        return request, secrets.randbits(64) if sp.seed is None else sp.seed

    def _video_request(self, index, prompt, sp: OmniDiffusionSamplingParams):
        """generate-video's request (cmd_generate_video.cc) for one prompt, every default filled
        in: the keyword arguments of WanCore.validate, the first frame, and the seed."""
        sp._check_for("wan")
        text, negative, image = prompt
        if negative is None:
            negative = sp.negative_prompt or ""
        if image is None and self._mode == "image-to-video":
            raise ValueError(f"prompt {index} has no image: with mode='image-to-video' every "
                             "prompt needs multi_modal_data={'image': ...}.")
        d = _WAN_DEFAULTS
        request = {
            "prompt": text,
            "negative_prompt": negative,
            "width": sp.width or d["width"],
            "height": sp.height or d["height"],
            "num_frames": sp.num_frames or d["num_frames"],
            "steps": sp.num_inference_steps or d["steps"],
            "guidance_scale": sp.guidance_scale if sp.guidance_scale_provided else
                              d["guidance_scale"],
            "guidance_scale_2": sp.guidance_scale_2,
            "boundary_ratio": self._boundary_ratio if sp.boundary_ratio is None else
                              sp.boundary_ratio,
            "flow_shift": self._flow_shift,
            "max_sequence_length": sp.max_sequence_length or d["max_sequence_length"],
        }
        return request, image, secrets.randbits(64) if sp.seed is None else sp.seed

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
