#!/usr/bin/env bash
# The Debian package builds, holds what it should, and the packaged binary runs: built with CPack
# from the test build, unpacked with dpkg-deb -x into a temporary root (nothing is installed on
# the machine), then `version` and `validate` of the packaged binary and examples; the man page,
# completions, LICENSE and changelog; the example the systemd unit runs with, with its credential,
# and (as root) run on a read-only root with a writable state directory, as the unit runs it.
set -u
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
check() {  # check NAME COMMAND...
  if "${@:2}" >"$tmp/out" 2>&1; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAILED: $1"; cat "$tmp/out"; fi
}
(cd "$build" && cpack -G DEB -B "$tmp/pkg" >"$tmp/cpack.log" 2>&1) || { cat "$tmp/cpack.log"; exit 1; }
deb=$(ls "$tmp"/pkg/xdcr-agent_*.deb)
check "package named xdcr-agent" bash -c "dpkg-deb -f '$deb' Package | grep -qx xdcr-agent"
check "dependencies computed from the binary" bash -c "dpkg-deb -f '$deb' Depends | grep -q libyaml-cpp"
dpkg-deb -x "$deb" "$tmp/root"
agent=$tmp/root/usr/bin/xdcr-agent
for f in usr/bin/xdcr-agent usr/lib/systemd/system/xdcr-agent.service \
         usr/share/doc/xdcr-agent/examples/demo.yaml usr/share/doc/xdcr-agent/README.md \
         usr/share/xdcr-agent/prometheus/xdcr-agent.rules.yml \
         usr/share/xdcr-agent/grafana/xdcr-agent.dashboard.json \
         usr/share/doc/xdcr-agent/examples/xdcr.yaml usr/share/doc/xdcr-agent/LICENSE \
         usr/share/doc/xdcr-agent/CHANGELOG.md usr/share/man/man1/xdcr-agent.1.gz \
         usr/share/bash-completion/completions/xdcr-agent \
         usr/share/zsh/vendor-completions/_xdcr-agent; do
  check "contains /$f" test -f "$tmp/root/$f"
done
check "version runs" bash -c "'$tmp/root/usr/bin/xdcr-agent' version | grep -q '^xdcr-agent '"
check "validate accepts the packaged example" \
  "$tmp/root/usr/bin/xdcr-agent" validate -c "$tmp/root/usr/share/doc/xdcr-agent/examples/demo.yaml"
# The documents: the Apache-2.0 text, a changelog, the man page and the completions.
doc=$tmp/root/usr/share/doc/xdcr-agent
check "LICENSE is the Apache License 2.0" cmp "$doc/LICENSE" /usr/share/common-licenses/Apache-2.0
check "CHANGELOG.md keeps a changelog" grep -q '^## \[Unreleased\]' "$doc/CHANGELOG.md"
man1=$tmp/root/usr/share/man/man1/xdcr-agent.1.gz
commands=$("$agent" --help | sed -n '/^Subcommands:/,$p' | awk 'NR > 1 && /^  [a-z]/ {print $1}')
MANWIDTH=80 man -l "$man1" >"$tmp/man.txt" 2>&1
for c in $commands; do check "man page: xdcr-agent $c" grep -q "xdcr-agent $c" "$tmp/man.txt"; done
MANWIDTH=80 man --warnings -l "$man1" >/dev/null 2>"$tmp/man.err"
check "man page: no warnings" test ! -s "$tmp/man.err"
check "bash completion registers" bash -c \
  "source '$tmp/root/usr/share/bash-completion/completions/xdcr-agent' && complete -p xdcr-agent"
check "zsh completion is a #compdef file" bash -c \
  "head -1 '$tmp/root/usr/share/zsh/vendor-completions/_xdcr-agent' | grep -qx '#compdef xdcr-agent'"

# The example the unit runs with (/etc/xdcr-agent/xdcr.yaml), under a temporary root: its admin
# token comes as a systemd credential, its state_dir is the unit's StateDirectory.
example=$doc/examples/xdcr.yaml
etc=$tmp/root/etc/xdcr-agent state=$tmp/root/var/lib/xdcr-agent creds=$tmp/credentials
mkdir -p "$etc" "$state" "$creds"
port=$((20000 + RANDOM % 30000))
while { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null; do exec 3<&-; port=$((20000 + RANDOM % 30000)); done
sed -e "s|^  state_dir: /var/lib/xdcr-agent|  state_dir: $state|" \
    -e "s|^  admin_listen: 127.0.0.1:9464|  admin_listen: 127.0.0.1:$port|" "$example" >"$etc/xdcr.yaml"
check "the example's state_dir is moved under the temporary root" grep -q "state_dir: $state" "$etc/xdcr.yaml"
(umask 077; printf 'token-for-the-test\n' >"$creds/admin-token")
check "validate accepts the unit's example with its credential" \
  env CREDENTIALS_DIRECTORY="$creds" "$agent" validate -c "$etc/xdcr.yaml"
env -u CREDENTIALS_DIRECTORY "$agent" validate -c "$etc/xdcr.yaml" >"$tmp/nocred.out" 2>&1
check "without the credential: 78" test $? -eq 78
check "without the credential: the LoadCredential= line to add" \
  grep -q 'LoadCredential=admin-token:/etc/xdcr-agent/admin-token' "$tmp/nocred.out"

# The unit's file system, as far as it can be had without systemd (root and unshare -m): the
# whole root read-only (ProtectSystem=strict) but the state directory (StateDirectory=). The
# example runs there; a state_dir beside the file (./xdcr-state, the old example's) is refused by
# validate and run alike with 78 (before: validate passed, run exited 1, systemd restarted it in
# a loop).
if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
  sed "s|^  state_dir: .*|  state_dir: ./xdcr-state|" "$etc/xdcr.yaml" >"$etc/beside.yaml"
  cat >"$tmp/sandboxed.sh" <<SANDBOX
set -u
mount --bind "$tmp/root" "$tmp/root" || exit 90
mount --bind "$state" "$state" || exit 91
mount -o remount,bind,ro "$tmp/root" || exit 92
export CREDENTIALS_DIRECTORY="$creds"
touch "$etc/probe" 2>/dev/null && { echo "the root is not read-only"; exit 93; }
"$agent" validate -c "$etc/beside.yaml" >"$tmp/beside-validate.out" 2>&1; echo "validate-beside \$?"
"$agent" run -c "$etc/beside.yaml" >"$tmp/beside-run.out" 2>&1; echo "run-beside \$?"
"$agent" validate -c "$etc/xdcr.yaml" >"$tmp/validate.out" 2>&1; echo "validate \$?"
"$agent" run -c "$etc/xdcr.yaml" >"$tmp/run.out" 2>&1 &
pid=\$!
for i in \$(seq 1 100); do
  grep -q 'starting 1 pipeline' "$tmp/run.out" && break
  kill -0 \$pid 2>/dev/null || break
  sleep 0.1
done
sleep 1
if kill -0 \$pid 2>/dev/null; then echo running; else echo "not running"; fi
kill -TERM \$pid; wait \$pid; echo "run \$?"
test -f "$state/agent.lock" && echo "lock in the state directory"
SANDBOX
  unshare -m bash "$tmp/sandboxed.sh" >"$tmp/sandboxed.out" 2>&1
  check "sandbox: validate refuses ./xdcr-state on the read-only root with 78" grep -qx 'validate-beside 78' "$tmp/sandboxed.out"
  check "sandbox: run refuses it with 78, not 1" grep -qx 'run-beside 78' "$tmp/sandboxed.out"
  check "sandbox: the refusal names the directory" grep -q "agent.state_dir \"$etc/xdcr-state\" cannot be created or written" "$tmp/beside-run.out"
  check "sandbox: the refusal says read-only and StateDirectory=" bash -c \
    "grep -q 'Read-only file system' '$tmp/beside-run.out' && grep -q 'StateDirectory=xdcr-agent' '$tmp/beside-run.out'"
  check "sandbox: validate accepts the example" grep -qx 'validate 0' "$tmp/sandboxed.out"
  check "sandbox: run of the example keeps running" grep -qx 'running' "$tmp/sandboxed.out"
  check "sandbox: SIGTERM ends it with 0" grep -qx 'run 0' "$tmp/sandboxed.out"
  check "sandbox: it wrote into the state directory" grep -qx 'lock in the state directory' "$tmp/sandboxed.out"
  [ "$fail" -eq 0 ] || { cat "$tmp/sandboxed.out"; tail -n 5 "$tmp"/beside-*.out "$tmp/run.out"; }
else
  echo "not root or no unshare -m: the unit's read-only file system was not emulated"
fi

# Installed for real (CI=true as root, e.g. the fresh-machine chroot; never over an xdcr-agent
# the machine already has): dpkg -i, the packaged example validated and run from /usr, removed.
if [ "${CI:-}" = true ] && [ "$(id -u)" = 0 ] && command -v dpkg >/dev/null &&
   ! dpkg -s xdcr-agent >/dev/null 2>&1; then
  dpkg -i "$deb" >"$tmp/dpkg.out" 2>&1
  check "dpkg -i installs the package" dpkg -s xdcr-agent
  check "installed: xdcr-agent on the PATH runs" bash -c "xdcr-agent version | grep -q '^xdcr-agent '"
  check "installed: the man page" bash -c "MANWIDTH=80 man xdcr-agent | grep -q 'xdcr-agent run'"
  check "installed: the unit file" test -f /lib/systemd/system/xdcr-agent.service
  installed_example=/usr/share/doc/xdcr-agent/examples/xdcr.yaml
  sed -e "s|^  state_dir: .*|  state_dir: $tmp/installed-state|" \
      -e "s|^  admin_listen: 127.0.0.1:9464|  admin_listen: 127.0.0.1:$port|" \
      "$installed_example" >"$tmp/installed.yaml"
  check "installed: validate accepts the packaged example" \
    env CREDENTIALS_DIRECTORY="$creds" xdcr-agent validate -c "$tmp/installed.yaml"
  env CREDENTIALS_DIRECTORY="$creds" xdcr-agent run -c "$tmp/installed.yaml" >"$tmp/installed-run.out" 2>&1 &
  ipid=$!
  sleep 2
  check "installed: run of the packaged example keeps running" kill -0 "$ipid"
  kill -TERM "$ipid" 2>/dev/null
  wait "$ipid"
  check "installed: SIGTERM ends it with 0" test $? -eq 0
  dpkg -r xdcr-agent >>"$tmp/dpkg.out" 2>&1
  check "dpkg -r removes it" bash -c "! command -v xdcr-agent"
  [ "$fail" -eq 0 ] || { cat "$tmp/dpkg.out"; tail -n 20 "$tmp/installed-run.out"; }
else
  echo "not CI=true as root with dpkg (or xdcr-agent already installed): the package was not installed"
fi

printf 'pipelines: [\n' >"$tmp/bad.yaml"
check "validate rejects a broken file with 78" bash -c \
  "'$tmp/root/usr/bin/xdcr-agent' validate -c '$tmp/bad.yaml'; test \$? -eq 78"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
