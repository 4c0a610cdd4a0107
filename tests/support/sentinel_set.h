#pragma once
// A Sentinel-managed master/replica pair for tests: two redis-servers (the second a REPLICAOF
// the first) and Sentinels monitoring them, each a RedisServer in Sentinel mode with its own
// directory (a Sentinel rewrites its configuration file), all on free 127.0.0.1 ports and
// stopped by PID. failover() asks a Sentinel to fail over and waits, bounded, until every
// Sentinel names the new master, it says role:master and the old master is its replica.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/redis_server.h"

namespace xdcr::test {

struct SentinelSetOptions {
  std::string master_name = "xdcr-master";
  int sentinels = 3;
  int quorum = 2;
  /** sentinel down-after-milliseconds. */
  std::chrono::milliseconds down_after{2000};
  /** sentinel failover-timeout. */
  std::chrono::milliseconds failover_timeout{10000};
  /** Bound on start-up: data nodes linked, every Sentinel knowing the replica and the others. */
  std::chrono::milliseconds ready_timeout{30000};
  /** Passed to both data nodes. */
  std::vector<std::string> extra_args;
};

struct SentinelFailoverResult {
  RedisServer* new_master = nullptr;
  RedisServer* old_master = nullptr;
  /** Until every Sentinel's get-master-addr-by-name named the new master. */
  std::chrono::milliseconds switched_after{0};
  /** Until the new master said role:master and the old one was its linked replica. */
  std::chrono::milliseconds settled_after{0};
};

class SentinelSet {
 public:
  /** Starts the pair and the Sentinels; throws std::runtime_error (with the Sentinels' views
   * and logs) when not ready within options.ready_timeout. */
  explicit SentinelSet(SentinelSetOptions options = {});
  ~SentinelSet();
  SentinelSet(const SentinelSet&) = delete;
  SentinelSet& operator=(const SentinelSet&) = delete;

  const std::string& masterName() const { return options_.master_name; }
  /** "127.0.0.1:P" of every Sentinel. */
  std::vector<std::string> sentinels() const;
  const std::vector<std::unique_ptr<RedisServer>>& sentinelServers() const { return sentinels_; }
  /** Both data nodes; [0] was started as the master, [1] as its replica. */
  const std::vector<std::unique_ptr<RedisServer>>& dataNodes() const { return data_; }

  /** "127.0.0.1:P" per SENTINEL get-master-addr-by-name of the first Sentinel that answers. */
  std::string currentMaster();
  /** The data node currentMaster() names, and the other one. */
  RedisServer& master();
  RedisServer& replica();

  /** "" when every Sentinel knows the current master (flags master), its replica (link ok)
   * and the other Sentinels, and CKQUORUM passes; otherwise what is missing. */
  std::string readyProblem();
  void waitReady(std::chrono::milliseconds timeout);

  /**
   * SENTINEL FAILOVER on the first Sentinel (retried while it answers NOGOODSLAVE, bounded), then
   * waits as described at the top. Throws std::runtime_error when `timeout` passes. Sentinel
   * demotes the old master only 8 s or more after the switch (it waits 4 hello periods before
   * reconfiguring a node that still claims to be master, and polls replicas' INFO every 10 s),
   * so this takes 10-16 s; meanwhile the old master is a second master (split brain). It does
   * not wait until every Sentinel lists the old master as a linked replica (another up to 10 s):
   * call waitReady() before a second failover.
   */
  SentinelFailoverResult failover(std::chrono::milliseconds timeout = std::chrono::seconds(60));

  /** How long start-up took. */
  std::chrono::milliseconds readyIn() const { return ready_in_; }

 private:
  /** Sentinels' SENTINEL MASTER / REPLICAS and the data nodes' roles, for messages. */
  std::string describe();
  RedisServer& dataNode(const std::string& address);

  SentinelSetOptions options_;
  std::vector<std::unique_ptr<RedisServer>> data_;
  std::vector<std::unique_ptr<RedisServer>> sentinels_;
  std::chrono::milliseconds ready_in_{0};
};

}  // namespace xdcr::test
