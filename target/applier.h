#pragma once
// The applier: filtered events in, target RESP commands out, with the maxTTL clamp applied
// (expiry-semantics.md §4). Deadlines are always written absolute (SET ... PXAT, PEXPIREAT,
// RESTORE ... ABSTTL), never as relative TTLs.
//
// The clamp is computed here against the agent's view of the target's clock
// (clock::ClusterClock: local clock + measured offset), so each write is ONE command carrying its
// final deadline: atomic on the target, no unclamped intermediate state, no extra round trip.
// A write whose final deadline is already past is sent as DEL (expired on arrival: never visible
// on the target). A source MULTI/EXEC stays one MULTI/EXEC; an entry that needs more than one
// target command (an in-place write plus its clamp, RENAME plus its deadline) is wrapped in its
// own MULTI/EXEC so no reader sees it half done.
//
// Not thread-safe; one per pipeline session.

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "clock/clock.h"
#include "common/logging.h"
#include "common/server_info.h"
#include "common/stats.h"
#include "filters/key_space.h"
#include "source/event.h"
#include "source/rdb_value.h"
#include "target/copy_repair.h"
#include "target/first_seen.h"
#include "target/max_ttl.h"

namespace xdcr::target {

/** Says at connect what the target is and what follows for snapshots and field TTLs. */
void logTargetServer(const std::string& label, const ServerInfo& server);

class Applier {
 public:
  Applier(const MaxTtlPolicy& policy, const filters::KeySpace& keys,
          const clock::ClusterClock& target_clock, PipelineStats& stats);

  /**
   * Starts a unit: one entry, or a source MULTI ... EXEC block (`transaction`). `local_ms`: this
   * host's wall clock as the source read it for the unit (ResolvedUnit::local_ms), so that the
   * target's now is not read again per unit; 0 = read the clock.
   */
  void beginUnit(bool transaction, int64_t local_ms = 0);
  /**
   * Translates one judged change of the current unit (filters::EventFilter). A snapshot key
   * (Effect::SnapshotKey, a create, §4) becomes `RESTORE key clamp(E) payload REPLACE [ABSTTL]
   * [IDLETIME s] [FREQ f]`, the payload being the raw RDB value with its type, the RDB version
   * and a CRC64, or DEL when the clamped deadline has already passed (lastSnapshotWrite()).
   */
  void apply(const source::Change& change);
  /** Appends the unit's target commands to `out`; returns how many commands (= replies). */
  size_t finishUnit(std::string& out);

  enum class SnapshotWrite {
    Restored,  // RESTORE
    Rebuilt,   // written as commands (rebuild.cc): the target cannot take the payload
    Expired,   // DEL: its deadline (or every field's) had passed
    Failed,    // nothing written: lastSnapshotError() says why
  };
  /** What the last snapshot key applied became. */
  SnapshotWrite lastSnapshotWrite() const { return snapshot_write_; }
  const std::string& lastSnapshotError() const { return snapshot_error_; }

  /**
   * The target server (INFO server) and its proto-max-bulk-len, known once connected. A
   * snapshot key is RESTOREd when the target takes its payload whole; otherwise — a target
   * older than the source, a payload over the bulk limit, field TTLs to translate or strip —
   * it is rebuilt from commands (hash-field-expiry.md, rebuild.cc). Field deadlines are left
   * out, and counted, where the target cannot store them. `label` names the pipeline and target
   * in messages.
   */
  void setTarget(const ServerInfo& server, uint64_t max_bulk, std::string label) {
    server_ = server;
    max_bulk_ = max_bulk;
    label_ = std::move(label);
  }
  const ServerInfo& targetServer() const { return server_; }
  /**
   * The target-loss marker (target/marker.h): `SET key token GET` in target db 0, in order after
   * everything before it. Call between beginUnit(false) and finishUnit().
   */
  void appendMarker(std::string_view key, std::string_view token);
  /** The unit so far writes a command whose replay is not idempotent (isReplayUnsafe). */
  bool unitReplayUnsafe() const { return unit_unsafe_; }
  /**
   * The replay stamp (exactly-once replay of replay-unsafe units): instead of finishUnit(),
   * appends the unit to a stamped group — one MULTI (opened by the group's first unit), the
   * units' commands without MULTI/EXEC of their own (the group's makes them atomic), then, at
   * closeGroup(), `SET stamp_key stamp_value` (target db 0) and EXEC. So the target holds the
   * stamp exactly when it holds the units, and a run of consecutive units costs one MULTI, one
   * SET and one EXEC, not three commands each. Returns the commands appended.
   */
  size_t appendUnitToGroup(std::string& out);
  bool groupOpen() const { return group_open_; }
  /** Ends an open group with the stamp; returns the commands appended (0 if none was open). */
  size_t closeGroup(std::string& out, std::string_view stamp_key, std::string_view stamp_value);
  /** `DEL key` in target db `db` (full_sync.delete_stale_keys). Same calling rules. */
  void appendDelete(int db, std::string_view key);

  /**
   * Target copies that ended before a later write (copy_repair.h, expiry-semantics.md §12). A
   * write whose reply tells whether the target's copy was still there is *watched*: the
   * renewal's own PEXPIREAT (0: gone), a guard `EXISTS k` ahead of an in-place write, SET
   * KEEPTTL or PERSIST in that entry's MULTI (0: gone) where the copy may have ended, RENAME's
   * "no such key", COPY's and MOVE's 0. A write near its copy's deadline without a guard is
   * watched too (Late): gone if answered at or past that deadline. A hash field's renewal
   * (HPEXPIREAT, HPERSIST) is watched as FieldRenewal: a code -2 (no such field, or no such
   * key) in its reply says a field's copy is gone.
   */
  enum class WatchKind : uint8_t { Renewal, Guard, Rename, CopyMove, Late, FieldRenewal };
  struct Watch {
    WatchKind kind = WatchKind::Guard;
    RepairReason reason = RepairReason::ExpiredBeforeWrite;
    int db = 0;  // the source key whose copy the reply judges
    std::string key;
    int from_db = 0;  // RENAME/COPY/MOVE: the other key (read back along with it)
    std::string from_key;
    int64_t deadline_ms = 0;  // Late, Guard: the copy's deadline on the target's clock (0: ?)
    /** finishUnit(): which of the commands it returned answers (an EXEC, or the write itself).
     *  appendUnitToGroup(): unused; the group's EXEC answers (Sink::closeGroup knows which). */
    size_t reply = 0;
    int element = -1;  // the index in that EXEC's array; -1: the reply itself
    bool in_group = false;
  };
  /** The watches of what the last finishUnit() or appendUnitToGroup() appended. */
  std::vector<Watch>& watches() { return done_watches_; }
  /**
   * The source keys of `judged` whose write apply() could have watched or guarded, whatever
   * the copies' deadlines and the time (a superset of what it watches: a replay after a crash
   * cannot know what a guard or a late watch decided then, §12.2 step 5), appended to `out`:
   * a renewal's or PERSIST's key; RENAME's, COPY's and MOVE's two keys; an in-place write's,
   * SET KEEPTTL's and a field write's keys where the copy can have a deadline (the source's, or
   * the collection's max_ttl or policy); a *STORE's destination and the keys it reads with a
   * deadline (S-13). A change that qualifies gives all its keys (a fragment it carried along).
   * Nothing when copies are not watched.
   */
  void watchableKeys(const source::Change& judged, std::vector<source::DocumentKey>& out);
  /**
   * Watches and guards on (off: nothing is watched, as before issue 27). `margin_ms`: an
   * unclamped copy whose deadline is within it of the write's now is guarded (it may end
   * before the target runs the write); past it, up to `late_ms`, the write is watched Late.
   */
  void setCopyWatch(bool on, int64_t margin_ms, int64_t late_ms) {
    watch_copies_ = on;
    guard_margin_ms_ = margin_ms;
    late_horizon_ms_ = late_ms;
  }
  bool watchesCopies() const { return watch_copies_; }
  /** The HEXISTS guard of a hash field changed in place (S-11) on or off: off where the
   *  target's user may not run HEXISTS (a guard refused inside a MULTI discards its write). */
  void setFieldGuards(bool on) { field_guards_ = on; }
  /**
   * A target copy read back from the source at offset `x` (copy_repair.h): in its own MULTI,
   * the document written as a snapshot key is (`judged`: Effect::SnapshotKey, judged by the
   * pipeline's filters: RESTORE … REPLACE with the deadline the rules give, or DEL when it has
   * passed) or, for a key the source no longer has, DEL; and `HSET record_key <db>:<key> x`
   * (target db 0): what a replay after a crash reads to skip the key's writes up to `x`.
   * Call between beginUnit(true) and finishUnit(). False, with nothing appended, when the
   * document cannot be written to this target (lastSnapshotError() says why).
   */
  bool appendRestoredCopy(const source::Change& judged, bool exists, std::string_view record_key,
                          uint64_t x);
  /** `HDEL record_key fields…` in target db 0 (records a durable checkpoint has passed), or
   *  `DEL record_key` when `fields` is empty. Same calling rules as appendMarker. */
  void appendRecordPrune(std::string_view record_key, const std::vector<std::string>& fields);

  /** Bytes of the RESTORE payload for a raw value of `value_size` bytes. */
  static size_t restorePayloadSize(size_t value_size) { return 1 + value_size + 2 + 8; }

  /**
   * Skew compensation (clock.on_skew: compensate): Δ = target − source, added to every source
   * deadline to translate it into the target's clock domain. 0 = no translation.
   */
  void setCompensationMs(int64_t delta) { compensation_ms_ = delta; }

  /**
   * max_lifetime's first-seen store (target/first_seen.h), owned by the pipeline; nullptr when
   * no collection of the target has max_lifetime. Records are written out at finishUnit() and
   * appendUnitToGroup(), before the sink sends the unit.
   */
  void setFirstSeenStore(FirstSeenStore* store) { first_seen_ = store; }
  FirstSeenStore* firstSeenStore() const { return first_seen_; }

 private:
  /** Target db + key of an event, and its effective maxTTL and collection policies. */
  struct Dest {
    int db;
    std::string_view prefix, rest;  // target key = prefix + rest
    int64_t max_ttl_ms;
    const CollectionPolicy* policy = nullptr;  // expiry-semantics.md §8; nullptr = none
  };
  Dest dest(int source_db, std::string_view key);
  int64_t toTarget(int64_t source_deadline) const {
    return source_deadline == 0 ? 0 : source_deadline + compensation_ms_;
  }
  /** The clamped deadline, counting clamps. */
  int64_t clamp(int64_t e, const Dest& d, int64_t now);
  /**
   * The deadline policy of §8 for a write of `kind` to `d` (the clamp alone where its
   * collection has no policy), recording the key's first-seen second for max_lifetime. Counts
   * a deadline lowered by max_ttl or max_lifetime as a clamp.
   */
  PolicyDecision decideFor(const Dest& d, WriteKind kind, int64_t e,
                           std::optional<std::string_view> value, int64_t now);
  /** The string value of a DUMP payload or an RDB value, when its type is a string. */
  std::optional<std::string_view> stringValue(uint8_t type, std::string_view raw,
                                              source::rdb::Flavor flavor);
  /** `PEXPIREAT key t LT`: a cap that only lowers the key's deadline (PolicyDecision::Cap). */
  void capDeadline(const Dest& d, int64_t t);
  /** max_lifetime: the key is gone from the target; its next write starts anew (§8.4). */
  void forgetKey(const Dest& d);
  std::string_view fullKey(const Dest& d);
  void flushFirstSeen();

  void ensureDb(int db);
  void resetEntry();      // before an entry's first command
  void cmd(size_t argc);  // starts a command of argc args in the entry buffer
  void bulk(std::string_view s) { resp::appendBulk(entry_, s); }
  void bulkKey(const Dest& d);
  void bulkInt(int64_t v) { resp::appendBulkInt(entry_, v); }
  void forward(const source::Change& c, bool rewrite_keys);
  /** Gives an existing key its final deadline T (PEXPIREAT, PERSIST, or DEL if T is past). */
  void setDeadline(const Dest& d, int64_t t, int64_t now, bool persist_if_none);

  void applySet(const source::Change& c, const source::Event& ev, int64_t now);
  void applyRestore(const source::Change& c, const source::Event& ev, int64_t now);
  void applyMoveOrCopy(const source::Change& c, const source::Event& ev, int64_t now);
  void applyFlush(const source::Change& c);
  void endEntry(bool needs_atomic);

  void applySnapshotKey(const source::Change& c, const source::Event& ev, int64_t now);

  // Copy watches (setCopyWatch).
  /** The copy of `d` may have ended before the target runs a write at `now`: its deadline
   *  `e_target` is within the guard margin, or the target's clamp or policy set it. */
  bool copyMayBeGone(const Dest& d, int64_t e_target, int64_t now);
  RepairReason reasonFor(const Dest& d, int64_t e_target, int64_t now);
  /** Whether the target's clamp or a policy decides the copy's deadline. */
  static bool clamped(const Dest& d) { return d.max_ttl_ms > 0 || d.policy != nullptr; }
  /** The deadline the target's copy has: the source's (`e_target`) where nothing clamps it,
   *  else what this applier last gave it (0: none, or unknown). */
  int64_t copyDeadline(const Dest& d, int64_t e_target);
  /** Remembers the deadline given to a clamped copy (`t` 0: none; -1: the copy is gone). */
  void noteCopy(const Dest& d, int64_t t);
  uint64_t copyHash(const Dest& d);
  /** Records a watch on the entry's next command (call just before its cmd()). */
  void watchNext(WatchKind kind, RepairReason reason, const source::Event& ev,
                 int64_t deadline_ms = 0);
  /** `EXISTS key` (watched as a Guard) when the copy may be gone; true if one was written. */
  bool guardCopy(const Dest& d, const source::Event& ev, int64_t e_target, int64_t now);
  /** After a write without a guard: a Late watch when its copy's deadline is near. */
  void watchLate(const Dest& d, const source::Event& ev, int64_t e_target, int64_t now,
                 size_t write_index);
  /** RESTORE cannot carry this key to this target as it is (see setTarget). */
  bool needsRebuild(const source::RdbPayload& rdb, const source::Event& ev) const;

  // rebuild.cc: a snapshot key as commands, and the hash-field deadlines of stream commands.
  /** Appends DEL + the commands that recreate the key + its deadline `t`; false (nothing
   *  appended) with snapshot_error_ set when the value cannot be decoded or sent. */
  bool rebuildSnapshotKey(const source::RdbPayload& rdb, const source::Event& ev, const Dest& d,
                          int64_t t, int64_t now);
  /** `name key items...` in commands of at most kRebuildBatch items / max-bulk bytes each. */
  void batched(std::string_view name, const Dest& d, const std::vector<std::string_view>& items,
               size_t per_item);
  void rebuildString(const Dest& d, std::string_view v);
  void rebuildHash(const Dest& d, const std::vector<source::rdb::HashField>& fields,
                   const source::Event& ev, int64_t now);
  void rebuildStream(const Dest& d, const source::rdb::Stream& s);
  /** HPEXPIREAT / HSETEX (CommandSpec::field_deadline): forwarded with their field deadline
   *  translated (compensation), or without it (strip_ttl, or a target without field TTLs). */
  void forwardFieldDeadline(const source::Change& c, const source::Event& ev);
  /** Counts `n` field deadlines the target cannot store; says so once per session. */
  void droppedFieldTtls(uint64_t n);

  const MaxTtlPolicy& policy_;
  const filters::KeySpace& keys_;
  SnapshotWrite snapshot_write_ = SnapshotWrite::Restored;
  std::string snapshot_error_;
  ServerInfo server_;
  uint64_t max_bulk_ = 512ULL << 20;
  bool said_field_ttls_dropped_ = false;
  std::string label_;                    // "pipeline p: target dst (…)", for messages
  source::rdb::Value value_;             // a decoded snapshot value (rebuild), reused
  std::vector<std::string_view> items_;  // arguments of a batched command (rebuild)
  std::vector<std::string> numbers_;     // formatted zset scores items_ views (rebuild)
  const clock::ClusterClock& target_clock_;
  int64_t unit_local_ms_ = 0;  // beginUnit()'s local_ms
  PipelineStats& stats_;
  int64_t compensation_ms_ = 0;
  FirstSeenStore* first_seen_ = nullptr;
  source::rdb::Value policy_value_;  // a decoded string value a field policy reads, reused

  int target_db_ = 0;  // db selected on the target connection
  bool transaction_ = false;
  bool unit_unsafe_ = false;
  bool unit_wrapped_ = false;  // unit_ is one entry in a MULTI/EXEC of its own (endEntry)
  size_t unit_multi_at_ = 0;   // where that MULTI starts in unit_ (after a SELECT ahead)
  bool group_open_ = false;    // a stamped group's MULTI was appended (appendUnitToGroup)
  std::string unit_;           // the unit's commands so far
  size_t unit_cmds_ = 0;
  std::string entry_;  // the current entry's commands
  size_t entry_cmds_ = 0;
  std::string select_;  // SELECT emitted for the current entry (before its MULTI)
  size_t select_cmds_ = 0;
  std::string key_scratch_;
  LogRateLimiter first_seen_log_;  // a failing first-seen append (a full disk), per unit

  // Copy watches. An entry's watches are numbered by its commands (entry_watches_), moved to the
  // unit at endEntry (unit_watches_, with where their reply comes), and handed to the sink by
  // finishUnit/appendUnitToGroup (done_watches_).
  struct PendingWatch {
    Watch w;
    size_t index = 0;      // the command's index in the entry (entry_watches_) or unit
    bool wrapped = false;  // the entry has a MULTI/EXEC of its own
    size_t lead = 0;       // wrapped: commands of the unit ahead of that MULTI (a SELECT)
    size_t exec_at = 0;    // wrapped: that EXEC's index in the unit
  };
  bool watch_copies_ = false;
  bool field_guards_ = true;
  int64_t guard_margin_ms_ = 5000;
  int64_t late_horizon_ms_ = 60000;
  std::vector<PendingWatch> entry_watches_;
  std::vector<PendingWatch> unit_watches_;
  std::vector<Watch> done_watches_;
  size_t group_queued_ = 0;  // commands queued in the open group's MULTI so far
  /** Clamped copies (max_ttl or a policy) this applier wrote, by FirstSeenStore::hashOf of the
   *  target db and key: the deadline it gave each (0: none). */
  CopyDeadlines copies_;
};

}  // namespace xdcr::target
