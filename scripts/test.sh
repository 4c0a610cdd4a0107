#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs the whole test suite
# (unit and integration tests against real redis-server processes on 127.0.0.1) through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)  # the repository: the blocks after the suite start from here
declare -A BG_PIDS=()  # jobs run beside the suite (below)
UNMOUNT_SERVERS=0
cleanup() {
  for p in "${BG_PIDS[@]}"; do kill -- "-$p" 2>/dev/null || true; done
  [ "$UNMOUNT_SERVERS" = 0 ] || bash "$ROOT/scripts/servers.sh" unmount
}
trap cleanup EXIT
bash scripts/install-deps.sh --test
# The server matrix (issue 16; scripts/servers.sh): Valkey 8.0 from bookworm-backports, Redis 8.0
# / Valkey 8.1 (trixie) and Redis 8.0.x / Valkey 9 (sid) in debootstrap chroots, cached in
# ~/.cache/xdcr-servers (about 2 minutes the first time). Its tests (label matrix) then fail
# instead of skipping when a server is missing. MATRIX=0 skips both (so does a run that is not
# root: chroot and mount need it); the chroots' mounts are removed at the end.
if [ "${MATRIX:-1}" != 0 ] && [ "$(id -u)" != 0 ]; then
  echo "test: the server matrix needs root (chroot, mount): its tests will skip" >&2
elif [ "${MATRIX:-1}" != 0 ]; then
  bash scripts/servers.sh provision
  export XDCR_MATRIX_REQUIRED=1
  UNMOUNT_SERVERS=1
fi
bash scripts/build.sh

# ---- what runs beside the suite -----------------------------------------------------------------
# The suite's two CTest runs spend most of their time waiting (servers starting, partitions held,
# deadlines passing): on 2 cores they leave about one idle. The static checks and the sanitized
# build use that core instead of running after them: at nice 19 and the idle I/O class, so a test
# process (nice 0) always comes first (nice 19 gets ~1.5 % of a contended core). CI's budget is
# what this is for (the sanitized stage is a second whole build). Each job's output goes to a log
# printed when it is waited for; a failure fails the run, as before.
background() {  # background NAME COMMAND...: runs COMMAND niced, output in build/NAME.log
  local name=$1
  shift
  mkdir -p "$ROOT/${BUILD_DIR:-build}"
  # setsid: a process group of its own, which cleanup() stops whole if the run ends early.
  (cd "$ROOT" && exec setsid -w nice -n 19 ionice -c 3 "$@") \
    >"$ROOT/${BUILD_DIR:-build}/$name.log" 2>&1 &
  BG_PIDS[$name]=$!
}
wait_background() {  # wait_background NAME: its log, and its exit status as this script's
  local name=$1 rc=0
  wait "${BG_PIDS[$name]}" || rc=$?
  echo "---- $name (ran beside the suite): ----"
  cat "$ROOT/${BUILD_DIR:-build}/$name.log"
  if [ "$rc" != 0 ]; then
    echo "test: $name failed (exit $rc); its output is above" >&2
    exit "$rc"
  fi
}
# Static checks (scripts/lint.sh: clang-format, clang-tidy). LINT=0 skips them.
if [ "${LINT:-1}" != 0 ]; then
  background lint env BUILD_DIR="${BUILD_DIR:-build}" bash scripts/lint.sh
fi
# The sanitizer build (ASan + UBSan): XDCR_SANITIZE=ON (-fsanitize=address,undefined, every UB
# report fatal; RelWithDebInfo, which the sanitizer build makes -O1 -g1 for readable stacks) in
# build-asan, benchmarks not built. SANITIZE=0 skips the stage.
if [ "${SANITIZE:-1}" != 0 ]; then
  background sanitized-build env BUILD_DIR=build-asan BUILD_TYPE=RelWithDebInfo XDCR_SANITIZE=ON \
    XDCR_BUILD_BENCH=OFF bash scripts/build.sh
fi

cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "${TEST_JOBS:-2}" --timeout 900 "$@"
[ "${LINT:-1}" = 0 ] || wait_background lint

# ---- the suite again, sanitized -----------------------------------------------------------------
# CTest gives every test process ASAN_OPTIONS/UBSAN_OPTIONS (tests/CMakeLists.txt), the agents the
# integration tests start inherit them, and a sanitizer report in an agent's log fails its test
# (tests/support/agent_process.cc). Not run sanitized: the packaging test (label packaging): it
# packages this build's binary as a .deb (which would then depend on libasan/libubsan) and runs
# only `version` and `validate` of it: it tests the package, not the code. Nor the cluster suite's
# second run with agent.threads: 3 (label threads; scripts/tsan.sh checks the threads), nor the
# 90 s WAN partitions and the 510 MB snapshot (label long: the short ones run the same code paths).
# Beside it: the fuzz targets' build (clang, build-fuzz), which the smoke below then runs.
if [ "${SANITIZE:-1}" != 0 ]; then
  cd "$ROOT"
  wait_background sanitized-build
  [ "${FUZZ_SMOKE:-1}" = 0 ] || background fuzz-build env FUZZ_BUILD_ONLY=1 bash scripts/fuzz.sh all
  ctest --test-dir build-asan --output-on-failure -j "${TEST_JOBS:-2}" --timeout 900 \
    --label-exclude "packaging|threads|long" "$@"
fi

# ---- fuzz smoke (fuzz/, scripts/fuzz.sh) -------------------------------------------------------
# After the suite: the libFuzzer targets (RESP parser + stream framing, RDB walker, config loader)
# are built with clang in build-fuzz (only the libraries they link), each replays its committed
# seed corpus, then fuzzes for FUZZ_SMOKE_SECONDS (default 20). FUZZ_SMOKE=0 skips it.
if [ "${FUZZ_SMOKE:-1}" != 0 ]; then
  cd "$ROOT"
  [ -z "${BG_PIDS[fuzz-build]:-}" ] || wait_background fuzz-build
  bash scripts/fuzz.sh all "${FUZZ_SMOKE_SECONDS:-20}"
fi
