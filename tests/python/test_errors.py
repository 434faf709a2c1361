"""Failures come back as exceptions of the quantserve.Error family, carrying the message the CLI
prints for the same input, and the interpreter (and every loaded LLM) keeps working after
each: a missing model, a corrupt checkpoint, a wrong quantization name, bad sampling
parameters, bad prompts."""

import pytest

import quantserve
from quantserve import LLM, SamplingParams

from conftest import MODEL_DIR, THREADS, cli_error

PROMPT = "Once upon a time"


def still_works(llm, max_tokens=4):
    out = llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=max_tokens),
                       use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == max_tokens


def test_missing_model(llm, tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(FileNotFoundError) as info:
        LLM(str(missing))
    assert isinstance(info.value, quantserve.NotFoundError)
    assert isinstance(info.value, quantserve.Error)
    assert str(info.value) == cli_error("generate", "--model", missing, "--prompt", "x")
    assert str(missing) in str(info.value)
    still_works(llm)


def test_truncated_checkpoint(llm, model_copy):
    weights = model_copy / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(quantserve.Error) as info:
        LLM(str(model_copy), threads=THREADS)
    assert isinstance(info.value, ValueError)  # CorruptFileError
    assert str(info.value) == cli_error("generate", "--model", model_copy, "--prompt", "x")
    still_works(llm)


def test_garbage_safetensors_header(llm, model_copy):
    (model_copy / "model.safetensors").write_bytes(b"\xff" * 8 + b"{not json")
    with pytest.raises(quantserve.Error) as info:
        LLM(str(model_copy), threads=THREADS)
    assert str(info.value) == cli_error("generate", "--model", model_copy, "--prompt", "x")
    still_works(llm)


@pytest.mark.parametrize("name", ["gptq", "no-such-method"])
def test_wrong_quantization_name(llm, name):
    with pytest.raises(ValueError) as info:
        LLM(str(MODEL_DIR), quantization=name, threads=THREADS)
    assert isinstance(info.value, quantserve.InvalidArgumentError)
    assert str(info.value) == cli_error("generate", "--model", MODEL_DIR, "--prompt", "x",
                                        "--quantization", name)
    still_works(llm)


def test_bad_constructor_arguments(llm):
    with pytest.raises(ValueError, match="kv-cache|kv_cache|fp4"):
        LLM(str(MODEL_DIR), kv_cache_dtype="fp4")
    with pytest.raises(ValueError, match="max_model_len"):
        LLM(str(MODEL_DIR), max_model_len=10**9)
    with pytest.raises(ValueError, match="dtype"):
        LLM(str(MODEL_DIR), dtype="float16")
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        LLM(str(MODEL_DIR), tensor_parallel_size=2)
    with pytest.raises(TypeError, match="no_such_argument"):
        LLM(str(MODEL_DIR), no_such_argument=1)
    still_works(llm)


@pytest.mark.parametrize("kwargs, message", [
    ({"temperature": -1.0}, "temperature must be in [0, 2], got -1"),
    ({"top_p": 0.0}, "top_p must be in (0, 1], got 0"),
    ({"top_k": -5}, "top_k must be 0 or -1 (disable), or at least 1, got -5."),
    ({"min_p": 1.5}, "min_p must be in [0, 1], got 1.5"),
    ({"max_tokens": 0}, "max_tokens must be at least 1, got 0."),
    ({"max_tokens": 4, "min_tokens": 5}, "min_tokens must be in [0, max_tokens=4], got 5."),
    ({"logprobs": 21}, "logprobs must be in [0, 20], got 21."),
    ({"presence_penalty": 3.0}, "presence_penalty must be in [-2, 2], got 3"),
    ({"repetition_penalty": 0.0}, "repetition_penalty must be a finite number greater than zero"),
    ({"stop": [""]}, "stop cannot contain an empty string."),
    ({"n": 0}, "n must be at least 1, got 0."),
    ({"temperature": "hot"}, "temperature must be a number"),
    ({"prompt_logprobs": 1}, "prompt_logprobs is not supported"),
    ({"logit_bias": {1: 2.0}}, "logit_bias is not supported"),
])
def test_bad_sampling_parameter(llm, kwargs, message):
    with pytest.raises(ValueError) as info:
        SamplingParams(**kwargs)
    assert message in str(info.value)
    still_works(llm)


def test_sampling_parameter_checked_against_the_model(llm):
    with pytest.raises(ValueError, match="stop_token_ids contains 100000, outside the vocabulary"):
        llm.generate(PROMPT, SamplingParams(stop_token_ids=[100000]), use_tqdm=False)
    with pytest.raises(ValueError, match="prompt token id 99999 outside the vocabulary"):
        llm.generate({"prompt_token_ids": [1, 99999]}, use_tqdm=False)
    with pytest.raises(ValueError, match="prompt"):
        llm.generate({"prompt_token_ids": []}, use_tqdm=False)
    with pytest.raises(ValueError, match="prompt"):
        llm.generate([], use_tqdm=False)
    with pytest.raises(ValueError, match="not supported"):
        llm.generate({"prompt": "x", "multi_modal_data": {}}, use_tqdm=False)
    with pytest.raises(ValueError, match="outside the tokenizer's vocabulary"):
        llm.get_tokenizer().decode([10**6])
    # A failing prompt in a batch leaves nothing queued behind it.
    with pytest.raises(ValueError):
        llm.generate([PROMPT, {"prompt_token_ids": [99999]}], use_tqdm=False)
    assert not llm._inbox
    still_works(llm)


def test_prompt_longer_than_the_context():
    small = LLM(str(MODEL_DIR), threads=THREADS, max_model_len=8)
    with pytest.raises(ValueError):
        small.generate("Once upon a time there was a little girl named Lily who loved to play",
                       use_tqdm=False)
    still_works(small, max_tokens=2)  # 5 prompt tokens + 2 fit in 8
