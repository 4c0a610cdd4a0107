#pragma once
// One side of `xdcr-agent verify` (the pipeline's source or its target), whatever its kind:
//  - a standalone server (type redis) — and the master a Sentinel names (type redis_sentinel):
//    "connect to an endpoint": one connection, SELECT for the db;
//  - a Redis Cluster (type redis_cluster): "a slot map and connections": the map
//    (target/slot_map.h) and one connection per master. Keys are listed by SCANning every master
//    of the map read at the scan's start, and a batch's commands go to the master owning each
//    key's slot, one pipelined callMany per master; MOVED, ASK, TRYAGAIN and CLUSTERDOWN are
//    followed in bounded rounds (replicator/verify_routing.h). A cluster has only db 0: nothing
//    is SELECTed, other dbs are empty. Keys migrated by a reshard while a scan runs may be listed
//    twice or not at all (SCAN's guarantees hold per node); their reads are routed anew.
//
// The Verifier (verify.cc) reads keys only through this interface, so the rules of what counts
// as a difference are the same for every kind.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/redis_conn.h"
#include "common/resp_value.h"
#include "config/config.h"

namespace xdcr::replicator {

class VerifySide {
 public:
  using Cmd = std::vector<std::string>;

  /** Where a listing of a db stands. Start with a default one; done once every key was listed. */
  struct ScanCursor {
    bool done = false;
    bool started = false;
    size_t node = 0;                         // a cluster: the index into `nodes` being scanned
    std::vector<config::NodeAddress> nodes;  // a cluster: its masters when the scan started
    std::string cursor = "0";                // SCAN's cursor on the current node
  };

  /**
   * The side for `cluster` (kept by reference: it must outlive the side). `role` ("source",
   * "target") names its connections in messages: "source east (127.0.0.1:7001)", "target west
   * node 127.0.0.1:7002". `timeout` bounds every connect and call.
   */
  static std::unique_ptr<VerifySide> make(net::any_io_executor ex,
                                          const config::ClusterConfig& cluster,
                                          const std::string& role,
                                          std::chrono::milliseconds timeout);
  virtual ~VerifySide() = default;

  /** Replies that were not answers, followed or waited out (a cluster only). */
  struct Redirections {
    uint64_t moved = 0;
    uint64_t ask = 0;
    uint64_t busy = 0;  // TRYAGAIN, CLUSTERDOWN
  };
  virtual bool isCluster() const { return false; }
  virtual Redirections redirections() const { return {}; }

  /**
   * Every connection of this side (those a cluster opens later too) sends `CLIENT NO-TOUCH ON`
   * after AUTH (Redis 7.2+, Valkey 7.2+), so that verify's own reads (GET, DUMP, ...) leave the
   * keys' idle times (OBJECT IDLETIME) as they were. Call before connect(). A server without it
   * (Redis 7.0) or a user without `+client|no-touch` is no error: idleTimesReset() says so.
   */
  void keepIdleTimes() { no_touch_ = true; }
  /** Why verify's reads reset idle times on this side ("" when every connection is NO-TOUCH). */
  const std::string& idleTimesReset() const { return touch_reason_; }

  /** "source east (127.0.0.1:7001)", "target west (127.0.0.1:7002,127.0.0.1:7003)". */
  virtual const std::string& label() const = 0;
  /** Standalone: TCP, TLS, AUTH. Cluster: the slot map (every slot owned), every master. */
  virtual net::awaitable<Status> connect() = 0;
  /** A connection to read the cluster's clock on (TIME): the server, or the first master. */
  virtual RedisConnection& clockConnection() = 0;
  /** The dbs that hold keys (standalone: INFO keyspace); a cluster: db 0. */
  virtual net::awaitable<Result<std::vector<int>>> keyDbs() = 0;
  /** False for a db this side cannot have (a cluster's db other than 0). */
  virtual bool hasDb(int db) const = 0;
  /** DBSIZE of `db` (a cluster: the sum over its masters). */
  virtual net::awaitable<Result<uint64_t>> dbSize(int db) = 0;
  /** The next page of keys of `db` (maybe none); sets `cursor.done` after the last page. */
  virtual net::awaitable<Result<std::vector<std::string>>> scanPage(int db, ScanCursor& cursor) = 0;
  /**
   * Runs `commands` in `db` and returns their replies in order. Each command is about one key,
   * its argument 1 (TYPE k, PEXPIRETIME k, GET k, EXISTS k, ...; OBJECT's argument 2), which
   * routes it on a cluster.
   * An error reply is a value (as RedisConnection::callMany); a cluster's redirections are
   * followed, never returned.
   */
  virtual net::awaitable<Result<std::vector<resp::Value>>> callKeyed(
      int db, const std::vector<Cmd>& commands) = 0;

 protected:
  /** After a connection's AUTH: CLIENT NO-TOUCH ON when keepIdleTimes() asked for it. */
  net::awaitable<Status> afterConnect(RedisConnection& conn, std::chrono::milliseconds timeout);

 private:
  bool no_touch_ = false;
  std::string touch_reason_;
};

}  // namespace xdcr::replicator
