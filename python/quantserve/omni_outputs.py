"""OmniRequestOutput with vLLM-Omni's names (vllm_omni/outputs.py): what Omni.generate returns,
one per prompt. A diffusion pipeline's output holds `images` (PIL images, or numpy arrays for
output_type "np" and "latent") and, with numpy installed, `image_arrays` (the pixels as uint8
numpy arrays) and `latents`, each a view of the engine's buffer. A video (final_output_type
"video", Wan2.2) holds its frames in `images`, one per frame as vLLM-Omni's video stages put
them, and with numpy also as one uint8 [frames, height, width, 3] array, `frames`;
`save_video` writes the MP4 `quantserve generate-video` writes. A text model's output holds its
vLLM RequestOutput in `request_output`, whose fields it also answers for (`outputs`,
`prompt_token_ids`), as vLLM-Omni's output of a text stage does."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

from . import _core
from .outputs import RequestOutput


@dataclass
class OmniRequestOutput:
    request_id: str = ""
    finished: bool = True
    stage_id: Optional[int] = None
    final_output_type: str = "text"
    request_output: Optional[RequestOutput] = None
    images: list = field(default_factory=list)
    prompt: Optional[str] = None
    # A list with one float32 [n_img, channels] array (the final packed latents) per image.
    latents: Any = None
    metrics: dict = field(default_factory=dict)
    # One uint8 [height, width, 3] array per image (per frame of a video): the pixels of
    # `images`, without a copy.
    image_arrays: list = field(default_factory=list)
    # A video's frames, uint8 [frames, height, width, 3] (a view of the engine's buffer, which
    # image_arrays slice), and the frame rate save_video writes by default.
    frames: Any = None
    fps: Optional[int] = None
    # The same frames as a memoryview, so that save_video works without numpy.
    _video_rgb8: Any = field(default=None, repr=False, compare=False)

    @property
    def outputs(self):
        return self.request_output.outputs if self.request_output is not None else []

    @property
    def prompt_token_ids(self):
        return self.request_output.prompt_token_ids if self.request_output is not None else None

    def save_images(self, path) -> list[str]:
        """Writes the images as PNG files and returns their paths. `path` a directory (or a
        name without a suffix, made as one): <request_id>_<i>.png in it. `path` a file name:
        that file for a single image, <stem>_<i><suffix> beside it for several."""
        if not self.images:
            raise ValueError(f"request {self.request_id} has no images to save "
                             f"(final_output_type={self.final_output_type!r}).")
        pixels = self._pixels()
        path = os.fspath(path)
        stem, suffix = os.path.splitext(path)
        if os.path.isdir(path) or not suffix:
            os.makedirs(path, exist_ok=True)
            names = [os.path.join(path, f"{self.request_id}_{i}.png")
                     for i in range(len(self.images))]
        elif len(self.images) == 1:
            names = [path]
        else:
            names = [f"{stem}_{i}{suffix}" for i in range(len(self.images))]
        for image, rgb8, name in zip(self.images, pixels, names):
            if hasattr(image, "save"):
                image.save(name)
            else:
                from PIL import Image
                Image.fromarray(rgb8).save(name)
        return names

    def save_video(self, path, fps: Optional[int] = None) -> str:
        """Writes the video as an MP4 file, the one `quantserve generate-video --out` writes
        for the same frames (H.264 yuv420p, crf 18, BT.709-tagged: the same encoder call), at
        `fps` frames per second (None: the request's fps, generate-video's 16 by default),
        through the same function (vision::write_mp4: written beside `path` and renamed into
        place, so a failure leaves no file). Returns the path."""
        if self._video_rgb8 is None:
            raise ValueError(f"request {self.request_id} has no video to save "
                             f"(final_output_type={self.final_output_type!r}; a video run with "
                             "output_type 'latent' decodes nothing).")
        fps = self.fps if fps is None else fps
        if isinstance(fps, bool) or not isinstance(fps, int):
            raise ValueError(f"fps must be an integer, got {fps!r}.")
        path = os.fspath(path)
        _core.write_mp4(path, self._video_rgb8, fps=fps)
        return path

    def _pixels(self):
        """The uint8 arrays behind `images` (output_type "np"); PIL images need none."""
        if self.image_arrays:
            return self.image_arrays
        if self.images and not hasattr(self.images[0], "save"):
            raise ValueError(f"request {self.request_id} holds latents, not images: decode them "
                             "or generate with output_type 'pil' or 'np'.")
        return [None] * len(self.images)
