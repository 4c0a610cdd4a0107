#include "replicator/pipeline.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "replicator/source_link.h"
#include "target/marker.h"
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

Pipeline::Pipeline(net::any_io_executor ex, config::ConfigConstSharedPtr config,
                   const config::PipelineConfig& pipeline, const clock::Clock& clock, Limits limits)
    : config_(std::move(config)),
      pipeline_(pipeline),
      source_cluster_(*config_->cluster(pipeline.source)),
      target_cluster_(*config_->cluster(pipeline.target)),
      clock_(clock),
      limits_(limits),
      target_clock_(clock),
      policy_(target_cluster_.buckets),
      keys_(std::make_shared<const filters::KeySpace>(pipeline)),
      store_(config_->agent.state_dir, pipeline.name),
      ex_(ex),
      pause_wake_(ex) {
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
  // A pipeline that joins a link (at start, or detached onto its own) brings the source clock's
  // latest measurement, rather than leaving the link at 0 until the next clock check.
  if (link_ != nullptr && skew_.measured) link_->setSourceClockOffsetMs(source_offset_ms_);
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
  auto cp = store_.load(index);
  if (!cp) return fail(cp.error());
  resume_ = *cp;
  // For one server the address is its identity. A Sentinel-managed master or a cluster shard
  // moves between nodes: there the replication history (the replid PSYNC offers) is the
  // identity, and a changed address is a failover to follow, not a new source.
  if (resume_ && source_cluster_.kind == config::ClusterKind::Redis &&
      !resume_->source_address.empty() && resume_->source_address != source_cluster_.address()) {
    spdlog::warn(
        "pipeline {}: checkpoint {} was taken from source {}, now {}; starting over "
        "with a full resync",
        pipeline_.name, store_.path(), resume_->source_address, source_cluster_.address());
    resume_.reset();
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
  auto sink = std::make_unique<target::RedisSink>(ex_, pipeline_, target_cluster_, keys_, policy_,
                                                  target_clock_, clock, limits_, stats_);
  sink->setCompensationMs(compensation_ms_);
  return sink;
}

Result<uint64_t> Pipeline::checkMarkers(const target::MarkerState& m) {
  if (!resume_ || resume_->marker.empty()) return uint64_t{0};  // nothing to check against
  // The replay stamp: what of the stream after the checkpoint the target has already applied.
  uint64_t skip_until = 0;
  if (!m.stamp.empty()) {
    const auto colon = m.stamp.rfind(':');
    if (colon != std::string::npos && m.stamp.substr(0, colon) == resume_->position.replid) {
      const uint64_t at = std::strtoull(m.stamp.c_str() + colon + 1, nullptr, 10);
      if (at > resume_->position.offset) skip_until = at;
    }
  }
  if (m.present && (m.marker == resume_->marker || m.marker == resume_->next_marker)) {
    if (skip_until > 0) {
      spdlog::info(
          "pipeline {}: the target already applied the stream up to offset {} (its "
          "replay stamp); the replay from checkpoint offset {} skips that far",
          pipeline_.name, skip_until, resume_->position.offset);
    }
    return skip_until;
  }
  spdlog::warn(
      "pipeline {}: target {} lost data the checkpoint at offset {} counts as written "
      "(marker {} is {}, expected {} or {}): it restarted empty, from an older snapshot, "
      "or failed over; starting a full resync",
      pipeline_.name, target_cluster_.name, resume_->position.offset,
      target::markerKey(pipeline_.name), m.present ? "\"" + m.marker + "\"" : "missing",
      resume_->marker, resume_->next_marker);
  ++stats_.target_loss_resyncs;
  resume_.reset();
  if (auto s = store_.remove(); !s) return fail(s.error());
  return uint64_t{0};
}

Status Pipeline::beginFullSync() {
  // From here until the snapshot is applied no checkpoint is valid: a crash in between must
  // start a new full sync, not resume the old history over a half-written snapshot.
  state_ = PipelineState::FullSync;
  resume_.reset();
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
  resume_ = cp;
  checkpointed_offset_ = cp.position.offset;
  applied_offset_ = std::max(applied_offset_, cp.position.offset);
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
  if (operator_paused_)
    out = "paused by the operator (POST /pipelines/" + pipeline_.name + "/resume)";
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
