"""A model directory placed in a Hugging Face hub cache, the way hf_hub_download stores the files
it fetched, for tests that load a repo id offline (tests/server/test_hf_cache.py,
tests/python/test_hf_repo_id.py).

The cache is written by huggingface_hub's own cache code, the steps its hf_hub_download takes
after a download (file_download._hf_hub_download_to_cache_dir), with the downloaded bytes copied
from a local directory instead of fetched: repo_folder_name names the repo folder,
_get_pointer_path the snapshot entry, _create_symlink links it to the blob (relative, as real
downloads do), _cache_commit_hash_for_specific_revision writes refs/<branch>."""

import hashlib
import os
import pathlib
import shutil

from huggingface_hub.file_download import (_cache_commit_hash_for_specific_revision,
                                           _create_symlink, _get_pointer_path,
                                           repo_folder_name)

# The Hub's default .gitattributes puts these in LFS, whose etag is the file's sha256; other
# files' etag is their git blob id.
LFS_SUFFIXES = (".safetensors", ".model", ".bin")


def etag(data: bytes, name: str) -> str:
    if name.endswith(LFS_SUFFIXES):
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def commit_hash(repo: str, ref: str) -> str:
    """A made-up but stable 40-hex commit id for `ref` of `repo`."""
    return hashlib.sha1(f"{repo} {ref}".encode()).hexdigest()


def place_in_cache(cache_dir: pathlib.Path, repo: str, model_dir: pathlib.Path,
                   revisions: dict) -> pathlib.Path:
    """Puts the files of `model_dir` (and of its subdirectories, as a pipeline's) into
    `cache_dir` as `repo`, once per {branch or tag: commit}; returns the repo's folder."""
    storage = cache_dir / repo_folder_name(repo_id=repo, repo_type="model")
    files = sorted(p for p in model_dir.rglob("*") if p.is_file())
    for ref, commit in revisions.items():
        for src in files:
            name = src.relative_to(model_dir).as_posix()
            data = src.read_bytes()
            blob = storage / "blobs" / etag(data, src.name)
            pointer = _get_pointer_path(str(storage), commit, name)
            blob.parent.mkdir(parents=True, exist_ok=True)
            os.makedirs(os.path.dirname(pointer), exist_ok=True)
            if not blob.exists():
                shutil.copyfile(src, blob)
            _create_symlink(str(blob), pointer, new_blob=True)
        _cache_commit_hash_for_specific_revision(str(storage), ref, commit)
    return storage
