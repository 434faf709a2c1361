"""quantserve.LLM: vLLM's offline inference API (vllm/entrypoints/llm.py) over quantserve's
engine. One LLM holds one loaded model and one engine; LLM.generate submits all its prompts to
that engine at once, so they are batched continuously as the server batches requests, and
returns their outputs in prompt order. The engine steps with the GIL released."""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Optional, Union

from . import _core
from .errors import InternalError
from .outputs import CompletionOutput, Logprob, RequestOutput
from .sampling_params import SamplingParams
from .tokenizer import Tokenizer

PromptType = Union[str, dict]

# vLLM constructor arguments that mean nothing on quantserve's CPU engine at their default
# (or any) value; any other value is a ValueError naming the argument.
_IGNORED_AT_DEFAULT = {
    "tokenizer": None,
    "tokenizer_mode": "auto",
    "tensor_parallel_size": 1,
    "pipeline_parallel_size": 1,
    "swap_space": 4,
    "cpu_offload_gb": 0,
    "skip_tokenizer_init": False,
}
# Accepted whatever their value: quantserve runs no code from a checkpoint and captures no
# graphs, so these change nothing.
_IGNORED = {"trust_remote_code", "enforce_eager", "disable_log_stats"}


class _NoProgress:
    def update(self, n):
        pass


@contextlib.contextmanager
def _progress(use_tqdm, total: int):
    """vLLM's progress bar over the prompts of one call: use_tqdm True (tqdm's bar, when tqdm
    is installed; silently none otherwise), False, or a callable that makes a tqdm-like bar."""
    bar = None
    if callable(use_tqdm):
        bar = use_tqdm(total=total, desc="Processed prompts")
    elif use_tqdm:
        try:
            from tqdm.auto import tqdm
        except ImportError:
            tqdm = None
        if tqdm is not None:
            bar = tqdm(total=total, desc="Processed prompts", dynamic_ncols=True)
    try:
        yield bar if bar is not None else _NoProgress()
    finally:
        if bar is not None:
            bar.close()


class _Prompt:
    __slots__ = ("text", "ids")

    def __init__(self, text: Optional[str], ids: list[int]):
        self.text = text
        self.ids = ids


class _Completion:
    """One completion as it accumulates."""

    __slots__ = ("index", "ids", "pieces", "logprobs", "cumulative", "finish_reason",
                 "stop_reason")

    def __init__(self, index: int, want_logprobs: bool):
        self.index = index
        self.ids: list[int] = []
        self.pieces: list[str] = []
        self.logprobs: Optional[list[dict[int, Logprob]]] = [] if want_logprobs else None
        self.cumulative: Optional[float] = 0.0 if want_logprobs else None
        self.finish_reason: Optional[str] = None
        self.stop_reason: Union[int, str, None] = None

    def output(self) -> CompletionOutput:
        return CompletionOutput(self.index, "".join(self.pieces), list(self.ids),
                                self.cumulative, self.logprobs, self.finish_reason,
                                self.stop_reason)


class LLM:
    """A model loaded for offline generation, with vLLM's constructor names.

    model: a checkpoint directory (config.json, *.safetensors, tokenizer files) or a Hugging
    Face repo id found offline in the hub cache (at `revision`). dtype: only "auto" (weights
    are used as stored; activations and attention are f32). quantization: the method the
    checkpoint must use (None: detect). kv_cache_dtype: "auto" (f32), "bfloat16", "fp8",
    "fp8_e4m3", "fp8_e5m2". threads: worker threads (None: one per core). seed: seeds the
    draws of requests whose SamplingParams have no seed, so a program gives the same outputs
    run after run (None: fresh entropy). The KV cache holds max_num_seqs sequences of
    max_model_len, within a quarter of the available memory, unless kv_cache_memory_bytes or
    gpu_memory_utilization (a fraction of the memory available after loading) says otherwise.
    lm_head_dtype: "auto" (the head as stored) or "int8" (a 16-bit lm_head rounded to int8 per
    row at load, as llama.cpp stores a tied output matrix; the CLI's --lm-head-dtype).
    device: "auto" (the first GPU where the build has the CUDA backend and the machine a GPU,
    else the CPU), "cpu", "cuda" or "cuda:N" (the CLI's --device).
    """

    def __init__(
        self,
        model: str,
        *,
        dtype: Optional[str] = None,
        quantization: Optional[str] = None,
        revision: Optional[str] = None,
        max_model_len: Optional[int] = None,
        kv_cache_dtype: str = "auto",
        enable_prefix_caching: bool = True,
        max_num_seqs: int = 256,
        max_num_batched_tokens: Optional[int] = None,
        threads: Optional[int] = None,
        seed: Optional[int] = 0,
        gpu_memory_utilization: Optional[float] = None,
        kv_cache_memory_bytes: Optional[int] = None,
        lm_head_dtype: str = "auto",
        device: str = "auto",
        **kwargs: Any,
    ):
        for name, value in kwargs.items():
            if name in _IGNORED:
                continue
            if name not in _IGNORED_AT_DEFAULT:
                raise TypeError(f"LLM got an unexpected keyword argument '{name}'")
            if value != _IGNORED_AT_DEFAULT[name] and not (name == "tokenizer" and value == model):
                raise ValueError(f"{name}={value!r} is not supported by quantserve.")
        if dtype not in (None, "auto"):
            raise ValueError(
                f"dtype={dtype!r} is not supported: quantserve uses the weights as the "
                "checkpoint stores them and computes in float32; pass dtype='auto'.")
        if not isinstance(model, str):
            model = str(model)  # a pathlib.Path
        self._core = _core.LlmCore.load(
            model=model,
            revision=revision or "",
            quantization=quantization or "",
            kv_cache_dtype=kv_cache_dtype,
            max_model_len=max_model_len or 0,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens or 0,
            enable_prefix_caching=enable_prefix_caching,
            threads=threads or 0,
            kv_cache_memory_bytes=kv_cache_memory_bytes,
            memory_fraction=gpu_memory_utilization,
            lm_head_dtype=lm_head_dtype,
            device=device,
        )
        self.model = model
        self._rng = random.Random(seed) if seed is not None else None
        self._ids = itertools.count()
        # Outputs of step() for requests still being read, by engine request id. Any call
        # may run a step; each one keeps what belongs to the others here (a stream being read
        # while generate() runs, or two threads).
        self._inbox: dict[str, list] = {}
        self._step_lock = threading.Lock()

    # ----- public API -------------------------------------------------------------------

    def get_tokenizer(self) -> Tokenizer:
        return Tokenizer(self._core)

    def get_default_sampling_params(self) -> SamplingParams:
        """vLLM's defaults overridden by the checkpoint's generation_config.json."""
        return SamplingParams(**self._core.generation_defaults())

    def generate(
        self,
        prompts: Union[PromptType, Sequence[PromptType]],
        sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]] = None,
        use_tqdm: Union[bool, Any] = True,
    ) -> list[RequestOutput]:
        """Completions of every prompt, in prompt order. prompts: a string, a dict
        {"prompt": str} or {"prompt_token_ids": [...]}, or a list of those. sampling_params:
        one SamplingParams for all prompts or one per prompt (None: the model's defaults)."""
        parsed = self._parse_prompts(prompts)
        return self._run(parsed, self._params_for(parsed, sampling_params), use_tqdm)

    def chat(
        self,
        messages: Union[list[dict], list[list[dict]]],
        sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]] = None,
        use_tqdm: Union[bool, Any] = True,
        chat_template: Optional[str] = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        tools: Optional[list[dict]] = None,
        chat_template_kwargs: Optional[dict] = None,
    ) -> list[RequestOutput]:
        """Replies to one conversation (a list of {"role", "content"} messages) or to each of
        a list of conversations, through the model's chat template (or `chat_template`: the
        template itself or a file) as the server's chat endpoint renders it."""
        conversations = messages if messages and isinstance(messages[0], (list, tuple)) \
            else [messages]
        parsed = [self._render_chat(c, chat_template, add_generation_prompt,
                                    continue_final_message, tools, chat_template_kwargs)
                  for c in conversations]
        return self._run(parsed, self._params_for(parsed, sampling_params), use_tqdm)

    def generate_stream(
        self,
        prompt: PromptType,
        sampling_params: Optional[SamplingParams] = None,
    ) -> Iterator[RequestOutput]:
        """One prompt's completions as they are generated: each RequestOutput yielded holds,
        for every completion that moved in one engine step, only the new token ids and text
        (vLLM's DELTA output kind); the last one has finished=True. Other calls on this LLM
        may run while the iterator is held; closing it early aborts the request."""
        parsed = self._parse_prompts(prompt)
        if len(parsed) != 1:
            raise ValueError("generate_stream takes one prompt; use generate() for several.")
        params = self._params_for(parsed, sampling_params)
        rid = str(next(self._ids))
        want_logprobs = params[0].logprobs is not None
        cumulative = [0.0] * params[0].n
        left = params[0].n
        for _, child, out in self._events(parsed, params, [rid], progress=None):
            delta = CompletionOutput(child, out.new_text, list(out.new_token_ids), None, None,
                                     out.finish_reason or None, None)
            if want_logprobs:
                delta.logprobs = [self._logprob_dict(s) for s in out.logprobs]
                cumulative[child] += sum(s[1] for s in out.logprobs)
                delta.cumulative_logprob = cumulative[child]
            if out.finished:
                delta.stop_reason = self._stop_reason(out)
                left -= 1
            yield RequestOutput(rid, parsed[0].text, parsed[0].ids, [delta], left == 0,
                                num_cached_tokens=out.num_cached_tokens)

    # ----- prompts and parameters -------------------------------------------------------

    def _parse_prompts(self, prompts) -> list[_Prompt]:
        if isinstance(prompts, (str, dict)):
            prompts = [prompts]
        if not isinstance(prompts, Sequence) or len(prompts) == 0:
            raise ValueError("prompts must be a string, a prompt dict, or a non-empty list of "
                             "them.")
        return [self._parse_prompt(p) for p in prompts]

    def _parse_prompt(self, p) -> _Prompt:
        if isinstance(p, str):
            return _Prompt(p, self._core.encode(p, True))
        if isinstance(p, dict):
            extra = set(p) - {"prompt", "prompt_token_ids"}
            if extra:
                raise ValueError(f"prompt keys {sorted(extra)} are not supported by "
                                 "quantserve.LLM (only 'prompt' or 'prompt_token_ids').")
            if "prompt_token_ids" in p:
                ids = p["prompt_token_ids"]
                if not isinstance(ids, Sequence) or isinstance(ids, str) or not all(
                        isinstance(t, int) and not isinstance(t, bool) for t in ids):
                    raise ValueError("prompt_token_ids must be a list of token ids.")
                if not all(-2**31 <= t < 2**31 for t in ids):
                    raise ValueError("prompt_token_ids holds an id outside int32.")
                return _Prompt(p.get("prompt"), list(ids))
            if isinstance(p.get("prompt"), str):
                return _Prompt(p["prompt"], self._core.encode(p["prompt"], True))
        raise ValueError(f"a prompt must be a string, {{'prompt': str}} or "
                         f"{{'prompt_token_ids': [...]}}, got {type(p).__name__}.")

    def _params_for(self, prompts, sampling_params) -> list[SamplingParams]:
        if sampling_params is None:
            return [self.get_default_sampling_params()] * len(prompts)
        if isinstance(sampling_params, SamplingParams):
            return [sampling_params] * len(prompts)
        if not isinstance(sampling_params, Sequence) or not all(
                isinstance(s, SamplingParams) for s in sampling_params):
            raise ValueError("sampling_params must be a SamplingParams or a list of them.")
        if len(sampling_params) != len(prompts):
            raise ValueError("The lengths of prompts and sampling_params must be the same.")
        return list(sampling_params)

    def _render_chat(self, conversation, chat_template, add_generation_prompt,
                     continue_final_message, tools, kwargs) -> _Prompt:
        if not isinstance(conversation, (list, tuple)):
            raise ValueError("messages must be a list of messages or a list of conversations.")
        context = dict(kwargs or {})
        if tools is not None:
            context["tools"] = tools
        text = self._core.render_chat(json.dumps(list(conversation)), add_generation_prompt,
                                      continue_final_message, chat_template,
                                      json.dumps(context))
        # As vLLM's chat: the template writes any BOS itself.
        return _Prompt(text, self._core.encode(text, False))

    # ----- the engine loop --------------------------------------------------------------

    def _run(self, prompts: list[_Prompt], params: list[SamplingParams], use_tqdm):
        rids = [str(next(self._ids)) for _ in prompts]
        completions = [[_Completion(j, p.logprobs is not None) for j in range(p.n)]
                       for p in params]
        cached = [0] * len(prompts)
        with _progress(use_tqdm, len(prompts)) as bar:
            for i, j, out in self._events(prompts, params, rids, progress=bar):
                c = completions[i][j]
                c.ids.extend(out.new_token_ids)
                c.pieces.append(out.new_text)
                if c.logprobs is not None:
                    for s in out.logprobs:
                        c.logprobs.append(self._logprob_dict(s))
                        c.cumulative += s[1]
                if out.finished:
                    c.finish_reason = out.finish_reason
                    c.stop_reason = self._stop_reason(out)
                    cached[i] = out.num_cached_tokens
        return [RequestOutput(rids[i], prompts[i].text, prompts[i].ids,
                              [c.output() for c in completions[i]], True,
                              num_cached_tokens=cached[i])
                for i in range(len(prompts))]

    def _events(self, prompts, params, rids, progress):
        """Submits every completion of every prompt, then yields (prompt index, completion
        index, step output) as the engine produces them, until all have finished. On any
        exit (an error, Ctrl-C, a stream closed early) the unfinished ones are aborted."""
        where: dict[str, tuple[int, int]] = {}
        unfinished: set[str] = set()
        left_per_prompt = [p.n for p in params]
        try:
            for i, (prompt, p) in enumerate(zip(prompts, params)):
                max_tokens = p.max_tokens
                if max_tokens is None:  # vLLM: up to the end of the context
                    max_tokens = max(1, self._core.max_model_len - len(prompt.ids))
                seed = p.seed
                if seed is None and self._rng is not None:
                    seed = self._rng.getrandbits(64)
                for j in range(p.n):
                    eid = rids[i] if p.n == 1 else f"{rids[i]}:{j}"
                    # vLLM's parallel sampling, as the server: completion j uses seed + j.
                    child_seed = None if seed is None else (seed + j) % 2**64
                    self._inbox[eid] = []
                    where[eid] = (i, j)
                    self._core.add_request(eid, prompt.ids,
                                           p._engine_fields(max_tokens, child_seed))
                    unfinished.add(eid)
            while unfinished:
                moved = False
                for eid in list(unfinished):
                    box = self._inbox[eid]
                    while box:
                        out = box.pop(0)
                        moved = True
                        if out.error is not None:
                            raise out.error
                        i, j = where[eid]
                        yield i, j, out
                        if out.finished:
                            unfinished.discard(eid)
                            left_per_prompt[i] -= 1
                            if left_per_prompt[i] == 0 and progress is not None:
                                progress.update(1)
                if unfinished and not moved:
                    self._step(unfinished)
        finally:
            for eid in unfinished:
                self._core.abort(eid)  # one that has finished meanwhile is ignored
            for eid in where:
                self._inbox.pop(eid, None)

    def _step(self, waiting):
        """Runs one engine step and files its outputs by request id, unless another thread's
        step (which holds the lock from the step until its outputs are filed) has meanwhile
        delivered something `waiting` is waiting for."""
        with self._step_lock:
            if any(self._inbox.get(eid) for eid in waiting):
                return
            if not self._core.has_unfinished():
                raise InternalError(f"the engine has no work but requests {sorted(waiting)} "
                                    "are unfinished")
            for out in self._core.step():
                box = self._inbox.get(out.request_id)
                if box is not None:
                    box.append(out)

    def _logprob_dict(self, sample) -> dict[int, Logprob]:
        token, logprob, top = sample
        d: dict[int, Logprob] = {}
        ranks = {t: r + 1 for r, (t, _) in enumerate(top)}
        d[token] = Logprob(logprob, ranks.get(token), self._core.decode([token], False))
        for t, lp in top:
            if t not in d:
                d[t] = Logprob(lp, ranks[t], self._core.decode([t], False))
        return d

    @staticmethod
    def _stop_reason(out):
        if out.stop_token_id is not None:
            return out.stop_token_id
        return out.stop_string
