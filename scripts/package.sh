#!/usr/bin/env bash
# Builds the Debian package: build-pkg/xdcr-agent_<version>_<arch>.deb (Release, no tests).
# Install it with: sudo apt-get install ./build-pkg/xdcr-agent_*.deb
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
command -v dpkg-shlibdeps >/dev/null || { echo "package: needs dpkg-dev (apt-get install dpkg-dev)" >&2; exit 1; }
BUILD_DIR=build-pkg XDCR_BUILD_TESTS=OFF bash scripts/build.sh --target xdcr-agent
cd build-pkg
cpack -G DEB >/dev/null
ls -1 "$PWD"/xdcr-agent_*.deb
