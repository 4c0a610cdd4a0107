#pragma once
// Where a source is read from, found anew before every session (issue 15: failover).
//
// A standalone source is one fixed address. A Redis Cluster shard and a Sentinel-managed master
// move: a failover promotes another node, which continues the same replication history
// (`PSYNC <old replid> <offset+1>` -> `+CONTINUE`, cluster-notes.md §3). A Locator names the
// node to attach to now, and watches for the moment that node stops being the right one (the
// session then ends and the next one attaches where discovery says): the agent never stays on a
// node that discovery no longer calls master (an old master can keep streaming a diverging
// history for seconds, cluster-notes.md §3.6).

#include <boost/asio/awaitable.hpp>

#include <memory>
#include <string>

#include "common/error.h"
#include "common/redis_endpoint.h"
#include "config/config.h"

namespace xdcr::source {

/** The node a session attaches to. */
struct NodeChoice {
  RedisEndpoint endpoint;
  /** The node must answer ROLE with this: "master", or "slave" when reading from a replica. */
  std::string role = "master";
};

class Locator {
 public:
  virtual ~Locator() = default;
  /** The node to attach to now (may ask the cluster or the Sentinels). */
  virtual boost::asio::awaitable<Result<NodeChoice>> locate() = 0;
  /**
   * Returns when `attached` is no longer the node to read from (a failover moved the master);
   * otherwise waits (cancellable) for as long as the session lasts.
   */
  virtual boost::asio::awaitable<void> watch(const NodeChoice& attached) = 0;
  /** For messages and status: "shard 0-5460", "" for a standalone source. */
  virtual std::string describe() const = 0;
};

/** A standalone source: always `cluster.endpoint()`, no ROLE requirement beyond "master". */
class FixedLocator final : public Locator {
 public:
  explicit FixedLocator(const config::ClusterConfig& cluster) : cluster_(cluster) {}
  boost::asio::awaitable<Result<NodeChoice>> locate() override;
  boost::asio::awaitable<void> watch(const NodeChoice& attached) override;
  std::string describe() const override { return ""; }

 private:
  const config::ClusterConfig& cluster_;
};

/**
 * A Sentinel-managed master (type redis_sentinel): the node the Sentinels name now, which must
 * say it is a master (common/sentinel.h); watched with `+switch-master`.
 */
class SentinelLocator final : public Locator {
 public:
  explicit SentinelLocator(const config::ClusterConfig& cluster) : cluster_(cluster) {}
  boost::asio::awaitable<Result<NodeChoice>> locate() override;
  boost::asio::awaitable<void> watch(const NodeChoice& attached) override;
  std::string describe() const override { return ""; }

 private:
  const config::ClusterConfig& cluster_;
};

/** The Locator of a source cluster of type redis (fixed) or redis_sentinel; a Redis Cluster's
 *  shards get theirs from their discovery (replicator/cluster_source.h). */
std::shared_ptr<Locator> fixedLocator(const config::ClusterConfig& cluster);

}  // namespace xdcr::source
