#include "replicator/pipeline.h"

#include <limits>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>

#include "replicator/source_link.h"
#include "target/cluster_sink.h"
#include "target/marker.h"
#include "target/memcached_sink.h"
#include "target/redis_sink.h"

namespace xdcr::replicator {

const char* stateName(PipelineState s) {
  switch (s) {
    case PipelineState::Starting:
      return "starting";
    case PipelineState::FullSync:
      return "full_sync";
    case PipelineState::Streaming:
      return "streaming";
    case PipelineState::Paused:
      return "paused";
    case PipelineState::Reconnecting:
      return "reconnecting";
    case PipelineState::Stopped:
      return "stopped";
  }
  return "unknown";
}

Limits limitsFor(const config::Config& config, const config::PipelineConfig& pipeline) {
  Limits limits;
  if (const auto* source = config.cluster(pipeline.source)) {
    limits.source_silence = source->link_timeout;
  }
  if (const auto* target = config.cluster(pipeline.target)) {
    limits.target_stall = target->link_timeout;
  }
  return limits;
}

Pipeline::Pipeline(net::any_io_executor ex, config::ConfigConstSharedPtr config,
                   const config::PipelineConfig& pipeline, const clock::Clock& clock, Limits limits,
                   std::shared_ptr<source::Locator> locator, std::optional<Shard> shard)
    : config_(std::move(config)),
      pipeline_(pipeline),
      instance_(shard ? shard->instance : pipeline.name),
      shard_label_(shard ? shard->label : ""),
      source_cluster_(*config_->cluster(pipeline.source)),
      target_cluster_(*config_->cluster(pipeline.target)),
      clock_(clock),
      limits_(limits),
      target_clock_(clock),
      policy_(target_cluster_.buckets),
      keys_(std::make_shared<const filters::KeySpace>(pipeline, source_cluster_.slots)),
      store_(config_->agent.state_dir, instance_),
      operator_state_(config_->agent.state_dir, pipeline.name),
      ex_(ex),
      pause_wake_(ex) {
  locator_ = locator ? std::move(locator) : source::fixedLocator(source_cluster_);
  if (pipeline_.bandwidth_limit > 0) {
    // One bucket for the pipeline's instances (the PipelineConfig is theirs alike, and lives as
    // long as they do); counters of this instance's own over it.
    const std::string key =
        fmt::format("write {} {}", static_cast<const void*>(&pipeline_), pipeline_.name);
    write_limiter_ =
        std::make_shared<RateLimiter>(RateLimiter::shared(key, pipeline_.bandwidth_limit));
  }
  if (operator_state_.paused()) {
    operator_paused_ = true;
    spdlog::warn(
        "pipeline {}: starts paused: the operator paused it ({}); `xdcr-agent resume -p {}` or "
        "POST /pipelines/{}/resume ends the pause",
        instance_, operator_state_.pausedPath(), pipeline_.name, pipeline_.name);
  }
  if (config_->clock.on_skew != config::SkewAction::Warn) {
    // Deadlines must not be written with an unknown skew; the first clock check lifts this.
    skew_paused_ = true;
    skew_pause_why_ =
        "waiting for the first clock measurement (clock.on_skew: " +
        std::string(config_->clock.on_skew == config::SkewAction::Pause ? "pause" : "compensate") +
        ")";
  }
}

void Pipeline::setLink(SourceLink* link) {
  link_ = link;
  if (link_ == nullptr) setReadLimiter(nullptr);
  // A pipeline that joins a link (at start, or detached onto its own) brings the source clock's
  // latest measurement, rather than leaving the link at 0 until the next clock check.
  if (link_ != nullptr && skew_.measured) link_->setSourceClockOffsetMs(source_offset_ms_);
}

void Pipeline::setReadLimiter(std::shared_ptr<RateLimiter> limiter) {
  if (limiter == read_limiter_) return;
  if (read_limiter_) read_throttled_before_ += read_limiter_->throttledSeconds();
  read_limiter_ = std::move(limiter);
}

Pipeline::Bandwidth Pipeline::bandwidth(std::chrono::steady_clock::time_point now) const {
  Bandwidth b;
  b.read_throttled_seconds = read_throttled_before_;
  if (read_limiter_) {
    b.read_bytes_per_second = read_limiter_->recentRate(now);
    b.read_throttled_seconds += read_limiter_->throttledSeconds();
  }
  if (write_limiter_) {
    b.write_bytes_per_second = write_limiter_->recentRate(now);
    b.write_throttled_seconds = write_limiter_->throttledSeconds();
  }
  return b;
}

void Pipeline::checkpointSoon() {
  // From any thread (the migration guard runs on the first one): on the link's thread, unless
  // the pipeline is gone by then (deleted on the first thread, see replicator/workers.h).
  net::post(ex_, [alive = alive_] {
    if (Pipeline* p = *alive; p != nullptr && p->link_ != nullptr) p->link_->checkpointSoon();
  });
}

void Pipeline::stop() {
  if (stopping_) return;
  stopping_ = true;
  pause_wake_.notify();
  if (link_ != nullptr) link_->memberStopping();
}

const source::ExpiryIndex& Pipeline::expiryIndex() const {
  static const source::ExpiryIndex kEmpty;
  return link_ != nullptr ? link_->expiryIndex() : kEmpty;
}

std::vector<std::string> Pipeline::linkMembers() const {
  return link_ != nullptr ? link_->memberNames() : std::vector<std::string>{};
}

Status Pipeline::open(source::ExpiryIndex& index) {
  if (auto s = store_.prepare(); !s) return s;
  if (policy_.maxLifetimeMs() > 0 && !first_seen_) {
    first_seen_ = std::make_unique<target::FirstSeenStore>(
        config_->agent.state_dir + "/" + instance_ + ".first-seen", policy_.maxLifetimeMs());
    if (auto s = first_seen_->open(target_clock_.nowMs()); !s) {
      first_seen_.reset();
      return s;
    }
    store_.setBeforeCommit([this] { return first_seen_->sync(target_clock_.nowMs()); });
  }
  auto cp = store_.load(index);
  if (!cp) return fail(cp.error());
  setResume(*cp);
  // For one server the address is its identity. A Sentinel-managed master or a cluster shard
  // moves between nodes: there the replication history (the replid PSYNC offers) is the
  // identity, and a changed address is a failover to follow, not a new source.
  if (resume_ && source_cluster_.kind == config::ClusterKind::Redis &&
      !resume_->source_address.empty() && resume_->source_address != source_cluster_.address()) {
    spdlog::warn(
        "pipeline {}: checkpoint {} was taken from source {}, now {}; starting over "
        "with a full resync",
        pipeline_.name, store_.path(), resume_->source_address, source_cluster_.address());
    setResume(std::nullopt);
    index.clearAll();
  }
  image_needed_ = false;
  if (resume_) {
    checkpointed_offset_ = applied_offset_ = resume_->position.offset;
    next_marker_ = resume_->next_marker;
  }
  return Status{};
}

std::unique_ptr<target::Sink> Pipeline::makeSink(const clock::Clock& clock) {
  std::unique_ptr<target::Sink> sink;
  if (target_cluster_.isRedisCluster()) {
    auto cluster =
        std::make_unique<target::ClusterSink>(ex_, pipeline_, instance_, target_cluster_, keys_,
                                              policy_, target_clock_, clock, limits_, stats_);
    cluster->setWriteLimiter(write_limiter_);
    sink = std::move(cluster);
  } else if (target_cluster_.isMemcached()) {
    auto mc =
        std::make_unique<target::MemcachedSink>(ex_, pipeline_, instance_, target_cluster_, keys_,
                                                policy_, target_clock_, clock, limits_, stats_);
    mc->setWriteLimiter(write_limiter_);
    sink = std::move(mc);
  } else {
    auto single =
        std::make_unique<target::RedisSink>(ex_, pipeline_, instance_, target_cluster_, keys_,
                                            policy_, target_clock_, clock, limits_, stats_);
    single->setWriteLimiter(write_limiter_);
    single->setFullSyncJournal(store_.fullSyncKeysPath());
    sink = std::move(single);
  }
  sink->setCompensationMs(compensation_ms_);
  sink->setFirstSeenStore(first_seen_.get());
  return sink;
}

namespace {

/** The offset of a replay stamp "<replid>:<offset>" of history `replid` (0: another history). */
uint64_t stampOffset(const std::string& stamp, const std::string& replid) {
  const auto colon = stamp.rfind(':');
  if (colon == std::string::npos || stamp.compare(0, colon, replid) != 0) return 0;
  return std::strtoull(stamp.c_str() + colon + 1, nullptr, 10);
}

}  // namespace

Result<target::ReplaySkip> Pipeline::checkMarkers(const target::MarkerState& m) {
  target::ReplaySkip skip;
  if (!resume_ || resume_->marker.empty()) return skip;  // nothing to check against
  // The replay stamps: what of the stream after the checkpoint the target has already applied.
  const uint64_t from = resume_->position.offset;
  if (const uint64_t at = stampOffset(m.stamp, resume_->position.replid); at > from) {
    skip.until = at;
  }
  for (const auto& [slot, stamp] : m.slot_stamps) {
    if (const uint64_t at = stampOffset(stamp, resume_->position.replid); at > from) {
      skip.slots.emplace_back(slot, at);
    }
  }
  auto ours = [&](const std::string& token) {
    return token == resume_->marker || token == resume_->next_marker;
  };
  std::string found;  // what is wrong, for the message
  if (m.node_markers.empty()) {
    if (!m.present || !ours(m.marker)) {
      found = fmt::format("marker {} is {}", target::markerKey(pipeline_.name),
                          m.present ? "\"" + m.marker + "\"" : "missing");
    }
  } else {
    const int64_t age_ms = clock_.nowMs() - resume_->written_at_ms;
    for (const auto& node : m.node_markers) {
      const std::string& where = node.first;
      const std::optional<std::string>& token = node.second;
      if (token && ours(*token)) continue;
      const auto u =
          std::find_if(m.unmarked.begin(), m.unmarked.end(),
                       [&](const target::UnmarkedMaster& x) { return x.address == where; });
      if (u != m.unmarked.end()) {
        if (auto why = target::markerMovedAway(*u, m.node_markers.size(), m.marker_keys_by_token,
                                               age_ms)) {
          spdlog::info(
              "pipeline {}: master {} of target {} holds no marker of the checkpoint at "
              "offset {}, and lost nothing: {}",
              pipeline_.name, where, target_cluster_.name, from, *why);
          continue;
        }
      }
      found = fmt::format("the marker on master {} is {}", where,
                          token ? "\"" + *token + "\"" : "missing");
      if (u != m.unmarked.end()) {
        found += fmt::format(" (it has run for {}, {} s since the checkpoint{})",
                             u->uptime_ms < 0 ? std::string("an unknown time")
                                              : fmt::format("{} s", u->uptime_ms / 1000),
                             age_ms / 1000, u->promoted ? ", and was promoted from replica" : "");
      }
      break;
    }
  }
  if (found.empty()) {
    if (skip.until > 0 || !skip.slots.empty()) {
      spdlog::info(
          "pipeline {}: the target already applied the stream up to offset {} (its replay "
          "stamp{}); the replay from checkpoint offset {} skips that far",
          pipeline_.name, skip.until,
          skip.slots.empty() ? "" : fmt::format("s, in {} slot(s)", skip.slots.size()), from);
    }
    return skip;
  }
  spdlog::warn(
      "pipeline {}: target {} lost data the checkpoint at offset {} counts as written ({}, "
      "expected {} or {}): it restarted empty, from an older snapshot, or failed over; "
      "starting a full resync",
      pipeline_.name, target_cluster_.name, from, found, resume_->marker, resume_->next_marker);
  ++stats_.target_loss_resyncs;
  setResume(std::nullopt);
  if (auto s = store_.remove(); !s) return fail(s.error());
  return target::ReplaySkip{};
}

std::vector<std::string> Pipeline::acceptedMarkers() const {
  if (!resume_ || resume_->marker.empty()) return {};
  return {resume_->marker, resume_->next_marker};
}

Status Pipeline::beginFullSync() {
  // From here until the snapshot is applied no checkpoint is valid: a crash in between must
  // start a new full sync, not resume the old history over a half-written snapshot.
  state_ = PipelineState::FullSync;
  setResume(std::nullopt);
  image_needed_ = false;
  return store_.remove();
}

const std::string& Pipeline::nextMarker() {
  if (next_marker_.empty()) next_marker_ = target::newMarkerToken();
  return next_marker_;
}

void Pipeline::checkpointWritten(const Checkpoint& cp) {
  ++stats_.checkpoints;
  next_marker_ = cp.next_marker;
  last_checkpoint_ms_ = cp.written_at_ms;
  setResume(cp);
  checkpointed_offset_ = cp.position.offset;
  applied_offset_ = std::max(applied_offset_, cp.position.offset);
}

Status Pipeline::pause() {
  if (operator_paused_) return Status{};
  if (auto s = operator_state_.setPaused(true, clock_.nowMs()); !s) return s;
  spdlog::warn("pipeline {}: paused by the operator (kept in {} across restarts and reloads)",
               instance_, operator_state_.pausedPath());
  operator_paused_ = true;
  return Status{};
}

Status Pipeline::resume() {
  if (!operator_paused_) return Status{};
  if (auto s = operator_state_.setPaused(false, clock_.nowMs()); !s) return s;
  spdlog::info("pipeline {}: operator pause ended{}", instance_,
               skew_paused_ ? "; still paused for clock skew" : "");
  operator_paused_ = false;
  pause_wake_.notify();
  return Status{};
}

Pipeline::FullSyncEstimate Pipeline::fullSyncEstimate() const {
  const SnapshotProgress& pr = progress_;
  if (!pr.active) return {};
  double ratio = 0;
  if (pr.bytes_total > 0) {
    ratio = double(pr.bytes_done) / double(pr.bytes_total);
  } else if (pr.keys_total > 0) {
    ratio = double(pr.keys_done) / double(pr.keys_total);
  }
  ratio = std::clamp(ratio, 0.0, 1.0);
  const double elapsed = std::chrono::duration<double>(clock_.monotonicNow() - pr.started).count();
  const double eta = ratio > 0 && elapsed > 0 ? elapsed * (1 - ratio) / ratio
                                              : std::numeric_limits<double>::infinity();
  return {elapsed, ratio, eta};
}

std::string Pipeline::pausedDetail() const {
  std::string out;
  if (operator_paused_)
    out = "paused by the operator (`xdcr-agent resume -p " + pipeline_.name +
          "` or POST /pipelines/" + pipeline_.name + "/resume)";
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
      spdlog::info("pipeline {}: clock skew back within max_skew {} ms; resuming", pipeline_.name,
                   config_->clock.max_skew.count());
    }
  }
  skew_paused_ = on;
  skew_pause_why_ = on ? why : "";
  if (!on) pause_wake_.notify();
}

void Pipeline::setCompensation(int64_t ms) {
  if (ms != compensation_ms_) {
    if (ms == 0) {
      spdlog::info(
          "pipeline {}: clock skew back within max_skew {} ms; deadlines are no longer "
          "translated",
          pipeline_.name, config_->clock.max_skew.count());
    } else if (compensation_ms_ == 0 ||
               std::llabs(ms - compensation_ms_) * 10 > config_->clock.max_skew.count()) {
      spdlog::warn(
          "pipeline {}: compensating clock skew: every deadline is translated by {:+} ms "
          "into the target's clock ({})",
          pipeline_.name, ms, skew_.reason);
    }
  }
  compensation_ms_ = ms;
  if (live_sink_ != nullptr) live_sink_->setCompensationMs(ms);
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
    source_offset_ms_ = toMs(skew_.source_offset_ns);
    if (link_ != nullptr) link_->setSourceClockOffsetMs(source_offset_ms_);
    target_clock_.setOffsetMs(toMs(skew_.target_offset_ns));
  }
  switch (cc.on_skew) {
    case config::SkewAction::Warn: {
      const auto now = clock_.monotonicNow();
      if (skew_.exceeded &&
          (!was_exceeded || now - last_skew_warning_ >= std::chrono::minutes(5))) {
        last_skew_warning_ = now;
        spdlog::warn(
            "pipeline {}: clock skew: {}; deadlines are replicated unchanged, so "
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

}  // namespace xdcr::replicator
