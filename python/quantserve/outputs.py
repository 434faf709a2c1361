"""RequestOutput and CompletionOutput with vLLM's names (vllm/outputs.py), and Logprob
(vllm/logprobs.py): what LLM.generate and LLM.chat return, one RequestOutput per prompt."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union


@dataclass
class Logprob:
    """One token's log-probability (from the log-softmax of the raw logits, before penalties
    and temperature: vLLM's default logprobs mode). rank: 1 for the most likely token; None
    for a sampled token outside the requested top-N, whose rank the engine does not compute."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


@dataclass
class CompletionOutput:
    """One completion of a prompt. finish_reason: "stop" (EOS, a stop token or string),
    "length" (max_tokens or the end of the context), "abort"; None while unfinished.
    stop_reason: the stop_token_ids entry or stop string that ended it, else None.
    logprobs: with SamplingParams(logprobs=N), one dict per generated token mapping token id to
    Logprob, the sampled token first; cumulative_logprob is then the sum of the sampled
    tokens' logprobs (None without logprobs, as vLLM's V1 engine)."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[list[dict[int, Logprob]]]
    finish_reason: Optional[str] = None
    stop_reason: Union[int, str, None] = None

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    """One prompt's outputs: `outputs` holds its n completions, in order. prompt is None for a
    prompt given as token ids. num_cached_tokens: prompt tokens the prefix cache served."""

    request_id: str
    prompt: Optional[str]
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    prompt_logprobs: None = None
    num_cached_tokens: int = 0
    metrics: Optional[dict] = field(default=None, repr=False)
