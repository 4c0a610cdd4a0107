#!/usr/bin/env bash
# Installs the Debian 12 packages xdcr-agent needs to build, test and run its demo. Installs only
# what is missing; needs root (or sudo). Safe to run again.
#   --test  also the packages only the test suite needs: chrony (real NTP/NTS servers on
#           loopback), faketime (libfaketime: redis-server with a skewed clock), memcached (a real
#           memcached target for tests/integration/memcached_test.cc) and openssl (the
#           CLI that makes the test CA for NTS); for the fuzz smoke (scripts/fuzz.sh) clang,
#           libclang-rt-14-dev (libFuzzer's and the sanitizers' runtimes, which clang only
#           recommends) and llvm-14 (llvm-symbolizer: crash reports with file:line).
#           Note: on a machine booted with systemd, Debian's chrony package enables its own
#           chronyd service (and replaces systemd-timesyncd) — it keeps the clock synchronised
#           like any NTP client. The tests never use that daemon; they run their own, with -x.
#           prometheus: its promtool checks and unit-tests the shipped alert rules, and jq reads the
#           Grafana dashboard (tests/packaging/monitoring_test.sh). Debian's prometheus package
#           likewise enables a prometheus service (port 9090) on a machine booted with systemd;
#           the tests only run promtool (`systemctl disable --now prometheus` if unwanted).
#           zsh and man-db: the generated completions run in a real zsh and the man page is
#           rendered with warnings on (tests/packaging/cli_docs_test.sh); systemd: systemd-analyze
#           verifies the unit and rates its sandbox (tests/packaging/unit_test.sh).
#   --render  also chromium, prometheus and curl: scripts/render-dashboard.sh draws
#           docs/dashboard.png with a headless chromium against a Prometheus that scrapes a
#           running agent. Not needed by the build or the tests. Both options can be given.
set -euo pipefail

PACKAGES=(
  # toolchain
  g++ cmake ninja-build ccache pkg-config git dpkg-dev file
  # libraries (Debian's, never downloaded at build time)
  libboost1.81-dev libyaml-cpp-dev libssl-dev libspdlog-dev libfmt-dev libcli11-dev
  nlohmann-json3-dev libexpected-dev libre2-dev libxxhash-dev liblzf-dev
  # tests
  googletest libgtest-dev libgmock-dev
  # the clusters the tests and the demo run on
  redis-server redis-tools
)
for opt in "$@"; do
  case $opt in
    --test)
      PACKAGES+=(chrony faketime memcached openssl clang libclang-rt-14-dev llvm-14 clang-format clang-tidy
        prometheus jq zsh man-db systemd) ;;
    --render) PACKAGES+=(chromium prometheus curl) ;;
    *) echo "install-deps: unknown option '$opt' (--test, --render)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# The packages' own services (a system redis-server on 6379, a system chronyd) are not needed:
# the demo and the tests start their own on free ports. A temporary policy-rc.d (Debian's switch
# for "do not start services while installing") keeps them from starting now, unless the
# machine already has one.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
  $SUDO chmod +x "$policy"
  trap '$SUDO rm -f "$policy"' EXIT
fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
