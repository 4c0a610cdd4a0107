#!/usr/bin/env bash
# The shipped Prometheus rules and Grafana dashboard (packaging/prometheus, packaging/grafana):
#   monitoring_test.sh check-rules  SRC   promtool check rules on the rules file
#   monitoring_test.sh test-rules   SRC   promtool test rules: the alerts' unit tests
#   monitoring_test.sh dashboard    SRC   the dashboard is valid JSON, every query is valid PromQL
#                                         (promtool check rules on a file made of them), uses the
#                                         ${DS_PROMETHEUS} data source, panels fit the 24-column
#                                         grid without overlapping
#   monitoring_test.sh metric-names SRC AGENT
#                                         every metric name the rules, their tests and the dashboard
#                                         use is one the agent exports: AGENT runs a pipeline
#                                         between two real redis-servers (free ports) and its
#                                         /metrics families (# TYPE lines; a histogram's
#                                         _bucket/_sum/_count) are compared with those names
# Needs promtool (Debian's prometheus package) and jq: scripts/install-deps.sh --test.
set -u
mode=${1:?usage: monitoring_test.sh check-rules|test-rules|dashboard|metric-names SRC [AGENT]}
src=${2:?the source directory}
rules=$src/packaging/prometheus/xdcr-agent.rules.yml
rules_test=$src/packaging/prometheus/xdcr-agent.rules.test.yml
dashboard=$src/packaging/grafana/xdcr-agent.dashboard.json

need() {
  command -v "$1" >/dev/null && return
  echo "monitoring_test: $1 not found: install Debian's $2 package (bash scripts/install-deps.sh --test)" >&2
  exit 1
}

tmp=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

case $mode in
check-rules)
  need promtool prometheus
  promtool check rules "$rules"
  ;;

test-rules)
  need promtool prometheus
  # promtool reads rule_files relative to the test file's directory
  cd "$(dirname "$rules_test")" && promtool test rules "$(basename "$rules_test")"
  ;;

dashboard)
  need promtool prometheus
  need jq jq
  fail=0
  jq empty "$dashboard" || { echo "FAILED: $dashboard is not valid JSON"; exit 1; }
  # Every query target: an expression, on the ${DS_PROMETHEUS} data source.
  bad=$(jq -r '.panels[] | select(.type != "row") | . as $p | .targets[]
    | select((.expr // "") == "" or .datasource.uid != "${DS_PROMETHEUS}")
    | "\($p.title) \(.refId)"' "$dashboard")
  [ -z "$bad" ] || { echo "FAILED: targets without an expr or not on \${DS_PROMETHEUS}:"; echo "$bad"; fail=1; }
  bad=$(jq -r '.panels[] | select(.type != "row" and (.datasource.uid != "${DS_PROMETHEUS}")) | .title' "$dashboard")
  [ -z "$bad" ] || { echo "FAILED: panels not on \${DS_PROMETHEUS}: $bad"; fail=1; }
  jq -e '.templating.list[] | select(.name == "DS_PROMETHEUS" and .type == "datasource")' \
    "$dashboard" >/dev/null || { echo "FAILED: no DS_PROMETHEUS data source variable"; fail=1; }
  jq -e '.templating.list[] | select(.name == "pipeline")' "$dashboard" >/dev/null ||
    { echo "FAILED: no pipeline variable"; fail=1; }
  # The grid: 24 columns, no two panels on the same cell.
  bad=$(jq -r '[.panels[] | .gridPos as $g | select($g.x < 0 or $g.w < 1 or $g.x + $g.w > 24)
    | .title] | .[]' "$dashboard")
  [ -z "$bad" ] || { echo "FAILED: panels outside the 24 columns: $bad"; fail=1; }
  bad=$(jq -r '[.panels[] | {t: .title, g: .gridPos}] as $ps
    | [range(0; $ps | length) as $i | range($i + 1; $ps | length) as $j
       | $ps[$i] as $a | $ps[$j] as $b
       | select($a.g.x < $b.g.x + $b.g.w and $b.g.x < $a.g.x + $a.g.w
                and $a.g.y < $b.g.y + $b.g.h and $b.g.y < $a.g.y + $a.g.h)
       | "\($a.t) / \($b.t)"] | .[]' "$dashboard")
  [ -z "$bad" ] || { echo "FAILED: overlapping panels: $bad"; fail=1; }
  # Every query parses: each one, with Grafana's variables replaced, becomes a recording rule
  # that promtool checks.
  {
    echo "groups:"
    echo "  - name: dashboard-queries"
    echo "    rules:"
    jq -r '.panels[] | select(.type != "row") | .targets[] | .expr' "$dashboard" |
      sed -e 's/\$__rate_interval/1m/g' -e 's/\$__interval/1m/g' -e 's/\$__range/1h/g' \
          -e 's/\$[a-z_]*/.*/g' |
      while IFS= read -r expr; do
        echo "      - record: dashboard:query"
        printf '        expr: %s\n' "$(jq -Rn --arg e "$expr" '$e')"
      done
  } >"$tmp/queries.yml"
  n=$(grep -c 'record:' "$tmp/queries.yml")
  if promtool check rules "$tmp/queries.yml" >"$tmp/promtool.out" 2>&1; then
    echo "dashboard: $n queries parse"
  else
    echo "FAILED: a dashboard query does not parse:"; cat "$tmp/promtool.out"; fail=1
  fi
  [ "$n" -ge 20 ] || { echo "FAILED: only $n queries found in $dashboard"; fail=1; }
  [ "$fail" -eq 0 ] && echo "dashboard: $(jq '[.panels[] | select(.type != "row")] | length' "$dashboard") panels checked"
  exit "$fail"
  ;;

metric-names)
  agent=${3:?the xdcr-agent binary}
  port_in_use() { grep -qi ":$(printf '%04X' "$1") " /proc/net/tcp /proc/net/tcp6 2>/dev/null; }
  taken=" "
  free_port() {
    local p
    for _ in $(seq 1 200); do
      p=$(( 20000 + RANDOM % 30000 ))
      if ! port_in_use "$p" && [[ $taken != *" $p "* ]]; then taken+="$p "; echo "$p"; return; fi
    done
    echo "monitoring_test: no free port found" >&2; exit 1
  }
  src_port=$(free_port); dst_port=$(free_port); admin_port=$(free_port)
  for side in source:$src_port target:$dst_port; do
    name=${side%%:*} port=${side#*:}
    mkdir -p "$tmp/$name"
    redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$tmp/$name" \
      --logfile "$tmp/$name/redis.log" --repl-diskless-sync-delay 0 >/dev/null &
    PIDS+=($!)
  done
  for port in "$src_port" "$dst_port"; do
    for _ in $(seq 1 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    redis-cli -p "$port" ping >/dev/null 2>&1 || { echo "FAILED: redis-server on $port did not start"; exit 1; }
  done
  sed -e "s/127.0.0.1:7001/127.0.0.1:$src_port/" -e "s/127.0.0.1:7002/127.0.0.1:$dst_port/" \
      -e "s|# admin_listen: 127.0.0.1:9464|admin_listen: 127.0.0.1:$admin_port|" \
      -e "s|state_dir: ./xdcr-state|state_dir: $tmp/state|" \
      "$src/examples/demo.yaml" >"$tmp/agent.yaml"
  grep -q "admin_listen: 127.0.0.1:$admin_port" "$tmp/agent.yaml" ||
    { echo "FAILED: examples/demo.yaml no longer has the admin_listen line this test edits"; exit 1; }
  "$agent" run -c "$tmp/agent.yaml" >"$tmp/agent.log" 2>&1 &
  PIDS=($! "${PIDS[@]}")
  scrape() {  # GET /metrics over bash's /dev/tcp (HTTP/1.0: the agent closes after answering)
    exec 3<>"/dev/tcp/127.0.0.1/$admin_port" || return 1
    printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
    cat <&3
    exec 3<&-
  }
  # The pipeline attached, and one write went through, so every family has had its chance.
  for _ in $(seq 1 150); do
    redis-cli -p "$src_port" info replication | grep -q "state=online" && break; sleep 0.1
  done
  redis-cli -p "$src_port" set monitoring:probe 1 ex 600 >/dev/null
  for _ in $(seq 1 100); do [ "$(redis-cli -p "$dst_port" exists monitoring:probe)" = 1 ] && break; sleep 0.1; done
  [ "$(redis-cli -p "$dst_port" exists monitoring:probe)" = 1 ] ||
    { echo "FAILED: the agent did not replicate a key; its log:"; cat "$tmp/agent.log"; exit 1; }
  scrape 2>/dev/null >"$tmp/metrics" || true
  grep -q '^HTTP/1.[01] 200' "$tmp/metrics" ||
    { echo "FAILED: GET /metrics on 127.0.0.1:$admin_port:"; head -5 "$tmp/metrics"; cat "$tmp/agent.log"; exit 1; }
  tr -d '\r' <"$tmp/metrics" | awk '$1 == "#" && $2 == "TYPE" {print $3, $4}' | sort -u >"$tmp/families"
  nfam=$(wc -l <"$tmp/families")
  [ "$nfam" -ge 20 ] || { echo "FAILED: only $nfam metric families on /metrics"; cat "$tmp/metrics"; exit 1; }

  missing=0 checked=0
  for name in $(grep -ohE '\b(xdcr|process)_[a-z0-9_]+' "$rules" "$rules_test" "$dashboard" | sort -u); do
    checked=$((checked + 1))
    grep -q "^$name " "$tmp/families" && continue
    base=${name%_bucket}; base=${base%_sum}; base=${base%_count}
    if [ "$base" != "$name" ]; then
      grep -q "^$base histogram$" "$tmp/families" && continue
      [ "${name%_bucket}" = "$name" ] && grep -q "^$base summary$" "$tmp/families" && continue
    fi
    used_in=$(grep -lw "$name" "$rules" "$rules_test" "$dashboard" | sed "s|^$src/||" | paste -sd, -)
    echo "MISSING: $name (used in $used_in) is not exported by the agent"
    missing=$((missing + 1))
  done
  echo "metric-names: $checked names used, $nfam families exported, $missing missing"
  [ "$missing" -eq 0 ]
  ;;

*)
  echo "monitoring_test: unknown mode '$mode' (check-rules, test-rules, dashboard, metric-names)" >&2
  exit 2
  ;;
esac
