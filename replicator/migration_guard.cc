#include "replicator/migration_guard.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <charconv>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "replicator/cluster_source.h"
#include "replicator/pipeline.h"

namespace xdcr::replicator {

namespace {

constexpr auto kCallTimeout = std::chrono::seconds(2);
constexpr auto kPoll = std::chrono::milliseconds(2);

net::awaitable<void> sleepFor(std::chrono::steady_clock::duration d) {
  net::steady_timer t(co_await net::this_coro::executor);
  t.expires_after(d);
  co_await t.async_wait(net::as_tuple(net::use_awaitable));
}

/** master_repl_offset from an INFO replication text. */
std::optional<uint64_t> replOffset(const std::string& info) {
  constexpr std::string_view kKey = "master_repl_offset:";
  const size_t at = info.find(kKey);
  if (at == std::string::npos) return std::nullopt;
  uint64_t v = 0;
  const char* b = info.data() + at + kKey.size();
  auto [p, ec] = std::from_chars(b, info.data() + info.size(), v);
  if (ec != std::errc()) return std::nullopt;
  return v;
}

}  // namespace

MigrationGuard::MigrationGuard(net::any_io_executor ex, std::shared_ptr<ClusterTopology> topology,
                               const clock::Clock& clock)
    : ex_(ex), topology_(std::move(topology)), clock_(clock), idle_(ex) {}

MigrationGuard::~MigrationGuard() = default;

void MigrationGuard::add(const ShardLocator* shard, Pipeline* p) {
  members_[p] = shard;
}

void MigrationGuard::remove(Pipeline* p) {
  members_.erase(p);
}

bool MigrationGuard::restorePending(std::string_view key) const {
  return pending_.find(key) != pending_.end();
}

RedisConnection& MigrationGuard::connection(const std::string& host, uint16_t port) {
  auto& c = conns_[host + ":" + std::to_string(port)];
  if (!c) {
    c = std::make_unique<RedisConnection>(ex_, fmt::format("source {} node {}:{} (migration check)",
                                                           topology_->cluster().name, host, port));
  }
  return *c;
}

net::awaitable<Result<std::vector<MigrationGuard::Horizon>>> MigrationGuard::horizons(
    const ShardLocator* shard, const std::vector<std::string>& keys,
    std::chrono::steady_clock::time_point until) {
  std::vector<Horizon> out;
  const std::vector<source::ShardView> shards = topology_->shards();
  for (const source::ShardView& v : shards) {
    if (shard->knows(v)) continue;
    const ShardLocator* other = nullptr;
    for (const auto& [p, s] : members_) {
      if (s->knows(v)) other = s;
    }
    if (other == nullptr) continue;  // a shard no pipeline of this process reads
    const source::ShardNode* m = v.master();
    if (m == nullptr) {
      co_return fail(Error::io(fmt::format("shard {} has no master now", v.label())));
    }
    std::vector<std::vector<std::string>> cmds;
    for (const auto& k : keys) cmds.push_back({"EXISTS", k});
    cmds.push_back({"INFO", "replication"});
    for (;;) {
      const std::string address = m->address();
      auto it = conns_.find(address);
      RedisConnection& c = connection(m->host, m->port);
      if (it == conns_.end()) {
        const RedisEndpoint endpoint = topology_->cluster().endpointAt(m->host, m->port);
        if (auto s = co_await c.connect(endpoint, kCallTimeout); !s) {
          conns_.erase(address);
          co_return fail(s.error());
        }
      }
      auto r = co_await c.callMany(cmds, kCallTimeout);
      if (!r) {
        conns_.erase(address);
        co_return fail(r.error());
      }
      bool still_there = false;
      for (size_t i = 0; i < keys.size(); ++i) {
        const resp::Value& e = (*r)[i];
        still_there = still_there || (e.type == resp::ReplyType::Integer && e.integer > 0);
      }
      const resp::Value& info = r->back();
      const auto offset = info.isError() ? std::nullopt : replOffset(info.str);
      if (!offset) {
        co_return fail(
            Error::protocol(fmt::format("{}: no master_repl_offset in INFO replication", address)));
      }
      // (MIGRATE ... COPY keeps the key on the exporter: it never deletes it, so waiting ends at
      // the time limit with the offset of then, which covers everything it wrote before.)
      if (!still_there || clock_.monotonicNow() >= until) {
        out.push_back(Horizon{other, address, *offset});
        break;
      }
      co_await sleepFor(kPoll);
    }
  }
  co_return out;
}

net::awaitable<Status> MigrationGuard::beforeRestore(const ShardLocator* shard,
                                                     const std::vector<std::string>& keys,
                                                     std::chrono::steady_clock::duration limit) {
  for (const auto& k : keys) pending_.insert(k);
  struct Done {
    MigrationGuard& g;
    const std::vector<std::string>& keys;
    bool held = false;
    ~Done() {
      for (const auto& k : keys) g.pending_.erase(g.pending_.find(k));
      if (held) {
        g.busy_ = false;
        g.idle_.notify();
      }
    }
  } done{*this, keys};
  const auto until = clock_.monotonicNow() + limit;
  while (busy_) co_await idle_.waitFor(std::chrono::milliseconds(20));
  busy_ = true;
  done.held = true;

  auto hs = co_await horizons(shard, keys, until);
  if (!hs) co_return fail(hs.error());
  for (const Horizon& h : *hs) {
    for (;;) {
      // Every pipeline instance of that shard: durable at or past the horizon.
      bool behind = false;
      for (const auto& [p, s] : members_) {
        if (s != h.shard || p->state() == PipelineState::Stopped) continue;
        if (p->checkpointedOffset() < h.offset) {
          behind = true;
          p->checkpointSoon();
        }
      }
      if (!behind) break;
      if (clock_.monotonicNow() >= until) {
        co_return fail(Error::io(fmt::format(
            "a slot migration: the RESTORE of \"{}\" waits for shard {} ({}) to be checkpointed "
            "past offset {}, which did not happen in time",
            keys.front(), h.shard->view().label(), h.address, h.offset)));
      }
      co_await sleepFor(kPoll);
    }
  }
  ++restores_;
  co_return Status{};
}

}  // namespace xdcr::replicator
