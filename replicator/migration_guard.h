#pragma once
// Slot migrations on a Redis Cluster source (issue 15, cluster-notes.md §2): MIGRATE writes
// `RESTORE-ASKING k` on the importing shard's stream, then `DEL k` on the exporting shard's.
// The two streams are read by independent links, in no common order, and a link replays from
// its last checkpoint after a reconnect or a crash. Applied naively, the exporter's DEL (or an
// older write of k it replays) reaches the target after the importer's RESTORE and deletes the
// key (measured: 55 of 55 migrated keys lost).
//
// The rule: the importer writes its RESTORE only once every other shard's pipelines have a
// durable checkpoint at or past that shard's offset at a moment when the shard no longer held k
// (its horizon). Then
//  - everything the exporter wrote about k before the migration, its DEL included, was applied
//    to the target before the RESTORE (acknowledged, since checkpoints cover only that), and
//  - no replay of the exporter can repeat any of it (its checkpoints are past the horizon).
// While a RESTORE waits, a DEL of the same key on another shard is not replicated: the RESTORE
// (written with REPLACE) follows it, so the key never disappears from the target meanwhile.
//
// The horizon: on each other shard's master, `EXISTS k` (pipelined, for the keys of a batch)
// until none of them is there any more (MIGRATE deletes right after the importer answered), then
// `INFO replication`'s master_repl_offset, which is at or past that DEL.
//
// One guard per source cluster and process: it needs every shard's checkpoints, which one
// process has. Agents that split a cluster's shards between them do not share it (see
// docs/architecture.md, "Scale-out").

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "clock/clock.h"
#include "common/error.h"
#include "common/notify.h"
#include "common/redis_conn.h"
#include "config/config.h"

namespace xdcr::replicator {

class ClusterTopology;
class Pipeline;
class ShardLocator;

class MigrationGuard {
 public:
  MigrationGuard(net::any_io_executor ex, std::shared_ptr<ClusterTopology> topology,
                 const clock::Clock& clock);
  ~MigrationGuard();

  /** A pipeline instance reading shard `shard` (its checkpoints count for the horizon). */
  void add(const ShardLocator* shard, Pipeline* p);
  void remove(Pipeline* p);

  /**
   * Before the importer `shard` writes RESTORE-ASKING of `keys`: waits until every other shard
   * is past its horizon for them (see above). Bounded: after `limit` it returns an error naming
   * the shard that did not get there (the link then reconnects and tries again).
   */
  net::awaitable<Status> beforeRestore(const ShardLocator* shard,
                                       const std::vector<std::string>& keys,
                                       std::chrono::steady_clock::duration limit);
  /** A RESTORE of `key` is waiting: a DEL of it on another shard must not be replicated. */
  bool restorePending(std::string_view key) const;

  /** Counters for status and tests. */
  uint64_t restoresGuarded() const { return restores_; }
  uint64_t deletesHeld() const { return deletes_held_; }
  void countDeleteHeld() { ++deletes_held_; }

 private:
  struct Horizon {
    const ShardLocator* shard;
    std::string address;
    uint64_t offset;
  };
  /** The offsets of every shard other than `shard` once none of `keys` is on them. */
  net::awaitable<Result<std::vector<Horizon>>> horizons(
      const ShardLocator* shard, const std::vector<std::string>& keys,
      std::chrono::steady_clock::time_point until);
  RedisConnection& connection(const std::string& host, uint16_t port);

  net::any_io_executor ex_;
  std::shared_ptr<ClusterTopology> topology_;
  const clock::Clock& clock_;  // monotonic: the time limits
  std::map<Pipeline*, const ShardLocator*> members_;
  std::multiset<std::string, std::less<>> pending_;
  std::map<std::string, std::unique_ptr<RedisConnection>> conns_;  // by "host:port"
  bool busy_ = false;  // one beforeRestore at a time (the connections are shared)
  Notify idle_;
  uint64_t restores_ = 0;
  uint64_t deletes_held_ = 0;
};

}  // namespace xdcr::replicator
