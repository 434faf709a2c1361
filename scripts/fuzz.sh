#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan incl. float-cast-overflow) into build-fuzz/
# and runs them. Findings land in fuzz/findings/TARGET/ (not committed); fixed ones are copied
# to fuzz/regressions/TARGET/, which every build replays (ctest -L fuzz).
#   scripts/fuzz.sh TARGET SECONDS   fuzz one target (or "all", one after another); new inputs
#                                    are merged, minimized, into fuzz/seeds/TARGET
#   scripts/fuzz.sh --ci [SECONDS]   replay seeds and regressions, then SECONDS (default 20)
#                                    per target, without touching fuzz/seeds
#   scripts/fuzz.sh --list           the targets
# Long runs: one target at a time, under nice (-jobs=1 -workers=1 is libFuzzer's default).
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS=(safetensors checkpoint_index model_config quant_config generation_config tokenizer_json
         vocab_merges tiktoken sentencepiece chat_template llama2c quant_layouts)

dict_for() {
  case "$1" in
    safetensors | checkpoint_index | quant_layouts) echo fuzz/dicts/safetensors.dict ;;
    chat_template) echo fuzz/dicts/jinja.dict ;;
    *) echo fuzz/dicts/json.dict ;;
  esac
}

build() {
  if [[ ! -f build-fuzz/CMakeCache.txt ]]; then
    CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Release -DQS_FUZZ=ON \
      -DQS_BUILD_TESTS=OFF -DQS_BUILD_BENCH=OFF >/dev/null
  fi
  cmake --build build-fuzz -j"$(nproc)" --target "$@" >/dev/null
}

# Common flags: 10 s per input is a hang; 2 GB is a memory blow-up; both are findings.
run_flags() {
  echo "-timeout=10 -rss_limit_mb=2048 -max_len=65536 -dict=$(dict_for "$1")" \
    "-artifact_prefix=fuzz/findings/$1/ -print_final_stats=1"
}

replay() {  # seeds and regressions: every one must pass before fuzzing starts
  local t=$1 dirs=("fuzz/seeds/$t")
  [[ -d fuzz/regressions/$t ]] && dirs+=("fuzz/regressions/$t")
  "build-fuzz/fuzz/${t}_fuzz" -runs=0 "${dirs[@]}" 2>&1 | tail -n 3
}

fuzz_one() {
  local t=$1 seconds=$2 work="build-fuzz/corpus/$1"
  mkdir -p "$work" "fuzz/findings/$t"
  echo "== $t: ${seconds}s" >&2
  # shellcheck disable=SC2046
  nice -n 19 "build-fuzz/fuzz/${t}_fuzz" $(run_flags "$t") -max_total_time="$seconds" \
    "$work" "fuzz/seeds/$t"
}

case "${1:-}" in
  --list)
    printf '%s\n' "${TARGETS[@]}"
    ;;
  --ci)
    seconds="${2:-20}"
    build qs_fuzzers
    for t in "${TARGETS[@]}"; do replay "$t"; done
    for t in "${TARGETS[@]}"; do
      work=$(mktemp -d)
      log="$work.log"
      mkdir -p "fuzz/findings/$t"
      # shellcheck disable=SC2046
      if ! "build-fuzz/fuzz/${t}_fuzz" $(run_flags "$t") -max_total_time="$seconds" "$work" \
        "fuzz/seeds/$t" >"$log" 2>&1; then
        tail -n 60 "$log" >&2
        echo "fuzz: $t failed; the input is in fuzz/findings/$t/" >&2
        exit 1
      fi
      echo "$t: $(grep -E '^stat::number_of_executed_units' "$log") $(grep -oE 'cov: [0-9]+' "$log" | tail -n 1)"
      rm -rf "$work" "$log"
    done
    ;;
  "" | -h | --help)
    sed -n '2,11p' "$0"
    exit 2
    ;;
  *)
    target=$1
    seconds=${2:?usage: scripts/fuzz.sh TARGET SECONDS}
    list=("$target")
    [[ $target == all ]] && list=("${TARGETS[@]}")
    for t in "${list[@]}"; do
      [[ " ${TARGETS[*]} " == *" $t "* ]] || { echo "fuzz: no target '$t' (--list)" >&2; exit 2; }
    done
    build $(printf '%s_fuzz ' "${list[@]}")
    for t in "${list[@]}"; do
      replay "$t"
      fuzz_one "$t" "$seconds"
      # Keep the committed corpus small: only inputs that add coverage, minimized.
      merged=$(mktemp -d)
      "build-fuzz/fuzz/${t}_fuzz" -merge=1 "$merged" "fuzz/seeds/$t" "build-fuzz/corpus/$t" \
        >/dev/null 2>&1
      rm -rf "fuzz/seeds/$t" && mv "$merged" "fuzz/seeds/$t"
    done
    ;;
esac
