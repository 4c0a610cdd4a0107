#pragma once
// The Sink interface: one pipeline's target.
//
// A Sink owns everything that depends on one target: the pipeline's key space and deletion
// filters (filters::EventFilter, strip_ttl included), the maxTTL clamp on the target's clock,
// the encoding, the pipelined writer and the offset up to which the target has answered, the
// target-loss marker and the replay stamp. It takes ResolvedUnits (source/source.h), the
// snapshot's keys and the stream's units alike, through the same code. replicator/source_link.h
// feeds one Source's units to the Sinks of every pipeline reading it.
//
// A new target kind (a Redis Cluster routed by slot, memcached) implements this interface.
//
// Offsets: every unit is committed with its end offset; ackedOffset() is the offset up to which
// the target has answered every command (never anything it has not acknowledged), which is what
// a checkpoint may cover and what the source is ACKed with.

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/limits.h"
#include "source/document_read.h"
#include "source/event.h"
#include "target/first_seen.h"
#include "target/marker.h"

namespace xdcr::target {

/** What a full sync made of its keys on one target. */
struct SnapshotCounts {
  uint64_t restored = 0;  // RESTOREd
  uint64_t rebuilt = 0;   // written as commands (the target cannot take the payload whole)
  uint64_t expired = 0;   // expired on the source, or clamped into the past: deleted
  uint64_t filtered = 0;  // outside the key space
  uint64_t failed = 0;    // NOT copied: refused by the target, or not writable to it
};

/** The target's bookkeeping keys, read when a session starts. */
struct MarkerState {
  bool present = false;
  std::string marker;  // the target-loss marker's token ("" when absent)
  std::string stamp;   // the replay stamp "<replid>:<offset>" ("" when absent)
  /**
   * A target of several masters (a Redis Cluster): each master's marker, (master address,
   * token or nullopt when absent). When not empty, every one must match the checkpoint, and
   * present/marker are not used.
   */
  std::vector<std::pair<std::string, std::optional<std::string>>> node_markers;
  /** A Redis Cluster target: the replay stamp of every slot that has one, (slot, stamp). */
  std::vector<std::pair<int, std::string>> slot_stamps;
  /**
   * A Redis Cluster target where a master holds no accepted marker: those masters, and for each
   * accepted token how many of this pipeline's marker keys hold it on all masters (what tells
   * a marker a reshard carried away from a master that lost data: markerMovedAway).
   */
  std::vector<UnmarkedMaster> unmarked;
  std::map<std::string, int64_t> marker_keys_by_token;
};

/** What a replay after a restart may skip: the target already applied it (replay stamps). */
struct ReplaySkip {
  uint64_t until = 0;  // every unit ending at or before this offset
  /** A Redis Cluster target: per slot, its replay-unsafe writes ending at or before an offset. */
  std::vector<std::pair<int, uint64_t>> slots;
};

class Sink {
 public:
  virtual ~Sink() = default;

  /** Connects, authenticates and learns what the target accepts. */
  virtual net::awaitable<Status> connect() = 0;
  /** Writes and reads replies until close() or an error (a failed write fails the session). */
  virtual net::awaitable<Status> run() = 0;
  virtual void close() = 0;
  /** Reads the marker and the replay stamp, on a connection of its own. `accepted`: the tokens
   *  the checkpoint accepts (a sink of several masters looks beyond a master's usual marker key
   *  for one of them: a reshard moves marker keys). */
  virtual net::awaitable<Result<MarkerState>> readMarkers(
      const std::vector<std::string>& accepted) = 0;

  /**
   * Judges, encodes and appends one resolved unit (a source transaction stays one transaction).
   * `write` false: the unit is judged (counted) but not written — the replay stamp shows the
   * target applied it before a crash. A snapshot unit is written at the current acknowledged
   * offset (a snapshot stands at the FULLRESYNC offset). Never suspends.
   */
  virtual void apply(const source::ResolvedUnit& unit, bool write) = 0;
  /**
   * Ends an open replay-stamp group with the stamp `<replid>:<end offset of its last unit>`.
   * Called before every suspension point: the writer never sends half a group.
   */
  virtual void closeGroup(std::string_view replid) = 0;
  /** Units in the open group (0: none open). */
  virtual size_t groupUnits() const = 0;
  /** The target-loss marker `token`, in order after everything appended, at `offset`. */
  virtual void appendMarker(std::string_view token, uint64_t offset) = 0;
  /** Sets the acknowledged offset with nothing in flight (after a handshake). */
  virtual void resetOffset(uint64_t offset) = 0;

  /** A full sync starts: counts from zero; `record_keys` (full_sync.delete_stale_keys):
   *  remember them for the stale sweep. Reads what an interrupted full sync left written. */
  virtual Status beginSnapshot(bool record_keys) = 0;
  virtual const SnapshotCounts& snapshotCounts() const = 0;
  /**
   * After the snapshot, before the stream: deletes the target keys of the key space the snapshot
   * lacked (full_sync.delete_stale_keys), or of those only the ones an interrupted full sync had
   * written (target/stale_sweep.h), in order after its writes; returns how many once all is
   * acknowledged (0 without a sweep).
   */
  virtual net::awaitable<Result<uint64_t>> deleteStaleKeys(uint64_t offset) = 0;
  /** The checkpoint after the snapshot is written: a later full sync has nothing to sweep. */
  virtual Status endFullSync() = 0;
  /** The per-slot part of a replay skip (Pipeline::checkMarkers); a sink of one node has none. */
  virtual void setSlotReplaySkip(std::vector<std::pair<int, uint64_t>> /*skips*/) {}
  /** No per-slot skip beyond `offset` (a source failover's fork: past it the offsets are the new
   *  history's, whatever a stamp of the old one says). */
  virtual void capSlotReplaySkip(uint64_t /*offset*/) {}
  /** Skew compensation: ms added to every source deadline (0 = none). */
  virtual void setCompensationMs(int64_t ms) = 0;
  /** max_lifetime's first-seen store (Applier::setFirstSeenStore); a full sync sweeps it: the
   *  keys it did not write are forgotten at endFullSync() (expiry-semantics.md §8.4). */
  virtual void setFirstSeenStore(FirstSeenStore* /*store*/) {}

  /**
   * Target copies that ended before a later write reached them (target/copy_repair.h,
   * expiry-semantics.md §12). The source keys whose documents must be read back, taken (the
   * list is emptied); `wanted` is called when there are some to take, so that the link takes
   * them at its next unit boundary. A sink that never finds one keeps the defaults.
   */
  virtual std::vector<source::DocumentKey> takeRepairs() { return {}; }
  virtual void setRepairWanted(std::function<void()> /*wanted*/) {}
  /**
   * A read of the source at offset X (`read.offset`): the documents of the keys this sink asked
   * for are written after everything appended so far, and their keys' events in units ending
   * at or before X are not written (they are in the documents). Keys that could not be read
   * are counted as unrecoverable and named in the log.
   */
  virtual void restoreCopies(const source::DocumentRead& /*read*/) {}
  /**
   * Whether every repair a write at or before `offset` asked for is on the target (read back,
   * written and answered, or given up as unrecoverable): a checkpoint at `offset` is written
   * only then. A request lives in this process only; a replay from a checkpoint past the write
   * that found the copy gone would never find it again (§12.2 step 5).
   */
  virtual bool repairsSettled(uint64_t /*offset*/) const { return true; }
  /**
   * What the source is ACKed with: ackedOffset(), held below the oldest write whose repair is
   * not on the target yet (§12.2 step 5), so that `WAIT` on the source, and a replica offset
   * equal to the master's, mean the whole documents are on the target.
   */
  virtual uint64_t ackableOffset() const { return ackedOffset(); }
  /**
   * The session resumes from a checkpoint at `offset`: a unit after it that the replay does not
   * write (a replay stamp shows the target applied it) was applied by an agent that may have
   * stopped before it acted on its replies, so the keys its writes could have watched are read
   * back (Applier::watchableKeys, §12.2 step 5). Never called: no unit is such.
   */
  virtual void setUnconfirmedAfter(uint64_t /*offset*/) {}

  virtual uint64_t ackedOffset() const = 0;
  /** Everything appended has been answered. */
  virtual bool drained() const = 0;
  /** The last marker is as durable as the sink makes it (a Redis Cluster target: a replica of
   *  each master has it, or it stopped waiting for one): until then its checkpoint is not
   *  written. */
  virtual bool markerSettled() const { return true; }
  /** Over its unanswered commands/bytes limits: the source must not be read further for it. */
  virtual bool overLimits(bool snapshot) const = 0;
  /** Commands appended so far this session, and how many of them the target has answered. */
  virtual uint64_t committedCommands() const = 0;
  virtual uint64_t answeredCommands() const = 0;
  /** Seconds since the last reply while commands were in flight (0 when idle). */
  virtual double stalledSeconds() const = 0;
  /** Waits until the target answers something (or `d` passes). */
  virtual net::awaitable<void> waitProgress(std::chrono::steady_clock::duration d) = 0;
};

}  // namespace xdcr::target
