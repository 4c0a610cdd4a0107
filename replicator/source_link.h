#pragma once
// One replication link: a Source (one source shard) composed with the Sinks of every pipeline
// that reads it. Pipelines naming the same `source` share one link — one PSYNC, one full sync,
// one expiry index — and each keeps its own target, filters, clamp, marker and checkpoint.
//
// The link only composes: supervision (sessions, reconnect with backoff), backpressure, the ACK
// to the source (the minimum of what every sink has answered), checkpoints. A session is:
//
//   Source::start        PSYNC; on a full sync the snapshot's keys, as resolved units, go to
//                        every sink (snapshotUnit), the link waiting while one is over its limits
//   readLoop             Source::nextUnit -> every Sink::apply (judge, clamp, encode, append)
//   ackLoop              every second: ACK min(acked), lag, watchdogs, checkpoint cadence
//   Sink::run            (one per pipeline) the target's pipelined writer and reply reader
//
// Every suspension point of readLoop lies between two units, so at a unit boundary the expiry
// index is exactly the index at the link's position: checkpoints are captured there, for every
// pipeline at once, and each becomes durable when its own target has answered its marker.
//
// A target that holds the others back — over its unanswered limits, silent with commands in
// flight, paused, or failed — for longer than Limits::detach_after is detached: the pipeline
// leaves this link and runs on a link of its own (DetachFn), resuming by partial resync from
// its own checkpoint. A link with one pipeline never detaches; it reconnects, as before.

#include <boost/asio/awaitable.hpp>

#include <atomic>
#include <bitset>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "clock/clock.h"
#include "common/limits.h"
#include "common/notify.h"
#include "common/rate_limiter.h"
#include "config/config.h"
#include "replicator/pipeline.h"
#include "replicator/source_head.h"
#include "replicator/supervision.h"
#include "source/expiry_index.h"
#include "source/locator.h"
#include "source/source.h"
#include "target/sink.h"

namespace xdcr {
class RedisConnection;
}  // namespace xdcr
namespace xdcr::source {
class RedisShardSource;
}  // namespace xdcr::source

namespace xdcr::replicator {

class SourceLink final : private source::SnapshotConsumer {
 public:
  /** `p` left this link: detached (run it on a link of its own) or stopped. */
  using MemberFn = std::function<void(Pipeline* p)>;

  SourceLink(net::any_io_executor ex, config::ConfigConstSharedPtr config,
             std::vector<Pipeline*> members, const clock::Clock& clock, MemberFn on_detach,
             MemberFn on_stopped);
  ~SourceLink();

  /** Runs sessions until every member has left; never throws. */
  net::awaitable<void> run();
  /** Graceful stop of every member: drain, checkpoint, leave. */
  void stopAll();
  /** A checkpoint at the next unit boundary (a slot migration on another shard waits for it). */
  void checkpointSoon();
  /** A member's stop() was called: the read loop lets it leave at the next unit boundary. */
  void memberStopping();
  /** The source cluster's measured clock offset (rule 5 reads the source's now). */
  void setSourceClockOffsetMs(int64_t ms) { source_clock_.setOffsetMs(ms); }
  const source::ExpiryIndex& expiryIndex() const { return index_; }
  const std::string& sourceName() const { return source_cluster_.name; }
  size_t memberCount() const { return pipelines_.size(); }
  /** What the link reads the source through: the smallest bandwidth_limit of its members
   *  (nullptr: none of them has one). */
  const std::shared_ptr<RateLimiter>& readLimiter() const { return read_limiter_; }
  /** The names of the pipelines this link feeds (status). */
  std::vector<std::string> memberNames() const {
    std::vector<std::string> names;
    for (const Pipeline* p : pipelines_) names.push_back(p->name());
    return names;
  }

 private:
  struct PendingCheckpoint {
    Checkpoint cp;
    uint64_t marker_seq = 0;  // durable once the target has answered this many commands
    std::shared_ptr<const std::vector<source::ExpiryIndex::Op>> ops;
  };
  /** One pipeline in the current session. */
  struct Member {
    Pipeline* p = nullptr;
    std::unique_ptr<target::Sink> sink;
    bool running = false;            // sink->run() has not returned yet
    bool release_when_done = false;  // stopped: hand the pipeline back once run() returns
    bool gone = false;               // detached or left during this session
    std::optional<Error> failed;     // sink->run() returned this
    uint64_t skip_until = 0;         // units ending at or before this are not written again
    uint64_t stamp = 0;              // the target's replay stamp (applied up to), 0 = none
    MemberHold hold;                 // what supervision saw last (replicator/supervision.h)
    std::optional<PendingCheckpoint> pending;
  };
  using Members = std::list<Member>;

  /** Sessions, with backoff in between, until every member has left. */
  net::awaitable<void> runSessions();
  net::awaitable<Status> session();
  /**
   * Every second, session or not: the source's own replication offset (INFO replication on a
   * connection of its own, replicator/source_head.h) into head_. Never returns; the end of
   * runSessions() cancels it.
   */
  net::awaitable<void> watchHead();
  /** Every second, session or not: updateFromHead(). Never returns (cancelled likewise). */
  net::awaitable<void> tickFigures();
  /** Each member's lag, backlog and apply rate from head_; a running full sync's progress line
   *  when none was logged for progress_report (a stalled one too). */
  void updateFromHead();
  /** A session ended with `why` while members were in a full sync: counted by reason. */
  void countAbortedFullSyncs(const Status& why);
  net::awaitable<Status> streamSide(source::Source& source);
  /**
   * Target copies that ended before a later write (target/copy_repair.h, expiry-semantics.md
   * §12): at a unit boundary, the keys every sink asked for are read back from the node the
   * session streams from (source/document_read.h: one transaction per batch, each at one
   * offset X) and handed to the sinks, which write them after everything appended so far.
   */
  net::awaitable<Status> restoreCopies(const source::Source& source);
  /** A sink has copies to restore: the read loop takes them at its next unit boundary. */
  void repairWanted();
  net::awaitable<Status> readLoop(source::Source& source);
  net::awaitable<Status> ackLoop(source::Source& source);
  /**
   * A Redis Cluster source: a unit with RESTORE-ASKING waits (still checkpointing) until the
   * other shards are past the migration (replicator/migration_guard.h); a DEL of a key whose
   * RESTORE waits elsewhere is not replicated.
   */
  net::awaitable<Status> guardMigration(source::Source& source, source::ResolvedUnit& unit);
  /** Runs delta checkpoints while the read loop waits inside a unit (never returns). */
  net::awaitable<Status> checkpointWhileWaiting(source::Source& source);
  /** Returns (an error) when the node the session reads is no longer the right one. */
  net::awaitable<Status> watchNode(source::Locator& locator, const source::NodeChoice& node);
  /** Returns when a single member's sink failed (that ends the session). */
  net::awaitable<Status> watchSinks();
  /**
   * Before resuming on `node`, when its history forked from the checkpoint's (a promoted
   * replica: master_replid2 is the checkpoint's replid): targets that may hold data of the old
   * history past the fork get a full sync (the source lost those writes); otherwise replay
   * stamps and checkpoints ahead of the link are capped at the fork, and a checkpoint past it
   * (only framing came after the last data) resumes at the fork. Needs INFO on the node;
   * without it nothing changes.
   */
  net::awaitable<void> alignWithHistory(const RedisEndpoint& node);
  /** Loads every member's checkpoint and picks where the link resumes (members that cannot
   *  join it are detached). */
  Status loadCheckpoints();
  std::string label() const;
  /**
   * Makes the read limiter the smallest bandwidth_limit of the members now (a member that left
   * may have had it) and gives it to the members and the session's source. One bucket for the
   * links of the same pipelines (the shards of a Redis Cluster source), counters per link.
   */
  void updateReadLimit();
  /** Where this link's full syncs spool (`node`: "host:port" of the session's node). */
  source::SpoolOptions spoolOptions(const std::string& node) const;
  /** Copies the source's spool figures into every member's SnapshotProgress (status). */
  void updateSpool(const source::Source& source);
  /** Waits `wait` after a failed session, or less: until the link's servers answer again after
   *  one of them did not (link_probe.h). */
  net::awaitable<void> backOff(std::chrono::steady_clock::duration wait);
  size_t live() const;
  /** The first member still on the link (nullptr: none). */
  Member* firstLive();
  /** Detaches `m` from this link (it runs on a link of its own). */
  void detach(Member& m, const std::string& why);
  /** Hands a stopped member's pipeline back (on_stopped_) once its sink is gone. */
  void releaseStopped(Member& m);
  /** Stops `m`'s pipeline for good (another writer owns its marker). */
  void retire(Member& m, const Error& why);
  /** A member whose pipeline was stopped: drain, checkpoint, leave. */
  net::awaitable<Status> leave(Member& m, const source::Source& source);
  /**
   * Multi-member links: detaches members that hold the others back (failed, paused while others
   * are not, over their limits or silent for longer than detach_after). Returns a fatal error
   * for a single member whose sink failed.
   */
  Status superviseMembers(bool snapshot);
  /** True while some live member is over its limits or paused (the link must wait). */
  bool mustWait(bool snapshot) const;
  net::awaitable<Status> waitForMembers(bool snapshot);

  // checkpoints
  bool needWholeImage(const Member& m) const;
  bool anyNeedsWholeImage() const;
  Checkpoint makeCheckpoint(const source::Source& source, Pipeline& p);
  void beginDeltaCheckpoint(const source::Source& source);
  void finishDeltaCheckpointsIfAnswered();
  net::awaitable<Status> drain(Member& m, std::chrono::steady_clock::time_point deadline);
  net::awaitable<Status> checkpointAfterMarker(const source::Source& source,
                                               std::vector<Member*> which);
  void checkpointNow(const source::Source& source, Member& m, const std::string& marker, bool whole,
                     const std::shared_ptr<const std::vector<source::ExpiryIndex::Op>>& ops);
  void closeGroups(const source::Source& source);
  void updateLag(const source::Source& source);

  // SnapshotConsumer
  net::awaitable<Status> beginSnapshot(const source::Position& at, uint64_t total_bytes) override;
  net::awaitable<Status> snapshotUnit(const source::ResolvedUnit& unit) override;
  void snapshotProgress(uint64_t keys_announced, uint64_t bytes) override;
  net::awaitable<Status> endSnapshot() override;
  void reportProgress(bool final);

  net::any_io_executor ex_;
  config::ConfigConstSharedPtr config_;
  const config::ClusterConfig& source_cluster_;
  const clock::Clock& clock_;
  Limits limits_;
  std::vector<Pipeline*> pipelines_;  // the members (across sessions)
  MemberFn on_detach_;
  MemberFn on_stopped_;
  clock::ClusterClock source_clock_;
  source::ExpiryIndex index_;
  std::string shard_;  // the node of this session ("host:port"): the metrics' shard label
  std::optional<RedisEndpoint> source_node_;  // the node the last session attached to (probes)
  std::optional<source::Position> resume_at_;
  int resume_db_ = 0;
  /** Where the stream last carried data (Checkpoint::data_offset/data_db): of the checkpoint the
   *  link resumes from, and of what the link consumed last (kept across sessions). */
  struct DataMark {
    std::string replid;
    uint64_t offset = 0;
    int db = 0;
  };
  DataMark resume_data_;
  DataMark data_end_;

  Members members_;  // this session's
  source::Source* live_source_ = nullptr;
  std::shared_ptr<RateLimiter> read_limiter_;           // updateReadLimit()
  source::RedisShardSource* limited_source_ = nullptr;  // the session's, for updateReadLimit()
  std::atomic<bool> stopping_ = false;  // also read by the migration guard (another thread)
  bool checkpoint_due_ = false;
  bool reading_source_ = false;
  bool ack_requested_ = false;
  bool member_leaving_ = false;
  bool repairs_wanted_ = false;  // a sink asked for copies to be read back (repairWanted)
  std::string source_role_;      // the session node's role ("master", "slave")
  std::unique_ptr<RedisConnection> repair_conn_;  // restoreCopies' reads (this session's node)
  bool master_moved_ = false;  // the session ended because the Sentinels switched the master
  Notify stop_wake_;
  Notify ack_wake_;
  Notify sink_wake_;  // a member's sink ended
  std::chrono::steady_clock::time_point last_checkpoint_{};
  std::chrono::steady_clock::time_point last_report_{};
  std::chrono::steady_clock::time_point snapshot_started_{};
  std::chrono::steady_clock::time_point last_spool_update_{};
  /** During a full sync of a Redis Cluster shard: the slots it owned when the snapshot began
   *  (MigrationGuard::beforeSnapshot); keys of other slots are checked one by one. */
  std::optional<std::bitset<16384>> snapshot_owned_;
  uint64_t received_offset_ = 0;
  struct Arrival {
    uint64_t end_offset;  // stream offset just past the bytes of one read
    std::chrono::steady_clock::time_point at;
  };
  std::deque<Arrival> arrivals_;
  SourceHead head_;             // the source's own offset (watchHead)
  std::string applied_replid_;  // the history the members' applied offsets belong to
  std::optional<source::Position> snapshot_at_;  // the running full sync's position
  uint64_t last_reported_bytes_ = 0;  // snapshot bytes read, as updateFromHead last saw them
  std::chrono::steady_clock::time_point last_snapshot_bytes_at_{};  // when they last grew
  bool head_refused_logged_ = false;
  std::mt19937_64 rng_;
};

}  // namespace xdcr::replicator
