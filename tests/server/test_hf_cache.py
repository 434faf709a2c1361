"""A Hugging Face repo id as the model name: `serve local/stories260K` loads the snapshot from a
hub cache in huggingface_hub's layout (offline), and clients see the repo id as the model.
huggingface_hub itself (offline, `local_files_only`) must resolve the hand-built cache to the
same snapshot, so the layout is the one real downloads leave."""

import os
import pathlib

import requests
from huggingface_hub import snapshot_download, try_to_load_from_cache

from conftest import MODEL_DIR, Server

COMMIT = "0123456789abcdef0123456789abcdef01234567"
OLD = "fedcba9876543210fedcba9876543210fedcba98"
REPO = "local/stories260K"


def make_cache(root: pathlib.Path) -> pathlib.Path:
    """models--local--stories260K with blobs/, snapshots/<commit>/ symlinks, refs/main and a
    tag refs/v0, as huggingface_hub writes them."""
    repo = root / "models--local--stories260K"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    for i, f in enumerate(sorted(p for p in MODEL_DIR.iterdir() if p.is_file())):
        blob = repo / "blobs" / f"blob{i}"
        blob.write_bytes(f.read_bytes())
        for commit in (COMMIT, OLD):
            snap = repo / "snapshots" / commit
            snap.mkdir(parents=True, exist_ok=True)
            os.symlink(os.path.join("..", "..", "blobs", blob.name), snap / f.name)
    (repo / "refs" / "main").write_text(COMMIT)
    (repo / "refs" / "v0").write_text(OLD)
    return repo


def test_huggingface_hub_resolves_the_same_snapshot(tmp_path):
    hub = tmp_path / "hub"
    repo = make_cache(hub)
    got = snapshot_download(REPO, cache_dir=hub, local_files_only=True)
    assert pathlib.Path(got) == repo / "snapshots" / COMMIT
    got_tag = snapshot_download(REPO, revision="v0", cache_dir=hub, local_files_only=True)
    assert pathlib.Path(got_tag) == repo / "snapshots" / OLD
    cfg = try_to_load_from_cache(REPO, "config.json", cache_dir=hub)
    assert pathlib.Path(cfg) == repo / "snapshots" / COMMIT / "config.json"


def test_serve_takes_a_repo_id_and_reports_it(tmp_path):
    hub = tmp_path / "hub"
    make_cache(hub)
    s = Server(tmp_path, env={"HF_HUB_CACHE": str(hub)}, model_dir=REPO, model_name=REPO)
    try:
        models = requests.get(s.url + "/v1/models", timeout=10).json()
        assert [m["id"] for m in models["data"]] == [REPO]
        r = requests.post(s.url + "/v1/completions", timeout=30,
                          json={"model": REPO, "prompt": "Once upon a time", "max_tokens": 8,
                                "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 8
    finally:
        assert s.stop() == 0, s.log_text()


def test_serve_without_the_repo_in_the_cache_says_where_it_looked(tmp_path):
    import subprocess
    from conftest import BINARY
    out = subprocess.run([str(BINARY), "serve", "nobody/nothing", "--port", "0"],
                         env={**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub")},
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert str(tmp_path / "hub" / "models--nobody--nothing") in out.stderr
