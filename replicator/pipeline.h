#pragma once
// One pipeline: source cluster -> filters -> target cluster, run on the agent's io_context.
//
// run() is a supervisor loop: it runs sessions, and after a failure reloads the last checkpoint
// (offset and expiry index together) and reconnects with exponential backoff and jitter. A
// session is four coroutines on one strand:
//
//   readLoop    source socket -> units -> StreamFilter -> Applier -> target.pending()
//   runWriter   target.pending() -> target socket (batches, double-buffered)
//   runReader   target replies -> acknowledged source offset
//   ackLoop     every second: REPLCONF ACK <acknowledged offset>, watchdogs, checkpoints
//
// Every suspension point of readLoop lies between two units, so whenever the target has
// answered everything (drained), the filter's state (expiry index, db) is exactly the state at
// the acknowledged offset: that is when checkpoints are taken.

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "clock/clock.h"
#include "clock/skew.h"
#include "common/notify.h"
#include "common/stats.h"
#include "config/config.h"
#include "filters/expiry_index.h"
#include "filters/stream_filter.h"
#include "replicator/checkpoint.h"
#include "replicator/snapshot_loader.h"
#include "source/redis_source.h"
#include "target/applier.h"
#include "target/max_ttl.h"
#include "target/redis_target.h"

namespace xdcr::replicator {

enum class PipelineState { Starting, FullSync, Streaming, Paused, Reconnecting, Stopped };
const char* stateName(PipelineState s);

class Pipeline {
 public:
  Pipeline(net::any_io_executor ex, config::ConfigConstSharedPtr config,
           const config::PipelineConfig& pipeline, const clock::Clock& clock);

  /** Runs until stop(); never throws. Returns false if the pipeline could not start at all. */
  net::awaitable<bool> run();
  /** Graceful stop: stop reading, drain what is in flight to the target, checkpoint. */
  void stop();
  /**
   * A new clock measurement (the skew monitor, every clock.check_interval): sets the source's
   * and the target's clock offsets and applies clock.on_skew (expiry-semantics.md §7). With
   * `pause` or `compensate`, nothing is written until the first measurement has arrived.
   */
  void onClockReport(const clock::ClockReport& report);
  /** The latest evaluation of this pipeline's clocks. */
  const clock::PipelineSkew& skew() const { return skew_; }
  /** ms added to every replicated deadline (compensate mode with the skew over max_skew). */
  int64_t compensationMs() const { return compensation_ms_; }

  const std::string& name() const { return pipeline_.name; }
  /** The state; a pause shows at once, even while the read loop waits for the source. */
  PipelineState state() const {
    return paused() && state_ == PipelineState::Streaming ? PipelineState::Paused : state_;
  }
  const PipelineStats& stats() const { return stats_; }
  uint64_t sourceOffset() const { return source_offset_; }
  uint64_t appliedOffset() const {
    return live_target_ != nullptr ? live_target_->ackedOffset() : applied_offset_;
  }
  const std::string& lastError() const { return last_error_; }
  /** Operator pause (POST /pipelines/NAME/pause): stop applying; the source's backlog holds. */
  void pause();
  /** Ends the operator pause; a clock-skew pause stays until the skew is back in bounds. */
  void resume();
  bool paused() const { return operator_paused_ || skew_paused_; }
  /** "operator", "clock_skew" or "" (a metric label). */
  const char* pausedReason() const {
    return operator_paused_ ? "operator" : skew_paused_ ? "clock_skew" : "";
  }
  /** For status: why, in words. */
  std::string pausedDetail() const;
  /**
   * Replication lag: how long the oldest stream byte the agent has received but the target has
   * not yet acknowledged has been waiting (0 when caught up). It starts when the agent reads the
   * byte, so time spent in the source's output buffer and on the network is not included.
   */
  double lagSeconds() const { return lag_seconds_; }
  /** Bytes received from the source and not yet acknowledged by the target. */
  uint64_t backlogBytes() const {
    return source_offset_ - std::min(source_offset_, appliedOffset());
  }
  int64_t lastCheckpointMs() const { return last_checkpoint_ms_; }
  const filters::ExpiryIndex& expiryIndex() const { return index_; }
  uint64_t checkpointJournalBytes() const { return store_.journalBytes(); }
  uint64_t checkpointedOffset() const { return checkpointed_offset_; }
  const SnapshotProgress& snapshotProgress() const { return progress_; }

 private:
  net::awaitable<Status> session();
  net::awaitable<Status> sourceSide(target::RedisTarget& target);
  net::awaitable<Status> readLoop(source::RedisSource& source, target::RedisTarget& target,
                                  filters::StreamFilter& filter, target::Applier& applier);
  net::awaitable<Status> ackLoop(source::RedisSource& source, target::RedisTarget& target,
                                 filters::StreamFilter& filter);
  /**
   * Writes the target-loss marker (marker.h) after everything sent so far, waits until the
   * target has acknowledged all of it, and checkpoints (a journal record, or a whole image when
   * one is needed). Only at a unit boundary of the stream (readLoop) or after a snapshot, so
   * the expiry index matches the offset. For a full sync's end, a stop, and compaction.
   */
  net::awaitable<Status> checkpointAfterMarker(const source::RedisSource& source,
                                               target::RedisTarget& target,
                                               const filters::StreamFilter& filter,
                                               target::Applier& applier);
  Status checkpointNow(const source::RedisSource& source, const target::RedisTarget& target,
                       const filters::StreamFilter& filter, const std::string& marker);
  /**
   * The periodic checkpoint, without stopping the stream: at a unit boundary, writes the marker
   * and captures the checkpoint (offset, db, the index's changes since the last one); it is
   * appended to the journal by finishDeltaCheckpoint once the target has answered the marker.
   */
  void beginDeltaCheckpoint(const source::RedisSource& source, target::RedisTarget& target,
                            const filters::StreamFilter& filter, target::Applier& applier);
  void finishDeltaCheckpointIfAnswered(const target::RedisTarget& target);
  /** True when the next checkpoint must be a whole image (no base, journal lost or too big). */
  bool needWholeImage() const;
  Checkpoint makeCheckpoint(const source::RedisSource& source,
                            const filters::StreamFilter& filter, const std::string& marker) const;
  /** A checkpoint is durable: it is now what a restart resumes from. */
  void checkpointWritten(const Checkpoint& cp);
  /** Reads the target's marker; resets resume_ (full resync) when it shows lost data. */
  net::awaitable<Status> checkTargetMarker();
  Status loadCheckpoint();
  void setSkewPause(bool on, const std::string& why);
  void setCompensation(int64_t ms);

  net::any_io_executor ex_;
  config::ConfigConstSharedPtr config_;  // keeps pipeline_ and the cluster configs alive
  const config::PipelineConfig& pipeline_;
  const config::ClusterConfig& source_cluster_;
  const config::ClusterConfig& target_cluster_;
  const clock::Clock& clock_;
  clock::ClusterClock source_clock_;
  clock::ClusterClock target_clock_;
  target::MaxTtlPolicy policy_;
  filters::KeyRewriter rewriter_;
  CheckpointStore store_;
  filters::ExpiryIndex index_;
  std::optional<Checkpoint> resume_;
  PipelineStats stats_;
  SnapshotProgress progress_;

  PipelineState state_ = PipelineState::Starting;
  bool stopping_ = false;
  bool checkpoint_due_ = false;  // ackLoop asks readLoop to checkpoint at the next boundary
  struct PendingCheckpoint {
    Checkpoint cp;
    uint64_t marker_seq = 0;  // durable once the target has answered this many commands
    std::vector<filters::ExpiryIndex::Op> ops;
  };
  std::optional<PendingCheckpoint> pending_cp_;
  std::vector<filters::ExpiryIndex::Op> spare_ops_;  // capacity reused between checkpoints
  bool image_needed_ = false;  // a journal append failed: its changes are in no file
  uint64_t source_offset_ = 0;
  uint64_t applied_offset_ = 0;
  uint64_t checkpointed_offset_ = 0;
  std::chrono::steady_clock::time_point last_checkpoint_{};
  std::string last_error_;
  source::RedisSource* live_source_ = nullptr;  // for stop(): cancels its pending read
  const target::RedisTarget* live_target_ = nullptr;  // for status: the acknowledged offset
  Notify stop_wake_;
  Notify ack_wake_;
  bool ack_requested_ = false;
  bool reading_source_ = false;  // readLoop waits for source bytes (ackLoop may wake it)
  std::string next_marker_;      // the marker token the next checkpoint writes
  std::string stamp_key_;        // appliedStampKey(pipeline)
  uint64_t skip_until_ = 0;      // replay: units ending at or before this offset are applied
  bool operator_paused_ = false;
  bool skew_paused_ = false;
  std::string skew_pause_why_;
  clock::PipelineSkew skew_;
  bool skew_measured_before_ = false;  // skew_ of the previous report was measured
  int64_t compensation_ms_ = 0;
  std::chrono::steady_clock::time_point last_skew_warning_{};
  target::Applier* live_applier_ = nullptr;  // for compensation changes mid-session
  Notify pause_wake_;
  double lag_seconds_ = 0;
  int64_t last_checkpoint_ms_ = 0;
  struct Arrival {
    uint64_t end_offset;  // stream offset just past the bytes of one read
    std::chrono::steady_clock::time_point at;
  };
  std::deque<Arrival> arrivals_;
  void updateLag(uint64_t applied);
};

}  // namespace xdcr::replicator
