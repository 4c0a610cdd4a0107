#pragma once
// Checks `run` makes once, before any pipeline starts, that need the servers themselves.
//
// The config's cycle and self-replication checks compare cluster names and addresses; they
// cannot see that `127.0.0.1:6379` and `localhost:6379` (or a DNS alias, or a NAT address) are
// one server. Every Redis has a run_id (INFO server) unique to its process, so two cluster
// names with one run_id are one server, whatever their addresses.

#include <chrono>

#include "config/config.h"

namespace xdcr::replicator {

/**
 * Reads `INFO server` run_id from every cluster the pipelines use (concurrently, through
 * RedisConnection: TLS and AUTH as the pipelines do; `timeout` bounds each step). A cluster that
 * cannot be reached or gives no run_id is logged as a warning and skipped: it must not stop the
 * agent from starting (its pipelines retry as usual). Returns 0, or logs one error line per pair
 * of cluster names that reach one server (names, addresses, run_id) and returns 78 (EX_CONFIG).
 * A memcached cluster (no run_id, never a source) is skipped with an info line.
 */
int checkDistinctServers(const config::Config& config,
                         std::chrono::milliseconds timeout = std::chrono::seconds(3));

}  // namespace xdcr::replicator
