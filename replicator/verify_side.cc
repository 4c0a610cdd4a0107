#include "replicator/verify_side.h"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <numeric>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "common/cluster_slot.h"
#include "common/resp.h"
#include "common/sentinel.h"
#include "replicator/verify_routing.h"
#include "target/slot_map.h"

namespace xdcr::replicator {
namespace {

constexpr int kScanCount = 500;  // SCAN COUNT: work per SCAN call on the server

/** A standalone server, or the master a Sentinel names: one connection. */
class StandaloneSide final : public VerifySide {
 public:
  StandaloneSide(net::any_io_executor ex, const config::ClusterConfig& cc, const std::string& role,
                 std::chrono::milliseconds timeout)
      : cc_(cc),
        timeout_(timeout),
        conn_(ex, fmt::format("{} {} ({})", role, cc.name, cc.address())) {}

  const std::string& label() const override { return conn_.label(); }

  net::awaitable<Status> connect() override {
    // A Sentinel-managed cluster is read at the master its Sentinels name.
    auto node = co_await sentinel::resolveEndpoint(cc_, timeout_);
    if (!node) co_return fail(node.error());
    Status s = co_await conn_.connect(*node, timeout_);  // TCP, TLS, AUTH
    if (!s) co_return s;
    co_return co_await afterConnect(conn_, timeout_);
  }

  RedisConnection& clockConnection() override { return conn_; }

  net::awaitable<Result<std::vector<int>>> keyDbs() override {
    // INFO keyspace lists the dbs that hold keys: "db0:keys=3,expires=1,avg_ttl=0".
    const std::vector<Cmd> cmd = {{"INFO", "keyspace"}};
    auto r = co_await conn_.callMany(cmd, timeout_);
    if (!r) co_return fail(r.error());
    std::vector<int> dbs;
    const std::string& text = (*r)[0].str;
    for (size_t pos = text.find("\ndb"); pos != std::string::npos;
         pos = text.find("\ndb", pos + 1)) {
      dbs.push_back(std::atoi(text.c_str() + pos + 3));
    }
    co_return dbs;
  }

  bool hasDb(int) const override { return true; }

  net::awaitable<Result<uint64_t>> dbSize(int db) override {
    if (auto s = co_await select(db); !s) co_return fail(s.error());
    const std::vector<Cmd> size = {{"DBSIZE"}};
    auto r = co_await conn_.callMany(size, timeout_);
    if (!r) co_return fail(r.error());
    co_return static_cast<uint64_t>((*r)[0].integer);
  }

  net::awaitable<Result<std::vector<std::string>>> scanPage(int db, ScanCursor& c) override {
    if (auto s = co_await select(db); !s) co_return fail(s.error());
    c.started = true;
    auto keys = co_await conn_.scanPage(c.cursor, kScanCount, timeout_);
    if (keys && c.cursor == "0") c.done = true;
    co_return keys;
  }

  net::awaitable<Result<std::vector<resp::Value>>> callKeyed(
      int db, const std::vector<Cmd>& commands) override {
    if (auto s = co_await select(db); !s) co_return fail(s.error());
    auto r = co_await conn_.callMany(commands, timeout_);
    co_return r;
  }

 private:
  net::awaitable<Status> select(int db) {
    if (db == db_) co_return Status{};
    const std::vector<Cmd> cmd = {{"SELECT", std::to_string(db)}};
    auto r = co_await conn_.callMany(cmd, timeout_);
    if (!r) co_return fail(r.error());
    if ((*r)[0].isError()) {
      co_return fail(
          Error::refused(fmt::format("{}: SELECT {}: {}", conn_.label(), db, (*r)[0].str)));
    }
    db_ = db;
    co_return Status{};
  }

  const config::ClusterConfig& cc_;
  std::chrono::milliseconds timeout_;
  RedisConnection conn_;
  int db_ = -1;  // selected on the connection
};

/** A Redis Cluster: the slot map and one connection per node, opened when first needed. */
class ClusterSide final : public VerifySide {
 public:
  ClusterSide(net::any_io_executor ex, const config::ClusterConfig& cc, const std::string& role,
              std::chrono::milliseconds timeout)
      : ex_(std::move(ex)),
        cc_(cc),
        role_(role),
        label_(fmt::format("{} {} ({})", role, cc.name, cc.address())),
        timeout_(timeout) {}

  const std::string& label() const override { return label_; }
  bool isCluster() const override { return true; }
  Redirections redirections() const override { return redirections_; }

  net::awaitable<Status> connect() override {
    if (auto s = co_await reloadMap(); !s) co_return s;
    for (const target::ClusterNode& m : map_.masters()) {
      auto c = co_await node(m.host, m.port);
      if (!c) co_return fail(c.error());
    }
    co_return Status{};
  }

  RedisConnection& clockConnection() override {
    const target::ClusterNode& m = map_.masters().front();  // connect() opened it
    return *conns_.at(m.address());
  }

  net::awaitable<Result<std::vector<int>>> keyDbs() override { co_return std::vector<int>{0}; }

  bool hasDb(int db) const override { return db == 0; }

  net::awaitable<Result<uint64_t>> dbSize(int db) override {
    if (db != 0) co_return uint64_t{0};
    uint64_t total = 0;
    const std::vector<Cmd> size = {{"DBSIZE"}};
    const std::vector<target::ClusterNode> masters = map_.masters();
    for (const target::ClusterNode& m : masters) {
      auto c = co_await node(m.host, m.port);
      if (!c) co_return fail(c.error());
      auto r = co_await (*c)->callMany(size, timeout_);
      if (!r) co_return fail(r.error());
      total += static_cast<uint64_t>(std::max<int64_t>(0, (*r)[0].integer));
    }
    co_return total;
  }

  net::awaitable<Result<std::vector<std::string>>> scanPage(int db, ScanCursor& c) override {
    if (!c.started) {
      c.started = true;
      c.node = 0;
      c.cursor = "0";
      c.nodes.clear();
      if (db == 0) {
        for (const target::ClusterNode& m : map_.masters()) c.nodes.push_back({m.host, m.port});
      }
    }
    if (c.node >= c.nodes.size()) {
      c.done = true;
      co_return std::vector<std::string>{};
    }
    const config::NodeAddress at = c.nodes[c.node];
    auto conn = co_await node(at.host, at.port);
    if (!conn) co_return fail(conn.error());
    auto keys = co_await (*conn)->scanPage(c.cursor, kScanCount, timeout_);
    if (!keys) co_return fail(keys.error());
    if (c.cursor == "0") {
      ++c.node;
      c.done = c.node >= c.nodes.size();
    }
    co_return keys;
  }

  net::awaitable<Result<std::vector<resp::Value>>> callKeyed(
      int db, const std::vector<Cmd>& commands) override {
    if (db != 0) {
      co_return fail(
          Error::refused(fmt::format("{}: a Redis Cluster has only db 0, not db {}", label_, db)));
    }
    const size_t n = commands.size();
    std::vector<resp::Value> replies(n);
    std::vector<std::string> keys;
    keys.reserve(n);
    for (const Cmd& c : commands) {
      const size_t at = resp::iequals(c[0], "OBJECT") ? 2 : 1;  // OBJECT IDLETIME key
      keys.push_back(c.size() > at ? c[at] : std::string());
    }
    std::vector<size_t> pending(n);
    std::iota(pending.begin(), pending.end(), size_t{0});
    std::vector<std::optional<config::NodeAddress>> ask_to(n);
    std::string last;  // the last refusal, for the message when giving up
    for (int round = 0;; ++round) {
      std::vector<size_t> unowned;
      const std::vector<NodeGroup> groups = groupByNode(map_, keys, pending, ask_to, unowned);
      if (!unowned.empty()) {
        const std::string& key = keys[unowned.front()];
        co_return fail(Error::refused(fmt::format(
            "{}: no master owns slot {} (of key {}); the cluster is not ready: assign every slot",
            label_, cluster::keySlot(key), key.substr(0, 80))));
      }
      RoundOutcome outcome;
      std::vector<size_t> again;
      for (const NodeGroup& g : groups) {
        std::vector<Cmd> batch;
        batch.reserve(g.commands.size());
        for (const NodeGroup::Routed& r : g.commands) {
          if (r.asking) batch.push_back({"ASKING"});
          batch.push_back(commands[r.index]);
        }
        auto conn = co_await node(g.node.host, g.node.port);
        if (!conn) co_return fail(conn.error());
        auto rs = co_await (*conn)->callMany(batch, timeout_);
        if (!rs) co_return fail(rs.error());
        size_t j = 0;
        for (const NodeGroup::Routed& r : g.commands) {
          if (r.asking) ++j;  // ASKING's +OK
          resp::Value& v = (*rs)[j++];
          target::Redirection where;
          switch (classifyReply(v, &where)) {
            case ReplyKind::Answer:
              replies[r.index] = std::move(v);
              continue;
            case ReplyKind::Moved:
              ++outcome.moved;
              ask_to[r.index].reset();
              break;
            case ReplyKind::Ask:
              ++outcome.asked;
              ask_to[r.index] = config::NodeAddress{where.host, where.port};
              break;
            case ReplyKind::Busy:
              ++outcome.busy;
              break;
          }
          last = fmt::format("{} from {}", v.str, g.node.str());
          again.push_back(r.index);
        }
      }
      redirections_.moved += outcome.moved;
      redirections_.ask += outcome.asked;
      redirections_.busy += outcome.busy;
      const RetryDecision d = decideRetry(outcome, round);
      if (d.action == RetryDecision::Action::Done) co_return replies;
      if (d.action == RetryDecision::Action::GiveUp) {
        co_return fail(Error::io(fmt::format(
            "{}: {} of {} reads still redirected or refused after {} rounds (last: {}); its "
            "slots are moving (a reshard or a failover): run verify again once it is over",
            label_, again.size(), n, round + 1, last)));
      }
      if (d.pause.count() > 0) {
        net::steady_timer t(ex_, d.pause);
        co_await t.async_wait(net::use_awaitable);
      }
      if (d.reload_map) {
        if (auto s = co_await reloadMap(); !s) co_return fail(s.error());
      }
      std::sort(again.begin(), again.end());
      pending = std::move(again);
    }
  }

 private:
  /** The connection to host:port, connected on first use. */
  net::awaitable<Result<RedisConnection*>> node(const std::string& host, uint16_t port) {
    const std::string address = host + ":" + std::to_string(port);
    auto it = conns_.find(address);
    if (it != conns_.end()) co_return it->second.get();
    auto conn = std::make_unique<RedisConnection>(
        ex_, fmt::format("{} {} node {}", role_, cc_.name, address));
    const RedisEndpoint endpoint = cc_.endpointAt(host, port);
    Status s = co_await conn->connect(endpoint, timeout_);  // TCP, TLS, AUTH
    if (!s) co_return fail(s.error());
    if (auto t = co_await afterConnect(*conn, timeout_); !t) co_return fail(t.error());
    RedisConnection* raw = conn.get();
    conns_.emplace(address, std::move(conn));
    co_return raw;
  }

  /** CLUSTER SLOTS from a node already connected, else a seed; every slot must be owned. */
  net::awaitable<Status> reloadMap() {
    std::vector<config::NodeAddress> known;
    for (const target::ClusterNode& m : map_.masters()) known.push_back({m.host, m.port});
    auto map = co_await target::loadSlotMap(cc_, known, timeout_);
    if (!map) co_return fail(map.error());
    if (const size_t uncovered = map->uncovered(); uncovered > 0) {
      co_return fail(Error::refused(fmt::format(
          "{}: {} of 16384 slots have no master (CLUSTER SLOTS); the cluster is not ready: "
          "assign every slot",
          label_, uncovered)));
    }
    map_ = std::move(*map);
    co_return Status{};
  }

  net::any_io_executor ex_;
  const config::ClusterConfig& cc_;
  std::string role_;
  std::string label_;
  std::chrono::milliseconds timeout_;
  target::SlotMap map_;
  std::map<std::string, std::unique_ptr<RedisConnection>> conns_;  // by "host:port"
  Redirections redirections_;
};

}  // namespace

net::awaitable<Status> VerifySide::afterConnect(RedisConnection& conn,
                                                std::chrono::milliseconds timeout) {
  if (!no_touch_) co_return Status{};
  const std::vector<Cmd> cmd = {{"CLIENT", "NO-TOUCH", "ON"}};
  auto r = co_await conn.callMany(cmd, timeout);
  if (!r) co_return fail(r.error());
  // Redis 7.0: "ERR unknown subcommand 'NO-TOUCH'"; a user without +client|no-touch: NOPERM.
  if ((*r)[0].isError() && touch_reason_.empty()) {
    touch_reason_ = fmt::format("{}: CLIENT NO-TOUCH ON: {}", conn.label(), (*r)[0].str);
  }
  co_return Status{};
}

std::unique_ptr<VerifySide> VerifySide::make(net::any_io_executor ex,
                                             const config::ClusterConfig& cluster,
                                             const std::string& role,
                                             std::chrono::milliseconds timeout) {
  if (cluster.isRedisCluster()) {
    return std::make_unique<ClusterSide>(std::move(ex), cluster, role, timeout);
  }
  return std::make_unique<StandaloneSide>(std::move(ex), cluster, role, timeout);
}

}  // namespace xdcr::replicator
