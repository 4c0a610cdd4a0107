#pragma once
// Which master of a Redis Cluster owns each of the 16384 slots, read from `CLUSTER SLOTS`
// (cluster-notes.md §4.1: `[start, end, [ip, port, id], replicas...]` per contiguous range).
// A writer routes every command by its key's slot (common/cluster_slot.h) with it, and reloads
// it when a node answers MOVED.

#include <boost/asio/awaitable.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/cluster_slot.h"
#include "common/error.h"
#include "common/redis_conn.h"
#include "common/resp_value.h"
#include "config/config.h"

namespace xdcr::target {

struct ClusterNode {
  std::string host;
  uint16_t port = 0;
  std::string id;       // the node id ("" when CLUSTER SLOTS did not give one)
  size_t replicas = 0;  // replicas CLUSTER SLOTS lists with it (healthy ones)
  std::string address() const { return host + ":" + std::to_string(port); }
};

class SlotMap {
 public:
  SlotMap() { owner_.fill(-1); }

  /**
   * From a `CLUSTER SLOTS` reply. An endpoint of "" or "?" (a node that does not know its own
   * address) is `fallback_host`, the address the map was read from. Fails on a malformed
   * reply, a slot owned twice, or no slot at all.
   */
  static Result<SlotMap> fromClusterSlots(const resp::Value& reply,
                                          const std::string& fallback_host);

  /** The master owning `slot` (an index into masters()), -1 when no master owns it. */
  int ownerOf(int slot) const { return owner_[static_cast<size_t>(slot)]; }
  const std::vector<ClusterNode>& masters() const { return masters_; }
  /** What a master said of its replicas itself (INFO replication connected_slaves, read at
   *  connect): CLUSTER SLOTS leaves out replicas it does not count healthy yet. */
  void setReplicas(size_t m, size_t replicas) { masters_[m].replicas = replicas; }
  /** The lowest slot master `m` owns (-1: none). */
  int lowestSlot(size_t m) const;
  /** Slots that no master owns (a cluster that is being set up or lost a shard). */
  size_t uncovered() const;
  /** The index of the master at `host:port`, -1 when it is not a master in this map. */
  int find(const std::string& host, uint16_t port) const;

 private:
  std::array<int16_t, cluster::kSlots> owner_{};
  std::vector<ClusterNode> masters_;
};

/**
 * Reads the slot map from the first node that answers: `known` (addresses the writer already
 * talks to) first, then the cluster's seeds. Every refusal is named in the error (including "this
 * node is not in cluster mode: use type: redis").
 */
net::awaitable<Result<SlotMap>> loadSlotMap(const config::ClusterConfig& cluster,
                                            const std::vector<config::NodeAddress>& known,
                                            std::chrono::milliseconds timeout);

}  // namespace xdcr::target
