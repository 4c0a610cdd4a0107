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
// A full sync of a shard is the other way keys arrive on it: its snapshot holds the keys
// migrated into it before it was taken, with no RESTORE-ASKING to guard. The same rule holds
// for them (beforeSnapshot, beforeSnapshotKey): once the snapshot has begun (the source forked
// it), a discovery names the slots the shard owns; every key of those slots left the other
// shards before the slot was assigned (MIGRATE deletes on the exporter before the operator's
// CLUSTER SETSLOT ... NODE), so the other shards' offsets read after that discovery are their
// horizons for the whole snapshot, and no snapshot key is written before their pipelines are
// checkpointed past them. A snapshot key of a slot the shard did not own then (a migration into
// it in progress) waits like a RESTORE-ASKING, when the shard still holds it. This matters most
// for an agent given `slots` (a cluster split across agents): a shard it did not follow starts
// with such a full sync when a reshard gives it one of the agent's slots, and without the wait
// a lagging (or replaying) link of the exporter would apply its DELs after the snapshot wrote
// the moved keys, losing them on the target for good.
//
// One guard per source cluster and process: it needs every shard's checkpoints, which one
// process has. Agents that split a cluster between them by slot each guard the shards they
// follow, which include every shard owning one of their slots (see docs/architecture.md,
// "Scale-out").

#include <boost/asio/awaitable.hpp>

#include <atomic>
#include <bitset>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "clock/clock.h"
#include "common/cluster_slot.h"
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
  /** The same, by a link that waits at `position` (its checkpoints can get there meanwhile)
   *  for the RESTORE-ASKING that ends at `restore_end` of the importer's stream. */
  net::awaitable<Status> beforeRestore(const ShardLocator* shard,
                                       const std::vector<std::string>& keys,
                                       std::chrono::steady_clock::duration limit, uint64_t position,
                                       uint64_t restore_end);
  /** A RESTORE of `key` is waiting: a DEL of it on another shard must not be replicated. From
   *  any thread (the other calls are awaited from a link's thread and run on the guard's). */
  bool restorePending(std::string_view key) const;
  /** The key's slot is one the agent replicates (the source's `slots`; all without them). */
  bool selects(std::string_view key) const {
    return selected_.test(static_cast<size_t>(cluster::keySlot(key)));
  }

  using SlotSet = std::bitset<cluster::kSlots>;
  /**
   * A full sync of `shard` has begun (its snapshot is forked): discovers the slots the shard
   * owns now and waits until every other shard followed here is checkpointed past its offset
   * read after that discovery (see above). Instances without a checkpoint are not waited for:
   * they full-sync after this moment, or are in a full sync themselves (docs/architecture.md
   * says what that leaves open). Returns the slots the shard owns. Bounded by `limit`;
   * `stopping` ends the wait early (an error).
   */
  net::awaitable<Result<SlotSet>> beforeSnapshot(const ShardLocator* shard,
                                                 std::chrono::steady_clock::duration limit,
                                                 std::function<bool()> stopping);
  /**
   * A snapshot key of `shard` in a slot it did not own at beforeSnapshot: when the shard still
   * holds it (a migration into it), waits as for a RESTORE-ASKING of it; otherwise (it left the
   * shard since the snapshot: the shard's stream carries its DEL, in order) returns at once.
   */
  net::awaitable<Status> beforeSnapshotKey(const ShardLocator* shard, const std::string& key,
                                           std::chrono::steady_clock::duration limit);

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
  /** The offsets of every shard other than `shard` once none of `keys` is on them (no keys:
   *  now). `for_snapshot`: shards none of whose instances has a checkpoint are left out. */
  net::awaitable<Result<std::vector<Horizon>>> horizons(const ShardLocator* shard,
                                                        const std::vector<std::string>& keys,
                                                        std::chrono::steady_clock::time_point until,
                                                        bool for_snapshot);
  /**
   * The horizons for a RESTORE-ASKING that ends at `restore_end` of `shard`'s stream. Read as
   * the importer's master_repl_offset first, then the other shards' offsets: a RESTORE-ASKING the
   * importer had executed by the first reading came from a MIGRATE its exporter ran to the end,
   * its DEL included, before it answered the later INFO (a server runs one command at a time),
   * so those offsets are past the DEL, and past every other RESTORE-ASKING's up to that first
   * reading. That reading is kept (Epoch) and serves every later RESTORE-ASKING at or before it:
   * a link replaying a reshard after a crash waits for the other shards' checkpoints once, not
   * once per MIGRATE batch while they chase a live load (CI's sanitized run: the replay of ~1,000
   * batches did not finish in 60 s). Needs no EXISTS.
   */
  net::awaitable<Result<std::vector<Horizon>>> restoreHorizons(
      const ShardLocator* shard, const std::vector<std::string>& keys,
      std::chrono::steady_clock::time_point until, uint64_t restore_end);
  struct Epoch {
    std::string masters;       // every shard's master then: a failover or a reshard ends it
    uint64_t importer_offset;  // the importer's master_repl_offset, read first
    std::vector<Horizon> horizons;
  };
  /** Until every instance of each horizon's shard is checkpointed past it. `for_snapshot`:
   *  instances without a checkpoint are not waited for, and a shard whose link waits in
   *  beforeRestore (maybe for the full sync that waits here) is there once checkpointed where
   *  it waits. */
  net::awaitable<Status> awaitCheckpoints(const std::vector<Horizon>& hs,
                                          std::chrono::steady_clock::time_point until,
                                          bool for_snapshot, const std::string& what,
                                          const std::function<bool()>& stopping);
  /** beforeRestore, beforeSnapshot and beforeSnapshotKey on the guard's executor. */
  net::awaitable<Status> restoreHere(const ShardLocator* shard,
                                     const std::vector<std::string>& keys,
                                     std::chrono::steady_clock::duration limit,
                                     std::optional<uint64_t> position,
                                     std::optional<uint64_t> restore_end);
  net::awaitable<Result<SlotSet>> snapshotHere(const ShardLocator* shard,
                                               std::chrono::steady_clock::duration limit,
                                               std::function<bool()> stopping);
  net::awaitable<Status> snapshotKeyHere(const ShardLocator* shard, const std::string& key,
                                         std::chrono::steady_clock::duration limit);
  /** beforeRestore's wait for `keys` (`position`: where the calling link waits, if it does;
   *  `restore_end`: where its RESTORE-ASKING ends, see restoreHorizons). */
  net::awaitable<Status> guardKeys(const ShardLocator* shard, const std::vector<std::string>& keys,
                                   std::chrono::steady_clock::duration limit, bool for_snapshot,
                                   std::optional<uint64_t> position,
                                   std::optional<uint64_t> restore_end = std::nullopt);
  /** horizons() while holding the connections. */
  net::awaitable<Result<std::vector<Horizon>>> leasedHorizons(
      const ShardLocator* shard, const std::vector<std::string>& keys,
      std::chrono::steady_clock::time_point until, bool for_snapshot);
  /** The connections are shared: one caller at a time uses them (acquire, then a Lease). */
  net::awaitable<void> acquire();
  void release();
  struct Lease {  // releases the connections however its scope ends
    MigrationGuard& g;
    ~Lease() { g.release(); }
  };
  RedisConnection& connection(const std::string& host, uint16_t port);
  /** One round of `cmds` on node host:port (connected on first use). */
  net::awaitable<Result<std::vector<resp::Value>>> call(
      const std::string& host, uint16_t port, const std::vector<std::vector<std::string>>& cmds);

  net::any_io_executor ex_;
  std::shared_ptr<ClusterTopology> topology_;
  const clock::Clock& clock_;  // monotonic: the time limits
  std::map<Pipeline*, const ShardLocator*> members_;
  mutable std::mutex pending_mutex_;  // restorePending() is called from the links' threads
  std::multiset<std::string, std::less<>> pending_;
  std::map<std::string, std::unique_ptr<RedisConnection>> conns_;  // by "host:port"
  bool busy_ = false;  // one caller of the connections at a time
  /** Links waiting in beforeRestore: where each waits (its checkpoints can get that far). */
  std::multimap<const ShardLocator*, uint64_t> waiting_at_;
  SlotSet selected_;  // the source's `slots` (all when it has none)
  Notify idle_;
  uint64_t restores_ = 0;
  std::map<const ShardLocator*, Epoch> epochs_;  // restoreHorizons' last reading, per importer
  std::atomic<uint64_t> deletes_held_ = 0;       // counted by the links' threads
};

}  // namespace xdcr::replicator
