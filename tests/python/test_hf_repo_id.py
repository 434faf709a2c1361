"""A Hugging Face repo id as LLM's (and Omni's) model, resolved offline through a hub cache that
huggingface_hub's own cache functions wrote (tests/common/hf_cache_layout.py, shared with
tests/server/test_hf_cache.py): the same greedy text as the local directory, `revision=` picking
a snapshot by branch, tag or commit, and a repo or revision that is not cached raising
FileNotFoundError (quantserve.NotFoundError) that names where it looked."""

import os
import sys

import numpy as np
import pytest

import quantserve
from quantserve import LLM, Omni, SamplingParams

from conftest import MODEL_DIR, ROOT, THREADS

sys.path.append(str(ROOT / "tests" / "common"))
from hf_cache_layout import commit_hash, place_in_cache  # noqa: E402

from test_omni import FLUX_DIR, PROMPT as IMAGE_PROMPT, small  # noqa: E402

REPO = "quantserve-test/stories260K"
FLUX_REPO = "quantserve-test/tiny-flux"
MAIN = commit_hash(REPO, "main")
OLD = commit_hash(REPO, "v0")
PROMPT = "Once upon a time"
GREEDY = SamplingParams(temperature=0, max_tokens=24)


@pytest.fixture
def hub(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    place_in_cache(cache, REPO, MODEL_DIR, {"main": MAIN, "v0": OLD})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def text(llm):
    return llm.generate(PROMPT, GREEDY, use_tqdm=False)[0].outputs[0].text


def test_repo_id_gives_the_local_paths_text(llm, hub):
    expected = text(llm)
    assert expected
    by_name = LLM(REPO, threads=THREADS)
    assert text(by_name) == expected
    assert by_name._core.model_dir == str(hub / "models--quantserve-test--stories260K" /
                                          "snapshots" / MAIN)
    for revision, commit in (("v0", OLD), (OLD, OLD), ("main", MAIN)):
        llm_rev = LLM(REPO, revision=revision, threads=THREADS)
        assert llm_rev._core.model_dir.endswith(os.path.join("snapshots", commit))
        assert text(llm_rev) == expected


def test_missing_repo_names_where_it_looked(hub):
    with pytest.raises(FileNotFoundError) as info:
        LLM("quantserve-test/no-such-model", threads=THREADS)
    assert isinstance(info.value, quantserve.NotFoundError)
    message = str(info.value)
    assert str(hub / "models--quantserve-test--no-such-model") in message
    assert "hf download quantserve-test/no-such-model" in message


def test_missing_revision_lists_the_cached_refs(hub):
    with pytest.raises(FileNotFoundError) as info:
        LLM(REPO, revision="v9", threads=THREADS)
    message = str(info.value)
    assert str(hub / "models--quantserve-test--stories260K" / "refs" / "v9") in message
    assert "main" in message and "v0" in message


def test_omni_loads_a_cached_pipeline_by_repo_id(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    commit = commit_hash(FLUX_REPO, "main")
    place_in_cache(cache, FLUX_REPO, FLUX_DIR, {"main": commit})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    by_path = Omni(model=str(FLUX_DIR), threads=THREADS)
    by_name = Omni(model=FLUX_REPO, threads=THREADS)
    expected = by_path.generate(IMAGE_PROMPT, small(), use_tqdm=False)[0].image_arrays[0]
    got = by_name.generate(IMAGE_PROMPT, small(), use_tqdm=False)[0].image_arrays[0]
    assert np.array_equal(got, expected)
    # A repo id of a text checkpoint goes to LLM, as a directory does.
    place_in_cache(cache, REPO, MODEL_DIR, {"main": MAIN})
    text_omni = Omni(model=REPO, threads=THREADS)
    out = text_omni.generate(PROMPT, GREEDY, use_tqdm=False)[0]
    assert out.final_output_type == "text" and out.outputs[0].text
