#!/usr/bin/env bash
# Builds (Release, build-bench at the repository root, -j2) and runs the benchmarks, then prints
# ONE table (stdout) and writes it with every measurement as JSON (default build-bench/bench.json).
# Progress and each benchmark's own output go to stderr. Each agent figure is measured with the
# target's maxTTL clamp on and off, each native figure (a redis-server replica, REPLICAOF) in the
# same run on the same machine.
#
#   drain     1M SET PXAT written while the consumer is SIGSTOPped, then the time to apply them
#             (stream_bench; --runs runs, medians)
#   lag       a paced 50,000 writes/s for 30 s: p50/p99/max source-write -> target-visible
#             (stream_bench, keyspace notifications on the target)
#   fullsync  full sync of 1M keys of mixed types (full_sync_bench --maxttl both)
#   cost      CPU s per million events, peak RSS, RSS growth per million tracked deadlines and
#             the agent's expiry-index gauges (stream_bench, 3 x 1M deadlines)
#   fanout    the drain's backlog into TWO targets: one agent running two pipelines of one source
#             (one replication link; target 1 with the clamp on, target 2 without) against two
#             native replicas of the source; ops/s until both targets have everything, the
#             agent's CPU s; the source must list one replica for the agent, two for the natives
#             (stream_bench; --runs runs, medians)
#   catchup   sliding expiration (expiry-semantics.md §12): 10,000 sessions renewed every 2 s
#             while the agent is SIGSTOPped 20 s, the time to catch up after SIGCONT when every
#             target copy expired meanwhile (all 10,000 read back and restored) against the same
#             stream when none did (ttl 60 s); the agent's CPU s for each (stream_bench; --runs
#             runs of each, alternating, medians, ratio expired/alive)
#   cluster   the drain's backlog (--ops keys, spread over all slots) into a 3-master Redis
#             Cluster source while the consumers are SIGSTOPped: ONE agent, one pipeline into a
#             3-master target cluster (one link per source shard) against 3 native replicas, one
#             REPLICAOF each source master; ops/s until every shard has landed (agent/native),
#             the agent's CPU s per million events and per shard (its total / 3); each source
#             master must list exactly one replica (cluster_bench; --runs runs, medians)
#   wan       NOT in the default set (it adds ~4 minutes, half as much again; run it with
#             --only wan): drain and lag across a simulated WAN, a user-space proxy that delays
#             each direction --wan-delay-ms (default 40; round trip +80 ms; the kernel has no
#             netem). The native replica reads its master through a proxy; the agent (clamp
#             off) reads the source through one ("reads across": the agent in the target's
#             datacenter) or writes its target through one ("writes across": in the source's);
#             each consumer its own fresh proxy. Drain: ops/s agent/native over the same link
#             (issue 17 aims: reads across >= 0.95, writes across >= 0.9); lag at --lag-rate
#             (the proxy path sustains the default 50,000/s: each second's p50 41-45 ms through
#             40 ms, no drift, even on a busy machine): p50/p99 side by side, none visible sooner
#             than the delay (stream_bench --only drain,lag --wan-delay-ms D; JSON keys
#             wan_drain, wan_lag; the table's rows put the agent in the clamp-off column)
#
# Options (all optional):
#   --only LIST        drain,lag,fullsync,cost,fanout,catchup,cluster,wan (comma-separated or repeated;
#                      default all but wan)
#   --runs R           drain, fan-out, cluster and full-sync runs (default 3)
#   --ops N            commands of one drain, also of the cluster drain (default 1000000)
#   --keys N           full-sync keys (default 1000000)
#   --lag-seconds S    (default 30)      --lag-rate W   writes/s (default 50000)
#   --value-size B     drain/lag/cluster values (default 256)
#   --timeout S        bound on each drain / full sync
#   --agent PATH       another xdcr-agent binary (default: build-bench's)
#   --agent-threads T  the cluster drain's agent.threads (default 1)
#   --json FILE        combined results (default: $BUILD_DIR/bench.json)
#   --wan-delay-ms D   the wan part's one-way delay in ms (default 40)
#   --placement P      the wan part's agent: reads, writes or both (default both)
#   --quiet-wait S     before each measurement wait for other processes to leave the machine,
#                      at most S seconds in all per benchmark program (default 120; 0 = never)
#   --no-build         use what build-bench holds
# Environment: BUILD_DIR (default build-bench), BUILD_JOBS (default 2).
# Every redis-server and agent is a child of a benchmark, stopped by PID, also on failure or
# Ctrl-C. Default runtime on a quiet 2-core machine: about 7 minutes plus the build, and the
# cluster part (two clusters formed per agent measurement; not yet timed on a quiet machine)
# (each measurement adds a 1 s quiet check; on a busy one up to 3 x --quiet-wait more).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
build="${BUILD_DIR:-$root/build-bench}"
json="$build/bench.json"
only=""
build_it=1
quiet_wait=120
stream_args=()
wan_args=()
wan_delay=40
cluster_args=()
full_args=()

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" >&2; exit 2; }
need() { [[ $# -ge 2 ]] || { echo "run.sh: $1 needs a value" >&2; exit 2; }; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --only) need "$@"; only="${only:+$only,}$2"; shift 2 ;;
    --runs|--timeout|--agent) need "$@"; stream_args+=("$1" "$2"); cluster_args+=("$1" "$2")
      full_args+=("$1" "$2"); wan_args+=("$1" "$2"); shift 2 ;;
    --ops|--value-size) need "$@"; stream_args+=("$1" "$2"); cluster_args+=("$1" "$2")
      wan_args+=("$1" "$2"); shift 2 ;;
    --agent-threads) need "$@"; cluster_args+=("$1" "$2"); shift 2 ;;
    --lag-seconds|--lag-rate) need "$@"; stream_args+=("$1" "$2"); wan_args+=("$1" "$2")
      shift 2 ;;
    --wan-delay-ms) need "$@"; wan_delay="$2"; shift 2 ;;
    --placement) need "$@"; wan_args+=("$1" "$2"); shift 2 ;;
    --keys) need "$@"; full_args+=("$1" "$2"); shift 2 ;;
    --json) need "$@"; json="$2"; shift 2 ;;
    --quiet-wait) need "$@"; quiet_wait="$2"; shift 2 ;;
    --no-build) build_it=0; shift ;;
    -h|--help) usage ;;
    *) echo "run.sh: unknown option $1" >&2; usage ;;
  esac
done
only="${only:-drain,lag,fullsync,cost,fanout,catchup,cluster}"
stream_parts=""
run_full=0
run_cluster=0
run_wan=0
IFS=',' read -r -a parts <<<"$only"
for part in "${parts[@]}"; do
  case "$part" in
    drain|lag|cost|fanout|catchup) stream_parts="${stream_parts:+$stream_parts,}$part" ;;
    fullsync) run_full=1 ;;
    cluster) run_cluster=1 ;;
    wan) run_wan=1 ;;
    *) echo "run.sh: --only takes drain, lag, fullsync, cost, fanout, catchup, cluster, wan (not '$part')" >&2
      exit 2 ;;
  esac
done

started=$SECONDS
say() { echo "[run.sh $((SECONDS - started)) s] $*" >&2; }

if [[ $build_it -eq 1 ]]; then
  say "building in $build (Release, -j${BUILD_JOBS:-2})"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXDCR_BUILD_TESTS=ON \
    -DXDCR_BUILD_BENCH=ON >/dev/null
  # 2 cores, and the heavy Asio TUs need ~1 GiB each: two jobs (as scripts/build.sh).
  cmake --build "$build" -j "${BUILD_JOBS:-2}" --target stream_bench full_sync_bench \
    cluster_bench bench_report xdcr-agent >&2
fi

# The benchmarks share the machine: say so when something else is using it (each measurement
# also reports the other processes' load, and the table flags NOISY figures).
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9; exit}' /proc/stat; }
b0=$(busy); sleep 2; b1=$(busy)
other=$(awk -v d=$((b1 - b0)) -v hz="$(getconf CLK_TCK)" 'BEGIN{printf "%.2f", d / hz / 2}')
say "load on the machine before starting: $other cores busy"
if awk -v o="$other" 'BEGIN{exit !(o >= 0.25)}'; then
  say "WARNING: the machine is not idle; the figures will be noisy (see the 'other load' rows)"
fi

mkdir -p "$(dirname "$json")"
stream_json="$build/bench-stream.json"
full_json="$build/bench-full-sync.json"
cluster_json="$build/bench-cluster.json"
wan_json="$build/bench-wan.json"
# never fold an older run's results into this table
rm -f "$stream_json" "$full_json" "$cluster_json" "$wan_json"
status=0
if [[ -n "$stream_parts" ]]; then
  say "stream_bench --only $stream_parts ${stream_args[*]}"
  "$build/bench/stream_bench" --only "$stream_parts" --json "$stream_json" \
    --quiet-wait "$quiet_wait" "${stream_args[@]}" >&2 || status=1
fi
if [[ $run_cluster -eq 1 ]]; then
  say "cluster_bench ${cluster_args[*]}"
  "$build/bench/cluster_bench" --json "$cluster_json" --quiet-wait "$quiet_wait" \
    "${cluster_args[@]}" >&2 || status=1
fi
if [[ $run_wan -eq 1 ]]; then
  say "stream_bench --only drain,lag --wan-delay-ms $wan_delay ${wan_args[*]}"
  "$build/bench/stream_bench" --only drain,lag --wan-delay-ms "$wan_delay" --json "$wan_json" \
    --quiet-wait "$quiet_wait" "${wan_args[@]}" >&2 || status=1
fi
if [[ $run_full -eq 1 ]]; then
  say "full_sync_bench --maxttl both ${full_args[*]}"
  "$build/bench/full_sync_bench" --maxttl both --json "$full_json" --quiet-wait "$quiet_wait" \
    "${full_args[@]}" >&2 || status=1
fi
say "done; the table:"
report_args=(--json "$json")
[[ -f "$stream_json" ]] && report_args+=(--stream "$stream_json")
[[ -f "$cluster_json" ]] && report_args+=(--cluster "$cluster_json")
[[ -f "$wan_json" ]] && report_args+=(--wan "$wan_json")
[[ -f "$full_json" ]] && report_args+=(--full-sync "$full_json")
"$build/bench/bench_report" "${report_args[@]}" || status=1
[[ $status -eq 0 ]] || echo "run.sh: a benchmark reported an error (see above and the JSON)" >&2
exit $status
