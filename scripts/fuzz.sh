#!/usr/bin/env bash
# Builds the libFuzzer targets into build-san/ (the one clang build with ASan + UBSan incl.
# float-cast-overflow and libFuzzer's coverage, which scripts/test.sh also runs every test
# suite in) and runs them. Findings land in fuzz/findings/TARGET/ (not committed); fixed ones
# are copied to fuzz/regressions/TARGET/, which every build replays (ctest -L fuzz).
#   scripts/fuzz.sh TARGET SECONDS   fuzz one target (or "all", one after another); new inputs
#                                    are merged, minimized, into fuzz/seeds/TARGET
#   scripts/fuzz.sh --campaign TARGET  the acceptance run: 10^6 executions or 30 minutes,
#                                    whichever comes first, its corpus kept in
#                                    build-san/corpus/TARGET (not merged into the seeds);
#                                    prints the row for docs/reliability.md's table
#   scripts/fuzz.sh --ci [SECONDS]   seeds and regressions, then SECONDS (default 10) per
#                                    target, without touching fuzz/seeds
#   scripts/fuzz.sh --configure      configure build-san/ only (scripts/test.sh builds it all)
#   scripts/fuzz.sh --list           the targets
# Long runs: one target at a time, under nice (-jobs=1 -workers=1 is libFuzzer's default).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build-san

TARGETS=(safetensors checkpoint_index model_config quant_config generation_config tokenizer_json
         vocab_merges tiktoken sentencepiece chat_template llama2c quant_layouts gguf
         openai_request pth clip_tokenizer unigram_tokenizer png flux_pipeline images_request
         sound_file ct2 transcriptions_request image_file chat_content video_file)

dict_for() {
  case "$1" in
    safetensors | checkpoint_index | quant_layouts) echo fuzz/dicts/safetensors.dict ;;
    chat_template) echo fuzz/dicts/jinja.dict ;;
    gguf) echo fuzz/dicts/gguf.dict ;;
    openai_request | images_request | chat_content) echo fuzz/dicts/openai.dict ;;
    pth) echo fuzz/dicts/pth.dict ;;
    png | image_file) echo fuzz/dicts/png.dict ;;
    sound_file) echo fuzz/dicts/audio.dict ;;
    transcriptions_request) echo fuzz/dicts/multipart.dict ;;
    *) echo fuzz/dicts/json.dict ;;
  esac
}

# No CUDA kernels here (-DQS_CUDA=OFF): the release build compiles them, and nvcc's three
# architectures would only add CI time to a build whose point is the host code. Shared
# libraries (-DQS_SHARED_LIBS=ON): statically linked, every instrumented test executable would
# carry its own copy of the layers (6 GB in all). A build directory made before either option
# existed is given it too.
configure() {
  if [[ ! -f $BUILD/CMakeCache.txt ]]; then
    CC=clang CXX=clang++ cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DQS_SANITIZE=ON \
      -DQS_FUZZ=ON -DQS_BUILD_BENCH=OFF -DQS_CUDA=OFF -DQS_SHARED_LIBS=ON >/dev/null
  elif ! grep -q '^QS_CUDA:BOOL=OFF$' "$BUILD/CMakeCache.txt" ||
    ! grep -q '^QS_SHARED_LIBS:BOOL=ON$' "$BUILD/CMakeCache.txt"; then
    cmake -S . -B "$BUILD" -DQS_CUDA=OFF -DQS_SHARED_LIBS=ON >/dev/null
  fi
}

build() {
  configure
  cmake --build "$BUILD" -j"$(nproc)" --target "$@" >/dev/null
}

# Common flags: 10 s per input is a hang; 2 GB is a memory blow-up; both are findings. On a
# machine loaded by other work a run under nice can be starved for longer than that, so
# QS_FUZZ_TIMEOUT raises the hang limit (the campaigns of docs/reliability.md say when).
run_flags() {
  echo "-timeout=${QS_FUZZ_TIMEOUT:-10} -rss_limit_mb=2048 -max_len=65536 -dict=$(dict_for "$1")" \
    "-artifact_prefix=fuzz/findings/$1/ -print_final_stats=1"
}

inputs() {  # the committed corpus of a target: seeds, and past findings when it has any
  echo "fuzz/seeds/$1"
  [[ -d fuzz/regressions/$1 ]] && echo "fuzz/regressions/$1"
  return 0
}

check_targets() {
  for t in "$@"; do
    [[ " ${TARGETS[*]} " == *" $t "* ]] || { echo "fuzz: no target '$t' (--list)" >&2; exit 2; }
  done
}

# Fuzzes $1 with the extra libFuzzer flags $3... into build-san/corpus/$1, logging to $2, then
# merges what added coverage, minimized, into fuzz/seeds/$1.
fuzz_and_merge() {
  local t=$1 log=$2 work="$BUILD/corpus/$1" merged
  shift 2
  mkdir -p "$work" "fuzz/findings/$t"
  # libFuzzer's status lines separate the count with a tab; grep finding nothing is no error.
  local rc
  set +e
  # shellcheck disable=SC2046
  nice -n 19 "$BUILD/fuzz/${t}_fuzz" $(run_flags "$t") "$@" "$work" $(inputs "$t") 2>&1 |
    tee "$log" | grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|ERROR|SUMMARY' >&2
  rc=${PIPESTATUS[0]}
  set -e
  [[ $rc -eq 0 ]] || { echo "fuzz: $t failed; see fuzz/findings/$t/" >&2; exit 1; }
  [[ ${QS_FUZZ_MERGE:-1} == 1 ]] || return 0
  merged=$(mktemp -d)
  "$BUILD/fuzz/${t}_fuzz" -merge=1 "$merged" "fuzz/seeds/$t" "$work" >/dev/null 2>&1
  rm -rf "fuzz/seeds/$t" && mv "$merged" "fuzz/seeds/$t"
}

# The table row of a finished run: executions, exec/s, cov, ft, corpus (files / size).
row() {  # row TARGET LOG CORPUS_DIR
  local t=$1 log=$2 corpus=$3
  local execs rate cov ft secs
  execs=$(grep -oE '^stat::number_of_executed_units:[[:space:]]+[0-9]+' "$log" | grep -oE '[0-9]+$')
  rate=$(grep -oE '^stat::average_exec_per_sec:[[:space:]]+[0-9]+' "$log" | grep -oE '[0-9]+$')
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -n 1 | grep -oE '[0-9]+')
  ft=$(grep -oE 'ft: [0-9]+' "$log" | tail -n 1 | grep -oE '[0-9]+')
  secs=$(grep -oE 'Done [0-9]+ runs in [0-9]+ second' "$log" | grep -oE 'in [0-9]+' | grep -oE '[0-9]+' || echo "?")
  echo "| $t | $execs in $secs s | $rate | $cov | $ft | $(find "$corpus" -type f | wc -l) inputs," \
    "$(du -sh --apparent-size "$corpus" | cut -f1) | none |"
}

# The --ci run of one target: its seeds and regressions, then $2 seconds; writes its exit
# status to $3/TARGET and prints one line (or, when it failed, the end of its log).
ci_one() {
  local t=$1 seconds=$2 status=$3 work log rc=0
  work=$(mktemp -d)
  log="$work.log"
  mkdir -p "fuzz/findings/$t"
  # The run starts by executing every seed and regression input (libFuzzer's initial
  # corpus); new inputs go to the throw-away first directory.
  # shellcheck disable=SC2046
  "$BUILD/fuzz/${t}_fuzz" $(run_flags "$t") -max_total_time="$seconds" "$work" \
    $(inputs "$t") >"$log" 2>&1 || rc=$?
  if ((rc != 0)); then
    { tail -n 60 "$log"; echo "fuzz: $t failed; the input is in fuzz/findings/$t/"; } >&2
  else
    echo "$t: $(grep -E '^stat::number_of_executed_units' "$log") $(grep -oE 'cov: [0-9]+' "$log" | tail -n 1)"
  fi
  echo "$rc" >"$status/$t"
  rm -rf "$work" "$log"
}

case "${1:-}" in
  --list)
    printf '%s\n' "${TARGETS[@]}"
    ;;
  --configure)
    configure
    ;;
  --ci)
    seconds="${2:-10}"
    build qs_fuzzers
    # One libFuzzer process per core (each is single-threaded): the targets' verdicts land in
    # $status/TARGET, which is read once all have finished, so a failure is never lost to the
    # order in which the jobs end.
    status=$(mktemp -d)
    for t in "${TARGETS[@]}"; do
      while (($(jobs -rp | wc -l) >= $(nproc))); do wait -n || true; done
      ci_one "$t" "$seconds" "$status" &
    done
    wait
    failed=""
    for t in "${TARGETS[@]}"; do
      [[ $(cat "$status/$t" 2>/dev/null) == 0 ]] || failed+="$t "
    done
    rm -rf "$status"
    [[ -z $failed ]] || { echo "fuzz: failed: $failed" >&2; exit 1; }
    ;;
  --campaign)
    t=${2:?usage: scripts/fuzz.sh --campaign TARGET}
    check_targets "$t"
    build "${t}_fuzz"
    log="$BUILD/campaign-$t.log"
    # A million executions leave a corpus of thousands of inputs: it stays in build-san/corpus
    # (the next campaign starts from it) and the committed seeds stay the small, readable set.
    QS_FUZZ_MERGE=0 fuzz_and_merge "$t" "$log" -runs=1000000 -max_total_time=1800
    row "$t" "$log" "$BUILD/corpus/$t"
    ;;
  "" | -h | --help)
    sed -n '2,15p' "$0"
    exit 2
    ;;
  *)
    target=$1
    seconds=${2:?usage: scripts/fuzz.sh TARGET SECONDS}
    list=("$target")
    [[ $target == all ]] && list=("${TARGETS[@]}")
    check_targets "${list[@]}"
    build $(printf '%s_fuzz ' "${list[@]}")
    for t in "${list[@]}"; do
      fuzz_and_merge "$t" "$BUILD/fuzz-$t.log" -max_total_time="$seconds"
      row "$t" "$BUILD/fuzz-$t.log" "fuzz/seeds/$t"
    done
    ;;
esac
