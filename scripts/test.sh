#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs the whole test suite
# (unit and integration tests against real redis-server processes on 127.0.0.1) through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --test
bash scripts/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "${TEST_JOBS:-2}" --timeout 900 "$@"
