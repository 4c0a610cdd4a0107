#!/usr/bin/env bash
# packaging/kubernetes/sidecar.yaml (issue 18, finding 1): the agent's probes must not take the
# local Redis out of its Service. Its embedded configuration is run as the manifest runs it
# (the ConfigMap's file, the Secret's variables), beside a real local redis-server and with the
# remote datacenter unreachable; then the readiness and liveness paths the manifest declares must
# answer 200 while /readyz is 503 (a remote outage), the admin token from the Secret must guard
# the POSTs, and the image the manifest names must be the one the Dockerfile builds (non-root,
# the same uid).
set -u
src=$1 build=$(cd "$2" && pwd)
manifest=$src/packaging/kubernetes/sidecar.yaml dockerfile=$src/Dockerfile
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"' EXIT
pass=0 fail=0
check() {  # check NAME COMMAND...
  if "${@:2}" >"$tmp/out" 2>&1; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAILED: $1"; cat "$tmp/out"; fi
}
freeport() {
  local p
  while :; do
    p=$((20000 + RANDOM % 30000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
}
http() {  # http METHOD PORT PATH [TOKEN] -> the status code
  local auth=""
  [ -n "${4:-}" ] && auth="Authorization: Bearer $4"$'\r\n'
  { exec 3<>"/dev/tcp/127.0.0.1/$2"; } 2>/dev/null || { echo 000; return; }
  printf '%s %s HTTP/1.1\r\nHost: x\r\n%sContent-Length: 0\r\nConnection: close\r\n\r\n' "$1" "$3" "$auth" >&3
  head -1 <&3 | awk '{print $2}'
  exec 3<&-
}

# The manifest: the probes' paths, and the embedded config (the ConfigMap's xdcr.yaml block).
readiness=$(sed -n '/- name: xdcr-agent/,/volumeMounts:/p' "$manifest" | grep -A1 'readinessProbe' |
  grep -oE 'path: */[a-z/]+' | head -1 | sed 's/path: *//')
liveness=$(sed -n '/- name: xdcr-agent/,/volumeMounts:/p' "$manifest" | grep -A1 'livenessProbe' |
  grep -oE 'path: */[a-z/]+' | head -1 | sed 's/path: *//')
check "the agent container has a readiness probe ($readiness)" test -n "$readiness"
check "the agent container has a liveness probe ($liveness)" test -n "$liveness"
awk '/^  xdcr.yaml: \|/ {on = 1; next} on && /^(---|[^ ])/ {on = 0} on {sub(/^    /, ""); print}' \
  "$manifest" >"$tmp/embedded.yaml"
check "the ConfigMap holds a config" grep -q '^pipelines:' "$tmp/embedded.yaml"
check "the admin server has a token (it listens on the pod network)" \
  grep -qE '^  admin_token: \{env: XDCR_ADMIN_TOKEN\}' "$tmp/embedded.yaml"
check "the ConfigMap's edits are applied (agent.watch_config)" grep -qE '^  watch_config: ' "$tmp/embedded.yaml"

# Run it: the local Redis real, the remote one a port nobody listens on.
# The remote: port 1 (tcpmux), where nothing listens; a random free port could be taken by a
# server of a test running beside this one, and the pipeline would then stream.
local_port=$(freeport) remote_port=1 admin_port=$(freeport)
redis-server --port "$local_port" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$tmp" >"$tmp/redis.log" 2>&1 &
pids+=($!)
mkdir -p "$tmp/state"
sed -e "s|0.0.0.0:9464|127.0.0.1:$admin_port|" -e "s|127.0.0.1:6379|127.0.0.1:$local_port|" \
    -e "s|redis.west.example:6379|127.0.0.1:$remote_port|" \
    -e "s|state_dir: /var/lib/xdcr-agent|state_dir: $tmp/state|" "$tmp/embedded.yaml" >"$tmp/xdcr.yaml"
export WEST_PASSWORD=west-secret XDCR_ADMIN_TOKEN=token-from-the-secret
check "validate accepts the embedded config" "$build/xdcr-agent" validate -c "$tmp/xdcr.yaml"
"$build/xdcr-agent" run -c "$tmp/xdcr.yaml" >"$tmp/agent.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do [ "$(http GET "$admin_port" /healthz)" = 200 ] && break; sleep 0.1; done
sleep 2  # the remote's connection refused, the pipeline not streaming
readyz=$(http GET "$admin_port" /readyz)
check "/readyz is 503 while the remote is down (why it cannot be the pod's readiness; got $readyz)" \
  test "$readyz" = 503
check "the readiness probe ($readiness) answers 200 while the remote is down" \
  test "$(http GET "$admin_port" "$readiness")" = 200
check "the liveness probe ($liveness) answers 200" test "$(http GET "$admin_port" "$liveness")" = 200
check "a POST without the token is refused (401)" \
  test "$(http POST "$admin_port" /pipelines/east-to-west/pause)" = 401
check "a POST with the Secret's token is accepted" \
  test "$(http POST "$admin_port" /pipelines/east-to-west/pause "$XDCR_ADMIN_TOKEN")" = 200
check "the readiness probe still answers 200 with the pipeline paused" \
  test "$(http GET "$admin_port" "$readiness")" = 200
[ "$fail" -eq 0 ] || tail -n 20 "$tmp/agent.log"

# The image: the Dockerfile at the root builds it from the .deb, not as root.
check "a Dockerfile at the root" test -f "$dockerfile"
check "the runtime stage installs the .deb with apt" grep -qE 'apt-get install .*xdcr-agent_\*\.deb' "$dockerfile"
check "the entrypoint is xdcr-agent" grep -qx 'ENTRYPOINT \["/usr/bin/xdcr-agent"\]' "$dockerfile"
uid=$(sed -n 's/^USER \([0-9]*\).*/\1/p' "$dockerfile")
check "the image runs as a non-root uid ($uid)" test -n "$uid" -a "${uid:-0}" != 0
check "the manifest runs the agent as that uid" grep -q "runAsUser: $uid" "$manifest"
check ".dockerignore keeps build trees out" grep -qx 'build\*/' "$src/.dockerignore"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
