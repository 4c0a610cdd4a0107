#pragma once
// The source side of every event's meaning (expiry-semantics.md §2, §5): one stream entry in,
// its events out, resolved against the source's own state and judged for no target.
//
//  - tracks the source db (SELECT);
//  - resolves the deadlines that depend on source state (in-place writes: the key's current
//    deadline; RENAME/COPY/MOVE: the other key's) from the expiry index, and keeps the index
//    equal to the source's deadlines;
//  - classifies each key of a DEL/UNLINK as an expiration (its deadline had passed on the
//    source's clock) or a deletion, with tombstones so that a second DEL of an expired key is a
//    no-op (Event::pass = false);
//  - records the deadlines of a snapshot's keys;
//  - keeps the deadlines of hash fields (FieldDeadlineIndex), so that the HDEL a source sends
//    when a field expires is classified as an expiration (docs/hash-field-expiry.md H6).
//
// One per source shard, shared by every pipeline reading that shard (fan-out): what it decides
// is the same for every target. What a pipeline makes of it (key space, drop_*, strip_ttl, the
// clamp) is filters::EventFilter's and the sink's. Not thread-safe; one strand.

#include <string>

#include "clock/clock.h"
#include "common/logging.h"
#include "source/event.h"
#include "source/expiry_index.h"
#include "source/field_index.h"
#include "source/rdb_value.h"

namespace xdcr::source {

class Resolver {
 public:
  Resolver(ExpiryIndex& index, const clock::ClusterClock& source_clock)
      : index_(index), source_clock_(source_clock) {}

  /** Decodes and resolves one entry into `out` (its events reuse out's vectors). */
  void resolve(const Entry& entry, Change& out) { resolve(entry, out, source_clock_.localNowMs()); }
  /**
   * The same, judged at `local_ms` (this host's wall clock, read by the caller once for many
   * entries: reading it costs ~55-140 ns on the machines measured, 12 % of a drain's CPU when
   * read three times per unit).
   */
  void resolve(const Entry& entry, Change& out, int64_t local_ms);
  /** One key of a snapshot: a create with the deadline the RDB holds (0 = none). */
  void resolveSnapshotKey(int db, std::string_view key, int64_t expire_ms,
                          const RdbPayload& payload, Change& out);

  /** The source db in effect at the current stream position (persisted with checkpoints). */
  int currentDb() const { return db_; }
  void setCurrentDb(int db) { db_ = db; }
  ExpiryIndex& index() { return index_; }
  const FieldDeadlineIndex& fieldIndex() const { return fields_; }

 private:
  void resolveKeyEvent(Change& c, Event& ev, int64_t source_now);
  /** Keeps fields_ equal to the source's field deadlines after `c`; classifies a field
   *  expiry's HDEL (and Valkey's UNLINK of the hash it emptied) as an expiration. */
  void trackFields(const Entry& entry, Change& c, int64_t source_now);

  ExpiryIndex& index_;
  FieldDeadlineIndex fields_;
  // The hash whose last field an HDEL just expired: Valkey then UNLINKs it in the same MULTI,
  // which is part of the expiration (server-versions-notes.md §4).
  int emptied_db_ = -1;
  std::string emptied_key_;
  rdb::Value value_;  // a snapshot hash with field TTLs, decoded (reused)
  const clock::ClusterClock& source_clock_;
  int db_ = 0;
  LogRateLimiter problem_log_;
};

}  // namespace xdcr::source
