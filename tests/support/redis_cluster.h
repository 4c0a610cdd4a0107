#pragma once
// A real Redis Cluster for tests: masters and replicas as RedisServer instances on free
// 127.0.0.1 ports, formed with CLUSTER commands (as redis-cli --cluster create does: equal slot
// ranges, distinct config epochs, MEET, REPLICATE), plus the two topology changes a replicator
// must survive: resharding (MIGRATE, slot by slot) and failover (graceful, FORCE, TAKEOVER).
//
// Roles change (failover), so the fixture asks the cluster rather than remembering: masters(),
// replicas(), shards() read CLUSTER NODES from a node that answers. Every wait is bounded and
// fails with each node's view of the cluster; every process is stopped by PID when the fixture
// is destroyed (RedisServer's destructor).

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/cluster_client.h"
#include "tests/support/redis_server.h"

namespace xdcr::test {

struct RedisClusterOptions {
  int masters = 3;
  int replicas_per_master = 1;
  /** --cluster-node-timeout: how long a silent node takes to be flagged PFAIL. */
  std::chrono::milliseconds node_timeout{3000};
  /** Passed to every node after the cluster arguments. */
  std::vector<std::string> extra_args;
  /** Bound on forming the cluster (start to every node healthy). */
  std::chrono::milliseconds form_timeout{60000};
};

/** One node as a node's CLUSTER NODES line describes it. */
struct ClusterNodeView {
  std::string id;
  uint16_t port = 0;
  std::string flags;                       // "myself,master", "slave", "master,fail?", ...
  std::string master_id;                   // "-" for a master
  std::string link;                        // connected / disconnected
  std::vector<std::pair<int, int>> slots;  // inclusive ranges, migration entries left out
  std::vector<std::string> migrations;     // "[5->-id]" / "[5-<-id]" entries, as printed

  bool isMaster() const;
  /** fail, fail?, handshake or noaddr among the flags. */
  bool troubled() const;
};

/** A master, its replicas and its slots. */
struct ClusterShard {
  RedisServer* master = nullptr;
  std::vector<RedisServer*> replicas;
  std::vector<std::pair<int, int>> slots;  // inclusive ranges, ascending
};

enum class FailoverMode {
  Graceful,  // CLUSTER FAILOVER on the replica: the master hands over, no write is lost
  // SIGSTOP the master, CLUSTER FAILOVER FORCE on the replica, SIGCONT once it is promoted.
  // Writes the replica had not received are lost, and the resumed old master still answers
  // writes (lost too) until it learns it was replaced: measured tens of ms, ~10 writes of a
  // single-connection load at ~15k ops/s.
  Force,
  Takeover,  // CLUSTER FAILOVER TAKEOVER on the replica: no agreement asked, master running
};
const char* failoverModeName(FailoverMode mode);

struct ReshardResult {
  int slots = 0;                            // slots moved
  int64_t keys = 0;                         // keys MIGRATE reported moving (OK batches)
  int64_t batches = 0;                      // MIGRATE calls
  std::vector<std::pair<int, int>> ranges;  // the slots moved, as ranges
  std::chrono::milliseconds elapsed{0};     // until every node agreed on the new owner
};

struct FailoverResult {
  RedisServer* new_master = nullptr;
  RedisServer* old_master = nullptr;
  std::chrono::milliseconds promoted_after{0};  // until the replica said role master
  std::chrono::milliseconds settled_after{0};   // until the old master was its replica, all agreed
};

class RedisCluster {
 public:
  /** Starts and forms the cluster; throws std::runtime_error (with the nodes' views and log
   * tails) when it is not healthy within options.form_timeout. */
  explicit RedisCluster(RedisClusterOptions options = {});
  ~RedisCluster();
  RedisCluster(const RedisCluster&) = delete;
  RedisCluster& operator=(const RedisCluster&) = delete;

  /** Every node, in start order (the first `masters` were started as masters). */
  const std::vector<std::unique_ptr<RedisServer>>& nodes() const { return nodes_; }
  /** Current masters / replicas (CLUSTER NODES of a node that answers), ordered by their first
   * slot / by port. */
  std::vector<RedisServer*> masters();
  std::vector<RedisServer*> replicas();
  /** "127.0.0.1:P" of every node. */
  std::vector<std::string> seeds() const;
  /** The master serving `slot`. */
  RedisServer& nodeForSlot(int slot);
  /** The master of the node on `port` (the node itself when it is a master). */
  RedisServer& masterOf(uint16_t port);
  std::vector<RedisServer*> replicasOf(const RedisServer& master);
  /** Inclusive slot ranges of `master`, ascending (empty for a replica). */
  std::vector<std::pair<int, int>> slotRanges(const RedisServer& master);
  std::vector<ClusterShard> shards();
  /** "127.0.0.1:P [0-5460] replicas 127.0.0.1:Q; ..." for messages. */
  std::string describe();
  /** The node's cluster id (CLUSTER MYID, read at start; ids survive failover). */
  const std::string& nodeId(const RedisServer& node) const;
  /** The node on `port`; throws std::out_of_range. */
  RedisServer& server(uint16_t port);
  /** One node's own CLUSTER NODES view. Throws RespIoError when it does not answer. */
  std::vector<ClusterNodeView> viewOf(const RedisServer& node);

  /** A cluster client seeded with every node. */
  ClusterClient client(ClusterClientOptions options = {}) const;

  /**
   * "" when every node says cluster_state:ok, knows every node as connected and
   * untroubled, reports the same roles and slot map (all 16384 slots, no migration in progress),
   * and every replica's link to its master is up; otherwise what is wrong.
   */
  std::string healthProblem();
  /** Waits (bounded) until healthProblem() is ""; throws with the last problem and views. */
  void waitHealthy(std::chrono::milliseconds timeout = std::chrono::seconds(30));

  /**
   * Moves the lowest `slot_count` slots of `from` to `to`, slot by slot: CLUSTER SETSLOT s
   * IMPORTING on `to`, MIGRATING on `from`, then GETKEYSINSLOT s 100 + MIGRATE ... KEYS until the
   * slot is empty, then SETSLOT s NODE <to> on `to`, `from` and every other master; then waits
   * until all nodes agree. Clients writing meanwhile get ASK/TRYAGAIN (ClusterClient follows).
   * Throws std::runtime_error on a refused step or when `timeout` passes.
   */
  ReshardResult reshard(RedisServer& from, RedisServer& to, int slot_count,
                        std::chrono::milliseconds timeout = std::chrono::seconds(60));

  /**
   * Promotes a replica of `master` (see FailoverMode) and waits until it is master, every node
   * agrees, and `master` is its replica with the link up. Throws std::runtime_error on a refused
   * command or when `timeout` passes (a FORCE failover always SIGCONTs the old master).
   */
  FailoverResult failover(RedisServer& master, FailoverMode mode,
                          std::chrono::milliseconds timeout = std::chrono::seconds(60));

  /** How long forming took (first start to healthy). */
  std::chrono::milliseconds formedIn() const { return formed_in_; }

 private:
  std::unique_ptr<RedisServer> startNode();
  void form();
  /** CLUSTER NODES of the first node (but `skip`) that answers. */
  std::vector<ClusterNodeView> anyView(const RedisServer* skip = nullptr);
  /** Views of every node (but `skip`), for messages. */
  std::string describeViews(const RedisServer* skip = nullptr);
  /** A short-timeout client for fixture commands. */
  RespClient admin(const RedisServer& node) const;
  /** Runs a command that must answer +OK; throws naming the node and the command otherwise. */
  void mustOk(const RedisServer& node, const RespCommand& args);

  RedisClusterOptions options_;
  std::vector<std::unique_ptr<RedisServer>> nodes_;
  std::map<uint16_t, std::string> ids_;  // port -> node id
  std::chrono::milliseconds formed_in_{0};
};

}  // namespace xdcr::test
