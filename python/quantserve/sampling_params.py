"""SamplingParams with vLLM's names, defaults and checks (vllm/sampling_params.py), mapped onto
the engine's sampling (src/engine/sampler.h). Values are checked when the object is made, by
the engine's own validation, so the messages are the server's and the CLI's. A vLLM parameter
the engine cannot honour is a ValueError naming it, never silently ignored."""

from __future__ import annotations

import copy
import numbers
from typing import Optional, Union

from . import _core

_INT32_MAX = 2**31 - 1

# vLLM parameters quantserve does not implement, with the value that means "not used".
_UNSUPPORTED = {
    "best_of": None,
    "prompt_logprobs": None,
    "logit_bias": None,
    "allowed_token_ids": None,
    "bad_words": None,
    "truncate_prompt_tokens": None,
    "logits_processors": None,
    "guided_decoding": None,
    "structured_outputs": None,
    "spaces_between_special_tokens": True,
    "detokenize": True,
}


def _int(name, value, lo=None, hi=_INT32_MAX):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}.")
    value = int(value)
    if lo is not None and value < lo:
        raise ValueError(f"{name} must be at least {lo}, got {value}.")
    if hi is not None and value > hi:
        raise ValueError(f"{name} must be at most {hi}, got {value}.")
    return value


def _float(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r}.")
    return float(value)


def _bool(name, value):
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}.")
    return value


class SamplingParams:
    """How to sample one prompt's completions. Defaults are vLLM's.

    n: completions per prompt (each seeded request's i-th completion uses seed + i, as the
    server does). max_tokens=None generates up to the end of the context. top_k 0 or -1
    means no top-k. logprobs=N returns the sampled token's logprob and the N most likely
    tokens' (N <= 20) with each generated token."""

    def __init__(
        self,
        *,
        n: int = 1,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repetition_penalty: float = 1.0,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        min_p: float = 0.0,
        seed: Optional[int] = None,
        stop: Optional[Union[str, list[str]]] = None,
        stop_token_ids: Optional[list[int]] = None,
        ignore_eos: bool = False,
        max_tokens: Optional[int] = 16,
        min_tokens: int = 0,
        logprobs: Optional[int] = None,
        skip_special_tokens: bool = True,
        include_stop_str_in_output: bool = False,
        **unsupported,
    ):
        for name, value in unsupported.items():
            if name not in _UNSUPPORTED:
                raise TypeError(f"SamplingParams got an unexpected keyword argument '{name}'")
            if value != _UNSUPPORTED[name]:
                raise ValueError(f"{name} is not supported by quantserve (got {value!r}).")
        self.n = _int("n", n, lo=1)
        self.presence_penalty = _float("presence_penalty", presence_penalty)
        self.frequency_penalty = _float("frequency_penalty", frequency_penalty)
        self.repetition_penalty = _float("repetition_penalty", repetition_penalty)
        self.temperature = _float("temperature", temperature)
        self.top_p = _float("top_p", top_p)
        self.top_k = _int("top_k", top_k, lo=None)
        self.min_p = _float("min_p", min_p)
        self.seed = None if seed is None else _int("seed", seed, hi=None)
        if stop is None:
            stop = []
        elif isinstance(stop, str):
            stop = [stop]
        elif not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) for s in stop):
            raise ValueError(f"stop must be a string or a list of strings, got {stop!r}.")
        self.stop = list(stop)
        if stop_token_ids is None:
            stop_token_ids = []
        elif not isinstance(stop_token_ids, (list, tuple)):
            raise ValueError(f"stop_token_ids must be a list of token ids, got {stop_token_ids!r}.")
        self.stop_token_ids = [_int("stop_token_ids", t, lo=None) for t in stop_token_ids]
        self.ignore_eos = _bool("ignore_eos", ignore_eos)
        self.max_tokens = None if max_tokens is None else _int("max_tokens", max_tokens, lo=None)
        self.min_tokens = _int("min_tokens", min_tokens, lo=None)
        self.logprobs = None if logprobs is None else _int("logprobs", logprobs, lo=None)
        self.skip_special_tokens = _bool("skip_special_tokens", skip_special_tokens)
        self.include_stop_str_in_output = _bool(
            "include_stop_str_in_output", include_stop_str_in_output
        )
        # The engine's checks and messages; max_tokens=None stands for "whatever the context
        # leaves", checked per prompt.
        _core.check_sampling_params(
            self._engine_fields(_INT32_MAX if self.max_tokens is None else self.max_tokens))

    def _engine_fields(self, max_tokens: int, seed: Optional[int] = None) -> dict:
        """The engine's SamplingParams as a dict (sampling_dict.cc)."""
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "min_p": self.min_p,
            "repetition_penalty": self.repetition_penalty,
            "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty,
            "seed": seed if seed is not None else (
                None if self.seed is None else self.seed % 2**64),
            "max_tokens": max_tokens,
            "min_tokens": self.min_tokens,
            "stop": self.stop,
            "stop_token_ids": self.stop_token_ids,
            "ignore_eos": self.ignore_eos,
            "skip_special_tokens": self.skip_special_tokens,
            "include_stop_str_in_output": self.include_stop_str_in_output,
            "logprobs": self.logprobs,
        }

    def clone(self) -> "SamplingParams":
        return copy.deepcopy(self)

    _FIELDS = (
        "n", "presence_penalty", "frequency_penalty", "repetition_penalty", "temperature",
        "top_p", "top_k", "min_p", "seed", "stop", "stop_token_ids", "ignore_eos",
        "max_tokens", "min_tokens", "logprobs", "skip_special_tokens",
        "include_stop_str_in_output",
    )

    def __eq__(self, other):
        if not isinstance(other, SamplingParams):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self._FIELDS)

    def __repr__(self):
        fields = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._FIELDS)
        return f"SamplingParams({fields})"
