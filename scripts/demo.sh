#!/usr/bin/env bash
# The README's demo command: installs what is missing, builds, starts two redis-servers on
# 127.0.0.1 (free ports), runs a pipeline between them with examples/demo.yaml, writes some
# expiring documents to the source and shows them arriving on the target with their deadlines.
# Everything runs under ./demo-run and is stopped by PID at the end (DEMO_KEEP=1 leaves the
# servers and the agent running).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
bash scripts/install-deps.sh
bash scripts/build.sh --target xdcr-agent
AGENT=$ROOT/build/xdcr-agent
RUN=$ROOT/demo-run
rm -rf "$RUN"
mkdir -p "$RUN"

port_in_use() { grep -qi ":$(printf '%04X' "$1") " /proc/net/tcp /proc/net/tcp6 2>/dev/null; }
free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$(( 20000 + RANDOM % 30000 ))
    port_in_use "$p" || { echo "$p"; return; }
  done
  echo "demo: no free port found" >&2
  exit 1
}
SRC=$(free_port)
DST=$(free_port)
while [ "$DST" = "$SRC" ]; do DST=$(free_port); done

PIDS=()
cleanup() {
  if [ "${DEMO_KEEP:-0}" = 1 ]; then
    echo "demo: left running (PIDs ${PIDS[*]}); stop with: kill ${PIDS[*]}"
    return
  fi
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
}
trap cleanup EXIT

start_redis() {
  local port=$1 name=$2
  mkdir -p "$RUN/$name"
  redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$RUN/$name" \
    --logfile "$RUN/$name/redis.log" --repl-diskless-sync-delay 0 >/dev/null &
  PIDS+=($!)
  for _ in $(seq 1 100); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && return
    sleep 0.1
  done
  echo "demo: redis-server on port $port did not start; see $RUN/$name/redis.log" >&2
  exit 1
}
start_redis "$SRC" source
start_redis "$DST" target
echo "demo: source redis on 127.0.0.1:$SRC, target redis on 127.0.0.1:$DST"

sed -e "s/127.0.0.1:7001/127.0.0.1:$SRC/" -e "s/127.0.0.1:7002/127.0.0.1:$DST/" \
  examples/demo.yaml > "$RUN/demo.yaml"
"$AGENT" validate -c "$RUN/demo.yaml"
"$AGENT" run -c "$RUN/demo.yaml" > "$RUN/agent.log" 2>&1 &
AGENT_PID=$!
PIDS=("$AGENT_PID" "${PIDS[@]}")
for _ in $(seq 1 150); do
  redis-cli -p "$SRC" info replication | grep -q "state=online" && break
  sleep 0.1
done
redis-cli -p "$SRC" info replication | grep -q "state=online" || {
  echo "demo: the agent did not attach to the source; its log:" >&2; cat "$RUN/agent.log" >&2; exit 1; }
echo "demo: agent attached to the source as a replica (log: $RUN/agent.log)"

src() { redis-cli -p "$SRC" "$@"; }
dst() { redis-cli -p "$DST" "$@"; }
src SET sess:alice "cart=3" EX 3600 >/dev/null     # 1 h TTL, but sessions are capped at 60 s
src SET sess:bob "cart=1" EX 20 >/dev/null         # 20 s: under the cap, kept
src SET tok:abc "token" >/dev/null                 # no TTL: the bucket's 10 m applies
src SET page:home "<html>" PX 90000 >/dev/null     # 90 s: under the bucket's 10 m
src SET user:1 "Ann" >/dev/null
src PERSIST user:1 >/dev/null
src HSET sess:carol cart 2 >/dev/null              # in-place write into a 60 s collection
src SET gone "x" PXAT 1000 >/dev/null              # already expired: never on the target
for _ in $(seq 1 50); do [ "$(dst EXISTS page:home)" = 1 ] && break; sleep 0.1; done

now=$(date +%s%3N)
printf '\n%-12s %-22s %-22s %s\n' key source_deadline_ms target_deadline_ms "target lives"
for k in sess:alice sess:bob tok:abc page:home user:1 sess:carol gone; do
  s=$(src PEXPIRETIME "$k"); t=$(dst PEXPIRETIME "$k")
  case $t in
    -2) life="absent" ;;
    -1) life="no deadline" ;;
    *) life="$(( (t - now + 500) / 1000 )) s" ;;
  esac
  printf '%-12s %-22s %-22s %s\n' "$k" "$s" "$t" "$life"
done
echo
echo "demo: deadlines are absolute (PEXPIRETIME, ms since the epoch); the target's maxTTL"
echo "      (sessions 60 s, bucket 10 m) capped the ones above it. Stopping with SIGTERM:"
kill -TERM "$AGENT_PID"
for _ in $(seq 1 100); do kill -0 "$AGENT_PID" 2>/dev/null || break; sleep 0.1; done
wait "$AGENT_PID" && echo "demo: agent drained, checkpointed and exited 0 ($(ls "$RUN"/xdcr-state))"
