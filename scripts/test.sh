#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs the whole test suite
# (unit and integration tests against real redis-server processes on 127.0.0.1) through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)  # the repository: the blocks after the suite start from here
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
  trap 'bash "$ROOT/scripts/servers.sh" unmount' EXIT
fi
bash scripts/build.sh
# Static checks first (scripts/lint.sh: clang-format, clang-tidy; ~3 min on 2 cores). LINT=0 skips.
if [ "${LINT:-1}" != 0 ]; then
  BUILD_DIR="${BUILD_DIR:-build}" bash scripts/lint.sh
fi
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "${TEST_JOBS:-2}" --timeout 900 "$@"

# ---- sanitizer build (ASan + UBSan) ------------------------------------------------------------
# After the suite: the same suite again, built with XDCR_SANITIZE=ON (-fsanitize=address,undefined,
# every UB report fatal; RelWithDebInfo for readable stacks) in build-asan, benchmarks not built.
# CTest gives every test process ASAN_OPTIONS/UBSAN_OPTIONS (tests/CMakeLists.txt), the agents the
# integration tests start inherit them, and a sanitizer report in an agent's log fails its test
# (tests/support/agent_process.cc). Not run sanitized: the packaging test (label packaging): it
# packages this build's binary as a .deb (which would then depend on libasan/libubsan) and runs
# only `version` and `validate` of it: it tests the package, not the code. Nor the cluster suite's
# second run with agent.threads: 3 (label threads; scripts/tsan.sh checks the threads), nor the
# 90 s WAN partitions (label long: the 20 s ones run the same code paths). SANITIZE=0 skips this
# stage.
if [ "${SANITIZE:-1}" != 0 ]; then
  cd "$ROOT"
  BUILD_DIR=build-asan BUILD_TYPE=RelWithDebInfo XDCR_SANITIZE=ON XDCR_BUILD_BENCH=OFF \
    bash scripts/build.sh
  ctest --test-dir build-asan --output-on-failure -j "${TEST_JOBS:-2}" --timeout 900 \
    --label-exclude "packaging|threads|long" "$@"
fi

# ---- fuzz smoke (fuzz/, scripts/fuzz.sh) -------------------------------------------------------
# After the suite: the libFuzzer targets (RESP parser + stream framing, RDB walker, config loader)
# are built with clang in build-fuzz (only the libraries they link), each replays its committed
# seed corpus, then fuzzes for FUZZ_SMOKE_SECONDS (default 20). FUZZ_SMOKE=0 skips it.
if [ "${FUZZ_SMOKE:-1}" != 0 ]; then
  cd "$ROOT"
  bash scripts/fuzz.sh all "${FUZZ_SMOKE_SECONDS:-20}"
fi
