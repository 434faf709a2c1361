"""quantserve.evaluate: the `quantserve eval` run from Python, returning the figures that
`quantserve eval --json` writes, as a dict."""

from __future__ import annotations

import json
import numbers
import os
from typing import Optional, Union

from . import _core

PathLike = Union[str, os.PathLike]


def _count(name, value):
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer or None, got {value!r}.")
    return int(value)


def evaluate(model: PathLike, reference: Optional[PathLike] = None, dataset: Optional[PathLike] =
             None, seqlen: Optional[int] = None, max_tokens: Optional[int] = None,
             threads: Optional[int] = None, quantization: Optional[str] = None,
             kv_cache_dtype: str = "auto", reference_kv_cache_dtype: str = "auto",
             revision: Optional[str] = None) -> dict:
    """Perplexity of `model` over held-out text and, with `reference` (typically the
    unquantized source), KL divergence, top-1 agreement and logit error against it on the
    same tokens. dataset: .txt or .jsonl with "text" (None: the shipped WikiText-2 test
    excerpt); seqlen: tokens per window (None: min(2048, the models' context)); max_tokens:
    use at most this many tokens of the text (None: all). The dict has the keys of
    `quantserve eval --json` (model, dataset, ppl, nll_mean, kl_mean, top1_agreement, ...).
    The activations of quantized linears follow QS_ACTIVATION_PRECISION, as the command's
    default does. Runs with the GIL released."""
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or
                                threads < 1):
        raise ValueError(f"threads must be a positive integer, got {threads!r}.")
    text = _core.run_eval(
        model=os.fspath(model),
        reference=os.fspath(reference) if reference is not None else "",
        revision=revision or "",
        dataset=os.fspath(dataset) if dataset is not None else "",
        seqlen=_count("seqlen", seqlen),
        max_tokens=_count("max_tokens", max_tokens),
        threads=threads,
        quantization=quantization or "",
        kv_cache_dtype=kv_cache_dtype,
        reference_kv_cache_dtype=reference_kv_cache_dtype,
    )
    return json.loads(text)
