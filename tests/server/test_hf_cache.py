"""A Hugging Face repo id as the model name, resolved offline through the hub cache.

The cache is written by huggingface_hub's own cache code (tests/common/hf_cache_layout.py: the
steps hf_hub_download takes after a download, with the bytes copied from models/stories260K).
huggingface_hub's scan_cache_dir and snapshot_download(local_files_only=True) must then see the
repo, so the layout is the one a real download leaves; and `generate` and `serve` must load it
by name.
"""

import hashlib
import os
import pathlib
import subprocess

import pytest
import requests
from huggingface_hub import scan_cache_dir, snapshot_download, try_to_load_from_cache
from huggingface_hub.file_download import repo_folder_name

import hf_cache_layout  # tests/common, on sys.path through conftest.py
from conftest import BINARY, MODEL_DIR, Server

REPO = "quantserve-test/stories260K"
MAIN = hashlib.sha1(b"quantserve-test/stories260K main").hexdigest()
OLD = hashlib.sha1(b"quantserve-test/stories260K v0").hexdigest()
PROMPT = "Once upon a time"


def place_in_cache(cache_dir: pathlib.Path, revisions: dict) -> pathlib.Path:
    return hf_cache_layout.place_in_cache(cache_dir, REPO, MODEL_DIR, revisions)


@pytest.fixture
def hub(tmp_path):
    cache = tmp_path / "hub"
    place_in_cache(cache, {"main": MAIN, "v0": OLD})
    return cache


def generate(model, env, *extra):
    out = subprocess.run([str(BINARY), "generate", "--model", str(model), "--prompt", PROMPT,
                          "--temperature", "0", "--max-tokens", "24", "--threads", "1", *extra],
                         env={**os.environ, **env}, capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout.decode()


def test_huggingface_hub_sees_the_repo(hub):
    info = scan_cache_dir(hub)
    assert info.warnings == []
    (repo,) = info.repos
    assert (repo.repo_id, repo.repo_type) == (REPO, "model")
    revisions = {r.commit_hash: r for r in repo.revisions}
    assert set(revisions) == {MAIN, OLD}
    assert revisions[MAIN].refs == frozenset({"main"})
    assert revisions[OLD].refs == frozenset({"v0"})
    files = {f.file_name: f for f in revisions[MAIN].files}
    assert set(files) == {p.name for p in MODEL_DIR.iterdir() if p.is_file()}
    st = files["model.safetensors"]
    assert st.file_path.is_symlink() and st.blob_path.parent.name == "blobs"
    assert st.size_on_disk == (MODEL_DIR / "model.safetensors").stat().st_size
    # huggingface_hub's own offline lookup lands on the snapshots quantserve loads.
    storage = hub / repo_folder_name(repo_id=REPO, repo_type="model")
    assert snapshot_download(REPO, cache_dir=hub, local_files_only=True) == str(
        storage / "snapshots" / MAIN)
    assert snapshot_download(REPO, revision="v0", cache_dir=hub,
                             local_files_only=True) == str(storage / "snapshots" / OLD)
    assert try_to_load_from_cache(REPO, "config.json", cache_dir=hub) == str(
        storage / "snapshots" / MAIN / "config.json")


def test_generate_by_repo_id_matches_the_local_path(hub):
    by_path = generate(MODEL_DIR, {})
    assert by_path
    assert generate(REPO, {"HF_HUB_CACHE": str(hub)}) == by_path
    assert generate(REPO, {"HF_HUB_CACHE": str(hub)}, "--revision", "v0") == by_path
    assert generate(REPO, {"HF_HUB_CACHE": str(hub)}, "--revision", OLD) == by_path
    # $HF_HOME/hub, with HF_HUB_CACHE unset, is the same cache.
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_CACHE",
                                                            "HUGGINGFACE_HUB_CACHE")}
    out = subprocess.run([str(BINARY), "generate", "--model", REPO, "--prompt", PROMPT,
                          "--temperature", "0", "--max-tokens", "24", "--threads", "1"],
                         env={**env, "HF_HOME": str(hub.parent)}, capture_output=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode() == by_path


def test_serve_by_repo_id_reports_the_name_as_given(hub, tmp_path):
    reference = generate(MODEL_DIR, {})
    s = Server(tmp_path, env={"HF_HUB_CACHE": str(hub)}, model_dir=REPO, model_name=None)
    try:
        models = requests.get(s.url + "/v1/models", timeout=10).json()
        assert [m["id"] for m in models["data"]] == [REPO]
        r = requests.post(s.url + "/v1/completions", timeout=30,
                          json={"model": REPO, "prompt": PROMPT, "max_tokens": 24,
                                "temperature": 0})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["model"] == REPO
        assert body["choices"][0]["text"] == reference
        assert body["usage"]["completion_tokens"] == 24
    finally:
        assert s.stop() == 0, s.log_text()


def test_a_repo_not_in_the_cache_says_where_it_looked(tmp_path):
    cache = tmp_path / "hub"
    for cmd in (["serve", "nobody/nothing", "--port", "0"],
                ["generate", "--model", "nobody/nothing", "--prompt", "x"]):
        out = subprocess.run([str(BINARY), *cmd], env={**os.environ, "HF_HUB_CACHE": str(cache)},
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 1, out.stderr
        assert str(cache / "models--nobody--nothing") in out.stderr
        assert "hf download nobody/nothing" in out.stderr


def test_a_revision_not_in_the_cache_names_the_ref_file(hub, tmp_path):
    out = subprocess.run([str(BINARY), "serve", REPO, "--revision", "v9", "--port", "0"],
                         env={**os.environ, "HF_HUB_CACHE": str(hub)}, capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 1, out.stderr
    storage = hub / repo_folder_name(repo_id=REPO, repo_type="model")
    assert str(storage / "refs" / "v9") in out.stderr
    assert "main" in out.stderr and "v0" in out.stderr
