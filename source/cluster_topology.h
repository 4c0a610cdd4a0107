#pragma once
// A Redis Cluster's shards as a source sees them: `CLUSTER SHARDS` (Redis 7.0+) from any node —
// per shard its slot ranges and its nodes with their role and health (cluster-notes.md §4.1) —
// and a node's replication ids (`INFO replication`: master_replid, master_replid2), the shard's
// lineage. A shard is followed across failovers by its node ids (the promoted replica was in it
// already) and across restarts by its lineage (the checkpoint's replid is the master's replid or,
// after one failover, its replid2); never by address.

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/redis_endpoint.h"
#include "common/resp_value.h"
#include "config/config.h"

namespace xdcr::source {

struct ShardNode {
  std::string id;
  std::string host;
  uint16_t port = 0;
  bool master = false;
  bool online = false;  // health "online"
  int64_t offset = 0;   // replication-offset
  std::string address() const { return host + ":" + std::to_string(port); }
};

struct ShardView {
  std::vector<std::pair<int, int>> slots;  // inclusive ranges, ascending
  std::vector<ShardNode> nodes;
  /** The master (nullptr: none online, e.g. during a failover). */
  const ShardNode* master() const;
  /** A replica that is online (nullptr: none). */
  const ShardNode* onlineReplica() const;
  /** "0-5460" (its first slot range; "+" when it has more), or "no slots @<master>". */
  std::string label() const;
  /** True when the two views share a node id (the same shard, maybe after a failover). */
  bool sameShard(const ShardView& other) const;
};

/** Parses a CLUSTER SHARDS reply (RESP2: flat key/value arrays). `fallback_host` replaces an
 *  empty or "?" endpoint. */
Result<std::vector<ShardView>> parseClusterShards(const resp::Value& reply,
                                                  const std::string& fallback_host);

/**
 * CLUSTER SHARDS from the first node that answers (`known` first, then the seeds). Errors name
 * every node tried.
 */
boost::asio::awaitable<Result<std::vector<ShardView>>> discoverShards(
    const config::ClusterConfig& cluster, const std::vector<config::NodeAddress>& known,
    std::chrono::milliseconds timeout, config::NodeAddress* answered = nullptr);

struct ReplicationIds {
  std::string replid;
  std::string replid2;  // all zeros when there is none
  std::string role;     // "master" or "slave"
};
/** INFO replication of one node. */
boost::asio::awaitable<Result<ReplicationIds>> replicationIds(const RedisEndpoint& node,
                                                              std::chrono::milliseconds timeout);

}  // namespace xdcr::source
