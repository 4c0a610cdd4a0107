#pragma once
// Target copies that ended before a later write reached them (expiry-semantics.md §12, issue 27).
//
// A target expires its copy of a key by itself, at the deadline it was given (the source's, or
// the clamp's). A renewal or an in-place write that reaches it after that instant — the pipeline
// paused, the agent stalled or restarted, a partition healed, or the WAN's one-way delay longer
// than what was left of the key's life — finds the copy gone: PEXPIREAT does nothing, INCR
// starts again from 1, HSET leaves a hash of one field. A native replica never loses these (it
// waits for its master's DEL); a mutation of Couchbase XDCR carries the whole document.
//
// The sink notices (the write's own reply, or a guard `EXISTS` in the write's MULTI), the link
// reads the whole document back from the source — `MULTI; DUMP; PEXPIRETIME; …; INFO
// replication; EXEC`, one atomic read at one replication offset X — and the sink writes it
// (`RESTORE … REPLACE`, the deadline the rules give, or DEL when the source no longer has it)
// after everything it has appended; then it drops every later event on that key of a unit
// ending at or before X: those writes are in the document already. The target thus ends, once
// it has applied the stream to any point past X, exactly as if its copy had never ended.
//
// This file holds the pure parts: the requests, the documents, the skips and the log of
// multi-key changes that decides which other keys a repair must take along.

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "source/document_read.h"

namespace xdcr::target {

/** Why a target copy was restored (the label of xdcr_target_copies_restored_total). */
enum class RepairReason : uint8_t {
  ExpiredBeforeWrite,       // the copy reached the source's own deadline before the write
  ClampedBeforeWrite,       // the target's max_ttl or collection policy ended it first
  FieldExpiredBeforeWrite,  // a hash field's copy expired before its renewal (HPEXPIREAT)
  // The target applied a write whose reply could have asked for a repair, and the agent stopped
  // (or its session ended) before it restored the copy: the replay does not write it again (its
  // replay stamp covers it), so its key is read back anyway (§12.2 step 5).
  UnconfirmedBeforeRestart,
};
inline constexpr int kRepairReasonCount = 4;
std::string_view repairReasonName(RepairReason r);

/** A source key whose target copy must be read back (the key as the source stream names it). */
struct CopyRepair {
  int db = 0;
  std::string key;
  RepairReason reason = RepairReason::ExpiredBeforeWrite;
  uint64_t offset = 0;  // end offset of the unit whose write found the copy gone
};

/**
 * Per sink: the keys restored from a read at offset X, whose events in units ending at or
 * before X are already in the restored document and must not be written again. Empty on the
 * hot path (one branch per unit).
 */
class RepairSkips {
 public:
  void add(int db, std::string_view key, uint64_t until);
  /** True when the event on (db, key) of a unit ending at `offset_end` is in a restored copy. */
  bool covers(int db, std::string_view key, uint64_t offset_end) const;
  /** The stream has passed `offset_end`: entries no unit can need any more are dropped. */
  void passed(uint64_t offset_end);
  bool empty() const { return skips_.empty(); }
  size_t size() const { return skips_.size(); }
  /** The entry of (db, key), if any. */
  std::optional<uint64_t> until(int db, std::string_view key) const;
  void clear() {
    skips_.clear();
    max_until_ = 0;
  }

  static std::string field(int db, std::string_view key);

 private:
  std::unordered_map<std::string, uint64_t> skips_;  // field(db, key) -> X
  uint64_t max_until_ = 0;
  mutable std::string scratch_;
};

/**
 * Per sink: the deadline the applier last gave each copy in a collection with max_ttl or a
 * policy (where the source's deadline does not tell it), so that a write after it can be
 * guarded. An open-addressing table of a 64-bit key hash and a 32-bit deadline second (rounded
 * up, never early): 12 bytes a slot, at most 3/4 full.
 */
class CopyDeadlines {
 public:
  /** `deadline_ms` 0: no deadline. */
  void set(uint64_t hash, int64_t deadline_ms);
  /** The deadline (ms, a whole second), 0 = none; nullopt = never written (or forgotten). */
  std::optional<int64_t> find(uint64_t hash) const;
  void erase(uint64_t hash);
  void clear();
  size_t size() const { return live_; }
  size_t bytes() const { return hashes_.size() * (sizeof(uint64_t) + sizeof(uint32_t)); }

 private:
  static uint64_t stored(uint64_t hash) { return hash == 0 ? 1 : hash; }  // 0 marks empty
  size_t slotOf(uint64_t h) const;
  void grow();
  std::vector<uint64_t> hashes_;
  std::vector<uint32_t> seconds_;
  size_t live_ = 0;
};

/**
 * Per sink: the keys of recent multi-key changes (RENAME, LMOVE, SUNIONSTORE, a MULTI of
 * several keys, …) with their units' end offsets, while they may still be unanswered. When a
 * copy is found gone at offset o, a multi-key change after o that read or wrote the key may
 * have carried its fragment into another key: the repair takes those keys along (closure()).
 */
class MultiKeyLog {
 public:
  using Key = std::pair<int, std::string>;
  void add(uint64_t offset_end, std::vector<Key> keys);
  /** Entries that ended at or before `acked` cannot matter for a copy found gone later. */
  void prune(uint64_t acked);
  /** `start` and every key linked to it by a logged change ending after `after`, in order. */
  std::vector<Key> closure(const Key& start, uint64_t after) const;
  size_t size() const { return entries_.size(); }
  void clear() { entries_.clear(); }

 private:
  struct Entry {
    uint64_t offset_end;
    std::vector<Key> keys;
  };
  std::deque<Entry> entries_;
};

}  // namespace xdcr::target
