#pragma once
// The Sink of a standalone Redis target: the pipeline's EventFilter, the Applier (clamp and
// encoding), the pipelined RedisTarget, the marker and the replay stamp.

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "clock/clock.h"
#include "common/logging.h"
#include "common/stats.h"
#include "config/config.h"
#include "filters/event_filter.h"
#include "filters/key_space.h"
#include "target/applier.h"
#include "target/copy_repair_book.h"
#include "target/max_ttl.h"
#include "target/redis_target.h"
#include "target/sink.h"
#include "target/stale_sweep.h"

namespace xdcr::target {

class RedisSink final : public Sink {
 public:
  /**
   * `target_clock` is the agent's view of the target's clock (the clamp's now); `stats` the
   * pipeline's counters. All references outlive the sink (one session).
   */
  /** `instance`: the pipeline's name, or `<name>@<shard>` for one shard of a cluster source
   *  (its markers and replay stamps are its own). */
  RedisSink(net::any_io_executor ex, const config::PipelineConfig& pipeline,
            const std::string& instance, const config::ClusterConfig& target_cluster,
            filters::KeySpaceConstSharedPtr keys, const MaxTtlPolicy& policy,
            const clock::ClusterClock& target_clock, const clock::Clock& clock,
            const Limits& limits, PipelineStats& stats);

  /** The pipeline's bandwidth limit of what is written to the target (nullptr: none); before
   *  connect(). The marker check's own connection is not limited. */
  void setWriteLimiter(std::shared_ptr<RateLimiter> limiter) {
    target_.setWriteLimiter(std::move(limiter));
  }
  /** Where the keys a full sync writes are recorded until its checkpoint (FullSyncJournal);
   *  before connect(). Without it an interrupted full sync's keys are not swept. */
  void setFullSyncJournal(std::string path);

  // Sink
  /** Connects, and tells the applier what the target server can take (Applier::setTarget). */
  net::awaitable<Status> connect() override;
  net::awaitable<Status> run() override;
  void close() override { target_.close(); }
  net::awaitable<Result<MarkerState>> readMarkers(
      const std::vector<std::string>& accepted) override;
  void apply(const source::ResolvedUnit& unit, bool write) override;
  void closeGroup(std::string_view replid) override;
  size_t groupUnits() const override { return group_units_; }
  void appendMarker(std::string_view token, uint64_t offset) override;
  void resetOffset(uint64_t offset) override { target_.resetOffset(offset); }
  Status beginSnapshot(bool record_keys) override;
  const SnapshotCounts& snapshotCounts() const override { return counts_; }
  net::awaitable<Result<uint64_t>> deleteStaleKeys(uint64_t offset) override;
  Status endFullSync() override;
  void setCompensationMs(int64_t ms) override { applier_.setCompensationMs(ms); }
  void setFirstSeenStore(FirstSeenStore* store) override { applier_.setFirstSeenStore(store); }
  uint64_t ackedOffset() const override { return target_.ackedOffset(); }
  bool drained() const override { return target_.drained(); }
  bool overLimits(bool snapshot) const override;
  uint64_t committedCommands() const override { return target_.committedCommands(); }
  uint64_t answeredCommands() const override { return target_.answeredCommands(); }
  double stalledSeconds() const override { return target_.stalledSeconds(); }
  net::awaitable<void> waitProgress(std::chrono::steady_clock::duration d) override {
    return target_.waitProgress(d);
  }
  std::vector<source::DocumentKey> takeRepairs() override;
  void setRepairWanted(std::function<void()> wanted) override {
    book_.setWanted(std::move(wanted));
  }
  void restoreCopies(const source::DocumentRead& read) override;
  bool repairsSettled(uint64_t offset) const override { return book_.settled(offset); }
  uint64_t ackableOffset() const override {
    return std::min(ackedOffset(), book_.firstUnsettled() - 1);
  }
  void setUnconfirmedAfter(uint64_t offset) override { unconfirmed_after_ = offset; }

 private:
  void applySnapshotKey(const source::Change& c);
  /** A snapshot key's RESTORE or rebuild that the target answered with an error. */
  void snapshotKeyRefused(const std::string& key, int db, const std::string& why);
  /** Redis Sentinel: returns an error (ending run()) once the master moves away from the node
   *  the writer is connected to. */
  net::awaitable<Status> followMaster();

  // Copies that ended before a later write (copy_repair_book.h).
  /** Registers the applier's watches of the unit just committed (`base`: the commands committed
   *  before it) or, for a stamped group's unit, keeps them until closeGroup. */
  void takeWatches(uint64_t base, uint64_t offset_end);
  /** The reply to command `seq`: the watches on it judge whether their copies were there. */
  void onWatchedReply(uint64_t seq, const resp::ReplyInfo& reply);

  struct SinkWatch {
    uint64_t seq = 0;
    uint64_t offset = 0;  // end offset of the unit that wrote it
    Applier::Watch w;
  };
  const clock::ClusterClock& target_clock_;
  std::deque<SinkWatch> watches_;         // by seq
  std::vector<SinkWatch> group_watches_;  // the open group's (seq known at closeGroup)
  CopyRepairBook book_;
  std::string record_key_;    // <marker>:restored: field "<db>:<key>" -> X (a replay skips)
  uint64_t last_offset_ = 0;  // end offset of the last unit committed
  // Units after this offset that are not written were applied by an agent that may not have
  // acted on their replies (setUnconfirmedAfter): their watchable keys are read back.
  uint64_t unconfirmed_after_ = UINT64_MAX;
  std::vector<source::DocumentKey> watchable_;  // (reused)
  bool copy_watch_refused_said_ = false;

  std::string label_;
  const config::PipelineConfig& pipeline_;
  const config::ClusterConfig& target_cluster_;
  const Limits& limits_;
  PipelineStats& stats_;
  filters::EventFilter filter_;
  Applier applier_;
  RedisTarget target_;
  std::string marker_key_;
  std::string stamp_key_;
  std::optional<std::string> last_marker_;  // the marker's value as this sink last left it
  source::Change judged_;  // this pipeline's copy of the change being judged (reused)
  uint64_t group_cmds_ = 0;
  uint64_t group_end_ = 0;
  size_t group_units_ = 0;
  SnapshotCounts counts_;
  bool record_keys_ = false;
  SnapshotKeys snapshot_keys_;
  std::unique_ptr<FullSyncJournal> journal_;  // nullptr: none (setFullSyncJournal)
  SnapshotKeys interrupted_keys_;  // what interrupted full syncs wrote (FullSyncJournal::load)
  LogRateLimiter fail_log_;
  LogRateLimiter conflict_log_;
};

}  // namespace xdcr::target
