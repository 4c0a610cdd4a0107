#!/usr/bin/env bash
# The server matrix (issue 16): every Redis and Valkey version the agent supports, from Debian's
# packages only, for the tests (label `matrix`) and for trying the agent by hand.
#
#   bash scripts/servers.sh provision   # idempotent: builds what is missing, mounts what the
#                                       # chroots need; about 1 minute the first time
#   bash scripts/servers.sh list        # NAME VERSION WRAPPER, one line per usable server
#   bash scripts/servers.sh unmount     # the chroots' mounts (provision makes them again)
#
# Servers (NAME: where it comes from):
#   redis-7.0   bookworm's redis-server, the host's (scripts/install-deps.sh)
#   valkey-8.0  bookworm-backports' valkey-server, installed on the host
#   redis-8.0   trixie's redis-server, in a debootstrap chroot (trixie's glibc is newer than the
#               host's, so its binaries run only there)
#   valkey-8.1  trixie's valkey-server, the same chroot
#   redis-8     sid's redis-server, in a second chroot (a later 8.0.x)
#   valkey-9    sid's valkey-server, the same chroot
# Each runs through $XDCR_SERVERS_DIR/bin/NAME, a wrapper that execs the server (in its chroot:
# `exec chroot ROOT /usr/bin/...`), so the PID a test starts is the server's and it stops it by
# PID. The chroots share the host's network (loopback) and see the host's /tmp (bind-mounted),
# where the tests keep their directories. Versions are read from the servers themselves.
#
# Environment: XDCR_SERVERS_DIR (default ~/.cache/xdcr-servers), DEBIAN_MIRROR (default
# http://deb.debian.org/debian). Needs root (debootstrap, chroot, mount).
set -euo pipefail
DIR=${XDCR_SERVERS_DIR:-$HOME/.cache/xdcr-servers}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
export DEBIAN_FRONTEND=noninteractive

say() { echo "servers: $*" >&2; }
die() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot and mount); run it as root or with sudo"

# Debian's "do not start services while installing" switch, for the host and each chroot.
no_services() {
  local root=$1
  if [ ! -e "$root/usr/sbin/policy-rc.d" ]; then
    mkdir -p "$root/usr/sbin"
    printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
    chmod +x "$root/usr/sbin/policy-rc.d"
    echo "$root/usr/sbin/policy-rc.d"
  fi
}

host_packages() {
  local missing=()
  for p in debootstrap redis-server valkey-server; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  local list=/etc/apt/sources.list.d/xdcr-bookworm-backports.sources
  if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    say "adding bookworm-backports ($list) for valkey-server 8.0"
    printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      "$MIRROR" >"$list"
  fi
  local policy
  policy=$(no_services "")
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends debootstrap redis-server redis-tools >/dev/null
  apt-get install -y -qq --no-install-recommends -t bookworm-backports valkey-server valkey-tools \
    >/dev/null
  [ -n "$policy" ] && rm -f "$policy"
  # Debian enables the packages' own services; the tests start their own servers.
  systemctl disable --now valkey-server >/dev/null 2>&1 || true
}

mount_chroot() {
  local root=$1
  mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
  mkdir -p "$root/tmp"
  mountpoint -q "$root/tmp" || mount --bind /tmp "$root/tmp"
}

# chroot SUITE PACKAGES...: a minbase chroot of SUITE under $DIR/SUITE with PACKAGES installed.
chroot_suite() {
  local suite=$1
  shift
  local root=$DIR/$suite
  if [ ! -e "$root/.xdcr-ready" ]; then
    say "building the $suite chroot in $root (debootstrap, about 20 s)"
    # (never through a mount: its /tmp is the host's)
    for m in tmp proc; do
      if mountpoint -q "$root/$m" 2>/dev/null; then umount "$root/$m"; fi
    done
    rm -rf --one-file-system "$root"
    mkdir -p "$root"
    debootstrap --variant=minbase "$suite" "$root" "$MIRROR" >"$DIR/$suite-debootstrap.log" 2>&1 ||
      die "debootstrap $suite failed; see $DIR/$suite-debootstrap.log"
    no_services "$root" >/dev/null
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    mount_chroot "$root"
    # sid's Release file can be "expired" against this machine's clock (server-versions-notes.md).
    chroot "$root" apt-get -o Acquire::Check-Valid-Until=false update -qq
    chroot "$root" apt-get install -y -qq --no-install-recommends "$@" >/dev/null
    echo "$*" >"$root/.xdcr-ready"
  fi
  mount_chroot "$root"
  # A chroot built for fewer packages (an older version of this script) gets the rest.
  if [ "$(cat "$root/.xdcr-ready")" != "$*" ]; then
    say "installing $* in the $suite chroot"
    chroot "$root" apt-get -o Acquire::Check-Valid-Until=false update -qq
    chroot "$root" apt-get install -y -qq --no-install-recommends "$@" >/dev/null
    echo "$*" >"$root/.xdcr-ready"
  fi
}

wrapper() {
  local name=$1 root=$2 binary=$3
  mkdir -p "$DIR/bin"
  if [ -z "$root" ]; then
    printf '#!/bin/sh\nexec %s "$@"\n' "$binary" >"$DIR/bin/$name"
  else
    printf '#!/bin/sh\nexec chroot %s %s "$@"\n' "$root" "$binary" >"$DIR/bin/$name"
  fi
  chmod +x "$DIR/bin/$name"
}

provision() {
  mkdir -p "$DIR"
  host_packages
  chroot_suite trixie redis-server valkey-server
  # libfaketime: the newer servers with a skewed clock (clock compensation of field deadlines).
  chroot_suite sid redis-server valkey-server libfaketime
  wrapper redis-7.0 "" /usr/bin/redis-server
  wrapper valkey-8.0 "" /usr/bin/valkey-server
  wrapper redis-8.0 "$DIR/trixie" /usr/bin/redis-server
  wrapper valkey-8.1 "$DIR/trixie" /usr/bin/valkey-server
  wrapper redis-8 "$DIR/sid" /usr/bin/redis-server
  wrapper valkey-9 "$DIR/sid" /usr/bin/valkey-server
  list
}

list() {
  for w in redis-7.0 valkey-8.0 redis-8.0 valkey-8.1 redis-8 valkey-9; do
    [ -x "$DIR/bin/$w" ] || continue
    local v
    v=$("$DIR/bin/$w" --version 2>/dev/null | grep -o 'v=[0-9.]*' | cut -d= -f2) || true
    echo "$w ${v:-unusable} $DIR/bin/$w"
  done
}

unmount() {
  for suite in trixie sid; do
    for m in tmp proc; do
      mountpoint -q "$DIR/$suite/$m" 2>/dev/null && umount "$DIR/$suite/$m"
    done
  done
  return 0
}

case "${1:-}" in
  provision) provision ;;
  list) list ;;
  unmount) unmount ;;
  *) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2 ;;
esac
