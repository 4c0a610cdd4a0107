#!/usr/bin/env bash
# Renders packaging/grafana/xdcr-agent.dashboard.json to docs/dashboard.png against a running agent,
# without Grafana (which Debian does not package):
#   1. two redis-servers (source, target) and the agent with examples/demo.yaml, on free ports,
#      under a write load that varies, with a pause of the pipeline, a resync (where the agent has
#      POST /pipelines/NAME/resync), a failed and then a successful SIGHUP reload on the way;
#   2. Debian's prometheus scraping the agent's /metrics every 2 s (temporary config and storage),
#      with packaging/prometheus/xdcr-agent.rules.yml loaded;
#   3. packaging/grafana/render.html, served by that Prometheus (--web.user-assets, same origin as
#      its API), draws every panel from query_range results in the dashboard's grid as SVG;
#   4. headless chromium takes the screenshot; everything is stopped by PID.
# Needs: bash scripts/install-deps.sh --render (chromium, prometheus, curl) and a built agent.
#   RENDER_SECONDS=240   how long the load runs (the time range drawn)
#   RENDER_OUT=docs/dashboard.png
#   RENDER_KEEP=1        leave everything running (Prometheus's URL is printed)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SECONDS_TOTAL=${RENDER_SECONDS:-240}
OUT=${RENDER_OUT:-docs/dashboard.png}
[[ $OUT == /* ]] || OUT=$ROOT/$OUT
AGENT=${AGENT:-$ROOT/build/xdcr-agent}
PIPELINE=east-to-west
for tool in chromium prometheus curl redis-server redis-cli; do
  command -v "$tool" >/dev/null ||
    { echo "render: $tool not found; run: bash scripts/install-deps.sh --render" >&2; exit 1; }
done
[ -x "$AGENT" ] || { echo "render: $AGENT not found; build it: bash scripts/build.sh --target xdcr-agent" >&2; exit 1; }
[ "$SECONDS_TOTAL" -ge 60 ] || { echo "render: RENDER_SECONDS must be at least 60" >&2; exit 1; }

RUN=$(mktemp -d /tmp/xdcr-render.XXXXXX)
port_in_use() { grep -qi ":$(printf '%04X' "$1") " /proc/net/tcp /proc/net/tcp6 2>/dev/null; }
TAKEN=" "
free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$(( 20000 + RANDOM % 30000 ))
    if ! port_in_use "$p" && [[ $TAKEN != *" $p "* ]]; then echo "$p"; return; fi
  done
  echo "render: no free port found" >&2
  exit 1
}
SRC=$(free_port); TAKEN+="$SRC "
DST=$(free_port); TAKEN+="$DST "
ADMIN=$(free_port); TAKEN+="$ADMIN "
PROM=$(free_port); TAKEN+="$PROM "

PIDS=()
cleanup() {
  if [ "${RENDER_KEEP:-0}" = 1 ]; then
    echo "render: left running (PIDs ${PIDS[*]}); Prometheus http://127.0.0.1:$PROM; stop with: kill ${PIDS[*]}"
    return
  fi
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  rm -rf "$RUN"
}
trap cleanup EXIT
log() { echo "render: [$(date +%T)] $*"; }

start_redis() {
  local port=$1 name=$2
  mkdir -p "$RUN/$name"
  redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$RUN/$name" \
    --logfile "$RUN/$name/redis.log" --repl-diskless-sync-delay 0 >/dev/null &
  PIDS+=($!)
  for _ in $(seq 1 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && return; sleep 0.1; done
  echo "render: redis-server on $port did not start; see $RUN/$name/redis.log" >&2
  exit 1
}
start_redis "$SRC" source
start_redis "$DST" target

sed -e "s/127.0.0.1:7001/127.0.0.1:$SRC/" -e "s/127.0.0.1:7002/127.0.0.1:$DST/" \
    -e "s|# admin_listen: 127.0.0.1:9464|admin_listen: 127.0.0.1:$ADMIN|" \
    -e "s|state_dir: ./xdcr-state|state_dir: $RUN/state|" \
    examples/demo.yaml >"$RUN/agent.yaml"
grep -q "admin_listen: 127.0.0.1:$ADMIN" "$RUN/agent.yaml" ||
  { echo "render: examples/demo.yaml has no '# admin_listen: 127.0.0.1:9464' line to enable" >&2; exit 1; }
cp "$RUN/agent.yaml" "$RUN/agent.yaml.good"
"$AGENT" run -c "$RUN/agent.yaml" >"$RUN/agent.log" 2>&1 &
AGENT_PID=$!
PIDS=("$AGENT_PID" "${PIDS[@]}")
for _ in $(seq 1 150); do
  redis-cli -p "$SRC" info replication | grep -q "state=online" && break; sleep 0.1
done
redis-cli -p "$SRC" info replication | grep -q "state=online" ||
  { echo "render: the agent did not attach; its log:" >&2; cat "$RUN/agent.log" >&2; exit 1; }
log "source :$SRC, target :$DST, agent admin :$ADMIN"

# Prometheus: the agent every 2 s, the shipped rules, the page and the dashboard as user assets.
mkdir -p "$RUN/assets" "$RUN/prom"
cp packaging/grafana/render.html packaging/grafana/xdcr-agent.dashboard.json "$RUN/assets/"
cat >"$RUN/prometheus.yml" <<EOF
global:
  scrape_interval: 2s
  evaluation_interval: 2s
rule_files:
  - $ROOT/packaging/prometheus/xdcr-agent.rules.yml
scrape_configs:
  - job_name: xdcr-agent
    static_configs:
      - targets: ['127.0.0.1:$ADMIN']
EOF
prometheus --config.file="$RUN/prometheus.yml" --storage.tsdb.path="$RUN/prom" \
  --web.listen-address="127.0.0.1:$PROM" --web.user-assets="$RUN/assets" \
  --log.level=warn >"$RUN/prometheus.log" 2>&1 &
PIDS=("$!" "${PIDS[@]}")
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PROM/-/ready" >/dev/null && break; sleep 0.2; done
curl -sf "http://127.0.0.1:$PROM/-/ready" >/dev/null ||
  { echo "render: prometheus did not start; its log:" >&2; cat "$RUN/prometheus.log" >&2; exit 1; }
log "prometheus :$PROM scraping the agent"

# The write load: batches of SETs with deadlines; the batch size (in $RUN/batch) varies.
echo 50 >"$RUN/batch"
payload=$(head -c 150 /dev/zero | tr '\0' x)
(
  i=0
  while :; do
    n=$(cat "$RUN/batch" 2>/dev/null || echo 50)
    for _ in $(seq 1 "$n"); do
      i=$((i + 1))
      echo "SET sess:$((i % 5000)) $payload EX 300"
      echo "SET doc:$((i % 20000)) $payload-$i EX 3600"
    done | redis-cli -p "$SRC" >/dev/null 2>&1 || true
    sleep 0.2
  done
) &
PIDS=("$!" "${PIDS[@]}")
START=$(date +%s)
at() { local until=$(( START + SECONDS_TOTAL * $1 / 100 )); while [ "$(date +%s)" -lt "$until" ]; do sleep 1; done; }
post() { curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$ADMIN/pipelines/$PIPELINE/$1"; }

at 10;  echo 150 >"$RUN/batch"; log "load up"
at 25;  log "pause: HTTP $(post pause)"
at 40;  log "resume: HTTP $(post resume)"
at 50;  log "resync: HTTP $(post resync) (404: an agent without POST /pipelines/NAME/resync)"
at 60;  printf 'pipelines: [\n' >"$RUN/agent.yaml"; kill -HUP "$AGENT_PID"; log "SIGHUP with a broken config"
at 72;  cp "$RUN/agent.yaml.good" "$RUN/agent.yaml"; kill -HUP "$AGENT_PID"; log "SIGHUP with the good config"
at 78;  echo 400 >"$RUN/batch"; log "load burst"
at 88;  echo 80 >"$RUN/batch"; log "load down"
at 100
END=$(date +%s)
kill -0 "$AGENT_PID" || { echo "render: the agent exited; its log:" >&2; tail -20 "$RUN/agent.log" >&2; exit 1; }

URL="http://127.0.0.1:$PROM/user/render.html?from=$START&to=$END&rate=20s&width=1600&height=1800"
URL+="&note=$(printf 'Rendered by scripts/render-dashboard.sh: xdcr-agent %s, examples/demo.yaml, %s s of writes; Prometheus scrapes every 2 s.' \
  "$("$AGENT" version 2>/dev/null | head -1 | awk '{print $2}')" "$SECONDS_TOTAL" | sed 's/ /%20/g; s/,/%2C/g; s/:/%3A/g')"
# shellcheck disable=SC2054  # --window-size takes "W,H"
CHROME=(chromium --headless --disable-gpu --no-sandbox --disable-dev-shm-usage --hide-scrollbars
  --user-data-dir="$RUN/chromium" --window-size=1600,1800)
"${CHROME[@]}" --dump-dom "$URL" >"$RUN/dom.html" 2>"$RUN/chromium.log" || true
grep -q 'data-render="done"' "$RUN/dom.html" ||
  { echo "render: the page did not finish drawing; chromium's log:" >&2; tail -20 "$RUN/chromium.log" >&2; exit 1; }
panels=$(grep -o 'data-panels="[0-9]*"' "$RUN/dom.html" | grep -o '[0-9]*')
with=$(grep -o 'data-panels-with-data="[0-9]*"' "$RUN/dom.html" | grep -o '[0-9]*')
mkdir -p "$(dirname "$OUT")"
"${CHROME[@]}" --screenshot="$OUT" "$URL" >>"$RUN/chromium.log" 2>&1 ||
  { echo "render: chromium failed; its log:" >&2; tail -20 "$RUN/chromium.log" >&2; exit 1; }
log "$OUT: $(stat -c %s "$OUT") bytes; $with of $panels panels with data; the whole run took $(( $(date +%s) - START + 0 )) s after the servers started"
