#include "replicator/cluster_source.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/limits.h"
#include "replicator/checkpoint.h"
#include "replicator/migration_guard.h"

namespace xdcr::replicator {

namespace {

constexpr auto kTimeout = std::chrono::seconds(5);
using cluster_limits::kDiscoveryPeriod;
using cluster_limits::kDiscoveryTimeout;
using cluster_limits::kGoneAfter;

}  // namespace

// ---- ClusterTopology ---------------------------------------------------------------------------

ClusterTopology::ClusterTopology(net::any_io_executor ex, const config::ClusterConfig& cluster)
    : ex_(ex), cluster_(cluster), done_(ex) {}

net::awaitable<Status> ClusterTopology::refresh(bool fresh) {
  if (refreshing_ && !fresh) {
    while (refreshing_) co_await done_.waitFor(std::chrono::milliseconds(50));
    co_return Status{};
  }
  while (refreshing_) co_await done_.waitFor(std::chrono::milliseconds(50));
  refreshing_ = true;
  // The node that answered last time first, then every node known, then the seeds.
  std::vector<config::NodeAddress> known;
  if (!last_good_.host.empty()) known.push_back(last_good_);
  for (const auto& s : shards_) {
    for (const auto& n : s.nodes) {
      if (n.online) known.push_back({n.host, n.port});
    }
  }
  auto r = co_await source::discoverShards(cluster_, known, kDiscoveryTimeout, &last_good_);
  refreshing_ = false;
  done_.notify();
  if (!r) co_return fail(r.error());
  shards_ = std::move(*r);
  co_return Status{};
}

const source::ShardView* ClusterTopology::find(const source::ShardView& like) const {
  for (const auto& s : shards_) {
    if (s.sameShard(like)) return &s;
  }
  return nullptr;
}

// ---- ShardLocator ------------------------------------------------------------------------------

ShardLocator::ShardLocator(std::shared_ptr<ClusterTopology> topology, source::ShardView view)
    : topology_(std::move(topology)) {
  adopt(view);
}

void ShardLocator::adopt(const source::ShardView& v) {
  {
    std::lock_guard lock(view_mutex_);
    view_ = v;
  }
  for (const auto& n : v.nodes) {
    if (!n.id.empty() && std::find(ids_.begin(), ids_.end(), n.id) == ids_.end()) {
      ids_.push_back(n.id);
    }
  }
}

bool ShardLocator::knows(const source::ShardView& v) const {
  for (const auto& n : v.nodes) {
    if (std::find(ids_.begin(), ids_.end(), n.id) != ids_.end()) return true;
  }
  return false;
}

const source::ShardView* ShardLocator::current(const std::vector<source::ShardView>& shards) const {
  const source::ShardView* best = nullptr;
  size_t best_slots = 0;
  for (const auto& v : shards) {
    if (!knows(v)) continue;
    size_t slots = 0;
    for (const auto& [lo, hi] : v.slots) slots += static_cast<size_t>(hi - lo + 1);
    if (best == nullptr || slots > best_slots) {
      best = &v;
      best_slots = slots;
    }
  }
  return best;
}

const source::ShardNode* ShardLocator::choose(const source::ShardView& v) const {
  if (topology_->cluster().read_from == config::ReadFrom::Replica) {
    if (const source::ShardNode* r = v.onlineReplica()) return r;
  }
  return v.master();
}

net::awaitable<Result<source::NodeChoice>> ShardLocator::locate() {
  co_return co_await net::co_spawn(topology_->executor(), locateHere(), net::use_awaitable);
}

net::awaitable<void> ShardLocator::watch(const source::NodeChoice& attached) {
  // (a cancellation of the caller's wait reaches watchHere's timer through co_spawn)
  co_await net::co_spawn(topology_->executor(), watchHere(attached), net::use_awaitable);
}

net::awaitable<Result<source::NodeChoice>> ShardLocator::locateHere() {
  if (auto s = co_await topology_->refresh(); !s) co_return fail(s.error());
  const source::ShardView* now = current(topology_->shards());
  if (now == nullptr) {
    co_return fail(
        Error::io(fmt::format("{}: the shard is not in the cluster any more", describe())));
  }
  adopt(*now);
  const source::ShardNode* n = choose(view_);
  if (n == nullptr) {
    co_return fail(Error::io(fmt::format(
        "{}: no node of the shard is a healthy master{} now (a failover in progress?)", describe(),
        topology_->cluster().read_from == config::ReadFrom::Replica ? " or replica" : "")));
  }
  source::NodeChoice c;
  c.endpoint = topology_->cluster().endpointAt(n->host, n->port);
  c.role = n->master ? "master" : "slave";
  co_return c;
}

net::awaitable<void> ShardLocator::watchHere(const source::NodeChoice& attached) {
  // The group's discovery refreshes the topology every second; a session ends once the shard's
  // chosen node is another (a failover) or the attached node left the shard.
  for (;;) {
    net::steady_timer t(co_await net::this_coro::executor);
    t.expires_after(std::chrono::milliseconds(250));
    auto [ec] = co_await t.async_wait(net::as_tuple(net::use_awaitable));
    if (ec) co_return;  // the session ended
    const source::ShardView* now = current(topology_->shards());
    if (now == nullptr) continue;  // not found this time: locate() decides at the next session
    const source::ShardNode* n = choose(*now);
    if (n == nullptr) continue;  // no master yet: keep streaming from the current node
    const bool same = n->port == attached.endpoint.port && n->host == attached.endpoint.host;
    const bool role_ok = (n->master ? "master" : "slave") == attached.role;
    if (!same || !role_ok) {
      spdlog::warn("{}: discovery names {} ({}) now; leaving {}", describe(), n->address(),
                   n->master ? "master" : "replica", attached.endpoint.address());
      adopt(*now);
      co_return;
    }
  }
}

// ---- ClusterSourceGroup ------------------------------------------------------------------------

std::optional<source::Position> peekCheckpoint(const std::string& state_dir,
                                               const std::string& instance) {
  CheckpointStore store(state_dir, instance);
  source::ExpiryIndex index;
  auto cp = store.load(index);
  if (!cp) {
    spdlog::warn("checkpoint {}: {}", store.path(), cp.error().message);
    return std::nullopt;
  }
  if (!*cp) return std::nullopt;
  return (*cp)->position;
}

ClusterSourceGroup::ClusterSourceGroup(net::any_io_executor ex, config::ConfigConstSharedPtr config,
                                       const config::ClusterConfig& source,
                                       std::vector<const config::PipelineConfig*> pipelines,
                                       const clock::Clock& clock, StartFn start, StopFn stop)
    : ex_(ex),
      config_(std::move(config)),
      source_(source),
      pipelines_(std::move(pipelines)),
      start_(std::move(start)),
      stop_(std::move(stop)),
      topology_(std::make_shared<ClusterTopology>(ex, source)),
      guard_(std::make_shared<MigrationGuard>(ex, topology_, clock)),
      wake_(ex) {}

void ClusterSourceGroup::stop() {
  stopping_ = true;
  wake_.notify();
}

net::awaitable<Status> ClusterSourceGroup::startShard(const source::ShardView& v) {
  const source::ShardNode* m = v.master();
  if (m == nullptr) co_return fail(Error::io("no master"));
  const RedisEndpoint endpoint = source_.endpointAt(m->host, m->port);
  auto ids = co_await source::replicationIds(endpoint, kTimeout);
  if (!ids) co_return fail(ids.error());
  // Each pipeline's checkpoint of this shard: the one whose history is the master's (or was,
  // before one failover: replid2). A shard without one starts with a full sync.
  std::vector<Instance> instances;
  const std::string& dir = config_->agent.state_dir;
  for (const config::PipelineConfig* pc : pipelines_) {
    std::string found;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      const std::string file = e.path().filename().string();
      const std::string prefix = pc->name + "@";
      if (file.rfind(prefix, 0) != 0 || e.path().extension() != ".ckpt") continue;
      const std::string instance = e.path().stem().string();
      if (std::find(claimed_.begin(), claimed_.end(), instance) != claimed_.end()) continue;
      auto pos = peekCheckpoint(dir, instance);
      if (pos && !pos->replid.empty() &&
          (pos->replid == ids->replid || pos->replid == ids->replid2)) {
        found = instance;
        break;
      }
    }
    if (found.empty()) found = fmt::format("{}@{}", pc->name, ids->replid.substr(0, 12));
    claimed_.push_back(found);
    instances.push_back(Instance{pc, found});
  }
  auto locator = std::make_shared<ShardLocator>(topology_, v);
  Running r;
  r.locator = locator;
  for (const auto& i : instances) r.instances.push_back(i.name);
  running_.push_back(std::move(r));
  spdlog::info("source {}: shard {} (master {}, replid {}): {} pipeline(s)", source_.name,
               v.label(), m->address(), ids->replid, instances.size());
  start_(locator, v.label(), std::move(instances));
  co_return Status{};
}

bool ClusterSourceGroup::selected(const source::ShardView& v) const {
  // With `slots`, a shard that owns none of them holds no key this agent replicates. Once
  // followed, a shard stays followed while it exists, whatever it owns later: after a reshard
  // its stream still carries the DELs (and, importing, the RESTORE-ASKINGs) of keys of the
  // agent's slots that the migration guard pairs, and stopping and restarting it would cost a
  // full sync.
  // A master without slots is followed too: it is usually about to import some (a node added
  // to the cluster), and following its stream from before the first RESTORE-ASKING lets the
  // migration guard pair its restores with the exporters' DELs.
  if (source_.slots.empty() || v.slots.empty()) return true;
  for (const auto& [lo, hi] : v.slots) {
    for (const auto& [a, b] : source_.slots) {
      if (lo <= b && a <= hi) return true;
    }
  }
  return false;
}

net::awaitable<void> ClusterSourceGroup::run() {
  bool reported = false;
  while (!stopping_) {
    if (auto s = co_await topology_->refresh(); !s) {
      if (!reported || running_.empty()) {
        spdlog::error("source {}: {}", source_.name, s.error().message);
        reported = true;
      }
      co_await wake_.waitFor(running_.empty() ? std::chrono::seconds(2) : kDiscoveryPeriod);
      continue;
    }
    reported = false;
    // Shards not followed yet (the first discovery: all of them) start; shards that left stop.
    const std::vector<source::ShardView> shards = topology_->shards();
    for (const auto& v : shards) {
      const bool known = std::any_of(running_.begin(), running_.end(),
                                     [&](const Running& r) { return r.locator->knows(v); });
      if (known || v.master() == nullptr || !selected(v)) continue;
      if (auto s = co_await startShard(v); !s) {
        spdlog::warn("source {}: shard {} not started yet: {}", source_.name, v.label(),
                     s.error().message);
      }
      if (stopping_) co_return;
    }
    for (auto it = running_.begin(); it != running_.end();) {
      if (it->locator->current(topology_->shards()) != nullptr) {
        it->missing = 0;
        ++it;
        continue;
      }
      if (++it->missing < kGoneAfter) {
        ++it;
        continue;
      }
      spdlog::warn("source {}: shard {} left the cluster; stopping its pipelines", source_.name,
                   it->locator->view().label());
      stop_(it->instances);
      it = running_.erase(it);
    }
    co_await wake_.waitFor(kDiscoveryPeriod);
  }
}

}  // namespace xdcr::replicator
