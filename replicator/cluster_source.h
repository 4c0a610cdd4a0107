#pragma once
// A Redis Cluster as a source (type: redis_cluster): its shards discovered with CLUSTER SHARDS
// and followed — one replication link per shard (fan-out per shard: the pipelines reading the
// cluster share each shard's link), one checkpoint per pipeline and shard.
//
// Identity. A shard is followed by its node ids while the agent runs (a failover promotes a
// node that was in the shard already), and across restarts by its replication history: the
// checkpoint of instance `<pipeline>@<id>` holds the replid it last streamed, which is the
// shard master's replid, or its replid2 after a failover (cluster-notes.md §3). Never by address.
//
// Failover. Before each session the shard's locator discovers again and picks its master (or an
// online replica with read_from: replica), which must answer ROLE accordingly; while a session
// runs, discovery (every second) ends it as soon as that node is no longer the one, and the next
// session continues with PSYNC <replid> <offset+1> (+CONTINUE) on the new node.
//
// New shards (a master given slots) start their own links with a full sync of that shard; shards
// that leave the cluster stop theirs; the others are not restarted.

#include <boost/asio/awaitable.hpp>

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "clock/clock.h"
#include "common/notify.h"
#include "common/redis_conn.h"
#include "config/config.h"
#include "source/cluster_topology.h"
#include "source/locator.h"
#include "source/redis_source.h"

namespace xdcr::replicator {

class MigrationGuard;

/** The shards of one source cluster as last discovered; shared by its shards' locators. */
class ClusterTopology {
 public:
  ClusterTopology(net::any_io_executor ex, const config::ClusterConfig& cluster);
  /** Discovers now (a caller arriving during a discovery waits for that one; with `fresh`, for
   *  one begun after the call). */
  net::awaitable<Status> refresh(bool fresh = false);
  const std::vector<source::ShardView>& shards() const { return shards_; }
  const config::ClusterConfig& cluster() const { return cluster_; }
  /** Where it runs: the first thread (replicator/workers.h). */
  const net::any_io_executor& executor() const { return ex_; }
  /** The current view of the shard `like` was (same node ids); nullptr when it is gone. */
  const source::ShardView* find(const source::ShardView& like) const;

 private:
  net::any_io_executor ex_;
  const config::ClusterConfig& cluster_;
  std::vector<source::ShardView> shards_;
  config::NodeAddress last_good_;  // the node that answered the last discovery
  bool refreshing_ = false;
  Notify done_;
};

/**
 * Where one shard is read from: its master, or an online replica (read_from: replica). It lives
 * on its topology's executor (the first thread); locate() and watch(), awaited by the shard's
 * link on its own thread, run there, and describe() may be called from any thread.
 */
class ShardLocator final : public source::Locator {
 public:
  ShardLocator(std::shared_ptr<ClusterTopology> topology, source::ShardView view);
  net::awaitable<Result<source::NodeChoice>> locate() override;
  net::awaitable<void> watch(const source::NodeChoice& attached) override;
  std::string describe() const override {
    std::lock_guard lock(view_mutex_);
    return "shard " + view_.label();
  }
  const source::ShardView& view() const { return view_; }
  /** True when `v` holds a node this shard ever had: the same shard, or a fragment of it (a
   *  failover shows the demoted master alone, without slots, until it becomes a replica). */
  bool knows(const source::ShardView& v) const;
  /** The current view of this shard among `shards`: of those it knows, the one with slots (the
   *  most), so a failover's fragment is never taken for the shard. nullptr: none. */
  const source::ShardView* current(const std::vector<source::ShardView>& shards) const;

 private:
  /** The node to read now from `v`, nullptr when none is usable. */
  const source::ShardNode* choose(const source::ShardView& v) const;

  /** Takes `v` as the shard's view, remembering its node ids. */
  void adopt(const source::ShardView& v);
  net::awaitable<Result<source::NodeChoice>> locateHere();
  net::awaitable<void> watchHere(const source::NodeChoice& attached);

  std::shared_ptr<ClusterTopology> topology_;
  mutable std::mutex view_mutex_;  // view_ is written here, describe() read on any thread
  source::ShardView view_;         // as last seen
  std::vector<std::string> ids_;   // every node id the shard has had
};

/**
 * Runs the discovery of one source cluster for a set of pipelines and tells the caller which
 * shard instances to start and stop.
 */
class ClusterSourceGroup {
 public:
  /** One pipeline's instance for a shard: the pipeline config and `<pipeline>@<id>`. */
  struct Instance {
    const config::PipelineConfig* pipeline;
    std::string name;
  };
  /** Start the instances of a new shard on one link reading through `locator`. */
  using StartFn = std::function<void(std::shared_ptr<ShardLocator> locator, std::string label,
                                     std::vector<Instance> instances)>;
  /** Stop the instances (by name) of a shard that left the cluster. */
  using StopFn = std::function<void(const std::vector<std::string>& instances)>;

  ClusterSourceGroup(net::any_io_executor ex, config::ConfigConstSharedPtr config,
                     const config::ClusterConfig& source,
                     std::vector<const config::PipelineConfig*> pipelines,
                     const clock::Clock& clock, StartFn start, StopFn stop);

  /** Discovers, starts every shard, then follows the cluster until stop(). */
  net::awaitable<void> run();
  void stop();
  /** The slot-migration guard every shard link of this group shares. */
  const std::shared_ptr<MigrationGuard>& migrationGuard() const { return guard_; }
  /** The names of the pipelines it runs. */
  const std::vector<const config::PipelineConfig*>& pipelines() const { return pipelines_; }

 private:
  struct Running {
    std::shared_ptr<ShardLocator> locator;
    std::vector<std::string> instances;
    int missing = 0;  // discoveries in a row that did not find the shard
  };
  /** The shard owns one of the source's `slots` (all shards without `slots`). */
  bool selected(const source::ShardView& v) const;
  /** Starts the instances of shard `v` (checkpoints matched by lineage). */
  net::awaitable<Status> startShard(const source::ShardView& v);

  net::any_io_executor ex_;
  config::ConfigConstSharedPtr config_;
  const config::ClusterConfig& source_;
  std::vector<const config::PipelineConfig*> pipelines_;
  StartFn start_;
  StopFn stop_;
  std::shared_ptr<ClusterTopology> topology_;
  std::shared_ptr<MigrationGuard> guard_;
  std::vector<Running> running_;
  std::vector<std::string> claimed_;  // checkpoint instances already matched to a shard
  bool stopping_ = false;
  Notify wake_;
};

/**
 * The source position of the checkpoint of `instance` in `state_dir` (nullopt: none, or one that
 * cannot be read — the shard then starts with a full sync).
 */
std::optional<source::Position> peekCheckpoint(const std::string& state_dir,
                                               const std::string& instance);

}  // namespace xdcr::replicator
