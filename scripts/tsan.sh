#!/usr/bin/env bash
# ThreadSanitizer check of agent.threads (replicator/workers.h): builds the agent, the replicator
# unit tests and the cluster suite with -fsanitize=thread in build-tsan, then runs the Workers unit
# tests and the cluster suite with agent.threads: 3. A ThreadSanitizer report in an agent's log
# fails its test (tests/support/agent_process.cc). Not part of scripts/test.sh (CI's time budget:
# the build takes about half an hour on 2 cores from a cold ccache, the run about 5 minutes); run
# it after a change to what crosses threads.
#   TSAN_FILTER=gtest filter for the cluster suite (default: all of it)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=build-tsan BUILD_TYPE=RelWithDebInfo XDCR_TSAN=ON XDCR_BUILD_BENCH=OFF \
  bash scripts/build.sh --target xdcr-agent replicator_test cluster_integration_test
# Reports go to the agent's log (the test checks it); report every race, not only the first.
export TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1 history_size=4"
build-tsan/tests/replicator/replicator_test --gtest_filter='Workers.*'
XDCR_TEST_AGENT_THREADS=3 build-tsan/tests/integration/cluster_integration_test \
  --gtest_filter="${TSAN_FILTER:-*}"
