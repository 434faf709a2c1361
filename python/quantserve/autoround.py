"""quantserve.AutoRound: auto-round's Python entry point (auto_round.AutoRound) over the
quantizer of `quantserve quantize`. The constructor takes auto-round's argument names and
turns them into the options the command builds from the same flags; quantize_and_save runs
the same C++ pipeline with them, so its checkpoint has the command's bytes. The run releases
the GIL; Ctrl-C stops it between tensors and blocks and leaves the output location as it
was."""

from __future__ import annotations

import json
import numbers
import os
from typing import Any, Optional, Union

from . import _core

# auto-round arguments that mean nothing on quantserve's CPU quantizer: accepted at any value
# (quantserve's runs are deterministic, on the one device there is).
_IGNORED = {"device", "enable_deterministic_algorithms", "disable_deterministic_algorithms"}
# auto-round arguments quantserve does not implement, with the value that means "not used".
_UNSUPPORTED = {
    "tokenizer": None,
    "act_bits": None,
    "data_type": None,
    "super_bits": None,
    "super_group_size": None,
    "enable_alg_ext": False,
    "enable_adam": False,
    "extra_config": None,
    "enable_minmax_tuning": True,
    "enable_norm_bias_tuning": False,
    "enable_quanted_input": True,
    "not_use_best_mse": False,
    "dynamic_max_gap": -1,
    "scale_dtype": None,
    "to_quant_block_names": None,
    "fp_layers": None,
    "ignore_layers": None,
    "iters_per_block": None,
}


def _int(name, value, lo, optional=False):
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {value!r}.")
    return int(value)


def _float(name, value):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r}.")
    return float(value)


class AutoRound:
    """Quantizes a checkpoint with auto-round's algorithms (AutoRound SignRound tuning for
    iters > 0, OPT-RTN for iters 0, plain RTN with disable_opt_rtn=True), with auto-round's
    argument names and defaults.

    model: a checkpoint directory (an LLM, a multimodal thinker, Whisper, or a diffusers
    pipeline) or a Hugging Face repo id found offline in the hub cache (at `revision`); not a
    loaded model object. scheme: W4A16, W8A16, W3A16, W2A16 (int, group 128, sym), or one of
    llm-compressor's RTN presets W8A8, FP8_DYNAMIC, FP8_BLOCK; bits, group_size and sym
    override the scheme. iters None: 200 (0 for the RTN presets). dataset: a .txt (one document
    per line) or .jsonl file (None: the shipped calibration text). layer_config: {name or
    pattern: scheme string or {"bits", "group_size", "sym", "data_type"}}. lr and minmax_lr
    None: 1/iters as auto-round. threads: worker threads (None: one per core)."""

    def __init__(
        self,
        model: Union[str, os.PathLike],
        tokenizer: Any = None,
        platform: str = "hf",
        scheme: str = "W4A16",
        layer_config: Optional[Union[dict, str]] = None,
        dataset: Optional[str] = None,
        iters: Optional[int] = None,
        seqlen: int = 2048,
        nsamples: int = 128,
        batch_size: int = 8,
        gradient_accumulate_steps: int = 1,
        low_gpu_mem_usage: bool = False,
        device_map: Any = 0,
        enable_torch_compile: bool = False,
        seed: int = 42,
        enable_adam: bool = False,
        extra_config: Any = None,
        enable_alg_ext: bool = False,
        disable_opt_rtn: Optional[bool] = None,
        low_cpu_mem_usage: bool = True,
        *,
        bits: Optional[int] = None,
        group_size: Optional[int] = None,
        sym: Optional[bool] = None,
        lr: Optional[float] = None,
        minmax_lr: Optional[float] = None,
        amp: bool = True,
        quant_lm_head: bool = False,
        threads: Optional[int] = None,
        revision: Optional[str] = None,
        **kwargs: Any,
    ):
        # Placement and memory knobs of a GPU run: nothing to place on a CPU.
        del low_gpu_mem_usage, device_map, enable_torch_compile, low_cpu_mem_usage
        if platform != "hf":
            raise ValueError(f"platform={platform!r} is not supported: quantserve reads local "
                             "checkpoints and the Hugging Face cache (platform='hf').")
        kwargs.update(enable_adam=enable_adam, extra_config=extra_config,
                      enable_alg_ext=enable_alg_ext)
        if disable_opt_rtn is None:  # auto-round: OPT-RTN for iters 0
            disable_opt_rtn = False
        kwargs["tokenizer"] = tokenizer
        for name, value in kwargs.items():
            if name in _IGNORED:
                continue
            if name not in _UNSUPPORTED:
                raise TypeError(f"AutoRound got an unexpected keyword argument '{name}'")
            if value is not _UNSUPPORTED[name] and value != _UNSUPPORTED[name]:
                raise ValueError(f"{name}={value!r} is not supported by quantserve's AutoRound.")
        if not isinstance(model, (str, os.PathLike)):
            raise ValueError("model must be a checkpoint directory or a repo id in the Hugging "
                             f"Face cache; quantserve does not take a loaded model "
                             f"({type(model).__name__}).")
        if not isinstance(scheme, str):
            raise ValueError(f"scheme must be a preset name such as 'W4A16', got {scheme!r}.")
        if sym is not None and not isinstance(sym, bool):
            raise ValueError(f"sym must be True, False or None, got {sym!r}.")
        for name, flag in (("amp", amp), ("disable_opt_rtn", disable_opt_rtn),
                           ("quant_lm_head", quant_lm_head)):
            if not isinstance(flag, bool):
                raise ValueError(f"{name} must be True or False, got {flag!r}.")
        if isinstance(layer_config, dict):
            layer_config = json.dumps(layer_config)
        elif layer_config is not None and not isinstance(layer_config, (str, os.PathLike)):
            raise ValueError("layer_config must be a dict, or a JSON file's path.")
        if seed is None or isinstance(seed, bool) or not isinstance(seed, numbers.Integral) \
                or not 0 <= seed < 2**64:
            raise ValueError(f"seed must be an integer in [0, 2**64), got {seed!r}.")
        self._setup = _core.QuantizeSetup.create(
            model=os.fspath(model),
            revision=revision or "",
            scheme=scheme,
            bits=_int("bits", bits, 1, optional=True),
            group_size=_int("group_size", group_size, -1, optional=True),
            sym=sym,
            iters=_int("iters", iters, 0, optional=True),
            nsamples=_int("nsamples", nsamples, 0),
            seqlen=_int("seqlen", seqlen, 0),
            batch_size=_int("batch_size", batch_size, 0),
            gradient_accumulate_steps=_int("gradient_accumulate_steps",
                                           gradient_accumulate_steps, 0),
            seed=int(seed),
            lr=_float("lr", lr),
            minmax_lr=_float("minmax_lr", minmax_lr),
            threads=_int("threads", threads, 1, optional=True),
            dataset=os.fspath(dataset) if dataset is not None else "",
            layer_config=os.fspath(layer_config) if layer_config is not None else None,
            quant_lm_head=quant_lm_head,
            disable_opt_rtn=disable_opt_rtn,
            disable_amp=not amp,
        )
        self.model = os.fspath(model)
        self.scheme = scheme
        # What the last quantize_and_save did: the numbers the command prints as its summary.
        self.summary: Optional[dict] = None

    @property
    def bits(self) -> int:
        return self._setup.bits

    @property
    def group_size(self) -> int:
        return self._setup.group_size

    @property
    def sym(self) -> bool:
        return self._setup.sym

    @property
    def iters(self) -> int:
        return self._setup.iters

    def quantize_and_save(self, output_dir: Union[str, os.PathLike] = "tmp_autoround",
                          format: Optional[str] = None, overwrite: bool = False) -> str:
        """Quantizes and writes the checkpoint to output_dir, which must not exist unless
        overwrite=True; returns its path. format: auto_round (the default; W8A8 presets:
        llm_compressor), auto_gptq, auto_awq or llm_compressor. The checkpoint is written to a
        temporary directory beside output_dir and renamed into place when complete."""
        if format is not None and not isinstance(format, str):
            raise ValueError(f"format must be a string such as 'auto_round', got {format!r}.")
        if not isinstance(overwrite, bool):
            raise ValueError(f"overwrite must be True or False, got {overwrite!r}.")
        output_dir = os.fspath(output_dir)
        self.summary = self._setup.run(output_dir=output_dir, format=format or "",
                                       overwrite=overwrite)
        return output_dir
