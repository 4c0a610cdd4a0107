#include "replicator/migration_guard.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <charconv>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/limits.h"
#include "replicator/cluster_source.h"
#include "replicator/pipeline.h"

namespace xdcr::replicator {

namespace {

constexpr auto kCallTimeout = cluster_limits::kGuardCallTimeout;
constexpr auto kPoll = cluster_limits::kGuardPoll;

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
    : ex_(ex), topology_(std::move(topology)), clock_(clock), idle_(ex) {
  const auto& slots = topology_->cluster().slots;
  if (slots.empty()) selected_.set();
  for (const auto& [lo, hi] : slots) {
    for (int s = std::max(lo, 0); s <= std::min(hi, cluster::kSlots - 1); ++s) {
      selected_.set(static_cast<size_t>(s));
    }
  }
}

MigrationGuard::~MigrationGuard() = default;

void MigrationGuard::add(const ShardLocator* shard, Pipeline* p) {
  members_[p] = shard;
}

void MigrationGuard::remove(Pipeline* p) {
  members_.erase(p);
}

bool MigrationGuard::restorePending(std::string_view key) const {
  std::lock_guard lock(pending_mutex_);
  return pending_.find(key) != pending_.end();
}

net::awaitable<void> MigrationGuard::acquire() {
  while (busy_) co_await idle_.waitFor(std::chrono::milliseconds(20));
  busy_ = true;
}

void MigrationGuard::release() {
  busy_ = false;
  idle_.notify();
}

RedisConnection& MigrationGuard::connection(const std::string& host, uint16_t port) {
  auto& c = conns_[host + ":" + std::to_string(port)];
  if (!c) {
    c = std::make_unique<RedisConnection>(ex_, fmt::format("source {} node {}:{} (migration check)",
                                                           topology_->cluster().name, host, port));
  }
  return *c;
}

net::awaitable<Result<std::vector<resp::Value>>> MigrationGuard::call(
    const std::string& host, uint16_t port, const std::vector<std::vector<std::string>>& cmds) {
  const std::string address = host + ":" + std::to_string(port);
  const bool fresh = conns_.find(address) == conns_.end();
  RedisConnection& c = connection(host, port);
  if (fresh) {
    const RedisEndpoint endpoint = topology_->cluster().endpointAt(host, port);
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
  co_return std::move(*r);
}

net::awaitable<Result<std::vector<MigrationGuard::Horizon>>> MigrationGuard::horizons(
    const ShardLocator* shard, const std::vector<std::string>& keys,
    std::chrono::steady_clock::time_point until, bool for_snapshot) {
  std::vector<Horizon> out;
  const std::vector<source::ShardView> shards = topology_->shards();
  for (const source::ShardView& v : shards) {
    if (shard->knows(v)) continue;
    const ShardLocator* other = nullptr;
    for (const auto& [p, s] : members_) {
      if (s->knows(v)) other = s;
    }
    if (other == nullptr) continue;  // a shard no pipeline of this process reads
    if (for_snapshot) {
      // Only shards with a checkpoint can replay (or still apply) what their snapshot or
      // stream wrote before this moment; the others full-sync (see beforeSnapshot).
      const bool checked = std::any_of(members_.begin(), members_.end(), [&](const auto& m) {
        return m.second == other && m.first->hasResumePoint();
      });
      if (!checked) continue;
    }
    const source::ShardNode* m = v.master();
    if (m == nullptr) {
      co_return fail(Error::io(fmt::format("shard {} has no master now", v.label())));
    }
    std::vector<std::vector<std::string>> cmds;
    for (const auto& k : keys) cmds.push_back({"EXISTS", k});
    cmds.push_back({"INFO", "replication"});
    for (;;) {
      const std::string address = m->address();
      auto r = co_await call(m->host, m->port, cmds);
      if (!r) co_return fail(r.error());
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

net::awaitable<Result<std::vector<MigrationGuard::Horizon>>> MigrationGuard::restoreHorizons(
    const ShardLocator* shard, const std::vector<std::string>& keys,
    std::chrono::steady_clock::time_point until, uint64_t restore_end) {
  std::string masters;
  const source::ShardNode* importer = nullptr;
  for (const source::ShardView& v : topology_->shards()) {
    const source::ShardNode* m = v.master();
    masters += (m != nullptr ? m->address() : std::string("-")) + " ";
    if (shard->knows(v)) importer = m;
  }
  if (auto it = epochs_.find(shard); it != epochs_.end() && it->second.masters == masters &&
                                     restore_end <= it->second.importer_offset) {
    co_return it->second.horizons;
  }
  // (no master of the importer in the map now: the horizons of these keys, as for a snapshot key)
  if (importer == nullptr) co_return co_await horizons(shard, keys, until, false);
  const std::vector<std::vector<std::string>> info = {{"INFO", "replication"}};
  auto r = co_await call(importer->host, importer->port, info);
  if (!r) co_return fail(r.error());
  const auto at = (*r)[0].isError() ? std::nullopt : replOffset((*r)[0].str);
  // (not executed there yet by that reading: another history, a failover under way; per key)
  if (!at || restore_end > *at) co_return co_await horizons(shard, keys, until, false);
  const std::vector<std::string> none;
  auto hs = co_await horizons(shard, none, until, false);
  if (!hs) co_return hs;
  epochs_[shard] = Epoch{masters, *at, *hs};
  co_return hs;
}

net::awaitable<Status> MigrationGuard::awaitCheckpoints(const std::vector<Horizon>& hs,
                                                        std::chrono::steady_clock::time_point until,
                                                        bool for_snapshot, const std::string& what,
                                                        const std::function<bool()>& stopping) {
  for (const Horizon& h : hs) {
    for (;;) {
      uint64_t offset = h.offset;
      if (for_snapshot) {
        // A link waiting in beforeRestore cannot get past the unit it waits in (it may wait for
        // the very full sync that waits here): its checkpoints reaching that unit are enough.
        const auto [b, e] = waiting_at_.equal_range(h.shard);
        for (auto it = b; it != e; ++it) offset = std::min(offset, it->second);
      }
      // Every pipeline instance of that shard: durable at or past the horizon.
      bool behind = false;
      for (const auto& [p, s] : members_) {
        if (s != h.shard || p->state() == PipelineState::Stopped) continue;
        if (for_snapshot && !p->hasResumePoint()) continue;  // full-syncs: see beforeSnapshot
        if (p->checkpointedOffset() < offset) {
          behind = true;
          p->checkpointSoon();
        }
      }
      if (!behind) break;
      if (stopping && stopping()) co_return fail(Error::cancelled());
      if (clock_.monotonicNow() >= until) {
        co_return fail(Error::io(
            fmt::format("{} waits for shard {} ({}) to be checkpointed past offset {}, which did "
                        "not happen in time",
                        what, h.shard->view().label(), h.address, offset)));
      }
      co_await sleepFor(kPoll);
    }
  }
  co_return Status{};
}

net::awaitable<Result<std::vector<MigrationGuard::Horizon>>> MigrationGuard::leasedHorizons(
    const ShardLocator* shard, const std::vector<std::string>& keys,
    std::chrono::steady_clock::time_point until, bool for_snapshot) {
  co_await acquire();
  Lease lease{*this};
  co_return co_await horizons(shard, keys, until, for_snapshot);
}

net::awaitable<Status> MigrationGuard::guardKeys(const ShardLocator* shard,
                                                 const std::vector<std::string>& keys,
                                                 std::chrono::steady_clock::duration limit,
                                                 bool for_snapshot,
                                                 std::optional<uint64_t> position,
                                                 std::optional<uint64_t> restore_end) {
  {
    std::lock_guard lock(pending_mutex_);
    for (const auto& k : keys) pending_.insert(k);
  }
  std::optional<std::multimap<const ShardLocator*, uint64_t>::iterator> waiting;
  if (position) waiting = waiting_at_.emplace(shard, *position);
  struct Done {
    MigrationGuard& g;
    const std::vector<std::string>& keys;
    std::optional<std::multimap<const ShardLocator*, uint64_t>::iterator>& waiting;
    ~Done() {
      {
        std::lock_guard lock(g.pending_mutex_);
        for (const auto& k : keys) g.pending_.erase(g.pending_.find(k));
      }
      if (waiting) g.waiting_at_.erase(*waiting);
    }
  } done{*this, keys, waiting};
  const auto until = clock_.monotonicNow() + limit;

  Result<std::vector<Horizon>> leased;
  if (restore_end) {
    co_await acquire();
    Lease lease{*this};
    leased = co_await restoreHorizons(shard, keys, until, *restore_end);
  } else {
    leased = co_await leasedHorizons(shard, keys, until, for_snapshot);
  }
  if (!leased) co_return fail(leased.error());
  const std::vector<Horizon> hs = std::move(*leased);
  const std::string what = fmt::format("a slot migration: the {} of \"{}\"",
                                       for_snapshot ? "snapshot key" : "RESTORE", keys.front());
  const std::function<bool()> never;
  co_return co_await awaitCheckpoints(hs, until, for_snapshot, what, never);
}

// The public calls come from the links' threads: each runs its work on the guard's executor (the
// first thread, replicator/workers.h) and resumes the caller on its own.

net::awaitable<Status> MigrationGuard::beforeRestore(const ShardLocator* shard,
                                                     const std::vector<std::string>& keys,
                                                     std::chrono::steady_clock::duration limit) {
  const std::optional<uint64_t> none;
  co_return co_await net::co_spawn(ex_, restoreHere(shard, keys, limit, none, none),
                                   net::use_awaitable);
}

net::awaitable<Status> MigrationGuard::beforeRestore(const ShardLocator* shard,
                                                     const std::vector<std::string>& keys,
                                                     std::chrono::steady_clock::duration limit,
                                                     uint64_t position, uint64_t restore_end) {
  const std::optional<uint64_t> at = position;
  const std::optional<uint64_t> end = restore_end;
  co_return co_await net::co_spawn(ex_, restoreHere(shard, keys, limit, at, end),
                                   net::use_awaitable);
}

net::awaitable<Result<MigrationGuard::SlotSet>> MigrationGuard::beforeSnapshot(
    const ShardLocator* shard, std::chrono::steady_clock::duration limit,
    std::function<bool()> stopping) {
  co_return co_await net::co_spawn(ex_, snapshotHere(shard, limit, std::move(stopping)),
                                   net::use_awaitable);
}

net::awaitable<Status> MigrationGuard::beforeSnapshotKey(
    const ShardLocator* shard, const std::string& key, std::chrono::steady_clock::duration limit) {
  co_return co_await net::co_spawn(ex_, snapshotKeyHere(shard, key, limit), net::use_awaitable);
}

net::awaitable<Status> MigrationGuard::restoreHere(const ShardLocator* shard,
                                                   const std::vector<std::string>& keys,
                                                   std::chrono::steady_clock::duration limit,
                                                   std::optional<uint64_t> position,
                                                   std::optional<uint64_t> restore_end) {
  auto s = co_await guardKeys(shard, keys, limit, false, position, restore_end);
  if (s) ++restores_;
  co_return s;
}

net::awaitable<Result<MigrationGuard::SlotSet>> MigrationGuard::snapshotHere(
    const ShardLocator* shard, std::chrono::steady_clock::duration limit,
    std::function<bool()> stopping) {
  const auto started = clock_.monotonicNow();
  const auto until = started + limit;
  // A discovery begun after the snapshot was forked: every slot it shows on the shard was
  // assigned to it before, so every migrated key of those slots had left its exporter.
  if (auto s = co_await topology_->refresh(true); !s) co_return fail(s.error());
  SlotSet owned;
  const source::ShardView* now = shard->current(topology_->shards());
  if (now != nullptr) {
    for (const auto& [lo, hi] : now->slots) {
      for (int s = std::max(lo, 0); s <= std::min(hi, cluster::kSlots - 1); ++s) {
        owned.set(static_cast<size_t>(s));
      }
    }
  }
  const std::vector<std::string> no_keys;
  auto leased = co_await leasedHorizons(shard, no_keys, until, true);
  if (!leased) co_return fail(leased.error());
  const std::vector<Horizon> hs = std::move(*leased);
  const std::string what = "the full sync of shard " + shard->view().label();
  if (auto s = co_await awaitCheckpoints(hs, until, true, what, stopping); !s) {
    co_return fail(s.error());
  }
  if (!hs.empty()) {
    std::string where;
    for (const Horizon& h : hs) {
      where +=
          fmt::format("{}{} past {}", where.empty() ? "" : ", ", h.shard->view().label(), h.offset);
    }
    spdlog::info(
        "source {}: the full sync of shard {} ({} slots) writes its snapshot after the other "
        "shards' checkpoints ({}), {} ms",
        topology_->cluster().name, shard->view().label(), owned.count(), where,
        std::chrono::duration_cast<std::chrono::milliseconds>(clock_.monotonicNow() - started)
            .count());
  }
  co_return owned;
}

net::awaitable<Status> MigrationGuard::snapshotKeyHere(const ShardLocator* shard,
                                                       const std::string& key,
                                                       std::chrono::steady_clock::duration limit) {
  const source::ShardView* v = shard->current(topology_->shards());
  const source::ShardNode* m = v != nullptr ? v->master() : nullptr;
  if (m == nullptr) {
    co_return fail(Error::io(fmt::format("{} has no master now", shard->describe())));
  }
  const std::string host = m->host;
  const uint16_t port = m->port;
  std::vector<std::vector<std::string>> cmds;
  cmds.push_back({"EXISTS", key});
  bool held = false;
  {
    co_await acquire();
    Lease lease{*this};
    auto r = co_await call(host, port, cmds);
    if (!r) co_return fail(r.error());
    held = (*r)[0].type == resp::ReplyType::Integer && (*r)[0].integer > 0;
  }
  // Gone from the shard since its snapshot: its stream carries the DEL (or what moved it), in
  // order after this key.
  if (!held) co_return Status{};
  std::vector<std::string> keys;
  keys.push_back(key);
  const std::optional<uint64_t> none;
  co_return co_await guardKeys(shard, keys, limit, true, none);
}

}  // namespace xdcr::replicator
