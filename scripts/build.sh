#!/usr/bin/env bash
# Configures and builds xdcr-agent (Release, ccache, Ninja) into ./build.
#   BUILD_DIR=build  BUILD_TYPE=Release  XDCR_BUILD_TESTS=ON  XDCR_BUILD_BENCH=ON  XDCR_SANITIZE=OFF  XDCR_TSAN=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
BUILD_TYPE=${BUILD_TYPE:-Release}
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
cmake -S . -B "$BUILD_DIR" -G Ninja \
  -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
  -DXDCR_BUILD_TESTS="${XDCR_BUILD_TESTS:-ON}" \
  -DXDCR_BUILD_BENCH="${XDCR_BUILD_BENCH:-ON}" \
  -DXDCR_SANITIZE="${XDCR_SANITIZE:-OFF}" \
  -DXDCR_TSAN="${XDCR_TSAN:-OFF}" >/dev/null
# 2 cores, and the heavy Asio TUs need ~1 GiB each: two jobs.
cmake --build "$BUILD_DIR" -j "${BUILD_JOBS:-2}" "$@"
