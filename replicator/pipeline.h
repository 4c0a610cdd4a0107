#pragma once
// One pipeline: what reading one source into one target needs that is the pipeline's own — its
// target (a Sink per session), key space, clamp policy, checkpoints, marker tokens, pause and
// clock-skew state, counters — and what the admin server shows of it.
//
// A pipeline does not run by itself: a SourceLink (replicator/source_link.h) runs the source and
// feeds every pipeline that reads it (fan-out: pipelines naming the same `source` share one
// replication link). The link drives the pipeline through the calls in the "link side" section.

#include <boost/asio/awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "clock/clock.h"
#include "clock/skew.h"
#include "common/limits.h"
#include "common/notify.h"
#include "common/rate_limiter.h"
#include "common/stats.h"
#include "config/config.h"
#include "filters/key_space.h"
#include "replicator/checkpoint.h"
#include "replicator/operator_state.h"
#include "replicator/source_head.h"
#include "source/expiry_index.h"
#include "source/locator.h"
#include "target/max_ttl.h"
#include "target/sink.h"

namespace xdcr::replicator {

class SourceLink;
class MigrationGuard;
class ShardLocator;

enum class PipelineState { Starting, FullSync, Streaming, Paused, Reconnecting, Stopped };
const char* stateName(PipelineState s);

/** Progress of the current (or last) full sync; read by logs and status. */
struct SnapshotProgress {
  bool active = false;
  uint64_t keys_done = 0;   // keys walked (restored + expired + filtered + failed)
  uint64_t keys_total = 0;  // from RESIZEDB (0 = unknown yet)
  uint64_t bytes_done = 0;
  uint64_t bytes_total = 0;  // 0 = unknown (diskless framing)
  uint64_t restored = 0;     // copied: RESTOREd or rebuilt
  uint64_t rebuilt = 0;      // of those, written as commands
  uint64_t expired = 0;
  uint64_t filtered = 0;
  uint64_t failed = 0;
  std::chrono::steady_clock::time_point started{};
  double seconds = 0;  // duration of the last completed one
  // The spool (source/spool.h) of this full sync, or of the last one once it drained.
  uint64_t spooled_bytes = 0;        // held now, memory and disk
  uint64_t spool_on_disk_bytes = 0;  // of those, on disk
  uint64_t spool_peak_bytes = 0;     // the most held at once
  uint64_t spool_limit = 0;          // 0: no spool
  bool spooling = false;             // the source is read into the spool now
};

/**
 * The engine's limits for `pipeline` as configured: the defaults, with the watchdogs from the
 * clusters' `link_timeout` (the source's silence, the target's unanswered commands).
 */
Limits limitsFor(const config::Config& config, const config::PipelineConfig& pipeline);

class Pipeline {
 public:
  /**
   * `locator` says where the source is read from (nullptr: the source cluster's address).
   * `shard`: for one shard of a Redis Cluster source, its instance name (`<pipeline>@<id>`, which
   * names its checkpoint and its markers on the target) and its label for status and metrics.
   */
  struct Shard {
    std::string instance;
    std::string label;
  };
  Pipeline(net::any_io_executor ex, config::ConfigConstSharedPtr config,
           const config::PipelineConfig& pipeline, const clock::Clock& clock,
           Limits limits = Limits{}, std::shared_ptr<source::Locator> locator = nullptr,
           std::optional<Shard> shard = std::nullopt);
  ~Pipeline() { *alive_ = nullptr; }
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  /** Graceful stop: its link stops feeding it, drains its target, checkpoints it. */
  void stop();
  bool stopping() const { return stopping_; }
  /**
   * A new clock measurement (the skew monitor, every clock.check_interval): sets the source's
   * and the target's clock offsets and applies clock.on_skew (expiry-semantics.md §7). With
   * `pause` or `compensate`, nothing is written until the first measurement has arrived.
   */
  void onClockReport(const clock::ClockReport& report);
  const clock::PipelineSkew& skew() const { return skew_; }
  /** ms added to every replicated deadline (compensate mode with the skew over max_skew). */
  int64_t compensationMs() const { return compensation_ms_; }

  const std::string& name() const { return pipeline_.name; }
  /** The name of its checkpoint and markers: name(), or `<name>@<id>` for a source shard. */
  const std::string& instance() const { return instance_; }
  /** The source shard it reads ("" for a source that is not a Redis Cluster). */
  const std::string& shardLabel() const { return shard_label_; }
  void setShardLabel(std::string l) { shard_label_ = std::move(l); }
  /** The node its link reads now ("" when none), as "host:port (role)". */
  const std::string& sourceNode() const { return source_node_; }
  void setSourceNode(std::string n) { source_node_ = std::move(n); }
  /** A Redis Cluster source: the slot-migration guard of its source cluster, and its shard. */
  void setMigrationGuard(std::shared_ptr<MigrationGuard> guard, const ShardLocator* shard) {
    migration_guard_ = std::move(guard);
    shard_ = shard;
  }
  MigrationGuard* migrationGuard() const { return migration_guard_.get(); }
  const ShardLocator* shard() const { return shard_; }
  /** Asks its link for a checkpoint at the next unit boundary; from any thread. */
  void checkpointSoon();
  /** The executor its link runs on (its thread: replicator/workers.h), and that thread's
   *  number (0: the first; for status). */
  const net::any_io_executor& executor() const { return ex_; }
  int thread() const { return thread_; }
  void setThread(int t) { thread_ = t; }
  /** Where its link reads the source from. */
  const std::shared_ptr<source::Locator>& locator() const { return locator_; }
  const config::PipelineConfig& config() const { return pipeline_; }
  const config::ClusterConfig& sourceCluster() const { return source_cluster_; }
  const config::ClusterConfig& targetCluster() const { return target_cluster_; }
  /** The state; a pause shows at once, even while the link waits for the source. */
  PipelineState state() const {
    return paused() && state_ == PipelineState::Streaming ? PipelineState::Paused : state_.load();
  }
  const PipelineStats& stats() const { return stats_; }
  uint64_t sourceOffset() const { return source_offset_; }
  uint64_t appliedOffset() const {
    return live_sink_ != nullptr ? live_sink_->ackedOffset() : applied_offset_;
  }
  const std::string& lastError() const { return last_error_; }
  /**
   * Operator pause (POST /pipelines/NAME/pause, `xdcr-agent pause`): stop applying; the source's
   * backlog holds. Kept in the state directory (replicator/operator_state.h) first: a restart or
   * a reload starts the pipeline paused. An error: the file could not be written; not paused.
   */
  Status pause();
  /** Ends the operator pause (the file first); a clock-skew pause stays until the skew is back
   *  in bounds. */
  Status resume();
  bool paused() const { return operator_paused_ || skew_paused_; }
  bool skewPaused() const { return skew_paused_; }
  /** "operator", "clock_skew" or "" (a metric label). */
  const char* pausedReason() const {
    return operator_paused_ ? "operator" : skew_paused_ ? "clock_skew" : "";
  }
  /** For status: why, in words. */
  std::string pausedDetail() const;
  /**
   * Replication lag: the age of the oldest source write not yet applied to the target (0 when
   * caught up). The larger of two lower bounds: since the agent received the oldest stream byte
   * its target has not acknowledged, and since the source's own offset (read every second apart
   * from the link: replicator/source_head.h) first passed the applied offset — which keeps
   * counting while the target is down or the pipeline paused.
   */
  double lagSeconds() const { return std::max(lag_seconds_, head_lag_seconds_.load()); }
  /** The source's offset minus the applied offset (or, when the source's offset is unknown,
   *  what was received and not yet acknowledged). */
  uint64_t backlogBytes() const {
    const uint64_t received = source_offset_ - std::min(source_offset_, appliedOffset());
    const int64_t head = head_backlog_;
    return head >= 0 ? std::max(received, static_cast<uint64_t>(head)) : received;
  }
  /** Stream bytes applied per second over the last 30 s. */
  double applyRate() const { return apply_rate_; }
  /** A running full sync, on the pipeline's clock: seconds so far, share done (0..1) and the
   *  seconds it still needs (+inf: unknown yet); all 0 when none runs. */
  struct FullSyncEstimate {
    double seconds = 0;
    double ratio = 0;
    double eta = 0;
  };
  FullSyncEstimate fullSyncEstimate() const;
  int64_t lastCheckpointMs() const { return last_checkpoint_ms_; }
  /** The expiry index of the link this pipeline reads (empty when none runs). */
  const source::ExpiryIndex& expiryIndex() const;
  uint64_t checkpointJournalBytes() const { return store_.journalBytes(); }
  uint64_t checkpointedOffset() const { return checkpointed_offset_; }
  const SnapshotProgress& snapshotProgress() const { return progress_; }
  /** Times this pipeline was detached from a shared link onto one of its own. */
  uint64_t detachments() const { return stats_.link_detachments; }
  /** The names of the pipelines on this pipeline's link, itself included; empty on no link. */
  std::vector<std::string> linkMembers() const;
  const Limits& limits() const { return limits_; }

  /** bandwidth_limit: bytes per second read from the source and, apart, written to the target
   *  (0: none). */
  uint64_t bandwidthLimit() const { return pipeline_.bandwidth_limit; }
  /**
   * What its target connections take from (nullptr without a limit): one bucket for every
   * instance of the pipeline (the shards of a Redis Cluster source), with this instance's
   * counters.
   */
  const std::shared_ptr<RateLimiter>& writeLimiter() const { return write_limiter_; }
  /** What its link reads the source through (nullptr: no limit there); set by the link. */
  const std::shared_ptr<RateLimiter>& readLimiter() const { return read_limiter_; }
  /** For status and metrics: the rates of the last seconds and the time spent waiting. */
  struct Bandwidth {
    double read_bytes_per_second = 0;
    double write_bytes_per_second = 0;
    double read_throttled_seconds = 0;   // of every link it was on
    double write_throttled_seconds = 0;  // of this instance's target connections
  };
  Bandwidth bandwidth(std::chrono::steady_clock::time_point now) const;

  // ---- link side (replicator/source_link.cc) ------------------------------------------------

  /** Prepares the state directory and loads the checkpoint into `index`; false: cannot run. */
  Status open(source::ExpiryIndex& index);
  /** The checkpoint a session resumes from (nullopt: a full sync). */
  const std::optional<Checkpoint>& resumePoint() const { return resume_; }
  /** resumePoint() is set; from any thread. */
  bool hasResumePoint() const { return has_resume_; }
  /** A new session's sink, on the link's executor. */
  std::unique_ptr<target::Sink> makeSink(const clock::Clock& clock);
  /**
   * Makes `sink` the live one (status reads its acknowledged offset; compensation changes reach
   * it); nullptr at the end. It gets the compensation in force now: a clock report may have
   * arrived while it was being connected.
   */
  void setLiveSink(target::Sink* sink) {
    live_sink_ = sink;
    if (sink != nullptr) sink->setCompensationMs(compensation_ms_);
  }
  /** Joins `link` (nullptr: leaves it, and its read limiter); the link's source clock takes
   *  this pipeline's offset. */
  void setLink(SourceLink* link);
  /** The read limiter of its link (SourceLink: the smallest limit of its members). */
  void setReadLimiter(std::shared_ptr<RateLimiter> limiter);
  /** The source cluster's measured clock offset (ms, 0 until measured). */
  int64_t sourceClockOffsetMs() const { return source_offset_ms_; }
  /**
   * Compares the target's marker with the checkpoint's; when the target lost data the checkpoint
   * counts as written, drops the checkpoint (the pipeline needs a full sync). Returns what of the
   * stream the target already holds (replay stamps: up to an offset, and per slot on a cluster).
   */
  Result<target::ReplaySkip> checkMarkers(const target::MarkerState& m);
  /** The marker tokens the checkpoint accepts (none without a checkpoint). */
  std::vector<std::string> acceptedMarkers() const;
  /** A full sync starts: the checkpoint is dropped (a crash must not resume the old history). */
  Status beginFullSync();
  void setState(PipelineState s) { state_ = s; }
  void setLastError(std::string e) { last_error_ = std::move(e); }
  PipelineStats& mutableStats() { return stats_; }
  SnapshotProgress& mutableProgress() { return progress_; }
  void setSourceOffset(uint64_t o) { source_offset_ = o; }
  void setAppliedOffset(uint64_t o) { applied_offset_ = o; }
  void setLag(double s) { lag_seconds_ = s; }
  /** What the source's own offset says (backlog < 0: unknown), and the apply rate. */
  void setHeadFigures(int64_t backlog, double lag, double rate) {
    head_backlog_ = backlog;
    head_lag_seconds_ = lag;
    apply_rate_ = rate;
  }
  /** Follows the applied offset for the apply rate and xdcr_applied_bytes_total. */
  ApplyRate& applyRateTracker() { return apply_tracker_; }
  void countDetachment() { ++stats_.link_detachments; }
  /** The marker token the next checkpoint writes (creating one if none). */
  const std::string& nextMarker();
  /** The checkpoint `cp` is durable: what a restart resumes from. */
  void checkpointWritten(const Checkpoint& cp);
  CheckpointStore& store() { return store_; }
  bool imageNeeded() const { return image_needed_; }
  void setImageNeeded(bool v) { image_needed_ = v; }
  /** Waits until a pause may have ended (or `d` passes). */
  net::awaitable<void> waitPauseChange(std::chrono::steady_clock::duration d) {
    co_await pause_wake_.waitFor(d);
  }

 private:
  void setSkewPause(bool on, const std::string& why);
  void setResume(std::optional<Checkpoint> cp) {
    resume_ = std::move(cp);
    has_resume_ = resume_.has_value();
  }
  void setCompensation(int64_t ms);

  config::ConfigConstSharedPtr config_;  // keeps pipeline_ and the cluster configs alive
  const config::PipelineConfig& pipeline_;
  std::string instance_;
  std::string shard_label_;
  std::string source_node_;
  std::shared_ptr<source::Locator> locator_;
  std::shared_ptr<MigrationGuard> migration_guard_;
  const ShardLocator* shard_ = nullptr;
  const config::ClusterConfig& source_cluster_;
  const config::ClusterConfig& target_cluster_;
  const clock::Clock& clock_;
  Limits limits_;
  clock::ClusterClock target_clock_;
  target::MaxTtlPolicy policy_;
  filters::KeySpaceConstSharedPtr keys_;
  CheckpointStore store_;
  /** max_lifetime's first-seen store (`<instance>.first-seen`); null without max_lifetime. */
  std::unique_ptr<target::FirstSeenStore> first_seen_;
  OperatorState operator_state_;
  std::optional<Checkpoint> resume_;
  std::atomic<bool> has_resume_ = false;
  PipelineStats stats_;
  SnapshotProgress progress_;
  net::any_io_executor ex_;
  int thread_ = 0;
  SourceLink* link_ = nullptr;
  target::Sink* live_sink_ = nullptr;
  std::shared_ptr<RateLimiter> write_limiter_;
  std::shared_ptr<RateLimiter> read_limiter_;
  double read_throttled_before_ = 0;  // seconds waited on the read limiters of earlier links

  // Read by the migration guard from another thread (state(), checkpointedOffset(),
  // hasResumePoint()): atomics. Everything else is the link's thread's (replicator/workers.h).
  std::atomic<PipelineState> state_ = PipelineState::Starting;
  bool stopping_ = false;
  bool image_needed_ = false;  // a journal append failed: its changes are in no file
  uint64_t source_offset_ = 0;
  uint64_t applied_offset_ = 0;
  std::atomic<uint64_t> checkpointed_offset_ = 0;
  std::string last_error_;
  std::string next_marker_;  // the marker token the next checkpoint writes
  std::atomic<bool> operator_paused_ = false;
  std::atomic<bool> skew_paused_ = false;
  std::string skew_pause_why_;
  clock::PipelineSkew skew_;
  bool skew_measured_before_ = false;  // skew_ of the previous report was measured
  int64_t compensation_ms_ = 0;
  int64_t source_offset_ms_ = 0;  // θ_source of the latest measurement
  std::chrono::steady_clock::time_point last_skew_warning_{};
  Notify pause_wake_;
  /** This pipeline until its destructor: what checkpointSoon() posts checks it. */
  std::shared_ptr<Pipeline*> alive_ = std::make_shared<Pipeline*>(this);
  double lag_seconds_ = 0;
  std::atomic<int64_t> head_backlog_ = -1;
  std::atomic<double> head_lag_seconds_ = 0;
  std::atomic<double> apply_rate_ = 0;
  ApplyRate apply_tracker_;
  int64_t last_checkpoint_ms_ = 0;
};

}  // namespace xdcr::replicator
