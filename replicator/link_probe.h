#pragma once
// Is the link back? While a link backs off after a failure, it asks its servers whether they
// answer again (issue 17: after a partition the agent must be streaming within 2 s of the link's
// return, not after a grown backoff). A probe is the connection a session would open — TCP, TLS,
// AUTH as configured — and a PING (`version` to a memcached target); any answer, even an error
// reply or a refused AUTH, means the network path works. Only an I/O failure (refused, reset, timed
// out) means it does not.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <vector>

#include "common/redis_endpoint.h"
#include "config/config.h"

namespace xdcr::replicator {

/** True when every endpoint answered within `timeout` (each probed in turn). */
boost::asio::awaitable<bool> allAnswer(boost::asio::any_io_executor ex,
                                       const std::vector<RedisEndpoint>& endpoints,
                                       std::chrono::milliseconds timeout);

/** The address a probe of `cluster` asks: its address, a Redis Cluster's first seed, or a
 *  Sentinel-managed cluster's first Sentinel. */
RedisEndpoint probeEndpoint(const config::ClusterConfig& cluster);

}  // namespace xdcr::replicator
