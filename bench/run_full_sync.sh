#!/usr/bin/env bash
# Builds full_sync_bench (and xdcr-agent) in Release and runs it: the agent's full sync of
# 1,000,000 keys against a native Redis replica's, 3 runs each, maxTTL on (the benchmark's
# defaults). Arguments go to the benchmark, e.g.  bench/run_full_sync.sh --keys 200000 --runs 5
#   BUILD_DIR  build directory (default: build-bench at the repository root)
#   JSON       results file (default: $BUILD_DIR/full_sync_bench.json; --json FILE overrides)
# Every redis-server and agent it starts is a child stopped by PID, also on failure or Ctrl-C.
# bench/run.sh runs this one (--maxttl both) with the others and prints one table.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
build="${BUILD_DIR:-$root/build-bench}"
json="${JSON:-$build/full_sync_bench.json}"

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DXDCR_BUILD_TESTS=ON \
  -DXDCR_BUILD_BENCH=ON >/dev/null
binary="$build/bench/full_sync_bench"
# 2 cores, and the heavy Asio TUs need ~1 GiB each: two jobs (as scripts/build.sh).
cmake --build "$build" -j "${BUILD_JOBS:-2}" --target full_sync_bench xdcr-agent
exec "$binary" --json "$json" "$@"
