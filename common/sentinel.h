#pragma once
// Redis Sentinel for a `type: redis_sentinel` cluster (interface.md §6.1): which node is the
// master now, and a watch that says when it stops being it.
//
// A Sentinel-managed failover leaves the old master running as a master for seconds (11 s in
// cluster-notes.md §3.6) while the promoted replica takes writes: a PSYNC client still attached
// to the old node receives bytes the new history never has. So a connection goes only to a node
// that a Sentinel names as master AND that says so itself (ROLE), and a session ends as soon as
// a Sentinel announces `+switch-master` for it (watchSwitchMaster), to rediscover and resume
// (PSYNC <old replid> <offset+1> continues on the promoted node).
//
// Used by the source (replicator/source_link.cc), the target's connections (target/) and the
// tools (verify, preflight, the clock probe); for the other kinds resolveEndpoint() is just
// ClusterConfig::endpoint().

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <string>

#include "common/error.h"
#include "common/redis_endpoint.h"
#include "config/config.h"

namespace xdcr::sentinel {

namespace net = boost::asio;

/**
 * Asks each Sentinel of `cluster` in turn (with sentinel_username/sentinel_password) for
 * `SENTINEL get-master-addr-by-name <master_name>`, then connects to the node it names (with the
 * cluster's credentials and TLS options) and checks that it is a master (`ROLE`, or `INFO
 * replication` for a user without +role). The first node that passes is returned as an endpoint
 * with the cluster's credentials. Otherwise the error names every Sentinel tried and what each
 * said (unreachable, unknown master name, a node that is a replica: a failover in progress).
 * `timeout` bounds each step.
 */
net::awaitable<Result<RedisEndpoint>> discoverMaster(const config::ClusterConfig& cluster,
                                                     std::chrono::milliseconds timeout);

/** Where a data connection to `cluster` goes: discoverMaster() for a redis_sentinel cluster,
 *  ClusterConfig::endpoint() otherwise. */
net::awaitable<Result<RedisEndpoint>> resolveEndpoint(const config::ClusterConfig& cluster,
                                                      std::chrono::milliseconds timeout);

/**
 * Subscribes to `+switch-master` on a Sentinel of `cluster` and returns (success) when the
 * master named master_name is no longer `current_master` ("host:port", RedisEndpoint::address()):
 * a `+switch-master` message that moves it elsewhere, or, right after subscribing, a Sentinel
 * that already names another master (a switch between discovery and the subscription). The
 * subscription is pinged every few seconds; a Sentinel that stops answering for the cluster's
 * link_timeout, or fails, is replaced by the next one. Returns an error only when no Sentinel
 * could be subscribed to (each one's reason in the message). Cancellable (|| operator).
 */
net::awaitable<Status> watchSwitchMaster(const config::ClusterConfig& cluster,
                                         const std::string& current_master);

/**
 * For a session attached to `current_master`: waits until the Sentinels move the master away
 * from it and returns the error that ends the session ("<label>: the Sentinels moved the master
 * away from H:P; ..."). While no Sentinel can be watched it warns and tries again every few
 * seconds: the data connection itself is fine. Cancellable (|| operator).
 */
net::awaitable<Error> untilMasterMoves(const config::ClusterConfig& cluster,
                                       std::string current_master, std::string label);

/** Parses a `+switch-master` payload "<name> <old-ip> <old-port> <new-ip> <new-port>" into the
 *  master's name and its new "ip:port"; false when malformed. */
bool parseSwitchMaster(const std::string& payload, std::string& name, std::string& new_address);

}  // namespace xdcr::sentinel
