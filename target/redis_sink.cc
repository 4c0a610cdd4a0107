#include "target/redis_sink.h"

#include <boost/asio/experimental/awaitable_operators.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <charconv>

#include "common/redis_conn.h"
#include "common/sentinel.h"
#include "target/marker.h"

namespace xdcr::target {

using namespace net::experimental::awaitable_operators;

namespace {
// How long a checkpoint's marker waits for a Sentinel-managed target's replica (WAIT).
constexpr std::chrono::milliseconds kWaitTimeout{2000};
}  // namespace

RedisSink::RedisSink(net::any_io_executor ex, const config::PipelineConfig& pipeline,
                     const std::string& instance, const config::ClusterConfig& target_cluster,
                     filters::KeySpaceConstSharedPtr keys, const MaxTtlPolicy& policy,
                     const clock::ClusterClock& target_clock, const clock::Clock& clock,
                     const Limits& limits, PipelineStats& stats)
    : target_clock_(target_clock),
      book_(fmt::format("pipeline {}: target {} ({})", instance, target_cluster.name,
                        target_cluster.address()),
            stats),
      label_(fmt::format("pipeline {}: target {} ({})", instance, target_cluster.name,
                         target_cluster.address())),
      pipeline_(pipeline),
      target_cluster_(target_cluster),
      limits_(limits),
      stats_(stats),
      filter_(pipeline, std::move(keys), stats),
      applier_(policy, filter_.keySpace(), target_clock, stats),
      target_(ex, target_cluster, label_, stats, clock),
      marker_key_(markerKey(instance)),
      stamp_key_(appliedStampKey(instance)) {
  record_key_ =
      stamp_key_.substr(0, stamp_key_.size() - std::string_view(":applied").size()) + ":restored";
  applier_.setCopyWatch(true, limits.copy_guard_margin_ms, limits.copy_late_horizon_ms);
  target_.setObserver(
      [this](uint64_t seq, const resp::ReplyInfo& reply) { onWatchedReply(seq, reply); });
}

net::awaitable<Status> RedisSink::run() {
  if (target_cluster_.isSentinel()) {
    // A Sentinel-managed target keeps its old master writable for seconds after a failover
    // (cluster-notes.md §3.6): what is written there is lost when it rejoins as a replica. Stop
    // writing to it as soon as a Sentinel announces the switch; the next session rediscovers.
    auto r = co_await (target_.runWriter() || target_.runReader() || followMaster());
    co_return std::visit([](auto& s) { return s; }, r);
  }
  auto r = co_await (target_.runWriter() || target_.runReader());
  co_return std::visit([](auto& s) { return s; }, r);
}

net::awaitable<Status> RedisSink::followMaster() {
  const std::string master = target_.node().address();
  Error moved = co_await sentinel::untilMasterMoves(target_cluster_, master, label_);
  co_return fail(std::move(moved));
}

net::awaitable<Result<MarkerState>> RedisSink::readMarkers(
    const std::vector<std::string>& /*accepted*/) {
  RedisConnection conn(co_await net::this_coro::executor, label_ + " marker check");
  constexpr auto kTimeout = std::chrono::seconds(10);
  // The node the writer reached (a Sentinel-managed target's master as discovered).
  if (Status s = co_await conn.connect(target_.node(), kTimeout); !s) {
    co_return fail(s.error());  // TCP, TLS, AUTH
  }
  // With the marker and the stamp: the copies restored since the checkpoint (§12), whose writes
  // up to their read's offset a replay must skip.
  const std::vector<std::vector<std::string>> get = {{"GET", marker_key_},
                                                     {"GET", stamp_key_},
                                                     {"HGETALL", record_key_},
                                                     {"EXISTS", record_key_},
                                                     {"HEXISTS", record_key_, "-"}};
  auto r = co_await conn.callMany(get, kTimeout);
  conn.close();
  if (!r) co_return fail(r.error());
  const resp::Value& v = (*r)[0];
  if (v.isError()) {
    co_return fail(Error::refused(fmt::format(
        "pipeline {}: cannot read the marker key {} on target {}: {}; the agent's user needs read "
        "and write access to it",
        pipeline_.name, marker_key_, target_cluster_.name, v.str)));
  }
  MarkerState m;
  m.present = !v.isNull();
  if (m.present) m.marker = v.str;
  last_marker_ = m.present ? std::optional<std::string>(m.marker) : std::nullopt;
  if (const resp::Value& st = (*r)[1]; st.type == resp::ReplyType::Bulk) m.stamp = st.str;
  book_.beginSession();
  if ((*r)[2].isError() || (*r)[3].isError()) {
    // A guard refused inside a MULTI would discard the write it guards (EXECABORT): without
    // +exists and +hgetall no copy is watched, as before copies were restored.
    applier_.setCopyWatch(false, 0, 0);
    if (!copy_watch_refused_said_) {
      copy_watch_refused_said_ = true;
      spdlog::warn(
          "{}: the target refused {} ({}): copies the target expires before a later source "
          "write reaches them are NOT restored (expiry-semantics.md §12); grant the target's "
          "user +exists +hgetall",
          label_, (*r)[2].isError() ? "HGETALL" : "EXISTS",
          (*r)[2].isError() ? (*r)[2].str : (*r)[3].str);
    }
  }
  // Without +hexists only the guard of a hash field changed in place (S-11) is off; it matters
  // only where the target keeps field TTLs.
  applier_.setFieldGuards(!(*r)[4].isError());
  if ((*r)[4].isError()) book_.fieldGuardRefused((*r)[4].str, applier_.targetServer().fieldTtls());
  if (const resp::Value& rec = (*r)[2]; rec.type == resp::ReplyType::Array) {
    for (size_t i = 0; i + 1 < rec.elements.size(); i += 2) {
      uint64_t until = 0;
      const std::string& v = rec.elements[i + 1].str;
      if (std::from_chars(v.data(), v.data() + v.size(), until).ec != std::errc()) continue;
      book_.loadRecord(record_key_, rec.elements[i].str, until);  // (false: not one of ours)
    }
    if (book_.records() > 0) {
      spdlog::info(
          "{}: {} restored copies on record: their writes up to each one's read are "
          "not replayed",
          label_, book_.records());
    }
  }
  co_return m;
}

bool RedisSink::overLimits(bool snapshot) const {
  const uint64_t max_cmds =
      snapshot ? limits_.snapshot_max_unanswered_commands : limits_.max_unanswered_commands;
  return target_.inflightCommands() > max_cmds ||
         target_.pendingBytes() > limits_.max_unanswered_bytes;
}

net::awaitable<Status> RedisSink::connect() {
  if (auto s = co_await target_.connect(); !s) co_return s;
  applier_.setTarget(target_.server(), target_.maxBulkLength(), label_);
  logTargetServer(label_, target_.server());
  co_return Status{};
}

void RedisSink::apply(const source::ResolvedUnit& unit, bool write) {
  if (unit.snapshot) {
    for (const auto& c : unit.view()) applySnapshotKey(c);
    return;
  }
  book_.passed(unit.offset_end, target_.ackedOffset());
  applier_.beginUnit(unit.transaction, unit.local_ms);
  const bool unconfirmed = !write && unit.offset_end > unconfirmed_after_;
  watchable_.clear();
  for (const auto& c : unit.view()) {
    judged_ = c;  // reuses judged_'s vectors
    filter_.judge(judged_);
    book_.dropRestored(judged_, unit.offset_end);
    if (applier_.watchesCopies()) book_.logMultiKey(judged_, unit.offset_end);
    if (write) applier_.apply(judged_);
    if (unconfirmed) applier_.watchableKeys(judged_, watchable_);
  }
  if (!watchable_.empty()) book_.requestUnconfirmed(watchable_, unit.offset_end);
  if (write) book_.release();  // past the units a stamp covers: read back what they asked for
  last_offset_ = unit.offset_end;
  // The replay stamp's group (Applier::appendUnitToGroup): from a replay-unsafe unit on, the
  // units taken without suspending share one MULTI/EXEC and one stamp; the group is committed
  // to the target (its replies counted, its end offset marked) only when closed.
  if (applier_.groupOpen() || applier_.unitReplayUnsafe()) {
    group_cmds_ += applier_.appendUnitToGroup(target_.pending());
    group_end_ = unit.offset_end;
    ++group_units_;
    takeWatches(0, unit.offset_end);
  } else {
    const uint64_t base = target_.committedCommands();
    target_.commit(applier_.finishUnit(target_.pending()), unit.offset_end);
    takeWatches(base, unit.offset_end);
  }
}

void RedisSink::takeWatches(uint64_t base, uint64_t offset_end) {
  for (Applier::Watch& w : applier_.watches()) {
    SinkWatch sw;
    sw.offset = offset_end;
    sw.w = std::move(w);
    if (sw.w.in_group) {
      group_watches_.push_back(std::move(sw));
      continue;
    }
    sw.seq = base + sw.w.reply + 1;
    target_.observe(sw.seq);
    watches_.push_back(std::move(sw));
  }
  applier_.watches().clear();
}

void RedisSink::onWatchedReply(uint64_t seq, const resp::ReplyInfo& reply) {
  while (!watches_.empty() && watches_.front().seq < seq) watches_.pop_front();  // (none: in order)
  while (!watches_.empty() && watches_.front().seq == seq) {
    SinkWatch sw = std::move(watches_.front());
    watches_.pop_front();
    const Applier::Watch& w = sw.w;
    resp::ReplyType type = reply.type;
    // An array (HPEXPIREAT's codes) is judged by its least integer element.
    int64_t integer = reply.type == resp::ReplyType::Array ? reply.least : reply.integer;
    if (w.element >= 0) {
      // An element of an EXEC's array; an EXEC that did not run (EXECABORT, a null) ran none of
      // its writes either: nothing to judge.
      if (reply.type != resp::ReplyType::Array ||
          static_cast<size_t>(w.element) >= reply.items.size()) {
        continue;
      }
      const resp::ReplyInfo::Item& item = reply.items[static_cast<size_t>(w.element)];
      type = item.type;
      integer = item.type == resp::ReplyType::Array ? item.least : item.integer;
    }
    book_.onWatched(w, sw.offset, type, integer, reply.text, target_clock_.nowMs());
  }
}

std::vector<source::DocumentKey> RedisSink::takeRepairs() {
  return book_.take();
}

void RedisSink::restoreCopies(const source::DocumentRead& read) {
  for (const auto& [key, why] : read.unreadable) {
    if (book_.claim(key)) book_.unrecoverable(key, why);
  }
  source::RdbPayload payload;
  for (const source::SourceDocument& doc : read.docs) {
    const source::DocumentKey key{doc.db, doc.key};
    const std::optional<CopyRepairBook::Asked> asked = book_.claim(key);
    if (!asked) continue;  // another pipeline's
    const RepairReason reason = asked->reason;
    documentAsSnapshotKey(doc, payload, judged_);
    const source::Event& ev = judged_.events.front();
    filter_.judge(judged_);
    if (!ev.pass) continue;  // outside the key space now (a reload changed it)
    applier_.beginUnit(true);
    if (!applier_.appendRestoredCopy(judged_, doc.exists, record_key_, read.offset)) {
      // Not writable to this target (a value it cannot take): its writes go on as they come.
      book_.unrecoverable(key, applier_.lastSnapshotError());
      continue;
    }
    target_.commit(applier_.finishUnit(target_.pending()), last_offset_);
    book_.restored(doc.db, doc.key, read.offset, record_key_, *asked, target_clock_.nowMs(),
                   doc.exists);
    ++book_.restoredCounter(reason);
    book_.sent(asked->write_offset);
    // The transaction's EXEC: an error in it (the target refused the RESTORE) is no restore.
    target_.onReply(target_.committedCommands(),
                    [this, key, reason, at = asked->write_offset](const resp::ReplyInfo& reply) {
                      book_.landed(at);
                      if (!reply.has_error) return Status{};
                      --book_.restoredCounter(reason);
                      book_.unrecoverable(key, "the target refused it: " + reply.text);
                      return Status{};
                    });
  }
}

void RedisSink::closeGroup(std::string_view replid) {
  book_.release();  // (before a suspension point: units a stamp covers asked for read-backs)
  if (!applier_.groupOpen()) return;
  group_cmds_ +=
      applier_.closeGroup(target_.pending(), stamp_key_, fmt::format("{}:{}", replid, group_end_));
  target_.commit(group_cmds_, group_end_);
  // The group's EXEC is its last command: every watch of its units reads an element of it.
  for (SinkWatch& sw : group_watches_) {
    sw.seq = target_.committedCommands();
    target_.observe(sw.seq);
    watches_.push_back(std::move(sw));
  }
  group_watches_.clear();
  group_cmds_ = 0;
  group_units_ = 0;
}

void RedisSink::appendMarker(std::string_view token, uint64_t offset) {
  // Records of restored copies that a durable checkpoint has passed: no replay can reach their
  // writes any more. The checkpoint before this one is durable now (a new one waits for that);
  // the one before it surely is.
  for (const auto& [record_key, fields] : book_.prunable(offset)) {
    applier_.beginUnit(false);
    applier_.appendRecordPrune(record_key, fields);
    target_.commit(applier_.finishUnit(target_.pending()), offset);
  }
  applier_.beginUnit(false);
  applier_.appendMarker(marker_key_, token);
  target_.commit(applier_.finishUnit(target_.pending()), offset);
  const uint64_t marker_seq = target_.committedCommands();
  // The previous value must be what this sink left there: anything else is another writer of
  // this pipeline's marker — a second agent replicating the same pipeline into this target,
  // which would apply every non-idempotent write twice.
  target_.expectReply(
      marker_seq, last_marker_,
      [this, ours = std::string(token)](const std::optional<std::string>& found) -> Status {
        const std::string what = fmt::format(
            "pipeline {}: another writer replaced this pipeline's marker {} on target {} since "
            "this agent last wrote it (found {}): two agents (or two pipelines of this name) "
            "replicate into the same target",
            pipeline_.name, marker_key_, target_cluster_.name,
            found ? "\"" + *found + "\"" : "nothing");
        if (found && markerWriterIsNewer(*found, ours)) {
          // The other agent started later: it gives way (it sees this agent's token as older).
          uint64_t suppressed = 0;
          if (conflict_log_.allow(suppressed)) {
            spdlog::error("{}; the one that started later stops, this one goes on", what);
          }
          return Status{};
        }
        return fail(Error::conflict(what + "; this agent started later, so this pipeline stops "
                                           "— stop the other writer first, then restart this "
                                           "agent"));
      });
  last_marker_ = std::string(token);
  if (target_.waitReplicas() > 0) {
    // A Sentinel-managed target: the checkpoint counts once the replica a failover would promote
    // has its marker (and so everything before it): the old master keeps taking writes for a
    // second after a failover and loses them, so a marker only it had would not be found.
    const std::string replicas = std::to_string(target_.waitReplicas());
    const std::string timeout = std::to_string(kWaitTimeout.count());
    resp::appendCommand(target_.pending(), {"WAIT", replicas, timeout});
    target_.commit(1, offset);
    target_.onReply(target_.committedCommands(), [this](const resp::ReplyInfo& reply) -> Status {
      if (reply.type == resp::ReplyType::Integer && reply.integer >= target_.waitReplicas()) {
        return Status{};
      }
      // Not on the replica: the checkpoint must not count (a failover now would lose it). A
      // replica that stopped answering, or an old master whose replica was just promoted: the
      // next session looks again (and waits for no replica if none is online).
      return fail(Error::io(fmt::format(
          "{}: the target's replica did not confirm a checkpoint's marker within {} ms (WAIT "
          "answered {}); reconnecting",
          label_, kWaitTimeout.count(), reply.integer)));
    });
  }
}

void RedisSink::setFullSyncJournal(std::string path) {
  journal_ = std::make_unique<FullSyncJournal>(std::move(path));
  // Before every send: a key is on record before the target can hold it.
  target_.setBeforeSend([this] { return journal_->flush(); });
}

Status RedisSink::beginSnapshot(bool record_keys) {
  counts_ = SnapshotCounts{};
  // A new history: the offsets of restored copies' records mean nothing in it, and the
  // snapshot writes every key whole.
  book_.clear();
  applier_.beginUnit(false);
  applier_.appendRecordPrune(record_key_, {});
  target_.commit(applier_.finishUnit(target_.pending()), target_.ackedOffset());
  if (FirstSeenStore* fs = applier_.firstSeenStore()) fs->beginSweep();
  snapshot_keys_.clear();
  interrupted_keys_.clear();
  if (journal_) {
    if (auto s = journal_->load(interrupted_keys_); !s) return s;
    const size_t records = interrupted_keys_.size();
    interrupted_keys_.seal();
    // Interrupted full syncs in a row each appended their keys: back to one record a key.
    if (interrupted_keys_.size() < records) {
      if (auto s = journal_->rewrite(interrupted_keys_); !s) return s;
    }
    if (interrupted_keys_.size() > 0) {
      spdlog::warn(
          "pipeline {}: an earlier full sync into {} was interrupted before its checkpoint; "
          "after this snapshot the {} key(s) it wrote that the snapshot does not hold are "
          "deleted ({})",
          pipeline_.name, target_cluster_.name, interrupted_keys_.size(), journal_->path());
    }
  }
  record_keys_ = record_keys || interrupted_keys_.size() > 0;
  return Status{};
}

void RedisSink::applySnapshotKey(const source::Change& c) {
  judged_ = c;
  filter_.judge(judged_);
  const source::Event& ev = judged_.events.front();
  if (!ev.pass) {
    ++counts_.filtered;
    return;
  }
  if (record_keys_ || journal_) {
    const uint64_t hash = SnapshotKeys::hashOf(ev.db, ev.key);  // once for both
    if (record_keys_) snapshot_keys_.addHash(hash);
    if (journal_) journal_->addHash(hash);
  }
  applier_.beginUnit(false);
  applier_.apply(judged_);
  // The whole snapshot stands at the FULLRESYNC offset: acknowledging it moves nothing.
  target_.commit(applier_.finishUnit(target_.pending()), target_.ackedOffset());
  using W = Applier::SnapshotWrite;
  const W write = applier_.lastSnapshotWrite();
  if (write == W::Expired) {
    ++counts_.expired;
    return;
  }
  if (write == W::Failed) {
    ++counts_.failed;
    ++stats_.snapshot_keys_failed;
    ++stats_.target_write_failures["unwritable"];
    uint64_t suppressed = 0;
    if (fail_log_.allow(suppressed)) {
      spdlog::error("{}: snapshot key \"{}\" (db {}) NOT copied: {}{}", label_, ev.key, ev.db,
                    applier_.lastSnapshotError(),
                    suppressed ? fmt::format(" ({} more suppressed)", suppressed) : "");
    }
    return;
  }
  // Copied once the target said so: its RESTORE (the unit's last command), or the EXEC of its
  // rebuild, can be refused, e.g. by an older server that cannot read the source's payload
  // version (server-versions-notes.md §3.3). Then it counts as failed, never as copied (the
  // full sync's last line and /status show it), and is logged with the key.
  const bool rebuilt = write == W::Rebuilt;
  ++(rebuilt ? counts_.rebuilt : counts_.restored);
  target_.onReply(target_.committedCommands(),
                  [this, rebuilt, key = std::string(ev.key),
                   db = ev.db](const resp::ReplyInfo& reply) -> Status {
                    if (!reply.has_error) return Status{};
                    --(rebuilt ? counts_.rebuilt : counts_.restored);
                    snapshotKeyRefused(key, db, reply.text);
                    return Status{};
                  });
}

void RedisSink::snapshotKeyRefused(const std::string& key, int db, const std::string& why) {
  ++counts_.failed;
  ++stats_.snapshot_keys_failed;
  ++stats_.target_write_failures["rejected"];
  uint64_t suppressed = 0;
  if (fail_log_.allow(suppressed)) {
    spdlog::error(
        "{}: the target refused snapshot key \"{}\" (db {}): {}: NOT copied "
        "(counted in xdcr_target_write_failures_total{{reason=\"rejected\"}}){}",
        label_, key, db, why, suppressed ? fmt::format(" ({} more suppressed)", suppressed) : "");
  }
}

net::awaitable<Result<uint64_t>> RedisSink::deleteStaleKeys(uint64_t offset) {
  if (!record_keys_) co_return uint64_t{0};
  snapshot_keys_.seal();
  // full_sync.delete_stale_keys sweeps the whole key space; otherwise only what an interrupted
  // full sync wrote.
  const SnapshotKeys* only = pipeline_.delete_stale_keys ? nullptr : &interrupted_keys_;
  auto deleted = co_await target::deleteStaleKeys(label_, target_cluster_, filter_.keySpace(),
                                                  snapshot_keys_, only, applier_, target_, offset);
  if (deleted && only == nullptr) {
    spdlog::info(
        "pipeline {}: full_sync.delete_stale_keys: deleted {} target key(s) the snapshot "
        "of {} key(s) did not hold",
        pipeline_.name, *deleted, snapshot_keys_.size());
  } else if (deleted) {
    spdlog::info(
        "pipeline {}: deleted {} target key(s) an interrupted full sync had written that the "
        "snapshot of {} key(s) did not hold",
        pipeline_.name, *deleted, snapshot_keys_.size());
  }
  snapshot_keys_.clear();
  interrupted_keys_.clear();
  record_keys_ = false;
  co_return deleted;
}

Status RedisSink::endFullSync() {
  if (FirstSeenStore* fs = applier_.firstSeenStore()) fs->endSweep();
  return journal_ ? journal_->remove() : Status{};
}

}  // namespace xdcr::target
