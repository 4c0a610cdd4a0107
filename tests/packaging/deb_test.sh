#!/usr/bin/env bash
# The Debian package builds, holds what it should, and the packaged binary runs: built with CPack
# from the test build, unpacked with dpkg-deb -x into a temporary root (nothing is installed on
# the machine), then `version` and `validate` of the packaged binary and example.
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
for f in usr/bin/xdcr-agent usr/lib/systemd/system/xdcr-agent.service \
         usr/share/doc/xdcr-agent/examples/demo.yaml usr/share/doc/xdcr-agent/README.md \
         usr/share/xdcr-agent/prometheus/xdcr-agent.rules.yml \
         usr/share/xdcr-agent/grafana/xdcr-agent.dashboard.json; do
  check "contains /$f" test -f "$tmp/root/$f"
done
check "version runs" bash -c "'$tmp/root/usr/bin/xdcr-agent' version | grep -q '^xdcr-agent '"
check "validate accepts the packaged example" \
  "$tmp/root/usr/bin/xdcr-agent" validate -c "$tmp/root/usr/share/doc/xdcr-agent/examples/demo.yaml"
printf 'pipelines: [\n' >"$tmp/bad.yaml"
check "validate rejects a broken file with 78" bash -c \
  "'$tmp/root/usr/bin/xdcr-agent' validate -c '$tmp/bad.yaml'; test \$? -eq 78"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
