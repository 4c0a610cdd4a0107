#pragma once
// The Sink of a Redis Cluster target (type: redis_cluster). The same EventFilter and Applier as
// the standalone RedisSink (so the expiry contract is one code path); what differs is where the
// commands go. Each unit's commands are split by the slot of their keys and handed to
// ClusterTarget (one pipelined connection per master, MOVED/ASK followed, nothing acknowledged
// that the target did not apply):
//
//  - a command whose keys share a slot goes to that slot; a MULTI ... EXEC (a source transaction,
//    or an entry the applier made atomic) stays one transaction per slot. One that spans slots
//    is split into one transaction per slot — atomic per slot, not across slots — and counted in
//    xdcr_cross_slot_splits_total (as is a multi-key command split per slot, below). A cluster
//    source's transactions are single-slot; only a standalone source, or a key_rewrite that
//    drops hash tags, produces such splits.
//  - DEL/UNLINK/MSET/MSETNX over several slots are split per slot. Any other command whose keys
//    span slots (RENAME a b, SMOVE, *STORE, ...) cannot run on a cluster: it is not written,
//    counted in xdcr_target_write_failures_total{reason="cross_slot"} and logged.
//  - FLUSHALL/FLUSHDB (replicate_flush), FUNCTION and SCRIPT go to every master; other keyless
//    commands (PUBLISH) to one.
//  - The target-loss marker is one key per master, in that master's lowest slot
//    (`__xdcr_marker__:<pipeline>:{<tag>}`), written in order after everything on that master.
//  - Replay stamps are per slot (`__xdcr_marker__:<pipeline>:applied:{<tag>}`), in the same
//    MULTI/EXEC as the replay-unsafe commands of that slot; after a crash the replay skips, per
//    slot, what the target already applied.
//  - Copies that ended before a later write (expiry-semantics.md §12) are watched as on a
//    standalone target: the applier's watches follow their commands into the parts of their
//    slot, ClusterTarget hands the replies back (PartWatch), and a restored copy's record lives
//    in its key's slot (`__xdcr_marker__:<pipeline>:restored:{<tag>}`), written in one
//    MULTI/EXEC with the document.
//
// Only db 0 exists on a cluster (validation refuses a dbs map into another db).

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "clock/clock.h"
#include "common/logging.h"
#include "common/resp.h"
#include "common/stats.h"
#include "config/config.h"
#include "filters/event_filter.h"
#include "filters/key_space.h"
#include "target/applier.h"
#include "target/cluster_target.h"
#include "target/copy_repair_book.h"
#include "target/max_ttl.h"
#include "target/sink.h"

namespace xdcr::target {

class ClusterSink final : public Sink {
 public:
  /** `instance`: the pipeline's name, or `<name>@<shard>` for one shard of a cluster source
   *  (its markers and replay stamps are its own). */
  ClusterSink(net::any_io_executor ex, const config::PipelineConfig& pipeline,
              const std::string& instance, const config::ClusterConfig& target_cluster,
              filters::KeySpaceConstSharedPtr keys, const MaxTtlPolicy& policy,
              const clock::ClusterClock& target_clock, const clock::Clock& clock,
              const Limits& limits, PipelineStats& stats);

  /** The pipeline's bandwidth limit of what is written to the target, one bucket for every
   *  master (nullptr: none); before connect(). The marker checks' connections are not limited. */
  void setWriteLimiter(std::shared_ptr<RateLimiter> limiter) {
    target_.setWriteLimiter(std::move(limiter));
  }

  // Sink
  /** Connects, and tells the applier what the masters can take (Applier::setTarget). */
  net::awaitable<Status> connect() override;
  net::awaitable<Status> run() override { return target_.run(); }
  void close() override { target_.close(); }
  net::awaitable<Result<MarkerState>> readMarkers(
      const std::vector<std::string>& accepted) override;
  void apply(const source::ResolvedUnit& unit, bool write) override;
  // Stamped per slot, per unit: no group. Before a suspension point the units a stamp covers
  // ask for their read-backs (CopyRepairBook::release).
  void closeGroup(std::string_view /*replid*/) override { book_.release(); }
  size_t groupUnits() const override { return 0; }
  void appendMarker(std::string_view token, uint64_t offset) override;
  void resetOffset(uint64_t offset) override { target_.resetOffset(offset); }
  Status beginSnapshot(bool record_keys) override;
  const SnapshotCounts& snapshotCounts() const override { return counts_; }
  net::awaitable<Result<uint64_t>> deleteStaleKeys(uint64_t offset) override;
  Status endFullSync() override {
    if (FirstSeenStore* fs = applier_.firstSeenStore()) fs->endSweep();
    return Status{};
  }
  void setSlotReplaySkip(std::vector<std::pair<int, uint64_t>> skips) override;
  void capSlotReplaySkip(uint64_t offset) override {
    for (auto& s : slot_skip_) s = std::min(s, offset);
    max_slot_skip_ = std::min(max_slot_skip_, offset);
  }
  void setCompensationMs(int64_t ms) override { applier_.setCompensationMs(ms); }
  std::vector<source::DocumentKey> takeRepairs() override { return book_.take(); }
  void setRepairWanted(std::function<void()> wanted) override {
    book_.setWanted(std::move(wanted));
  }
  void restoreCopies(const source::DocumentRead& read) override;
  bool repairsSettled(uint64_t offset) const override { return book_.settled(offset); }
  uint64_t ackableOffset() const override {
    return std::min(ackedOffset(), book_.firstUnsettled() - 1);
  }
  void setUnconfirmedAfter(uint64_t offset) override { unconfirmed_after_ = offset; }
  void setFirstSeenStore(FirstSeenStore* store) override { applier_.setFirstSeenStore(store); }
  uint64_t ackedOffset() const override { return target_.ackedOffset(); }
  bool drained() const override { return target_.drained(); }
  bool markerSettled() const override { return marker_waits_open_ == 0; }
  bool overLimits(bool snapshot) const override;
  // Counted in units: a checkpoint's marker is answered when every unit up to it is.
  uint64_t committedCommands() const override { return target_.committedUnits(); }
  uint64_t answeredCommands() const override { return target_.answeredUnits(); }
  double stalledSeconds() const override { return target_.stalledSeconds(); }
  net::awaitable<void> waitProgress(std::chrono::steady_clock::duration d) override {
    return target_.waitProgress(d);
  }

  /** The marker key of master `m` of the slot map in force. */
  std::string markerKeyFor(size_t m) const;

 private:
  /** The commands of one slot (or keyless destination) within one group. */
  struct Slice {
    int slot = 0;  // kBroadcast / kAnyNode for keyless commands
    std::string bytes;
    size_t commands = 0;
    bool unsafe = false;         // holds a command whose replay is not idempotent
    std::string_view first_key;  // (views scratch_)
    bool multi_key = false;      // writes more than one key
    /** Watched commands in it: (its index among the slice's commands, the watch's index in
     *  unit_watches_). */
    std::vector<std::pair<uint32_t, size_t>> watched;
    void noteKey(std::string_view key) {
      if (first_key.empty()) {
        first_key = key;
      } else if (key != first_key) {
        multi_key = true;
      }
    }
  };
  static constexpr int kBroadcast = -1;
  static constexpr int kAnyNode = -2;

  /** This pipeline's marker keys holding one of `accepted` on the master `conn` is connected
   *  to, (key, token): a bounded SCAN, stopping at the first with `first_only`. */
  net::awaitable<Result<std::vector<std::pair<std::string, std::string>>>> scanMarkers(
      RedisConnection& conn, const std::vector<std::string>& accepted, bool first_only);
  /** Fills state.unmarked (uptime, promoted) for the masters not `marked` and
   *  state.marker_keys_by_token over every master. */
  net::awaitable<Status> readUnmarked(const std::vector<std::string>& accepted,
                                      const std::vector<bool>& marked, MarkerState& state);
  /** A marker of this pipeline holding one of `accepted` anywhere on the master `conn` is
   *  connected to (a bounded SCAN; nullopt: none found). */
  net::awaitable<Result<std::optional<std::string>>> findMarker(
      RedisConnection& conn, const RedisEndpoint& endpoint,
      const std::vector<std::string>& accepted);
  /** The key of the record of a restored copy of `key` (in `key`'s slot). */
  std::string recordKeyFor(std::string_view key) const;
  /** Maps the applier's watches of the unit in scratch_ to its commands (raw_watches_). */
  void prepareWatches();
  /** The watch of a slice about to be appended as a part (`wrapped`: in MULTI/EXEC, its EXEC
   *  the part's reply `commands - 1`); nullptr when nothing in it is read. */
  std::shared_ptr<ClusterTarget::PartWatch> sliceWatch(const Slice& s, bool wrapped,
                                                       size_t commands);
  /** This pipeline's keys on the master `conn` is connected to that match `pattern` (a bounded
   *  SCAN). */
  net::awaitable<Result<std::vector<std::string>>> scanKeys(RedisConnection& conn,
                                                            const std::string& pattern);
  /** The records of restored copies on the master `conn` is connected to, into book_; checks
   *  first (on `probe_slot`'s record key) that the target lets guards and records be read, and
   *  turns the copy watches off with a warning when it does not. */
  net::awaitable<Status> readRecords(RedisConnection& conn, int probe_slot);
  /** Routes the applier's output for one unit (scratch_) to the target. */
  void route(const source::ResolvedUnit& unit, bool write);
  Slice& slice(int slot);
  /** Adds one command (args views scratch_) to the group being routed. */
  void addCommand(std::string_view raw, const std::vector<std::string_view>& args);
  void flushGroup(const source::ResolvedUnit& unit, bool write, bool transaction);

  std::string label_;
  const config::PipelineConfig& pipeline_;
  const config::ClusterConfig& target_cluster_;
  const Limits& limits_;
  PipelineStats& stats_;
  filters::EventFilter filter_;
  Applier applier_;
  ClusterTarget target_;
  std::string marker_prefix_;            // "__xdcr_marker__:<pipeline>:"
  std::string stamp_prefix_;             // "__xdcr_marker__:<pipeline>:applied:"
  std::vector<std::string> own_tokens_;  // marker tokens this sink wrote (the last few)
  std::vector<std::pair<std::string, std::optional<std::string>>> last_markers_;
  source::Change judged_;
  std::string scratch_;        // the applier's output for one unit
  std::vector<Slice> slices_;  // reused
  size_t used_slices_ = 0;
  bool split_ = false;   // the group holds a multi-key command split per slot
  int selected_db_ = 0;  // the db the applier's commands are for (SELECT it emitted)
  std::vector<resp::ArgSpan> spans_;
  std::vector<std::string_view> args_;
  std::vector<uint16_t> key_pos_;
  std::string reencoded_;
  std::vector<uint64_t> slot_skip_;  // per slot: replay-unsafe writes up to here are applied
  uint64_t max_slot_skip_ = 0;       // the greatest of slot_skip_
  // Units after this offset that a slot's stamp skips were applied by an agent that may not
  // have acted on their replies (setUnconfirmedAfter): their watchable keys are read back.
  uint64_t unconfirmed_after_ = UINT64_MAX;
  std::vector<source::DocumentKey> watchable_;  // (reused)
  // Copies that ended before a later write (§12).
  const clock::ClusterClock& target_clock_;
  CopyRepairBook book_;
  std::string record_prefix_;  // "__xdcr_marker__:<pipeline>:restored:" (+ "{<tag>}")
  std::vector<Applier::Watch> unit_watches_;  // the unit being routed's
  /** (the watched command's index among the unit's commands, its index in unit_watches_),
   *  ascending; next_watch_ the next to meet while routing. */
  std::vector<std::pair<size_t, size_t>> raw_watches_;
  size_t next_watch_ = 0;
  size_t raw_index_ = 0;      // the command being routed, among the unit's
  uint64_t unit_offset_ = 0;  // the end offset of the unit being routed
  uint64_t last_offset_ = 0;  // of the last unit applied
  /** Routing a restored copy: not skipped by a slot's replay stamp, and its EXEC's reply says
   *  whether it was written (restore_key_, restore_reason_). */
  bool restoring_ = false;
  source::DocumentKey restore_key_;
  RepairReason restore_reason_ = RepairReason::ExpiredBeforeWrite;
  uint64_t restore_write_offset_ = 0;  // the write that asked for it (CopyRepairBook::sent)
  bool copy_watch_refused_said_ = false;
  // The last marker's WAIT 1 per master (appendMarker): the checkpoint waits until each found
  // a replica caught up, or kMarkerReplicaPatience passed.
  const clock::Clock& clock_;
  int marker_waits_open_ = 0;
  uint64_t marker_epoch_ = 0;
  std::chrono::steady_clock::time_point marker_since_{};
  std::vector<std::string> wait_given_up_;  // masters whose replica did not catch up in time
  LogRateLimiter wait_log_;
  /** Appends `WAIT 1` for master `m`'s marker slot, read by onMarkerWait. */
  void appendMarkerWait(int slot, const std::string& master);
  void onMarkerWait(int slot, const std::string& master, uint64_t epoch,
                    const resp::ReplyInfo& reply);
  SnapshotCounts counts_;
  LogRateLimiter fail_log_;
  LogRateLimiter conflict_log_;
};

}  // namespace xdcr::target
