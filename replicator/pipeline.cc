#include "replicator/pipeline.h"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>

#include <filesystem>

#include "replicator/marker.h"
#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace xdcr::replicator {
namespace {

using namespace net::experimental::awaitable_operators;

// Backpressure: stop taking units from the source while this much is unanswered by the target.
// The source's own backlog and output buffer hold the stream meanwhile.
constexpr uint64_t kMaxInflightCommands = 100'000;
constexpr size_t kMaxPendingBytes = 16u << 20;
// Redis pings its replicas every 10 s (repl-ping-replica-period) and drops silent ones after
// repl-timeout (60 s): the same bound in the other direction.
constexpr double kSourceSilenceLimitS = 60;
constexpr double kTargetStallLimitS = 60;
constexpr auto kDrainTimeout = std::chrono::seconds(30);
constexpr int64_t kTombstonePurgeMs = 5 * 60 * 1000;
// Slots of the expiry index a periodic checkpoint examines for old tombstones (~1 ms of work):
// the purge goes round a big index over many checkpoints instead of scanning it whole.
constexpr size_t kPurgeSlotsPerCheckpoint = 256 * 1024;
// The journal is folded into a new whole image once it outgrows the image, and at least this.
constexpr uint64_t kCompactJournalBytes = 64ULL << 20;
// A checkpoint is taken early once this many index changes wait for one (a backlog drain makes
// ~250,000 a second): the in-memory journal stays ~1.5 MB instead of growing with the rate.
constexpr size_t kCheckpointEveryChanges = 64 * 1024;
// Units under one replay stamp at most (each closed group costs MULTI, SET, EXEC).
constexpr size_t kMaxGroupUnits = 512;

bool isGetAck(const source::Entry& e) {
  return e.args.size() >= 2 && resp::iequals(e.args[0], "replconf") &&
         resp::iequals(e.args[1], "getack");
}

}  // namespace

const char* stateName(PipelineState s) {
  switch (s) {
    case PipelineState::Starting: return "starting";
    case PipelineState::FullSync: return "full_sync";
    case PipelineState::Streaming: return "streaming";
    case PipelineState::Paused: return "paused";
    case PipelineState::Reconnecting: return "reconnecting";
    case PipelineState::Stopped: return "stopped";
  }
  return "unknown";
}

Pipeline::Pipeline(net::any_io_executor ex, config::ConfigConstSharedPtr config,
                   const config::PipelineConfig& pipeline, const clock::Clock& clock)
    : ex_(ex),
      config_(std::move(config)),
      pipeline_(pipeline),
      source_cluster_(*config_->cluster(pipeline.source)),
      target_cluster_(*config_->cluster(pipeline.target)),
      clock_(clock),
      source_clock_(clock),
      target_clock_(clock),
      policy_(target_cluster_.buckets),
      rewriter_(pipeline.key_rewrite),
      store_(config_->agent.state_dir, pipeline.name),
      stop_wake_(ex),
      ack_wake_(ex),
      pause_wake_(ex) {
  stamp_key_ = appliedStampKey(pipeline_.name);
  if (config_->clock.on_skew != config::SkewAction::Warn) {
    // Deadlines must not be written with an unknown skew; the first clock check lifts this.
    skew_paused_ = true;
    skew_pause_why_ = "waiting for the first clock measurement (clock.on_skew: " +
                      std::string(config_->clock.on_skew == config::SkewAction::Pause
                                      ? "pause"
                                      : "compensate") +
                      ")";
  }
}

void Pipeline::pause() {
  if (!operator_paused_) spdlog::warn("pipeline {}: paused by the operator", pipeline_.name);
  operator_paused_ = true;
}

void Pipeline::resume() {
  if (operator_paused_) {
    spdlog::info("pipeline {}: operator pause ended{}", pipeline_.name,
                 skew_paused_ ? "; still paused for clock skew" : "");
  }
  operator_paused_ = false;
  pause_wake_.notify();
}

std::string Pipeline::pausedDetail() const {
  std::string out;
  if (operator_paused_) out = "paused by the operator (POST /pipelines/" + pipeline_.name + "/resume)";
  if (skew_paused_) out += (out.empty() ? "" : "; ") + skew_pause_why_;
  return out;
}

void Pipeline::setSkewPause(bool on, const std::string& why) {
  if (on && !skew_paused_) {
    spdlog::warn("pipeline {}: paused: {}", pipeline_.name, why);
  } else if (!on && skew_paused_) {
    if (skew_.measured && !skew_measured_before_) {
      spdlog::info("pipeline {}: clocks measured (target − source {}); starting", pipeline_.name,
                   clock::formatOffset(skew_.delta_ns));
    } else {
      spdlog::info("pipeline {}: clock skew back within max_skew {} ms; resuming",
                   pipeline_.name, config_->clock.max_skew.count());
    }
  }
  skew_paused_ = on;
  skew_pause_why_ = on ? why : "";
  if (!on) pause_wake_.notify();
}

void Pipeline::setCompensation(int64_t ms) {
  if (ms != compensation_ms_) {
    if (ms == 0) {
      spdlog::info("pipeline {}: clock skew back within max_skew {} ms; deadlines are no longer "
                   "translated",
                   pipeline_.name, config_->clock.max_skew.count());
    } else if (compensation_ms_ == 0 ||
               std::llabs(ms - compensation_ms_) * 10 > config_->clock.max_skew.count()) {
      spdlog::warn("pipeline {}: compensating clock skew: every deadline is translated by {:+} ms "
                   "into the target's clock ({})",
                   pipeline_.name, ms, skew_.reason);
    }
  }
  compensation_ms_ = ms;
  if (live_applier_ != nullptr) live_applier_->setCompensationMs(ms);
}

void Pipeline::onClockReport(const clock::ClockReport& report) {
  const auto& cc = config_->clock;
  const int64_t max_ns = cc.max_skew.count() * 1'000'000;
  const bool was_exceeded = skew_.exceeded;
  skew_measured_before_ = skew_.measured;
  skew_ = clock::evaluateSkew(report, source_cluster_.name, target_cluster_.name, max_ns);
  auto toMs = [](int64_t ns) { return (ns >= 0 ? ns + 500'000 : ns - 500'000) / 1'000'000; };
  if (skew_.measured) {
    // Rule 5 reads the source's now, the clamp (rule 4) the target's own now.
    source_clock_.setOffsetMs(toMs(skew_.source_offset_ns));
    target_clock_.setOffsetMs(toMs(skew_.target_offset_ns));
  }
  switch (cc.on_skew) {
    case config::SkewAction::Warn: {
      const auto now = std::chrono::steady_clock::now();
      if (skew_.exceeded &&
          (!was_exceeded || now - last_skew_warning_ >= std::chrono::minutes(5))) {
        last_skew_warning_ = now;
        spdlog::warn("pipeline {}: clock skew: {}; deadlines are replicated unchanged, so "
                     "documents end {} ms {} on the target (clock.on_skew: warn)",
                     pipeline_.name, skew_.reason, std::llabs(toMs(skew_.delta_ns)),
                     skew_.delta_ns > 0 ? "early" : "late");
      } else if (!skew_.exceeded && was_exceeded) {
        spdlog::info("pipeline {}: clock skew back within max_skew {} ms", pipeline_.name,
                     cc.max_skew.count());
      }
      break;
    }
    case config::SkewAction::Pause:
      if (!skew_.measured) {
        setSkewPause(true, "clock.on_skew is pause and " + skew_.reason);
      } else {
        setSkewPause(skew_.exceeded, "clock skew: " + skew_.reason);
      }
      break;
    case config::SkewAction::Compensate:
      if (!skew_.measured) {
        setSkewPause(true, "clock.on_skew is compensate and " + skew_.reason);
      } else {
        setSkewPause(false, "");
        setCompensation(skew_.exceeded ? toMs(skew_.delta_ns) : 0);
      }
      break;
  }
}

void Pipeline::updateLag(uint64_t applied) {
  while (!arrivals_.empty() && arrivals_.front().end_offset <= applied) arrivals_.pop_front();
  lag_seconds_ = arrivals_.empty() ? 0
                                   : std::chrono::duration<double>(
                                         std::chrono::steady_clock::now() - arrivals_.front().at)
                                         .count();
}

void Pipeline::stop() {
  if (stopping_) return;
  stopping_ = true;
  if (live_source_ != nullptr) live_source_->cancel();  // wake a read waiting for the source
  stop_wake_.notify();
  ack_wake_.notify();
}

Status Pipeline::loadCheckpoint() {
  auto cp = store_.load(index_);
  if (!cp) return fail(cp.error());
  resume_ = *cp;
  if (resume_ && !resume_->source_address.empty() &&
      resume_->source_address != source_cluster_.address()) {
    spdlog::warn("pipeline {}: checkpoint {} was taken from source {}, now {}; starting over "
                 "with a full resync",
                 pipeline_.name, store_.path(), resume_->source_address,
                 source_cluster_.address());
    resume_.reset();
    index_.clearAll();
  }
  pending_cp_.reset();
  image_needed_ = false;
  // Journal the index's changes from the loaded state on; without a checkpoint there is a
  // full sync first, whose end writes a whole image.
  index_.setJournaling(resume_.has_value());
  if (resume_) {
    checkpointed_offset_ = applied_offset_ = resume_->position.offset;
    next_marker_ = resume_->next_marker;
  }
  return Status{};
}

net::awaitable<bool> Pipeline::run() {
  if (auto s = store_.prepare(); !s) {
    spdlog::error("pipeline {}: {}", pipeline_.name, s.error().message);
    state_ = PipelineState::Stopped;
    co_return false;
  }
  if (auto s = loadCheckpoint(); !s) {
    spdlog::error("pipeline {}: {}", pipeline_.name, s.error().message);
    state_ = PipelineState::Stopped;
    co_return false;
  }
  if (resume_) {
    spdlog::info("pipeline {}: resuming from checkpoint {}:{} ({} deadlines in the expiry index)",
                 pipeline_.name, resume_->position.replid, resume_->position.offset,
                 index_.size());
  }
  std::mt19937_64 rng(std::random_device{}());
  auto backoff = std::chrono::milliseconds(500);
  while (!stopping_) {
    auto started = std::chrono::steady_clock::now();
    Status s;
    try {
      s = co_await session();
    } catch (const std::exception& e) {
      s = fail(Error::io(fmt::format("unexpected failure: {}", e.what())));
    }
    if (stopping_) break;
    last_error_ = s ? "session ended" : s.error().message;
    spdlog::error("pipeline {}: {}", pipeline_.name, last_error_);
    ++stats_.reconnects;
    state_ = PipelineState::Reconnecting;
    // Back to the last checkpoint: its offset and its expiry index belong together.
    index_.clearAll();
    if (auto l = loadCheckpoint(); !l) {
      spdlog::error("pipeline {}: {}", pipeline_.name, l.error().message);
      break;
    }
    if (std::chrono::steady_clock::now() - started > std::chrono::seconds(60)) {
      backoff = std::chrono::milliseconds(500);
    }
    auto jittered = std::chrono::milliseconds(
        std::uniform_int_distribution<int64_t>(backoff.count() / 2, backoff.count())(rng));
    spdlog::info("pipeline {}: reconnecting in {} ms", pipeline_.name, jittered.count());
    co_await stop_wake_.waitFor(jittered);
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(30));
  }
  state_ = PipelineState::Stopped;
  spdlog::info("pipeline {}: stopped at offset {}", pipeline_.name, applied_offset_);
  co_return true;
}

net::awaitable<Status> Pipeline::session() {
  state_ = PipelineState::Starting;
  const std::string label_dst =
      fmt::format("pipeline {}: target {} ({})", pipeline_.name, target_cluster_.name,
                  target_cluster_.address());
  target::RedisTarget target(ex_, target_cluster_, label_dst, stats_);
  if (auto r = co_await target.connect(); !r) co_return r;
  live_target_ = &target;
  struct ClearTarget {
    const target::RedisTarget*& p;
    ~ClearTarget() { p = nullptr; }
  } clear_target{live_target_};
  // The target's writer and reader run from the start: a full sync writes through them too.
  auto result =
      co_await (sourceSide(target) || target.runWriter() || target.runReader());
  target.close();
  co_return std::visit([](auto& s) { return s; }, result);
}

net::awaitable<Status> Pipeline::sourceSide(target::RedisTarget& target) {
  const std::string label_src =
      fmt::format("pipeline {}: source {} ({})", pipeline_.name, source_cluster_.name,
                  source_cluster_.address());
  source::RedisSource source(ex_, source_cluster_, label_src);
  live_source_ = &source;
  struct Clear {
    source::RedisSource*& p;
    ~Clear() { p = nullptr; }
  } clear{live_source_};
  if (stopping_) co_return Status{};

  // A clock-skew pause holds before the source is even asked to sync: nothing may reach the
  // target, a full sync included. The source's backlog keeps the stream meanwhile.
  while (skew_paused_ && !stopping_) {
    state_ = PipelineState::Paused;
    co_await pause_wake_.waitFor(std::chrono::seconds(1));
  }
  if (stopping_) co_return Status{};
  state_ = PipelineState::Starting;

  filters::StreamFilter filter(pipeline_, index_, source_clock_, stats_);
  target::Applier applier(policy_, rewriter_, filter, target_clock_, stats_);
  applier.setCompensationMs(compensation_ms_);
  live_applier_ = &applier;
  struct ClearApplier {
    target::Applier*& p;
    ~ClearApplier() { p = nullptr; }
  } clear_applier{live_applier_};
  SnapshotLoader loader(pipeline_.name, filter, index_, applier, target, stats_, progress_,
                        [this]() -> Status {
                          // From here until the snapshot is applied no checkpoint is valid: a
                          // crash in between must start a new full sync, not resume the old
                          // history over a half-written snapshot.
                          state_ = PipelineState::FullSync;
                          index_.setJournaling(false);  // the end writes a whole image
                          index_.clearAll();
                          resume_.reset();
                          pending_cp_.reset();
                          return store_.remove();
                        },
                        [this] { return paused() && !stopping_; });
  SnapshotKeys snapshot_keys;
  if (pipeline_.delete_stale_keys) loader.recordKeys(&snapshot_keys);
  if (auto m = co_await checkTargetMarker(); !m) co_return m;
  std::optional<source::Position> resume_at;
  int resume_db = 0;
  if (resume_) {
    resume_at = resume_->position;
    resume_db = resume_->db;
  }
  auto kind = co_await source.start(resume_at ? &*resume_at : nullptr, loader);
  if (!kind) {
    source.close();
    co_return fail(kind.error());
  }
  if (*kind == source::SyncKind::Partial) {
    ++stats_.partial_syncs;
    filter.setCurrentDb(resume_db);
  } else {
    ++stats_.full_syncs;
    filter.setCurrentDb(0);  // the stream after a full sync starts with SELECT
    skip_until_ = 0;         // a new history's offsets: the stamp says nothing about them
  }
  target.resetOffset(source.position().offset);
  source_offset_ = applied_offset_ = source.position().offset;
  arrivals_.clear();
  lag_seconds_ = 0;
  if (*kind == source::SyncKind::Full && pipeline_.delete_stale_keys) {
    // Before the stream resumes, so nothing written after the snapshot can look stale.
    snapshot_keys.seal();
    auto deleted = co_await deleteStaleKeys(pipeline_, target_cluster_, filter, snapshot_keys,
                                            applier, target, source.position().offset);
    if (!deleted) co_return fail(deleted.error());
    stats_.stale_keys_deleted += *deleted;
    spdlog::info("pipeline {}: full_sync.delete_stale_keys: deleted {} target key(s) the "
                 "snapshot of {} key(s) did not hold",
                 pipeline_.name, *deleted, snapshot_keys.size());
    snapshot_keys.clear();
  }
  if (*kind == source::SyncKind::Full) {
    // The snapshot is acknowledged (SnapshotLoader::end drained the target): persist the new
    // history at once, so that a restart resumes it instead of syncing again.
    if (auto c = co_await checkpointAfterMarker(source, target, filter, applier); !c) co_return c;
  }
  state_ = PipelineState::Streaming;
  spdlog::info("pipeline {}: streaming from {}:{}", pipeline_.name, source.position().replid,
               source.position().offset);
  auto result = co_await (readLoop(source, target, filter, applier) ||
                          ackLoop(source, target, filter));
  source.close();
  co_return std::visit([](auto& s) { return s; }, result);
}

net::awaitable<Status> Pipeline::readLoop(source::RedisSource& source, target::RedisTarget& target,
                                          filters::StreamFilter& filter,
                                          target::Applier& applier) {
  source::Unit unit;
  source::Change change;
  // The replay stamp's group (Applier::appendUnitToGroup): from a replay-unsafe unit on, the
  // units taken from the buffer without waiting share one MULTI/EXEC and one stamp. The group is
  // committed to the target (its replies counted, its end offset marked) only when closed, so
  // it is closed before every suspension point: the writer never sends half a group.
  uint64_t group_cmds = 0;
  uint64_t group_end = 0;
  size_t group_units = 0;
  auto closeGroup = [&] {
    if (!applier.groupOpen()) return;
    group_cmds += applier.closeGroup(target.pending(), stamp_key_,
                                     fmt::format("{}:{}", source.position().replid, group_end));
    target.commit(group_cmds, group_end);
    group_cmds = 0;
    group_units = 0;
  };
  auto overBackpressure = [&] {
    return target.inflightCommands() > kMaxInflightCommands ||
           target.pendingBytes() > kMaxPendingBytes;
  };
  for (;;) {
    if (applier.groupOpen() &&
        (stopping_ || checkpoint_due_ || paused() || group_units >= kMaxGroupUnits ||
         overBackpressure() || index_.journalSize() >= kCheckpointEveryChanges)) {
      closeGroup();
    }
    if (stopping_) {
      // Graceful drain: everything read is already translated; wait for the target's answers.
      auto deadline = std::chrono::steady_clock::now() + kDrainTimeout;
      while (!target.drained() && std::chrono::steady_clock::now() < deadline) {
        co_await target.waitProgress(std::chrono::milliseconds(50));
      }
      if (!target.drained()) {
        co_return fail(Error::io(fmt::format(
            "pipeline {}: target did not acknowledge everything within {} s; not checkpointing "
            "the unacknowledged part (it will be sent again)",
            pipeline_.name, kDrainTimeout.count())));
      }
      co_return co_await checkpointAfterMarker(source, target, filter, applier);
    }
    finishDeltaCheckpointIfAnswered(target);
    if (index_.journalSize() >= kCheckpointEveryChanges && !pending_cp_ && !needWholeImage()) {
      checkpoint_due_ = true;
    }
    // Not while paused: the marker is a write too, and a skew pause lets none through (the
    // checkpoint follows the resume; nothing is applied meanwhile).
    if (checkpoint_due_ && !paused()) {
      if (needWholeImage()) {
        if (auto c = co_await checkpointAfterMarker(source, target, filter, applier); !c) {
          co_return c;
        }
      } else {
        beginDeltaCheckpoint(source, target, filter, applier);
      }
    }
    while (paused() && !stopping_) {
      // Nothing is taken from the source while paused; ACKs go on, so the link stays up, and
      // the source's backlog (and output buffer) holds the stream.
      state_ = PipelineState::Paused;
      co_await pause_wake_.waitFor(std::chrono::seconds(1));
    }
    if (state_ == PipelineState::Paused) state_ = PipelineState::Streaming;
    while (overBackpressure() && !stopping_) {
      co_await target.waitProgress(std::chrono::milliseconds(100));
    }

    auto got = source.nextUnit(unit);
    if (!got) co_return fail(got.error());
    if (!*got) {
      closeGroup();
      reading_source_ = true;
      auto r = co_await source.readMore();
      reading_source_ = false;
      if (!r) {
        if (stopping_) continue;  // cancelled by stop(): drain
        // Cancelled by ackLoop: a checkpoint is due while the source is quiet.
        if (checkpoint_due_ && r.error().kind == Error::Kind::Cancelled) continue;
        co_return r;
      }
      source_offset_ = source.position().offset + source.bytesBuffered();
      arrivals_.push_back({source_offset_, std::chrono::steady_clock::now()});
      if (arrivals_.size() > 4096) arrivals_.pop_front();  // bounded: lag is then a lower bound
      continue;
    }
    // A unit the replay stamp shows applied (after a crash): the filter still sees it, so the
    // expiry index follows the stream, but nothing is written again.
    const bool applied_already = unit.offset_end <= skip_until_;
    applier.beginUnit(unit.transaction);
    for (const auto& entry : unit.entries) {
      if (isGetAck(entry)) {
        ack_requested_ = true;
        ack_wake_.notify();
      }
      filter.process(entry, change);
      if (!applied_already) applier.apply(change);
    }
    if (applier.groupOpen() || applier.unitReplayUnsafe()) {
      group_cmds += applier.appendUnitToGroup(target.pending());
      group_end = unit.offset_end;
      ++group_units;
      source.consume(unit);
    } else {
      const size_t n = applier.finishUnit(target.pending());
      source.consume(unit);
      target.commit(n, unit.offset_end);
    }
  }
}

net::awaitable<Status> Pipeline::ackLoop(source::RedisSource& source, target::RedisTarget& target,
                                         filters::StreamFilter& filter) {
  uint64_t last_bytes = source.bytesRead();
  auto last_activity = std::chrono::steady_clock::now();
  last_checkpoint_ = std::chrono::steady_clock::now();
  const auto session_start = std::chrono::steady_clock::now();
  for (;;) {
    // A diskless source ignores an ACK that arrives before it has reaped its snapshot child
    // (redis-replication-notes.md §3) and streams only after the next one: ACK every 100 ms for
    // the first seconds so that streaming starts promptly, then every second like Redis.
    const bool early = std::chrono::steady_clock::now() - session_start < std::chrono::seconds(3);
    co_await ack_wake_.waitFor(early ? std::chrono::milliseconds(100) : std::chrono::seconds(1));
    if (stopping_) {
      // Keep the loop alive (not finishing the session) while readLoop drains.
      co_await stop_wake_.waitFor(std::chrono::seconds(3600));
      continue;
    }
    applied_offset_ = target.ackedOffset();
    updateLag(applied_offset_);
    // ACK the applied offset (not the received one), so that WAIT on the source means "on the
    // target". A diskless source also needs these ACKs to start and keep streaming.
    ack_requested_ = false;
    if (auto r = co_await source.sendAck(applied_offset_); !r) co_return r;

    auto now = std::chrono::steady_clock::now();
    if (source.bytesRead() != last_bytes) {
      last_bytes = source.bytesRead();
      last_activity = now;
    } else if (std::chrono::duration<double>(now - last_activity).count() > kSourceSilenceLimitS) {
      co_return fail(Error::io(fmt::format("pipeline {}: source silent for {} s (it pings every "
                                           "10 s); reconnecting",
                                           pipeline_.name, kSourceSilenceLimitS)));
    }
    if (target.stalledSeconds() > kTargetStallLimitS) {
      co_return fail(Error::io(fmt::format("pipeline {}: target has not answered for {} s; "
                                           "reconnecting",
                                           pipeline_.name, kTargetStallLimitS)));
    }
    // A quiet source: the marker of a pending checkpoint may be answered while readLoop waits.
    finishDeltaCheckpointIfAnswered(target);
    if (now - last_checkpoint_ >= pipeline_.checkpoint_interval && !pending_cp_ &&
        (applied_offset_ != checkpointed_offset_ || index_.dirty() > 0) && !checkpoint_due_) {
      // readLoop checkpoints at the next unit boundary; if it is waiting for the source, wake
      // it (cancelling a read loses no bytes).
      checkpoint_due_ = true;
      if (reading_source_) source.cancel();
    }
  }
}

net::awaitable<Status> Pipeline::checkpointAfterMarker(const source::RedisSource& source,
                                                       target::RedisTarget& target,
                                                       const filters::StreamFilter& filter,
                                                       target::Applier& applier) {
  const auto deadline = std::chrono::steady_clock::now() + kDrainTimeout;
  auto drain = [&]() -> net::awaitable<Status> {
    while (!target.drained() && std::chrono::steady_clock::now() < deadline) {
      co_await target.waitProgress(std::chrono::milliseconds(50));
    }
    if (!target.drained()) {
      co_return fail(Error::io(fmt::format(
          "pipeline {}: target did not acknowledge everything within {} s; not checkpointing",
          pipeline_.name, kDrainTimeout.count())));
    }
    co_return Status{};
  };
  if (pending_cp_) {
    // The periodic checkpoint still waiting for its marker's answer goes first: each
    // checkpoint's marker is its predecessor's next_marker.
    if (auto d = co_await drain(); !d) co_return d;
    finishDeltaCheckpointIfAnswered(target);
  }
  if (next_marker_.empty()) next_marker_ = newMarkerToken();
  const std::string token = next_marker_;
  applier.beginUnit(false);
  applier.appendMarker(markerKey(pipeline_.name), token);
  target.commit(applier.finishUnit(target.pending()), source.position().offset);
  if (auto d = co_await drain(); !d) co_return d;
  co_return checkpointNow(source, target, filter, token);
}

bool Pipeline::needWholeImage() const {
  return image_needed_ || !store_.hasBase() || !index_.journaling() || index_.journalLost() ||
         store_.journalBytes() > std::max(kCompactJournalBytes, store_.baseBytes());
}

Checkpoint Pipeline::makeCheckpoint(const source::RedisSource& source,
                                    const filters::StreamFilter& filter,
                                    const std::string& marker) const {
  Checkpoint cp;
  cp.position = source.position();
  cp.db = filter.currentDb();
  cp.written_at_ms = clock_.nowMs();
  cp.source_address = source_cluster_.address();
  cp.marker = marker;
  cp.next_marker = newMarkerToken();
  return cp;
}

void Pipeline::beginDeltaCheckpoint(const source::RedisSource& source,
                                    target::RedisTarget& target,
                                    const filters::StreamFilter& filter,
                                    target::Applier& applier) {
  checkpoint_due_ = false;
  last_checkpoint_ = std::chrono::steady_clock::now();
  if (pending_cp_) return;  // the previous one still waits for the target
  if (next_marker_.empty()) next_marker_ = newMarkerToken();
  applier.beginUnit(false);
  applier.appendMarker(markerKey(pipeline_.name), next_marker_);
  target.commit(applier.finishUnit(target.pending()), source.position().offset);
  index_.purgeTombstonesStep(source_clock_.nowMs() - kTombstonePurgeMs,
                             kPurgeSlotsPerCheckpoint);
  PendingCheckpoint p;
  p.cp = makeCheckpoint(source, filter, next_marker_);
  p.marker_seq = target.committedCommands();
  p.ops.swap(spare_ops_);
  index_.takeJournal(p.ops);
  index_.clearDirty();
  pending_cp_ = std::move(p);
}

void Pipeline::finishDeltaCheckpointIfAnswered(const target::RedisTarget& target) {
  if (!pending_cp_ || target.answeredCommands() < pending_cp_->marker_seq) return;
  PendingCheckpoint p = std::move(*pending_cp_);
  pending_cp_.reset();
  p.cp.written_at_ms = clock_.nowMs();
  if (auto s = store_.appendDelta(p.cp, p.ops); !s) {
    ++stats_.checkpoint_failures;
    image_needed_ = true;  // these changes are in no file now
    spdlog::error("pipeline {}: {}", pipeline_.name, s.error().message);
  } else {
    checkpointWritten(p.cp);
  }
  p.ops.clear();
  spare_ops_.swap(p.ops);
}

void Pipeline::checkpointWritten(const Checkpoint& cp) {
  ++stats_.checkpoints;
  next_marker_ = cp.next_marker;
  last_checkpoint_ms_ = cp.written_at_ms;
  resume_ = cp;
  checkpointed_offset_ = cp.position.offset;
  applied_offset_ = std::max(applied_offset_, cp.position.offset);
}

net::awaitable<Status> Pipeline::checkTargetMarker() {
  skip_until_ = 0;
  if (!resume_ || resume_->marker.empty()) co_return Status{};  // nothing to check against
  RedisConnection conn(ex_, fmt::format("pipeline {}: target {} ({}) marker check",
                                        pipeline_.name, target_cluster_.name,
                                        target_cluster_.address()));
  constexpr auto kTimeout = std::chrono::seconds(10);
  Status s = co_await conn.connect(target_cluster_.endpoint(), kTimeout);  // TCP, TLS, AUTH
  if (!s) co_return s;
  const std::vector<std::vector<std::string>> get = {{"GET", markerKey(pipeline_.name)},
                                                      {"GET", stamp_key_}};
  auto r = co_await conn.callMany(get, kTimeout);
  conn.close();
  if (!r) co_return fail(r.error());
  const resp::Value& v = (*r)[0];
  // The replay stamp: what of the stream after the checkpoint the target has already applied.
  skip_until_ = 0;
  if (const resp::Value& st = (*r)[1]; st.type == resp::ReplyType::Bulk) {
    const auto colon = st.str.rfind(':');
    if (colon != std::string::npos && st.str.substr(0, colon) == resume_->position.replid) {
      const uint64_t at = std::strtoull(st.str.c_str() + colon + 1, nullptr, 10);
      if (at > resume_->position.offset) skip_until_ = at;
    }
  }
  if (v.isError()) {
    co_return fail(Error::refused(fmt::format(
        "pipeline {}: cannot read the marker key {} on target {}: {}; the agent's user needs read "
        "and write access to it",
        pipeline_.name, markerKey(pipeline_.name), target_cluster_.name, v.str)));
  }
  if (!v.isNull() && (v.str == resume_->marker || v.str == resume_->next_marker)) {
    if (skip_until_ > 0) {
      spdlog::info("pipeline {}: the target already applied the stream up to offset {} (its "
                   "replay stamp); the replay from checkpoint offset {} skips that far",
                   pipeline_.name, skip_until_, resume_->position.offset);
    }
    co_return Status{};
  }
  skip_until_ = 0;
  spdlog::warn("pipeline {}: target {} lost data the checkpoint at offset {} counts as written "
               "(marker {} is {}, expected {} or {}): it restarted empty, from an older snapshot, "
               "or failed over; starting a full resync",
               pipeline_.name, target_cluster_.name, resume_->position.offset,
               markerKey(pipeline_.name), v.isNull() ? "missing" : "\"" + v.str + "\"",
               resume_->marker, resume_->next_marker);
  ++stats_.target_loss_resyncs;
  resume_.reset();
  index_.setJournaling(false);
  index_.clearAll();
  co_return store_.remove();
}

Status Pipeline::checkpointNow(const source::RedisSource& source,
                               const target::RedisTarget& target,
                               const filters::StreamFilter& filter, const std::string& marker) {
  checkpoint_due_ = false;
  last_checkpoint_ = std::chrono::steady_clock::now();
  const bool whole = needWholeImage();
  if (whole) {
    index_.purgeTombstones(source_clock_.nowMs() - kTombstonePurgeMs);
  } else {
    index_.purgeTombstonesStep(source_clock_.nowMs() - kTombstonePurgeMs,
                               kPurgeSlotsPerCheckpoint);
  }
  Checkpoint cp = makeCheckpoint(source, filter, marker);
  if (target.ackedOffset() != cp.position.offset) {
    // Cannot happen when drained; refuse rather than cover unacknowledged data.
    return fail(Error::storage(fmt::format(
        "pipeline {}: internal: checkpoint at {} but target acknowledged {}", pipeline_.name,
        cp.position.offset, target.ackedOffset())));
  }
  Status s;
  if (whole) {
    s = store_.commit(cp, index_);
    if (s) {
      index_.setJournaling(true);  // the image holds every change so far
      image_needed_ = false;
    }
  } else {
    index_.takeJournal(spare_ops_);
    s = store_.appendDelta(cp, spare_ops_);
    spare_ops_.clear();
    if (!s) image_needed_ = true;  // these changes are in no file now
  }
  if (!s) {
    ++stats_.checkpoint_failures;
    spdlog::error("pipeline {}: {}", pipeline_.name, s.error().message);
    return Status{};  // keep replicating; the previous checkpoint stays valid
  }
  index_.clearDirty();
  // (after a failed commit the same marker token is written again)
  checkpointWritten(cp);
  return Status{};
}

}  // namespace xdcr::replicator
