#pragma once
// One sink's book of target copies that ended before a later write (expiry-semantics.md §12):
// what its watched writes found gone, what it asked the link to read back, which keys' events a
// restored copy already holds, and the records of restored copies on the target that a replay
// after a crash must honour. The Redis and Redis Cluster sinks keep one each; where a watched
// reply comes from and where records live is theirs (one node, or the slots of a cluster).

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "common/resp.h"
#include "common/stats.h"
#include "source/document_read.h"
#include "source/event.h"
#include "target/applier.h"
#include "target/copy_repair.h"

namespace xdcr::target {

/**
 * The document read back as a snapshot key in `c` (its vectors reused): the pipeline's filters
 * (strip_ttl) and the rules of a create (§4, §8) then decide its deadline, on the target's clock
 * at the write. `payload` holds its value (c.rdb points to it) when the source had the key; the
 * caller keeps it alive while `c` is used.
 */
void documentAsSnapshotKey(const source::SourceDocument& doc, source::RdbPayload& payload,
                           source::Change& c);

class CopyRepairBook {
 public:
  /** `label` names the pipeline and target in messages. */
  CopyRepairBook(std::string label, PipelineStats& stats)
      : label_(std::move(label)), stats_(stats) {}

  /** Called when there are repairs to take (the link takes them at its next unit boundary). */
  void setWanted(std::function<void()> wanted) { wanted_ = std::move(wanted); }

  /**
   * Whether the reply to a watched write says its copy was gone: (type, integer) of the write's
   * reply (or of its element of an EXEC; for an array, its least integer element), `error` the
   * error text of a RENAME, `now_ms` the target's clock when the reply came.
   */
  static bool gone(const Applier::Watch& w, resp::ReplyType type, int64_t integer,
                   std::string_view error, int64_t now_ms);
  /** A watched reply: when gone(), the key (and the other key of a RENAME/COPY/MOVE) is asked
   *  for. `offset`: the end of the unit that wrote it. */
  void onWatched(const Applier::Watch& w, uint64_t offset, resp::ReplyType type, int64_t integer,
                 std::string_view error, int64_t now_ms);
  /** Asks for the document of (db, key), and of every key a later multi-key change linked to
   *  it; not when a copy restored from a read at or past `offset` holds the write already.
   *  `copy_deadline_ms`, `found_at_ms` (target clock, 0: not known): for the journal. */
  void request(int db, const std::string& key, RepairReason reason, uint64_t offset,
               int64_t copy_deadline_ms = 0, int64_t found_at_ms = 0);
  /**
   * A unit ending at `offset_end` that a replay does not write (the target's replay stamp covers
   * it) was applied by an agent that may have stopped before it acted on its replies: the keys
   * a write of it could have watched or guarded (`keys`: Applier::watchableKeys) are asked for
   * as UnconfirmedBeforeRestart, without waking the link — release() does, once per batch of
   * such units, so that they are read back in batches of copy_read_batch, not one a unit.
   */
  void requestUnconfirmed(const std::vector<source::DocumentKey>& keys, uint64_t offset_end);
  /** Wakes the link for what requestUnconfirmed() asked for. */
  void release() {
    if (!repairs_.empty() && !signalled_ && wanted_) {
      signalled_ = true;
      wanted_();
    }
  }
  /** The keys asked for since the last take. */
  std::vector<source::DocumentKey> take();

  /**
   * Whether every repair a write at or before `offset` asked for is on the target: read back,
   * written, and answered (or given up as unrecoverable). A checkpoint at `offset` waits for it:
   * a request lives in this process only, and a replay from a later checkpoint would never see
   * the write that found the copy gone again.
   */
  bool settled(uint64_t offset) const { return firstUnsettled() > offset; }
  /**
   * The offset of the oldest write whose repair is not on the target yet (UINT64_MAX: none).
   * The source is ACKed below it (Sink::ackableOffset): a WAIT on the source then means the
   * whole document is on the target, not a fragment waiting for its restore.
   */
  uint64_t firstUnsettled() const {
    // (Asked on the read loop's path while a checkpoint waits: the oldest of each set, no scan.)
    uint64_t first = asked_offsets_.empty() ? UINT64_MAX : *asked_offsets_.begin();
    if (!in_flight_.empty()) first = std::min(first, *in_flight_.begin());
    return first;
  }
  /** A restored document for a write at `write_offset` was appended (claimed): in flight until
   *  landed() says the target answered it. */
  void sent(uint64_t write_offset) { in_flight_.insert(write_offset); }
  void landed(uint64_t write_offset) {
    if (auto it = in_flight_.find(write_offset); it != in_flight_.end()) in_flight_.erase(it);
  }

  /** The stream passed `offset_end`; `acked`: the target answered everything up to it. */
  void passed(uint64_t offset_end, uint64_t acked) {
    skips_.passed(offset_end);
    if (multi_keys_.size() > 0) multi_keys_.prune(acked);
  }
  /** Drops the events of `c` (a unit ending at `offset_end`) a restored copy holds already; a
   *  change that reads or links a restored key to another is dropped whole and its keys are
   *  read back again. */
  void dropRestored(source::Change& c, uint64_t offset_end);
  /** Logs the keys of a change that links several (MultiKeyLog). */
  void logMultiKey(const source::Change& c, uint64_t offset_end);

  /** Why a document was asked for: the first write that found its copy gone. */
  struct Asked {
    RepairReason reason = RepairReason::ExpiredBeforeWrite;
    uint64_t write_offset = 0;
    int64_t copy_deadline_ms = 0;
    int64_t found_at_ms = 0;
  };
  /** A document read back: why it was asked for, and it is no longer asked for; nullopt when
   *  this sink did not ask for it (another pipeline of the link did). */
  std::optional<Asked> claim(const source::DocumentKey& key);
  /** The target's user may not run HEXISTS: the field guard (S-11) is off. Says so once, where
   *  the target keeps field TTLs (`field_ttls`); elsewhere no such guard is ever written. */
  void fieldGuardRefused(std::string_view error, bool field_ttls);
  /** Counts and names a copy that could not be restored. */
  void unrecoverable(const source::DocumentKey& key, const std::string& why);
  uint64_t& restoredCounter(RepairReason reason);
  /** Written to the target with a record (`field` of hash `record_key`; "": none, a target
   *  whose writes are all idempotent) saying it holds the stream up to `x`: the key's events up
   *  to x are skipped from now on. Noted in the pipeline's journal (common/restore_journal.h)
   *  with `asked`, `now_ms` (target clock) and whether the source still had the key. */
  void restored(int db, std::string_view key, uint64_t x, std::string record_key,
                const Asked& asked, int64_t now_ms, bool source_had_it);
  /** A record read from the target when a session starts: a replay skips its key's events up
   *  to `until`. False when the field is not one of ours. */
  bool loadRecord(const std::string& record_key, const std::string& field, uint64_t until);
  size_t records() const { return records_.size(); }
  /** The distinct record keys of the records this book knows of. */
  std::vector<std::string> recordKeys() const {
    std::vector<std::string> keys;
    for (const Record& r : records_) {
      if (std::find(keys.begin(), keys.end(), r.record_key) == keys.end()) {
        keys.push_back(r.record_key);
      }
    }
    return keys;
  }
  /** At a marker written at `marker_offset`: the records a durable checkpoint has passed (the
   *  one before the previous marker), grouped by record key, to delete; forgotten here. */
  std::vector<std::pair<std::string, std::vector<std::string>>> prunable(uint64_t marker_offset);

  /** A session starts: skips and records come from the target again. */
  void beginSession() {
    skips_.clear();
    records_.clear();
  }
  /** A new history (a full sync): nothing of the old one applies. */
  void clear();

 private:
  struct Record {
    std::string record_key;
    std::string field;  // "<db>:<key>"
    uint64_t until;
  };
  std::string label_;
  PipelineStats& stats_;
  std::function<void()> wanted_;
  RepairSkips skips_;
  MultiKeyLog multi_keys_;
  std::vector<source::DocumentKey> repairs_;        // to take
  std::map<source::DocumentKey, Asked> requested_;  // asked for, not yet restored
  std::multiset<uint64_t> asked_offsets_;           // requested_'s write offsets
  std::multiset<uint64_t> in_flight_;    // write offsets of restores the target has not answered
  bool signalled_ = false;               // wanted_ was called for what repairs_ holds
  std::vector<Record> records_;          // on the target, not yet pruned
  uint64_t prune_upto_ = 0;              // records up to here are covered by a durable checkpoint
  uint64_t previous_marker_offset_ = 0;  // the last marker's offset
  LogRateLimiter log_;
  bool field_guard_refused_said_ = false;
};

}  // namespace xdcr::target
