"""quantserve.evaluate against `quantserve eval --json -`: the same figures for a model alone and
against a reference (a checkpoint AutoRound made), the same errors with the command's messages,
and the interpreter still working after each."""

import json

import pytest

import quantserve
from quantserve import AutoRound, evaluate

from conftest import MODEL_DIR, THREADS, cli_error, run_cli

SETTINGS = dict(seqlen=64, max_tokens=1024, threads=THREADS)
CLI_SETTINGS = ["--seqlen", 64, "--max-tokens", 1024, "--threads", THREADS]


def cli_eval(*args):
    return json.loads(run_cli("eval", *args, *CLI_SETTINGS, "--json", "-").stdout)


def same_figures(got, expected):
    assert got.pop("seconds") > 0
    expected.pop("seconds")
    assert got == expected


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    out = tmp_path_factory.mktemp("quantized") / "w4g32"
    AutoRound(str(MODEL_DIR), group_size=32, iters=2, nsamples=4, seqlen=32,
              threads=THREADS).quantize_and_save(str(out))
    return out


def test_perplexity_equals_the_cli():
    got = evaluate(str(MODEL_DIR), **SETTINGS)
    same_figures(got, cli_eval("--model", MODEL_DIR))
    assert got["scored_tokens"] > 0 and got["ppl"] > 1
    assert "kl_mean" not in got


def test_against_a_reference_equals_the_cli(quantized, tmp_path):
    got = evaluate(quantized, reference=MODEL_DIR, **SETTINGS)
    same_figures(got, cli_eval("--model", quantized, "--reference", MODEL_DIR))
    assert got["weights"].startswith("auto-round")
    assert 0 < got["top1_agreement"] < 1 and got["kl_mean"] > 0
    # A dataset of the caller's.
    text = tmp_path / "text.txt"
    text.write_text("Once upon a time there was a little dog. " * 40)
    got = evaluate(quantized, reference=MODEL_DIR, dataset=text, **SETTINGS)
    same_figures(got, cli_eval("--model", quantized, "--reference", MODEL_DIR, "--dataset",
                               text))
    assert got["dataset"] == str(text)


def test_errors_carry_the_cli_message(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(FileNotFoundError) as info:
        evaluate(str(missing))
    assert isinstance(info.value, quantserve.NotFoundError)
    assert str(info.value) == cli_error("eval", "--model", missing)
    with pytest.raises(FileNotFoundError) as info:
        evaluate(str(MODEL_DIR), reference=str(missing))
    assert str(info.value) == cli_error("eval", "--model", MODEL_DIR, "--reference", missing)
    with pytest.raises(ValueError) as info:
        evaluate(str(MODEL_DIR), kv_cache_dtype="fp4")
    assert str(info.value) == cli_error("eval", "--model", MODEL_DIR, "--kv-cache-dtype", "fp4")
    with pytest.raises(ValueError) as info:
        evaluate(str(MODEL_DIR), quantization="gptq")
    assert str(info.value) == cli_error("eval", "--model", MODEL_DIR, "--quantization", "gptq")
    with pytest.raises(OSError) as info:  # the engine reads it as an I/O error: FileReadError
        evaluate(str(MODEL_DIR), dataset=str(tmp_path / "none.txt"))
    assert str(info.value) == cli_error("eval", "--model", MODEL_DIR, "--dataset",
                                        tmp_path / "none.txt")
    with pytest.raises(ValueError, match="max_tokens"):
        evaluate(str(MODEL_DIR), max_tokens=-1)
    with pytest.raises(ValueError, match="threads"):
        evaluate(str(MODEL_DIR), threads=0)
    assert evaluate(str(MODEL_DIR), **SETTINGS)["scored_tokens"] > 0
