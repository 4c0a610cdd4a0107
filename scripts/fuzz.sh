#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang into build-fuzz and runs them.
#   bash scripts/fuzz.sh TARGET [SECONDS]     TARGET: resp | rdb | config | all; 60 s each by default
# Each target first replays its committed seed corpus (fuzz/corpus/TARGET, every input once), then
# fuzzes for SECONDS. The committed corpus is only read: new inputs go to build-fuzz/corpus-TARGET,
# crashes to build-fuzz/artifacts/. Exit status 1 when a target crashed or violated a property
# (the command that reproduces it is printed), 2 for a usage or setup error.
# Needs clang and the libFuzzer runtime: bash scripts/install-deps.sh --test installs them.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: bash scripts/fuzz.sh resp|rdb|config|all [SECONDS]" >&2
  exit 2
}
[ $# -ge 1 ] && [ $# -le 2 ] || usage
case "$1" in
  resp | rdb | config) TARGETS=("$1") ;;
  all) TARGETS=(resp rdb config) ;;
  *) usage ;;
esac
SECONDS_EACH=${2:-60}
[[ "$SECONDS_EACH" =~ ^[0-9]+$ ]] || usage

BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
# The largest input each target is given: a few commands, a small snapshot, a config file.
declare -A MAX_LEN=([resp]=4096 [rdb]=8192 [config]=8192)

command -v clang++ >/dev/null || {
  echo "fuzz: clang++ not found; run: bash scripts/install-deps.sh --test" >&2
  exit 2
}
runtime="$(clang++ -print-resource-dir)/lib/linux/libclang_rt.fuzzer-$(uname -m).a"
[ -f "$runtime" ] || {
  echo "fuzz: the libFuzzer runtime ($runtime) is missing; run: bash scripts/install-deps.sh --test" >&2
  exit 2
}

# Sanitizer reports with function names and file:line (llvm-14, from install-deps.sh --test).
symbolizer=$(command -v llvm-symbolizer || echo /usr/lib/llvm-14/bin/llvm-symbolizer)
[ -x "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH="$symbolizer"

export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
start=$(date +%s)
CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DXDCR_BUILD_FUZZ=ON -DXDCR_BUILD_TESTS=OFF -DXDCR_BUILD_BENCH=OFF >/dev/null
# Only the fuzz targets and the libraries they link (xdcr_common, xdcr_source, xdcr_config).
cmake --build "$BUILD_DIR" -j "${BUILD_JOBS:-2}" --target "${TARGETS[@]/#/fuzz_}"
echo "fuzz: build took $(($(date +%s) - start)) s"
# FUZZ_BUILD_ONLY=1: stop here (scripts/test.sh builds them in the background of a test stage).
[ "${FUZZ_BUILD_ONLY:-0}" = 0 ] || exit 0

mkdir -p "$BUILD_DIR/artifacts"
failed=()
for t in "${TARGETS[@]}"; do
  bin="$BUILD_DIR/fuzz/fuzz_$t"
  seeds="fuzz/corpus/$t"
  work="$BUILD_DIR/corpus-$t"
  log="$BUILD_DIR/fuzz-$t.log"
  mkdir -p "$work"
  opts=(-max_len="${MAX_LEN[$t]}" -rss_limit_mb=2048 -timeout=10 -dict="fuzz/$t.dict"
        -artifact_prefix="$BUILD_DIR/artifacts/$t-" -print_final_stats=1)

  # 1. Every committed seed once (inputs given as files are run, not fuzzed).
  echo "fuzz: $t: replaying $(ls "$seeds" | wc -l) seed inputs from $seeds"
  if ! timeout 300 "$bin" "${opts[@]}" "$seeds"/* >"$log" 2>&1; then
    input=$(sed -n 's/^Running: //p' "$log" | tail -1)
    echo "fuzz: $t: seed input $input fails; log: $log" >&2
    grep -a -E 'property violated|^     |ERROR: |SUMMARY' "$log" | head -15 >&2
    echo "fuzz: reproduce: $bin $input" >&2
    failed+=("$t")
    continue
  fi

  # 2. Fuzz for the time given, from the seeds and what earlier runs found.
  [ "$SECONDS_EACH" -gt 0 ] || continue
  echo "fuzz: $t: fuzzing for $SECONDS_EACH s (new inputs: $work)"
  rc=0
  timeout $((SECONDS_EACH + 300)) "$bin" "${opts[@]}" -max_total_time="$SECONDS_EACH" \
    "$work" "$seeds" >>"$log" 2>&1 || rc=$?
  done_line=$(grep -a -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  echo "fuzz: $t: ${execs:-?} inputs, ${rate:-?} exec/s; ${done_line:-no summary}"
  if [ "$rc" -ne 0 ]; then
    artifact=$(ls -t "$BUILD_DIR/artifacts/$t-"* 2>/dev/null | head -1 || true)
    echo "fuzz: $t: FAILED (exit $rc); log: $log" >&2
    grep -a -E 'property violated|^     |ERROR: |SUMMARY' "$log" | head -15 >&2
    if [ -n "$artifact" ]; then
      echo "fuzz: reproduce: $bin $artifact" >&2
      echo "fuzz: minimize:  $bin -minimize_crash=1 -runs=10000 $artifact" >&2
    fi
    failed+=("$t")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${TARGETS[*]}: no crash, every property held ($(($(date +%s) - start)) s in all)"
