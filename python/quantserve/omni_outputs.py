"""OmniRequestOutput with vLLM-Omni's names (vllm_omni/outputs.py): what Omni.generate returns,
one per prompt. A diffusion pipeline's output holds `images` (PIL images); a text model's holds
its vLLM RequestOutput in `request_output`, whose fields it also answers for (`outputs`,
`prompt_token_ids`), as vLLM-Omni's output of a text stage does."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

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
    latents: Any = None
    metrics: dict = field(default_factory=dict)

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
        for image, name in zip(self.images, names):
            image.save(name)
        return names
