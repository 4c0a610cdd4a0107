#include "replicator/source_link.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/cluster_slot.h"
#include "common/redis_conn.h"
#include "common/sentinel.h"
#include "replicator/link_probe.h"
#include "replicator/migration_guard.h"
#include "replicator/supervision.h"
#include "source/document_read.h"
#include "source/redis_shard_source.h"
#include "source/spool.h"
#include "target/marker.h"

namespace xdcr::replicator {
namespace {

using namespace net::experimental::awaitable_operators;

bool isGetAck(const source::Change& c) {
  return c.entry != nullptr && c.entry->args.size() >= 2 &&
         resp::iequals(c.entry->args[0], "replconf") && resp::iequals(c.entry->args[1], "getack");
}

/** False for a unit that is only framing: PING, REPLCONF, SELECT, a Sentinel's hello. */
bool carriesData(const source::ResolvedUnit& unit) {
  for (const auto& c : unit.view()) {
    switch (c.effect) {
      case source::Effect::Select:
      case source::Effect::Multi:
      case source::Effect::Exec:
      case source::Effect::Heartbeat:
        break;
      default:
        return true;
    }
  }
  return false;
}

/** master_replid, master_replid2 and second_repl_offset of a node (INFO replication). */
struct History {
  std::string replid, replid2;
  int64_t second_offset = -1;
};

net::awaitable<Result<History>> readHistory(const RedisEndpoint& node, const std::string& label) {
  constexpr auto kTimeout = std::chrono::seconds(10);
  RedisConnection conn(co_await net::this_coro::executor, label + " history check");
  if (auto s = co_await conn.connect(node, kTimeout); !s) co_return fail(s.error());
  const std::vector<std::vector<std::string>> info = {{"INFO", "replication"}};
  auto r = co_await conn.callMany(info, kTimeout);
  conn.close();
  if (!r) co_return fail(r.error());
  if ((*r)[0].isError()) co_return fail(Error::refused((*r)[0].str));
  History h;
  std::istringstream in((*r)[0].str);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, colon), value = line.substr(colon + 1);
    if (key == "master_replid") h.replid = value;
    if (key == "master_replid2") h.replid2 = value;
    if (key == "second_repl_offset") h.second_offset = std::strtoll(value.c_str(), nullptr, 10);
  }
  co_return h;
}

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

SourceLink::SourceLink(net::any_io_executor ex, config::ConfigConstSharedPtr config,
                       std::vector<Pipeline*> members, const clock::Clock& clock,
                       MemberFn on_detach, MemberFn on_stopped)
    : ex_(ex),
      config_(std::move(config)),
      source_cluster_(members.front()->sourceCluster()),
      clock_(clock),
      limits_(members.front()->limits()),
      pipelines_(std::move(members)),
      on_detach_(std::move(on_detach)),
      on_stopped_(std::move(on_stopped)),
      source_clock_(clock),
      stop_wake_(ex),
      ack_wake_(ex),
      sink_wake_(ex),
      rng_(std::random_device{}()) {
  for (Pipeline* p : pipelines_) p->setLink(this);
  updateReadLimit();
}

SourceLink::~SourceLink() {
  for (Pipeline* p : pipelines_) p->setLink(nullptr);
}

void SourceLink::updateReadLimit() {
  uint64_t limit = 0;
  const Pipeline* by = nullptr;
  std::vector<std::string> who;
  for (const Pipeline* p : pipelines_) {
    const uint64_t l = p->bandwidthLimit();
    if (l > 0 && (limit == 0 || l < limit)) {
      limit = l;
      by = p;
    }
    // The links of one set of pipelines (one per shard of a Redis Cluster source) share the
    // bucket: a pipeline reads no more than its limit over all of them.
    who.push_back(fmt::format("{} {}", static_cast<const void*>(&p->config()), p->name()));
  }
  const uint64_t now = read_limiter_ ? read_limiter_->rate() : 0;
  if (limit != now) {
    if (limit == 0) {
      read_limiter_.reset();
      if (now > 0) spdlog::info("{}: no bandwidth limit on reading the source any more", label());
    } else {
      std::sort(who.begin(), who.end());
      std::string key = "read";
      for (const auto& w : who) key += " " + w;
      read_limiter_ = std::make_shared<RateLimiter>(RateLimiter::shared(key, limit));
      spdlog::info("{}: reading the source at most {} bytes/s (bandwidth_limit of pipeline {})",
                   label(), limit, by->name());
    }
  }
  for (Pipeline* p : pipelines_) p->setReadLimiter(read_limiter_);
  if (limited_source_ != nullptr) limited_source_->setReadLimiter(read_limiter_);
}

std::string SourceLink::label() const {
  std::string names;
  for (const Pipeline* p : pipelines_) names += (names.empty() ? "" : ", ") + p->name();
  const std::string where = pipelines_.empty() ? "" : pipelines_.front()->locator()->describe();
  return fmt::format("pipeline{} {}: source {} ({})", pipelines_.size() > 1 ? "s" : "", names,
                     source_cluster_.name, where.empty() ? source_cluster_.address() : where);
}

source::SpoolOptions SourceLink::spoolOptions(const std::string& node) const {
  // <state_dir>/spool/<source>.<pipelines>.<node>.spool: one file per link, named so that an
  // operator sees whose it is.
  std::string names;
  for (const Pipeline* p : pipelines_) names += (names.empty() ? "" : "+") + p->name();
  std::string name = fmt::format("{}.{}.{}", source_cluster_.name, names, node);
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_' &&
        c != '+') {
      c = '_';
    }
  }
  if (name.size() > 180) name = name.substr(0, 180);
  source::SpoolOptions o;
  o.dir = config_->agent.state_dir + "/spool";
  o.name = std::move(name);
  o.cluster = source_cluster_.name;
  o.limit = source_cluster_.spool_limit;
  return o;
}

void SourceLink::updateSpool(const source::Source& source) {
  const source::SpoolStats f = source.spool();
  for (auto& m : members_) {
    if (m.gone) continue;
    SnapshotProgress& pr = m.p->mutableProgress();
    pr.spooling = f.active;
    pr.spooled_bytes = f.bytes;
    pr.spool_on_disk_bytes = f.on_disk;
    pr.spool_peak_bytes = f.peak;
    pr.spool_limit = f.limit;
  }
}

SourceLink::Member* SourceLink::firstLive() {
  for (auto& m : members_) {
    if (!m.gone) return &m;
  }
  return nullptr;
}

size_t SourceLink::live() const {
  size_t n = 0;
  for (const auto& m : members_) n += m.gone ? 0 : 1;
  return n;
}

void SourceLink::stopAll() {
  stopping_ = true;
  for (Pipeline* p : pipelines_) p->stop();
  if (live_source_ != nullptr) live_source_->cancel();  // wake a read waiting for the source
  stop_wake_.notify();
  ack_wake_.notify();
}

void SourceLink::checkpointSoon() {
  if (checkpoint_due_ || members_.empty()) return;
  checkpoint_due_ = true;
  if (reading_source_ && live_source_ != nullptr) live_source_->cancel();
}

void SourceLink::memberStopping() {
  bool all = true;
  for (const Pipeline* p : pipelines_) all = all && p->stopping();
  if (all) {
    stopping_ = true;
    stop_wake_.notify();
  }
  member_leaving_ = true;
  if (live_source_ != nullptr && reading_source_) live_source_->cancel();
  ack_wake_.notify();
}

void SourceLink::detach(Member& m, const std::string& why) {
  Pipeline* p = m.p;
  spdlog::warn(
      "pipeline {}: detached from the link it shared with {} other pipeline(s) of "
      "source {}: {}; it continues on a link of its own from its last checkpoint",
      p->name(), live() - 1, source_cluster_.name, why);
  m.gone = true;
  m.pending.reset();
  if (m.sink) m.sink->close();
  p->setLiveSink(nullptr);
  p->setLink(nullptr);
  p->countDetachment();
  std::erase(pipelines_, p);
  updateReadLimit();
  // Started once this coroutine suspends: the new link loads the pipeline's checkpoint then.
  net::post(ex_, [fn = on_detach_, p] { fn(p); });
}

void SourceLink::retire(Member& m, const Error& why) {
  Pipeline* p = m.p;
  spdlog::critical("{}", why.message);
  m.gone = true;
  m.pending.reset();
  if (m.sink) m.sink->close();
  p->setLiveSink(nullptr);
  p->setLink(nullptr);
  p->setLastError(why.message);
  p->setState(PipelineState::Stopped);
  std::erase(pipelines_, p);
  updateReadLimit();
  releaseStopped(m);
}

void SourceLink::releaseStopped(Member& m) {
  // The sink refers to the pipeline's config, clocks and counters: it must be gone before the
  // pipeline is (on_stopped_ deletes it). A sink still running is released when its run ends.
  if (m.running) {
    m.release_when_done = true;
    return;
  }
  net::post(ex_, [fn = on_stopped_, p = m.p, sink = std::move(m.sink)]() mutable {
    sink.reset();
    fn(p);
  });
}

net::awaitable<void> SourceLink::runSessions() {
  Backoff backoff(limits_);
  while (!stopping_ && !pipelines_.empty()) {
    const auto started = clock_.monotonicNow();
    Status s;
    try {
      s = co_await session();
    } catch (const std::exception& e) {
      s = fail(Error::io(fmt::format("unexpected failure: {}", e.what())));
    }
    countAbortedFullSyncs(s);
    if (stopping_ || pipelines_.empty()) break;
    const std::string why = s ? "session ended" : s.error().message;
    if (master_moved_) {
      // Not a failure: the Sentinels named a new master. Go there at once, no backoff.
      master_moved_ = false;
      spdlog::info("{}: {}", label(), why);
      for (Pipeline* p : pipelines_) {
        ++p->mutableStats().reconnects;
        p->setState(PipelineState::Reconnecting);
      }
      continue;
    }
    spdlog::error("{}: {}", label(), why);
    for (Pipeline* p : pipelines_) {
      p->setLastError(why);
      ++p->mutableStats().reconnects;
      p->setState(PipelineState::Reconnecting);
    }
    const auto wait = backoff.next(clock_.monotonicNow() - started, rng_);
    spdlog::info("{}: reconnecting in {} ms, or as soon as the link answers again", label(),
                 std::chrono::duration_cast<std::chrono::milliseconds>(wait).count());
    co_await backOff(wait);
  }
}

net::awaitable<void> SourceLink::tickFigures() {
  for (;;) {
    net::steady_timer t(ex_);
    t.expires_after(limits_.head_period);
    auto [ec] = co_await t.async_wait(net::as_tuple(net::use_awaitable));
    if (ec) co_return;  // cancelled: the link ends
    updateFromHead();
  }
}

net::awaitable<void> SourceLink::run() {
  // (the watch's INFO may wait on a slow or broken link: the figures tick apart from it)
  co_await (runSessions() || watchHead() || tickFigures());
  // Everyone still here stops with the link (a graceful stop, or a pipeline that cannot run).
  members_.clear();  // the last session's sinks (all joined) go before their pipelines
  std::vector<Pipeline*> left;
  left.swap(pipelines_);
  for (Pipeline* p : left) {
    p->setState(PipelineState::Stopped);
    p->setLink(nullptr);
    spdlog::info("pipeline {}: stopped at offset {}", p->name(), p->appliedOffset());
    on_stopped_(p);
  }
}

net::awaitable<void> SourceLink::watchHead() {
  std::optional<RedisConnection> conn;
  std::string conn_address;
  const std::vector<std::vector<std::string>> info = {{"INFO", "replication"}};
  for (;;) {
    net::steady_timer t(ex_);
    t.expires_after(limits_.head_period);
    auto [ec] = co_await t.async_wait(net::as_tuple(net::use_awaitable));
    if (ec) co_return;  // cancelled: the link ends
    try {
      // The node the link reads (a shard's or a Sentinel's master once located); a plain
      // source's address before the first session.
      std::optional<RedisEndpoint> node = source_node_;
      if (!node && source_cluster_.kind == config::ClusterKind::Redis) {
        node = probeEndpoint(source_cluster_);
      }
      if (node && (!conn || conn_address != node->address())) {
        conn.reset();
        conn.emplace(ex_, label() + " offset watch");
        if (auto c = co_await conn->connect(*node, limits_.link_probe_timeout); !c) {
          conn.reset();  // the session reports an unreachable source; the last reading stands
        } else {
          conn_address = node->address();
        }
      }
      if (conn) {
        auto r = co_await conn->callMany(info, limits_.link_probe_timeout);
        if (!r) {
          conn.reset();
        } else if ((*r)[0].isError()) {
          if (!head_refused_logged_) {
            head_refused_logged_ = true;
            spdlog::warn(
                "{}: the source refused INFO replication ({}): lag and backlog count only what "
                "the agent has received (grant the replication user +info)",
                label(), (*r)[0].str);
          }
        } else if (auto reading = SourceHead::parse((*r)[0].str)) {
          head_.record(std::move(*reading), clock_.monotonicNow());
        }
      }
    } catch (const std::exception& e) {
      conn.reset();  // never ends the link: the next second tries again
      spdlog::debug("{}: offset watch: {}", label(), e.what());
    }
  }
}

void SourceLink::updateFromHead() {
  const auto now = clock_.monotonicNow();
  for (Pipeline* p : pipelines_) {
    // A full sync: what the snapshot's position leaves, and at least the time since it began.
    const bool syncing = p->state() == PipelineState::FullSync && snapshot_at_.has_value();
    const std::string& replid = syncing ? snapshot_at_->replid : applied_replid_;
    const uint64_t applied = syncing ? snapshot_at_->offset : p->appliedOffset();
    const std::optional<uint64_t> backlog = head_.backlog(replid, applied);
    double lag = head_.lagSeconds(replid, applied, now);
    if (syncing && p->snapshotProgress().active) {
      lag = std::max(lag, seconds(now - p->snapshotProgress().started));
    }
    if (!syncing && !applied_replid_.empty()) {
      p->mutableStats().applied_bytes +=
          p->applyRateTracker().record(applied_replid_, applied, now);
    }
    p->setHeadFigures(backlog ? static_cast<int64_t>(*backlog) : -1, lag,
                      p->applyRateTracker().bytesPerSecond());
  }
  // A full sync is never silent for longer than progress_report, stalled or not (this runs
  // every head_period: a line is due when the next run would be late).
  if (snapshot_at_ && firstLive() != nullptr) {
    const uint64_t bytes = firstLive()->p->snapshotProgress().bytes_done;
    if (bytes != last_reported_bytes_) {
      last_reported_bytes_ = bytes;
      last_snapshot_bytes_at_ = now;
    }
  }
  if (snapshot_at_ && !members_.empty() &&
      now - last_report_ + limits_.head_period > limits_.progress_report) {
    reportProgress(false);
  }
}

void SourceLink::countAbortedFullSyncs(const Status& why) {
  std::string reason = "other";
  if (stopping_) {
    reason = "stopped";
  } else if (!why) {
    const std::string& m = why.error().message;
    // (source/redis_source.cc diagnoses a link the source closed during a full sync; it blames
    // client-output-buffer-limit replica unless the agent had read nearly everything sent)
    if (m.find("the source closed the link during a full sync") != std::string::npos) {
      reason =
          m.find("nearly empty") == std::string::npos ? "output_buffer_limit" : "source_closed";
    } else if (std::any_of(members_.begin(), members_.end(),
                           [](const Member& mb) { return mb.failed.has_value(); })) {
      reason = "target_error";  // (members_ is the ended session's until the next one)
    } else if (why.error().kind == Error::Kind::Io) {
      reason = "source_closed";
    }
  }
  snapshot_at_.reset();  // the session is over: no progress lines for it any more
  for (Pipeline* p : pipelines_) {
    SnapshotProgress& pr = p->mutableProgress();
    if (!pr.active) continue;
    pr.active = false;
    ++p->mutableStats().full_syncs_aborted[reason];
    spdlog::warn("pipeline {}: full sync aborted ({}) after {:.0f} s, {} keys and {} read",
                 p->name(), reason, seconds(clock_.monotonicNow() - pr.started), pr.keys_done,
                 source::formatBytes(pr.bytes_done));
  }
}

net::awaitable<void> SourceLink::backOff(std::chrono::steady_clock::duration wait) {
  // Probe every server of the link while waiting: when one did not answer and then all do, the
  // partition is over and the next session starts now (the backoff has grown during a long
  // partition; a failure with the link up — a refusal, a full sync that failed — waits it out).
  std::vector<RedisEndpoint> endpoints;
  endpoints.push_back(source_node_ ? *source_node_ : probeEndpoint(source_cluster_));
  for (const Pipeline* p : pipelines_) {
    RedisEndpoint t = probeEndpoint(p->targetCluster());
    if (std::none_of(endpoints.begin(), endpoints.end(),
                     [&](const RedisEndpoint& e) { return e.address() == t.address(); })) {
      endpoints.push_back(std::move(t));
    }
  }
  const auto start = clock_.monotonicNow();
  const auto deadline = start + wait;
  bool saw_down = false;
  while (!stopping_ && clock_.monotonicNow() < deadline) {
    const bool up = co_await allAnswer(ex_, endpoints, limits_.link_probe_timeout);
    if (!up) {
      saw_down = true;
    } else if (saw_down) {
      spdlog::info(
          "{}: the link answers again: reconnecting now ({} ms into the backoff)", label(),
          std::chrono::duration_cast<std::chrono::milliseconds>(clock_.monotonicNow() - start)
              .count());
      co_return;
    }
    const auto now = clock_.monotonicNow();
    if (now >= deadline) break;
    co_await stop_wake_.waitFor(
        std::min<std::chrono::steady_clock::duration>(deadline - now, limits_.link_probe_period));
  }
}

Status SourceLink::loadCheckpoints() {
  // Back to the last checkpoints: an offset and its expiry index belong together.
  resume_at_.reset();
  resume_db_ = 0;
  index_.setJournaling(false);
  index_.clearAll();
  struct Loaded {
    Pipeline* p;
    source::ExpiryIndex index;
  };
  std::vector<Loaded> loaded;
  for (Pipeline* p : std::vector<Pipeline*>(pipelines_)) {
    Loaded l{p, {}};
    if (auto s = p->open(l.index); !s) {
      spdlog::error("pipeline {}: {}", p->name(), s.error().message);
      if (pipelines_.size() == 1) return s;  // the pipeline cannot run at all
      std::erase(pipelines_, p);
      p->setState(PipelineState::Stopped);
      p->setLink(nullptr);
      net::post(ex_, [fn = on_stopped_, p] { fn(p); });
      continue;
    }
    loaded.push_back(std::move(l));
  }
  // The link resumes where every member can: the oldest checkpoint of one replication history,
  // with that checkpoint's index; members ahead of it skip what their target already holds.
  // A member without a checkpoint (or of another history) needs a full sync the others do not:
  // it runs on a link of its own. With no checkpoint anywhere, everyone shares one full sync.
  const Loaded* base = nullptr;
  for (const auto& l : loaded) {
    if (!l.p->resumePoint()) continue;
    if (base == nullptr ||
        (l.p->resumePoint()->position.replid == base->p->resumePoint()->position.replid &&
         l.p->resumePoint()->position.offset < base->p->resumePoint()->position.offset)) {
      base = &l;
    }
  }
  if (base != nullptr && loaded.size() > 1) {
    const std::string& replid = base->p->resumePoint()->position.replid;
    for (const auto& l : loaded) {
      const auto& r = l.p->resumePoint();
      if (r && r->position.replid == replid) continue;
      spdlog::warn("pipeline {}: {}; it syncs on a link of its own", l.p->name(),
                   r ? "its checkpoint belongs to another replication history than its "
                       "link's"
                     : "it has no checkpoint while the other pipelines of its source do");
      std::erase(pipelines_, l.p);
      l.p->setLink(nullptr);
      l.p->countDetachment();
      net::post(ex_, [fn = on_detach_, p = l.p] { fn(p); });
    }
  }
  if (base != nullptr) {
    resume_at_ = base->p->resumePoint()->position;
    applied_replid_ = resume_at_->replid;
    resume_db_ = base->p->resumePoint()->db;
    resume_data_ = {resume_at_->replid, base->p->resumePoint()->data_offset,
                    base->p->resumePoint()->data_db};
    index_ = std::move(const_cast<Loaded*>(base)->index);
    // Journal the index's changes from the loaded state on; without a checkpoint there is a
    // full sync first, whose end writes a whole image.
    index_.setJournaling(true);
    spdlog::info("{}: resuming from checkpoint {}:{} ({} deadlines in the expiry index)", label(),
                 resume_at_->replid, resume_at_->offset, index_.size());
  }
  return Status{};
}

net::awaitable<Status> SourceLink::session() {
  members_.clear();
  checkpoint_due_ = false;
  for (Pipeline* p : pipelines_) p->setState(PipelineState::Starting);
  if (auto s = loadCheckpoints(); !s) {
    stopping_ = true;  // nothing to retry: the state directory is unusable
    co_return s;
  }
  if (pipelines_.empty()) co_return Status{};

  // The sinks: connected, their writer/reader running from the start (a full sync writes
  // through them too), their markers checked against the checkpoints.
  for (Pipeline* p : pipelines_) {
    Member& m = members_.emplace_back();
    m.p = p;
    m.sink = p->makeSink(clock_);
  }
  auto runSink = [this](Member& m) {
    m.running = true;
    net::co_spawn(ex_, m.sink->run(), [this, &m](std::exception_ptr e, Status s) {
      m.running = false;
      if (m.release_when_done) {
        releaseStopped(m);
        return;
      }
      if (e) s = fail(Error::io("unexpected failure in the target writer"));
      if (!m.gone && !s) m.failed = s.error();
      if (!m.gone && s && !stopping_) m.failed = Error::io("target connection closed");
      sink_wake_.notify();
      ack_wake_.notify();
      if (live_source_ != nullptr && reading_source_) live_source_->cancel();
    });
  };
  struct JoinSinks {
    SourceLink& link;
    ~JoinSinks() {
      for (auto& m : link.members_) {
        if (m.sink) m.sink->close();
        // (a member that left belongs to another link now, or is gone)
        if (!m.gone) m.p->setLiveSink(nullptr);
      }
    }
  } join{*this};
  Status result;
  bool resuming = resume_at_.has_value();
  for (auto& m : members_) {
    Status s = co_await m.sink->connect();
    target::MarkerState markers;
    if (s) {
      const std::vector<std::string> accepted = m.p->acceptedMarkers();
      auto r = co_await m.sink->readMarkers(accepted);
      if (r) {
        markers = *r;
      } else {
        s = fail(r.error());
      }
    }
    if (!s) {
      if (live() == 1) {
        result = s;
        break;
      }
      detach(m, s.error().message);
      continue;
    }
    auto skip = m.p->checkMarkers(markers);
    if (!skip) {
      result = fail(skip.error());
      break;
    }
    if (resuming && !m.p->resumePoint()) {
      // This target lost data: it needs a full sync.
      if (live() > 1) {
        detach(m, "its target lost data its checkpoint counts as written");
        continue;
      }
      resume_at_.reset();
      index_.setJournaling(false);
      index_.clearAll();
    }
    m.skip_until = skip->until;
    m.stamp = skip->until;
    m.sink->setSlotReplaySkip(std::move(skip->slots));
    if (m.p->resumePoint()) {
      // What a stamp covers beyond its own checkpoint was applied by an agent that may have
      // stopped before it acted on the replies (§12.2 step 5).
      m.sink->setUnconfirmedAfter(m.p->resumePoint()->position.offset);
    }
    if (m.p->resumePoint() && resume_at_ &&
        m.p->resumePoint()->position.offset > resume_at_->offset) {
      // Ahead of the link: its target holds the stream up to its own checkpoint already.
      m.skip_until = std::max(m.skip_until, m.p->resumePoint()->position.offset);
    }
    m.p->setLiveSink(m.sink.get());
    m.sink->setRepairWanted([this] { repairWanted(); });
    runSink(m);
  }
  if (result && live() > 0) {
    // Where to read from now: a shard's or a Sentinel's master moves with failovers; the
    // session ends as soon as discovery says the node is no longer the one. A Sentinel-managed
    // master is the one the Sentinels name now (and that says it is one).
    std::shared_ptr<source::Locator> locator = pipelines_.front()->locator();
    Result<source::NodeChoice> node = co_await locator->locate();
    if (!node) {
      result = fail(node.error());
    } else {
      shard_ = node->endpoint.address();
      source_node_ = node->endpoint;
      source_role_ = node->role;
      repair_conn_.reset();  // (a connection to the last session's node)
      for (auto& m : members_) {
        if (!m.gone) m.p->mutableStats().source_failovers[shard_];  // the series exists at 0
      }
      // A source whose history forked from the checkpoint's (a promoted replica: a Sentinel's
      // or a cluster shard's failover, or a standalone address now served by the promoted node).
      if (resume_at_) {
        const RedisEndpoint endpoint = node->endpoint;
        co_await alignWithHistory(endpoint);
      }
      source::RedisShardSource source(ex_, source_cluster_,
                                      fmt::format("{} node {}", label(), node->endpoint.address()),
                                      index_, source_clock_);
      source.setNode(node->endpoint, node->role);
      source.setSpool(spoolOptions(node->endpoint.address()));
      // The members that left since (loadCheckpoints) may have had the smallest limit.
      updateReadLimit();
      source.setReadLimiter(read_limiter_);
      limited_source_ = &source;
      struct Unlimit {
        source::RedisShardSource*& source;
        ~Unlimit() { source = nullptr; }
      } unlimit{limited_source_};
      for (Pipeline* p : pipelines_) {
        p->setSourceNode(fmt::format("{}{}", node->endpoint.address(),
                                     node->role.empty() ? "" : " (" + node->role + ")"));
      }
      if (source_cluster_.isSentinel()) spdlog::info("{}: attaching to master {}", label(), shard_);
      // (background(): the spool's pump during a full sync; it returns only when cancelled)
      auto r = co_await (streamSide(source) || watchSinks() || watchNode(*locator, *node) ||
                         source.background());
      result = std::visit([](auto& s) { return s; }, r);
    }
  }
  // Join: every sink's run() must have returned before its Member goes away.
  for (auto& m : members_) {
    if (m.sink) m.sink->close();
  }
  while (std::any_of(members_.begin(), members_.end(), [](const Member& m) { return m.running; })) {
    co_await sink_wake_.waitFor(std::chrono::milliseconds(100));
  }
  co_return result;
}

net::awaitable<Status> SourceLink::watchNode(source::Locator& locator,
                                             const source::NodeChoice& node) {
  co_await locator.watch(node);
  // watch() also returns when the session ended otherwise (the || cancelled it): then nothing
  // moved, and the session's own result stands.
  net::cancellation_state cs = co_await net::this_coro::cancellation_state;
  if (cs.cancelled() != net::cancellation_type::none) co_return Status{};
  master_moved_ = true;  // not a failure: go to the new node at once, without backoff
  co_return fail(Error::io(
      fmt::format("{} is no longer the node to read from (a failover); attaching to the new one",
                  node.endpoint.address())));
}

net::awaitable<void> SourceLink::alignWithHistory(const RedisEndpoint& node) {
  const std::string who = label();
  auto history = co_await readHistory(node, who);
  if (!history) {
    spdlog::debug("{}: cannot read INFO replication of {}: {}", who, node.address(),
                  history.error().message);
    co_return;
  }
  // Only a node whose history forked from the checkpoint's: a promoted replica (its replid2 is
  // the checkpoint's replid) shares it up to `fork`, the last offset of both (PSYNC <old id>
  // <offset+1> is accepted up to offset+1 == second_repl_offset, cluster-notes.md §3.1).
  if (history->replid == resume_at_->replid || history->replid2 != resume_at_->replid ||
      history->second_offset < 1) {
    co_return;
  }
  const auto fork = static_cast<uint64_t>(history->second_offset - 1);
  // How far into the old history the targets may hold data: what this link last handed them
  // (this process), each checkpoint's last data, each target's replay stamp. Past the fork is
  // what the old master took after the failover and the new one never had (cluster-notes.md
  // §3.3, §3.6): the targets hold writes the source lost, only a full sync makes them whole.
  uint64_t held = resume_data_.offset;
  if (data_end_.replid == resume_at_->replid) held = std::max(held, data_end_.offset);
  for (const auto& m : members_) {
    if (m.gone) continue;
    held = std::max(held, m.stamp);
    const auto& own = m.p->resumePoint();
    if (own && own->position.replid == resume_at_->replid) {
      held = std::max(held, own->data_offset);
    }
  }
  if (held > fork) {
    spdlog::warn(
        "{}: the targets hold writes of the old master up to offset {}, past the failover point "
        "{}: {} never had them (writes the source lost in the failover); a full sync follows",
        who, held, fork, node.address());
    resume_at_.reset();
    index_.setJournaling(false);
    index_.clearAll();
    for (auto& m : members_) {
      m.skip_until = 0;
      if (m.sink) m.sink->setSlotReplaySkip({});
    }
    co_return;
  }
  // Past the fork the offsets are the new history's: nothing there was written before, whatever
  // a checkpoint ahead of the link's or a replay stamp says.
  for (auto& m : members_) {
    m.skip_until = std::min(m.skip_until, fork);
    if (m.sink) m.sink->capSlotReplaySkip(fork);
  }
  if (resume_at_->offset <= fork) co_return;  // PSYNC continues as is
  // Only framing (pings, the Sentinels' hellos) came after the last data, so resuming anywhere
  // from there to the fork skips nothing; the fork is the latest such point, the surest to be in
  // the new master's backlog (a node just re-synced keeps a short one). The db in effect there
  // does not matter: a promoted replica starts its stream with a SELECT (replicationUnsetMaster
  // resets slaveseldb).
  spdlog::info(
      "{}: the old master sent only framing (pings, Sentinel hellos) after the last data (offset "
      "{}) up to the checkpoint's offset {}; the new master's history forked at {}: resuming "
      "there",
      who, held, resume_at_->offset, fork);
  resume_at_->offset = fork;
  resume_db_ = resume_data_.db;
}

net::awaitable<Status> SourceLink::watchSinks() {
  for (;;) {
    co_await sink_wake_.waitFor(std::chrono::seconds(1));
    if (live() > 1) continue;  // several: the read loop detaches a failed one
    for (auto& m : members_) {
      if (m.gone || !m.failed) continue;
      if (m.failed->kind == Error::Kind::Conflict) {
        retire(m, *m.failed);
        co_return Status{};
      }
      co_return fail(*m.failed);
    }
    if (live() == 0) co_return Status{};
  }
}

net::awaitable<Status> SourceLink::streamSide(source::Source& source) {
  live_source_ = &source;
  struct Clear {
    source::Source*& p;
    ~Clear() { p = nullptr; }
  } clear{live_source_};

  // A clock-skew pause holds before the source is even asked to sync: nothing may reach a
  // target, a full sync included. The source's backlog keeps the stream meanwhile.
  for (;;) {
    if (stopping_) co_return Status{};
    if (auto s = superviseMembers(false); !s) co_return s;
    bool all_paused = live() > 0;
    for (auto& m : members_) all_paused = all_paused && (m.gone || m.p->skewPaused());
    if (!all_paused) break;
    for (auto& m : members_) {
      if (!m.gone) m.p->setState(PipelineState::Paused);
    }
    co_await firstLive()->p->waitPauseChange(std::chrono::seconds(1));
  }
  if (live() == 0) co_return Status{};
  for (auto& m : members_) {
    if (!m.gone) m.p->setState(PipelineState::Starting);
  }

  auto kind = co_await source.start(resume_at_ ? &*resume_at_ : nullptr, resume_db_, *this);
  if (!kind) {
    source.close();
    co_return fail(kind.error());
  }
  const uint64_t at = source.position().offset;
  // +CONTINUE under a new replication id: the history went on through a failover (a promoted
  // replica's replid2 is the old id, cluster-notes.md §3.1) and was followed without a full sync.
  const bool failover = *kind == source::SyncKind::Partial && resume_at_ &&
                        source.position().replid != resume_at_->replid;
  if (failover) {
    spdlog::info("{}: followed a failover without a full sync: history {} continues as {} on {}",
                 label(), resume_at_->replid, source.position().replid, shard_);
  }
  for (auto& m : members_) {
    if (m.gone) continue;
    if (failover) ++m.p->mutableStats().source_failovers[shard_];
    if (*kind == source::SyncKind::Partial) {
      ++m.p->mutableStats().partial_syncs;
    } else {
      ++m.p->mutableStats().full_syncs;
      m.skip_until = 0;  // a new history's offsets: the stamp says nothing about them
      m.sink->setSlotReplaySkip({});
    }
    m.sink->resetOffset(at);
    m.p->setSourceOffset(at);
    m.p->setAppliedOffset(at);
    m.p->setLag(0);
  }
  received_offset_ = at;
  applied_replid_ = source.position().replid;
  data_end_ = {source.position().replid, at, source.currentDb()};
  arrivals_.clear();
  if (*kind == source::SyncKind::Full) {
    for (auto& m : members_) {
      if (m.gone || !resume_at_ || m.p->config().delete_stale_keys) continue;
      spdlog::warn(
          "pipeline {}: a full sync after checkpoint {}:{}: keys the source deleted since that "
          "the target still holds stay there (and a later write of a list, hash, set or zset "
          "merges into them); full_sync.delete_stale_keys deletes them after the snapshot",
          m.p->name(), resume_at_->replid, resume_at_->offset);
    }
    for (auto& m : members_) {
      if (m.gone) continue;
      // Before the stream resumes, so nothing written after the snapshot can look stale: the
      // key space (full_sync.delete_stale_keys), or what an interrupted full sync wrote.
      auto deleted = co_await m.sink->deleteStaleKeys(at);
      if (!deleted) co_return fail(deleted.error());
      m.p->mutableStats().stale_keys_deleted += *deleted;
    }
    // The snapshot is acknowledged (endSnapshot drained the targets): persist the new history
    // at once, so that a restart resumes it instead of syncing again.
    std::vector<Member*> all;
    for (auto& m : members_) {
      if (!m.gone) all.push_back(&m);
    }
    if (auto c = co_await checkpointAfterMarker(source, all); !c) co_return c;
    for (Member* m : all) {
      // Only once the checkpoint is written: until then a restart syncs again and must sweep.
      if (m->gone) continue;
      if (auto s = m->sink->endFullSync(); !s) co_return s;
    }
  }
  for (auto& m : members_) {
    if (m.gone) continue;
    m.p->setState(PipelineState::Streaming);
    spdlog::info("pipeline {}: streaming from {}:{}", m.p->name(), source.position().replid,
                 source.position().offset);
  }
  auto result = co_await (readLoop(source) || ackLoop(source));
  source.close();
  co_return std::visit([](auto& s) { return s; }, result);
}

Status SourceLink::superviseMembers(bool snapshot) {
  for (auto& m : members_) {
    // Another writer of this pipeline's marker: replicating on would apply writes twice.
    if (!m.gone && m.failed && m.failed->kind == Error::Kind::Conflict) retire(m, *m.failed);
  }
  if (live() == 1) {
    for (auto& m : members_) {
      if (!m.gone && m.failed) return fail(*m.failed);
    }
    return Status{};
  }
  // Each member's view, then the verdicts (replicator/supervision.h): a member that holds the
  // others back longer than detach_after leaves for a link of its own. (Time is read only here:
  // this runs per unit, and a clock read cost 2-5 % of a one-member drain.)
  const auto now = clock_.monotonicNow();
  for (auto& m : members_) {
    if (m.gone) continue;
    m.hold.failed = m.failed.has_value();
    m.hold.paused = m.p->paused() && !m.p->stopping();
    m.hold.over_limits = m.sink->overLimits(snapshot);
    m.hold.silent_s = m.sink->stalledSeconds();
  }
  for (auto& m : members_) {
    if (m.gone || live() <= 1) continue;
    bool others_free = false;
    for (const auto& o : members_) {
      if (&o != &m && !o.gone && !o.hold.failed && !o.hold.paused && !o.hold.over_limits &&
          o.hold.silent_s <= seconds(limits_.detach_after)) {
        others_free = true;
      }
    }
    std::string why = detachReason(m.hold, others_free, now, limits_);
    if (why.empty()) continue;
    if (m.failed) why += ": " + m.failed->message;
    if (m.hold.paused) why += ": " + m.p->pausedDetail();
    detach(m, why);
  }
  return Status{};
}

bool SourceLink::mustWait(bool snapshot) const {
  for (const auto& m : members_) {
    if (m.gone) continue;
    if (m.sink->overLimits(snapshot) || (m.p->paused() && !m.p->stopping())) return true;
  }
  return false;
}

net::awaitable<Status> SourceLink::waitForMembers(bool snapshot) {
  while (!stopping_ && !member_leaving_) {
    if (auto s = superviseMembers(snapshot); !s) co_return s;
    if (!mustWait(snapshot)) break;
    Member* over = nullptr;
    bool paused = false;
    for (auto& m : members_) {
      if (m.gone) continue;
      if (m.sink->overLimits(snapshot)) over = over ? over : &m;
      if (m.p->paused()) {
        paused = true;
        // Nothing is taken from the source while paused; ACKs go on, so the link stays up, and
        // the source's backlog (and output buffer) holds the stream.
        if (m.p->state() == PipelineState::Streaming) m.p->setState(PipelineState::Paused);
      }
    }
    if (over != nullptr) {
      co_await over->sink->waitProgress(std::chrono::milliseconds(100));
    } else if (paused) {
      co_await firstLive()->p->waitPauseChange(std::chrono::milliseconds(200));
    }
  }
  for (auto& m : members_) {
    if (!m.gone && !m.p->paused() && m.p->state() == PipelineState::Paused) {
      m.p->setState(PipelineState::Streaming);
    }
  }
  co_return Status{};
}

void SourceLink::repairWanted() {
  repairs_wanted_ = true;
  // Waiting for the source (nothing new to read): wake the read loop now.
  if (live_source_ != nullptr && reading_source_) live_source_->cancel();
}

net::awaitable<Status> SourceLink::restoreCopies(const source::Source& source) {
  repairs_wanted_ = false;
  std::vector<source::DocumentKey> keys;
  for (auto& m : members_) {
    if (m.gone) continue;
    std::vector<source::DocumentKey> more = m.sink->takeRepairs();
    keys.insert(keys.end(), std::make_move_iterator(more.begin()),
                std::make_move_iterator(more.end()));
  }
  if (keys.empty()) co_return Status{};
  if (!source_node_) {
    // (Cannot happen while streaming.) Never dropped: the next session replays their writes.
    co_return fail(Error::io(fmt::format("{}: {} key(s) to read back and no source node located",
                                         label(), keys.size())));
  }
  std::sort(keys.begin(), keys.end());  // by db: one SELECT a db
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  const uint64_t consumed = source.position().offset;
  for (size_t at = 0; at < keys.size(); at += limits_.copy_read_batch) {
    const std::vector<source::DocumentKey> batch(
        keys.begin() + static_cast<std::ptrdiff_t>(at),
        keys.begin() +
            static_cast<std::ptrdiff_t>(std::min(keys.size(), at + limits_.copy_read_batch)));
    Result<source::DocumentRead> read = fail(Error::io("not read"));
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (!repair_conn_) {
        repair_conn_ = std::make_unique<RedisConnection>(ex_, label() + " read back");
        if (auto c = co_await repair_conn_->connect(*source_node_, limits_.copy_read_timeout); !c) {
          repair_conn_.reset();
          read = fail(c.error());
          continue;
        }
        if (source_cluster_.kind == config::ClusterKind::RedisCluster && source_role_ != "master") {
          // A cluster replica serves reads only to a READONLY connection.
          std::vector<std::string_view> readonly{"READONLY"};
          (void)co_await repair_conn_->call(readonly, limits_.copy_read_timeout);
        }
      }
      read = co_await source::readDocuments(*repair_conn_, batch, limits_.copy_read_timeout);
      if (read || read.error().kind != Error::Kind::Io) break;
      repair_conn_.reset();  // a broken connection: once more on a new one
    }
    if (!read && read.error().kind == Error::Kind::Refused) {
      // The source will not give them (its ACL, an old server): never silent, never a loop.
      source::DocumentRead refused;
      for (const auto& k : batch) refused.unreadable.push_back({k, read.error().message});
      for (auto& m : members_) {
        if (!m.gone) m.sink->restoreCopies(refused);
      }
      continue;
    }
    if (!read) co_return fail(read.error());  // the next session replays: found gone again
    if (read->offset < consumed ||
        (!read->replid.empty() && read->replid != source.position().replid)) {
      // Another history (a failover between the stream and the read): the next session
      // attaches where the stream now is, and the copies are found gone again.
      co_return fail(Error::io(fmt::format(
          "{}: a read back of {} key(s) came from {}:{}, the stream is at {}:{}; reconnecting",
          label(), batch.size(), read->replid, read->offset, source.position().replid, consumed)));
    }
    for (auto& m : members_) {
      if (!m.gone) m.sink->restoreCopies(*read);
    }
  }
  co_return Status{};
}

void SourceLink::closeGroups(const source::Source& source) {
  for (auto& m : members_) {
    if (!m.gone) m.sink->closeGroup(source.position().replid);
  }
}

net::awaitable<Status> SourceLink::readLoop(source::Source& source) {
  source::ResolvedUnit unit;
  auto anyPaused = [&] {
    for (const auto& m : members_) {
      if (!m.gone && m.p->paused()) return true;
    }
    return false;
  };
  for (;;) {
    // An open replay-stamp group is closed before every suspension point (the writer never
    // sends half a group) and at these limits.
    bool close = stopping_ || member_leaving_ || checkpoint_due_ || anyPaused() ||
                 index_.journalSize() >= limits_.checkpoint_every_changes;
    for (const auto& m : members_) {
      if (!m.gone &&
          (m.sink->groupUnits() >= limits_.max_group_units || m.sink->overLimits(false))) {
        close = true;
      }
    }
    if (close) closeGroups(source);

    if (stopping_) {
      // Graceful drain: everything read is already translated; wait for the targets' answers,
      // then checkpoint every member.
      std::vector<Member*> all;
      for (auto& m : members_) {
        if (!m.gone) all.push_back(&m);
      }
      co_return co_await checkpointAfterMarker(source, all);
    }
    if (member_leaving_) {
      member_leaving_ = false;
      for (auto& m : members_) {
        if (!m.gone && m.p->stopping()) {
          if (auto s = co_await leave(m, source); !s) co_return s;
        }
      }
      if (live() == 0) co_return Status{};
    }
    if (auto s = superviseMembers(false); !s) co_return s;
    if (live() == 0) co_return Status{};

    finishDeltaCheckpointsIfAnswered();
    if (index_.journalSize() >= limits_.checkpoint_every_changes && !anyNeedsWholeImage()) {
      checkpoint_due_ = true;
    }
    // Not while paused: the marker is a write too, and a skew pause lets none through (the
    // checkpoint follows the resume; nothing is applied meanwhile).
    if (checkpoint_due_ && !anyPaused()) {
      if (anyNeedsWholeImage()) {
        std::vector<Member*> all;
        for (auto& m : members_) {
          if (!m.gone) all.push_back(&m);
        }
        if (auto c = co_await checkpointAfterMarker(source, all); !c) co_return c;
      } else {
        beginDeltaCheckpoint(source);
      }
    }
    if (auto s = co_await waitForMembers(false); !s) co_return s;
    if (stopping_ || member_leaving_ || live() == 0) continue;
    if (repairs_wanted_) {
      // Before the next unit: what the restored copies hold is then exactly the stream up to
      // their read, and every later unit that touches them is judged against it.
      closeGroups(source);
      if (auto s = co_await restoreCopies(source); !s) co_return s;
      continue;
    }

    auto got = source.nextUnit(unit);
    if (!got) co_return fail(got.error());
    if (!*got) {
      closeGroups(source);
      if (repairs_wanted_) continue;  // (units a stamp covered asked for read-backs: first)
      reading_source_ = true;
      auto r = co_await source.readMore();
      reading_source_ = false;
      if (!r) {
        if (stopping_ || member_leaving_) continue;              // cancelled by a stop: drain
        if (r.error().kind == Error::Kind::Cancelled) continue;  // a checkpoint or a member
        co_return r;
      }
      received_offset_ = source.receivedOffset();
      for (auto& m : members_) {
        if (!m.gone) m.p->setSourceOffset(received_offset_);
      }
      arrivals_.push_back({received_offset_, clock_.monotonicNow()});
      if (arrivals_.size() > 4096) arrivals_.pop_front();  // bounded: lag is then a lower bound
      continue;
    }
    if (MigrationGuard* guard = pipelines_.front()->migrationGuard(); guard != nullptr) {
      if (auto s = co_await guardMigration(source, unit); !s) co_return s;
    }
    for (const auto& c : unit.view()) {
      if (isGetAck(c)) {
        ack_requested_ = true;
        ack_wake_.notify();
      }
    }
    // A unit the replay stamp (or a checkpoint ahead of the link's) shows applied: the sink
    // still judges it (counters), but nothing is written again.
    for (auto& m : members_) {
      if (!m.gone) m.sink->apply(unit, unit.offset_end > m.skip_until);
    }
    source.consume(unit);
    if (carriesData(unit)) {
      // (data_end_.replid is the session's, set after Source::start: no copy per unit)
      data_end_.offset = unit.offset_end;
      data_end_.db = source.currentDb();
    }
  }
}

net::awaitable<Status> SourceLink::guardMigration(source::Source& source,
                                                  source::ResolvedUnit& unit) {
  MigrationGuard& guard = *pipelines_.front()->migrationGuard();
  std::vector<std::string> restored;
  for (size_t i = 0; i < unit.count; ++i) {
    source::Change& c = unit.changes[i];
    if (c.entry == nullptr || c.effect != source::Effect::Restore) continue;
    if (!resp::iequals(c.arg(0), "restore-asking")) continue;
    for (const auto& ev : c.events) {
      // (a key of a slot another agent replicates is not written here: nothing to pair)
      if (guard.selects(ev.key)) restored.emplace_back(ev.key);
    }
  }
  // A DEL of a key whose RESTORE waits on another shard: that RESTORE (with REPLACE) follows,
  // so the key is not deleted from the target meanwhile.
  for (size_t i = 0; i < unit.count; ++i) {
    source::Change& c = unit.changes[i];
    if (c.effect != source::Effect::Delete) continue;
    for (auto& ev : c.events) {
      if (ev.pass && guard.restorePending(ev.key)) {
        ev.pass = false;
        guard.countDeleteHeld();
        for (auto& m : members_) {
          if (!m.gone) ++m.p->mutableStats().migration_deletes_held;
        }
      }
    }
  }
  if (restored.empty()) co_return Status{};
  closeGroups(source);
  // (the checkpoints taken meanwhile stand before this unit; its only effect on the expiry
  // index, the restored keys' deadlines, is put again when it is read again: idempotent)
  const ShardLocator* shard = pipelines_.front()->shard();
  const uint64_t waiting_at = source.position().offset;  // where checkpoints can get meanwhile
  auto r = co_await (
      guard.beforeRestore(shard, restored, limits_.migration_wait, waiting_at, unit.offset_end) ||
      checkpointWhileWaiting(source));
  Status s = std::visit([](auto& s) { return s; }, r);
  if (s) {
    for (auto& m : members_) {
      if (!m.gone) ++m.p->mutableStats().migration_restores;
    }
  }
  co_return s;
}

net::awaitable<Status> SourceLink::checkpointWhileWaiting(source::Source& source) {
  for (;;) {
    finishDeltaCheckpointsIfAnswered();
    bool paused = false;
    for (const auto& m : members_) paused = paused || (!m.gone && m.p->paused());
    if (checkpoint_due_ && !paused && !anyNeedsWholeImage()) beginDeltaCheckpoint(source);
    net::steady_timer t(ex_);
    t.expires_after(std::chrono::milliseconds(2));
    auto [ec] = co_await t.async_wait(net::as_tuple(net::use_awaitable));
    if (ec) co_return Status{};  // cancelled: the other branch finished
  }
}

net::awaitable<Status> SourceLink::leave(Member& m, const source::Source& source) {
  // The stopped pipeline's last checkpoint, at this unit boundary; the others wait meanwhile.
  m.sink->closeGroup(source.position().replid);
  std::vector<Member*> just{&m};  // (a braced list as a coroutine argument trips GCC 12)
  Status s = co_await checkpointAfterMarker(source, just);
  if (!s) {
    spdlog::error("pipeline {}: {}", m.p->name(), s.error().message);
    if (live() == 1) co_return s;  // the session ends with it
  }
  Pipeline* p = m.p;
  m.gone = true;
  m.pending.reset();
  m.sink->close();
  p->setLiveSink(nullptr);
  p->setLink(nullptr);
  p->setState(PipelineState::Stopped);
  std::erase(pipelines_, p);
  updateReadLimit();
  spdlog::info("pipeline {}: stopped at offset {}", p->name(), p->appliedOffset());
  releaseStopped(m);
  co_return Status{};
}

void SourceLink::updateLag(const source::Source& source) {
  uint64_t min_applied = UINT64_MAX;
  const auto now = clock_.monotonicNow();
  for (auto& m : members_) {
    if (m.gone) continue;
    const uint64_t applied = m.sink->ackedOffset();
    m.p->setAppliedOffset(applied);
    min_applied = std::min(min_applied, applied);
    double lag = 0;
    for (const auto& a : arrivals_) {
      if (a.end_offset > applied) {
        lag = seconds(now - a.at);
        break;
      }
    }
    m.p->setLag(lag);
  }
  while (!arrivals_.empty() && arrivals_.front().end_offset <= min_applied) arrivals_.pop_front();
}

net::awaitable<Status> SourceLink::ackLoop(source::Source& source) {
  Watchdog source_silence(limits_.source_silence, clock_.monotonicNow());
  uint64_t last_bytes = source.bytesRead();
  // last_checkpoint_ is when this process last wrote a checkpoint (never: the epoch), not when
  // the session began: a session resumed after a crash checkpoints as soon as it has applied
  // something. Restarting the interval with every session kept an agent that lives less than
  // checkpoint_interval (a crash loop) at its old checkpoint until the source's backlog no
  // longer held it, and the full sync that followed left keys deleted meanwhile on the target.
  const auto session_start = clock_.monotonicNow();
  for (;;) {
    co_await ack_wake_.waitFor(ackPeriod(limits_, clock_.monotonicNow() - session_start));
    if (stopping_) {
      // Keep the loop alive (not finishing the session) while readLoop drains.
      co_await stop_wake_.waitFor(std::chrono::seconds(3600));
      continue;
    }
    const auto now = clock_.monotonicNow();
    updateLag(source);
    updateSpool(source);  // (while a full sync's spool drains)
    // ACK what every target has applied (not what was received), repairs included, so that
    // WAIT on the source means "on every target". A diskless source also needs these ACKs to
    // start streaming.
    uint64_t applied = UINT64_MAX;
    for (const auto& m : members_) {
      if (!m.gone) applied = std::min(applied, m.sink->ackableOffset());
    }
    if (applied == UINT64_MAX) applied = source.position().offset;
    ack_requested_ = false;
    if (auto r = co_await source.sendAck(applied); !r) co_return r;

    if (source.bytesRead() != last_bytes) {
      last_bytes = source.bytesRead();
      source_silence.feed(now);
    } else if (source_silence.expired(now)) {
      co_return fail(Error::io(fmt::format(
          "{}: the connection timed out after it had worked: nothing from the source for {} s "
          "(link_timeout of cluster {}; the source pings its replicas every "
          "repl-ping-replica-period, 10 s by default); reconnecting",
          label(), seconds(limits_.source_silence), source_cluster_.name)));
    }
    for (auto& m : members_) {
      if (m.gone) continue;
      const double stalled = m.sink->stalledSeconds();
      if (live() == 1 && stalled > seconds(m.p->limits().target_stall)) {
        co_return fail(Error::io(fmt::format(
            "pipeline {}: the connection to target {} timed out after it had worked: no answer "
            "for {} s with commands in flight (link_timeout of cluster {}); reconnecting",
            m.p->name(), m.p->targetCluster().name, seconds(m.p->limits().target_stall),
            m.p->targetCluster().name)));
      }
      if (live() > 1 && stalled > seconds(limits_.detach_after) && reading_source_) {
        // Silent with commands in flight: the read loop detaches it at its next boundary.
        live_source_->cancel();
      }
    }
    // A quiet source: the marker of a pending checkpoint may be answered while readLoop waits.
    finishDeltaCheckpointsIfAnswered();
    bool changed = index_.dirty() > 0;
    bool pending = false;
    for (const auto& m : members_) {
      if (m.gone) continue;
      changed = changed || m.sink->ackedOffset() != m.p->checkpointedOffset();
      pending = pending || m.pending.has_value();
    }
    // The shortest checkpoint_interval of the pipelines on the link (one checkpoint for all).
    auto interval = std::chrono::steady_clock::duration::max();
    for (const auto& m : members_) {
      if (!m.gone)
        interval = std::min<std::chrono::steady_clock::duration>(interval,
                                                                 m.p->config().checkpoint_interval);
    }
    if (now - last_checkpoint_ >= interval && !pending && changed && !checkpoint_due_) {
      // readLoop checkpoints at the next unit boundary; if it is waiting for the source, wake
      // it (cancelling a read loses no bytes).
      checkpoint_due_ = true;
      if (reading_source_) live_source_->cancel();
    }
  }
}

// ---- checkpoints ------------------------------------------------------------------------------

bool SourceLink::needWholeImage(const Member& m) const {
  const CheckpointStore& store = m.p->store();
  return m.p->imageNeeded() || !store.hasBase() || !index_.journaling() || index_.journalLost() ||
         store.journalBytes() > std::max(limits_.compact_journal_bytes, store.baseBytes());
}

bool SourceLink::anyNeedsWholeImage() const {
  for (const auto& m : members_) {
    if (!m.gone && needWholeImage(m)) return true;
  }
  return false;
}

Checkpoint SourceLink::makeCheckpoint(const source::Source& source, Pipeline& p) {
  Checkpoint cp;
  cp.position = source.position();
  cp.db = source.currentDb();
  cp.written_at_ms = clock_.nowMs();
  cp.source_address = source_cluster_.address();
  cp.marker = p.nextMarker();
  cp.next_marker = target::newMarkerToken();
  cp.data_offset = std::min(data_end_.offset, cp.position.offset);
  cp.data_db = cp.data_offset == cp.position.offset ? cp.db : data_end_.db;
  return cp;
}

void SourceLink::beginDeltaCheckpoint(const source::Source& source) {
  checkpoint_due_ = false;
  last_checkpoint_ = clock_.monotonicNow();
  for (const auto& m : members_) {
    if (!m.gone && m.pending) return;  // a previous one still waits for its target
  }
  index_.purgeTombstonesStep(source_clock_.nowMs() - limits_.tombstone_purge_ms,
                             limits_.purge_slots_per_checkpoint);
  auto ops = std::make_shared<std::vector<source::ExpiryIndex::Op>>();
  index_.takeJournal(*ops);
  index_.clearDirty();
  for (auto& m : members_) {
    if (m.gone) continue;
    PendingCheckpoint p;
    p.cp = makeCheckpoint(source, *m.p);
    m.sink->appendMarker(p.cp.marker, source.position().offset);
    p.marker_seq = m.sink->committedCommands();
    p.ops = ops;
    m.pending = std::move(p);
  }
}

void SourceLink::finishDeltaCheckpointsIfAnswered() {
  for (auto& m : members_) {
    // (and every repair its writes asked for on the target: a request is in this process only)
    if (m.gone || !m.pending || m.sink->answeredCommands() < m.pending->marker_seq ||
        !m.sink->markerSettled() || !m.sink->repairsSettled(m.pending->cp.position.offset)) {
      continue;
    }
    PendingCheckpoint p = std::move(*m.pending);
    m.pending.reset();
    p.cp.written_at_ms = clock_.nowMs();
    if (auto s = m.p->store().appendDelta(p.cp, *p.ops); !s) {
      ++m.p->mutableStats().checkpoint_failures;
      m.p->setImageNeeded(true);  // these changes are in no file now
      spdlog::error("pipeline {}: {}", m.p->name(), s.error().message);
    } else {
      m.p->checkpointWritten(p.cp);
    }
  }
}

net::awaitable<Status> SourceLink::drain(Member& m,
                                         std::chrono::steady_clock::time_point deadline) {
  while ((!m.sink->drained() || !m.sink->markerSettled()) && clock_.monotonicNow() < deadline &&
         !m.failed) {
    co_await m.sink->waitProgress(std::chrono::milliseconds(50));
  }
  if (!m.sink->drained() || !m.sink->markerSettled()) {
    co_return fail(Error::io(fmt::format(
        "pipeline {}: target did not acknowledge everything within {:.0f} s; not checkpointing "
        "the unacknowledged part (it will be sent again)",
        m.p->name(), seconds(limits_.drain_timeout))));
  }
  co_return Status{};
}

net::awaitable<Status> SourceLink::checkpointAfterMarker(const source::Source& source,
                                                         std::vector<Member*> which) {
  const auto deadline = clock_.monotonicNow() + limits_.drain_timeout;
  Status first_error;
  std::vector<Member*> ok;
  for (Member* m : which) {
    if (m->pending) {
      // The periodic checkpoint still waiting for its marker's answer goes first: each
      // checkpoint's marker is its predecessor's next_marker.
      if (auto d = co_await drain(*m, deadline); !d) {
        if (first_error) first_error = d;
        continue;
      }
    }
    ok.push_back(m);
  }
  finishDeltaCheckpointsIfAnswered();
  std::vector<std::string> tokens;
  for (Member* m : ok) {
    tokens.push_back(m->p->nextMarker());
    m->sink->appendMarker(tokens.back(), source.position().offset);
  }
  std::vector<char> whole;
  for (Member* m : ok) whole.push_back(needWholeImage(*m));
  for (size_t i = 0; i < ok.size(); ++i) {
    if (auto d = co_await drain(*ok[i], deadline); !d) {
      if (first_error) first_error = d;
      whole[i] = -1;  // not checkpointed
    }
  }
  // Written only once every repair its writes asked for is on the target (a request lives in
  // this process only): the read-backs that replies during the drain asked for are taken now.
  const uint64_t at = source.position().offset;
  for (int round = 0; round < 3; ++round) {
    bool unsettled = false;
    for (size_t i = 0; i < ok.size(); ++i) {
      unsettled = unsettled || (whole[i] >= 0 && !ok[i]->sink->repairsSettled(at));
    }
    if (!unsettled) break;
    if (auto r = co_await restoreCopies(source); !r) co_return r;
    for (size_t i = 0; i < ok.size(); ++i) {
      if (whole[i] < 0) continue;
      if (auto d = co_await drain(*ok[i], deadline); !d) {
        if (first_error) first_error = d;
        whole[i] = -1;
      }
    }
  }
  for (size_t i = 0; i < ok.size(); ++i) {
    if (whole[i] >= 0 && !ok[i]->sink->repairsSettled(at)) {
      spdlog::warn(
          "pipeline {}: copies asked for at or before offset {} are not restored yet: no "
          "checkpoint now (the next one follows them)",
          ok[i]->p->name(), at);
      whole[i] = -1;
    }
  }
  // One set of index changes for every member that appends to its journal; members that write
  // a whole image (after a full sync, compaction, a failed append) hold them anyway.
  const bool journaling = index_.journaling() && !index_.journalLost();
  auto ops = std::make_shared<std::vector<source::ExpiryIndex::Op>>();
  if (std::find(whole.begin(), whole.end(), 1) != whole.end()) {
    index_.purgeTombstones(source_clock_.nowMs() - limits_.tombstone_purge_ms);
  }
  index_.takeJournal(*ops);
  index_.clearDirty();
  for (size_t i = 0; i < ok.size(); ++i) {
    if (whole[i] >= 0) {
      checkpointNow(source, *ok[i], tokens[i], whole[i] == 1, ops);
    } else {
      ok[i]->p->setImageNeeded(true);  // its share of `ops` is in no file
    }
  }
  // From a whole image on, the index's changes are journaled.
  if (!journaling) index_.setJournaling(true);
  checkpoint_due_ = false;
  last_checkpoint_ = clock_.monotonicNow();
  co_return first_error;
}

void SourceLink::checkpointNow(
    const source::Source& source, Member& m, const std::string& marker, bool whole,
    const std::shared_ptr<const std::vector<source::ExpiryIndex::Op>>& ops) {
  Pipeline& p = *m.p;
  Checkpoint cp = makeCheckpoint(source, p);
  cp.marker = marker;
  if (m.sink->ackedOffset() != cp.position.offset) {
    // Cannot happen when drained; refuse rather than cover unacknowledged data.
    ++p.mutableStats().checkpoint_failures;
    spdlog::error("pipeline {}: internal: checkpoint at {} but target acknowledged {}", p.name(),
                  cp.position.offset, m.sink->ackedOffset());
    return;
  }
  Status s;
  if (whole) {
    s = p.store().commit(cp, index_);
    if (s) p.setImageNeeded(false);
  } else {
    s = p.store().appendDelta(cp, *ops);
    if (!s) p.setImageNeeded(true);  // these changes are in no file now
  }
  if (!s) {
    ++p.mutableStats().checkpoint_failures;
    spdlog::error("pipeline {}: {}", p.name(), s.error().message);
    return;  // keep replicating; the previous checkpoint stays valid
  }
  // (after a failed commit the same marker token is written again)
  p.checkpointWritten(cp);
}

// ---- the snapshot (SnapshotConsumer) ----------------------------------------------------------

net::awaitable<Status> SourceLink::beginSnapshot(const source::Position& at, uint64_t total_bytes) {
  // The end writes a whole image for every member.
  index_.setJournaling(false);
  index_.clearAll();
  snapshot_started_ = last_report_ = last_snapshot_bytes_at_ = clock_.monotonicNow();
  snapshot_at_ = at;
  last_reported_bytes_ = 0;
  for (auto& m : members_) {
    if (m.gone) continue;
    m.pending.reset();
    if (auto s = m.p->beginFullSync(); !s) co_return s;
    if (auto s = m.sink->beginSnapshot(m.p->config().delete_stale_keys); !s) co_return s;
    SnapshotProgress& pr = m.p->mutableProgress();
    pr = SnapshotProgress{};
    pr.active = true;
    pr.bytes_total = total_bytes;
    pr.started = clock_.monotonicNow();
    spdlog::info("pipeline {}: full sync from {}:{} ({} snapshot)", m.p->name(), at.replid,
                 at.offset,
                 total_bytes ? fmt::format("{} byte", total_bytes) : std::string("diskless"));
  }
  // A shard of a Redis Cluster: its snapshot may hold keys migrated into it whose exporter's
  // DELs (and older writes) another link of this process has not applied and checkpointed yet
  // (replicator/migration_guard.h). The pipelines show full_sync meanwhile.
  snapshot_owned_.reset();
  if (MigrationGuard* guard = pipelines_.front()->migrationGuard(); guard != nullptr) {
    const ShardLocator* shard = pipelines_.front()->shard();
    const std::function<bool()> stopping = [this] { return stopping_.load(); };
    auto owned = co_await guard->beforeSnapshot(shard, limits_.migration_wait, stopping);
    if (!owned) co_return fail(owned.error());
    snapshot_owned_ = *owned;
  }
  co_return Status{};
}

net::awaitable<Status> SourceLink::snapshotUnit(const source::ResolvedUnit& unit) {
  if (snapshot_owned_) {
    // A key of a slot the shard did not own when its snapshot began: migrated into it (waits
    // like a RESTORE-ASKING) or out of it since (written: the shard's DEL follows in order).
    MigrationGuard& guard = *pipelines_.front()->migrationGuard();
    for (const auto& c : unit.view()) {
      if (c.effect != source::Effect::SnapshotKey) continue;
      for (const auto& ev : c.events) {
        if (!guard.selects(ev.key) ||
            snapshot_owned_->test(static_cast<size_t>(cluster::keySlot(ev.key))))
          continue;
        const std::string key(ev.key);
        const ShardLocator* shard = pipelines_.front()->shard();
        if (auto s = co_await guard.beforeSnapshotKey(shard, key, limits_.migration_wait); !s) {
          co_return s;
        }
      }
    }
  }
  for (auto& m : members_) {
    if (m.gone) continue;
    m.sink->apply(unit, true);
    ++m.p->mutableProgress().keys_done;
  }
  // Backpressure and pauses, between keys (the source reads no further meanwhile).
  if (mustWait(true) || live() > 1) {
    if (auto s = co_await waitForMembers(true); !s) co_return s;
  }
  const auto now = clock_.monotonicNow();
  if (live_source_ != nullptr && now - last_spool_update_ >= std::chrono::milliseconds(250)) {
    last_spool_update_ = now;
    updateSpool(*live_source_);
  }
  if (now - last_report_ >= limits_.progress_report) reportProgress(false);
  co_return Status{};
}

void SourceLink::snapshotProgress(uint64_t keys_announced, uint64_t bytes) {
  for (auto& m : members_) {
    if (m.gone) continue;
    SnapshotProgress& pr = m.p->mutableProgress();
    pr.keys_total += keys_announced;
    pr.bytes_done += bytes;
  }
}

void SourceLink::reportProgress(bool final) {
  const auto now = clock_.monotonicNow();
  last_report_ = now;
  const double secs = seconds(now - snapshot_started_);
  for (auto& m : members_) {
    if (m.gone) continue;
    const SnapshotProgress& pr = m.p->mutableProgress();
    std::string keys = pr.keys_total
                           ? fmt::format("{}/{} keys ({:.0f}%)", pr.keys_done, pr.keys_total,
                                         100.0 * pr.keys_done / pr.keys_total)
                           : fmt::format("{} keys", pr.keys_done);
    std::string bytes =
        pr.bytes_total ? fmt::format("{:.1f}/{:.1f} MB", pr.bytes_done / 1e6, pr.bytes_total / 1e6)
                       : fmt::format("{:.1f} MB", pr.bytes_done / 1e6);
    if (::isatty(STDERR_FILENO) == 1 && &m == firstLive()) {
      // A progress bar for a person watching; logs get the same line every few seconds.
      const int width = 30;
      const int filled = pr.keys_total ? static_cast<int>(width * pr.keys_done / pr.keys_total) : 0;
      std::fprintf(stderr, "\r[%s%s] %s, %s, %.0f s%s", std::string(filled, '=').c_str(),
                   std::string(width - filled, ' ').c_str(), keys.c_str(), bytes.c_str(), secs,
                   final ? "\n" : "");
      std::fflush(stderr);
    }
    if (final) continue;
    // The rate so far and what remains; or, when nothing came since the last line, for how long.
    std::string pace;
    const double quiet = seconds(now - last_snapshot_bytes_at_);
    if (quiet >= seconds(limits_.progress_report) - 0.5) {
      pace = fmt::format(
          ", stalled: nothing from the source for {:.0f} s (a slow link, a target holding the "
          "link back, or the source still writing its snapshot to disk)",
          quiet);
    } else {
      const Pipeline::FullSyncEstimate e = m.p->fullSyncEstimate();
      pace = fmt::format(", {:.2f} MB/s", secs > 0 ? pr.bytes_done / secs / 1e6 : 0.0);
      if (std::isfinite(e.eta) && e.ratio > 0) pace += fmt::format(", about {:.0f} s left", e.eta);
    }
    spdlog::info("pipeline {}: full sync: {}, {}, {:.0f} s{}", m.p->name(), keys, bytes, secs,
                 pace);
  }
}

net::awaitable<Status> SourceLink::endSnapshot() {
  snapshot_owned_.reset();
  snapshot_at_.reset();
  // "Applied" means acknowledged by the target.
  for (auto& m : members_) {
    while (!m.gone && !m.sink->drained()) {
      if (auto s = superviseMembers(true); !s) co_return s;
      co_await m.sink->waitProgress(std::chrono::milliseconds(50));
    }
  }
  const double secs = seconds(clock_.monotonicNow() - snapshot_started_);
  reportProgress(true);
  std::string spool_said;
  if (live_source_ != nullptr) {
    updateSpool(*live_source_);
    const source::SpoolStats f = live_source_->spool();
    if (f.limit > 0) {
      spool_said =
          fmt::format("; spool peak {} ({} on disk), {} still in it", source::formatBytes(f.peak),
                      source::formatBytes(f.peak_on_disk), source::formatBytes(f.bytes));
    }
  }
  for (auto& m : members_) {
    if (m.gone) continue;
    SnapshotProgress& pr = m.p->mutableProgress();
    const target::SnapshotCounts& c = m.sink->snapshotCounts();
    pr.active = false;
    pr.seconds = secs;
    pr.restored = c.restored + c.rebuilt;
    pr.rebuilt = c.rebuilt;
    pr.expired = c.expired;
    pr.filtered = c.filtered;
    pr.failed = c.failed;
    PipelineStats& st = m.p->mutableStats();
    st.snapshot_keys_restored += c.restored;
    st.snapshot_keys_rebuilt += c.rebuilt;
    st.snapshot_keys_expired += c.expired;
    // "N keys" are the keys copied, RESTOREd or written as commands.
    const std::string rebuilt = c.rebuilt > 0
                                    ? fmt::format(
                                          " ({} written as commands: the target cannot RESTORE the "
                                          "source's payloads)",
                                          c.rebuilt)
                                    : std::string();
    if (c.failed > 0) {
      // Said in the last line too: the keys are NOT on the target (each was logged above).
      spdlog::warn(
          "pipeline {}: snapshot applied: {} keys, {} expired, {} failed, {} filtered, {} bytes "
          "in {:.1f} s{}{}; {} key(s) NOT copied (see the errors above; "
          "xdcr_snapshot_keys_total{{result=\"failed\"}})",
          m.p->name(), pr.restored, c.expired, c.failed, c.filtered, pr.bytes_done, secs, rebuilt,
          spool_said, c.failed);
      continue;
    }
    spdlog::info(
        "pipeline {}: snapshot applied: {} keys, {} expired, {} failed, {} filtered, {} "
        "bytes in {:.1f} s{}{}",
        m.p->name(), pr.restored, c.expired, c.failed, c.filtered, pr.bytes_done, secs, rebuilt,
        spool_said);
  }
  co_return Status{};
}

}  // namespace xdcr::replicator
