#pragma once
// The event model of the whole pipeline. One stream entry (a command) decodes into one event per
// key it touches (or one keyless event: a flush, an unknown command). Events view the source's
// read buffer: they live as long as the unit they came from (no copies on the hot path).
//
//   source/  decodes entries into Events (effect, keys, the deadline the command states), then
//            resolves deadlines from the expiry index and classifies deletions (Resolver):
//            a resolved, target-neutral unit (ResolvedUnit)
//   filters/ judges each event for one pipeline: key space, drop_*, strip_ttl (EventFilter)
//   target/  clamps to the target's maxTTL and writes RESP (a Sink)

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/stats.h"
#include "source/command_table.h"
#include "source/rdb.h"
#include "source/redis_source.h"

namespace xdcr::source {

/** Where an event's deadline E (expiry-semantics.md §4 table) comes from. */
enum class DeadlineRule : uint8_t {
  Explicit,  // the command states it (SET PXAT, PEXPIREAT, RESTORE ABSTTL); 0 = none
  None,      // the write clears it (SET without TTL, MSET, *STORE, PERSIST): E = 0
  Keep,      // SET KEEPTTL: the target keeps its own deadline, no clamp
  Current,   // in-place write: E = the key's current source deadline (expiry index)
  FromKey,   // RENAME/COPY destination: E = the source deadline of `from_key`
};

struct Event {
  EventKind kind = EventKind::Other;
  DeadlineRule rule = DeadlineRule::None;
  int db = 0;                 // source db
  std::string_view key;       // source key; empty for keyless events
  uint16_t key_arg = 0;       // position of `key` in the command's args (0 = keyless)
  int64_t deadline_ms = 0;    // E: absolute epoch ms in the SOURCE clock domain; 0 = none
  std::string_view from_key;  // RENAME/COPY: the source key whose deadline moves
  int from_db = 0;
  // Set by the resolver (false: a no-op at the source, e.g. a DEL of a key that had already
  // expired) and then by filters/ (false: not replicated to this pipeline's target).
  bool pass = true;
  bool stripped = false;  // strip_ttl removed a deadline / expiry change
  // strip_ttl applies to hash-field deadlines too: the applier leaves them out of a snapshot
  // key's rebuild and out of HPEXPIREAT / HSETEX (hash-field-expiry.md).
  bool strip_field_ttls = false;
  // HINCRBY, HINCRBYFLOAT (the field is args[2]): the field's source deadline as the field
  // index knows it (0: none, or unknown), so that the applier can guard a write to a field
  // whose copy may have expired on the target (expiry-semantics.md §12, S-11).
  int64_t field_deadline_ms = 0;
};

/** The value of one snapshot key: the RDB's raw value bytes, written as a RESTORE payload. */
struct RdbPayload {
  uint8_t type = 0;
  std::string_view value;  // views the source's read buffer
  int rdb_version = 0;     // the version a DUMP of it carries (rdb::payloadVersion)
  int64_t idle_s = -1;     // LRU idle time, -1 = none
  int freq = -1;           // LFU frequency, -1 = none
  rdb::Flavor flavor = rdb::Flavor::Redis;  // whose type numbers `type` is
};

/** One decoded stream entry. */
struct Change {
  const Entry* entry = nullptr;       // the source command and its offset (entry->offset_end);
                                      // nullptr for a snapshot key
  const RdbPayload* rdb = nullptr;    // Effect::SnapshotKey: the key's value
  const CommandSpec* spec = nullptr;  // nullptr: a command not in the table
  Effect effect = Effect::Unknown;
  int db = 0;                 // source db the command ran in
  std::vector<Event> events;  // reused between entries
  /** Positions of every key the command names (written first, then read ones): keyPositions(). */
  std::vector<uint16_t> key_args;
  /** A command that writes only its first key from others (CommandSpec::dest_only: *STORE,
   *  PFMERGE, …): each read key's source deadline before the command (key_args[1…]; 0: none
   *  known), so that the applier can guard a read key whose target copy may have ended
   *  (expiry-semantics.md §12, S-13). Empty otherwise. */
  std::vector<int64_t> read_deadlines;

  std::string_view arg(size_t i) const { return entry->args[i]; }
  size_t argc() const { return entry->args.size(); }
};

/**
 * True for `PUBLISH __sentinel__:hello <payload>`: a Sentinel announcing itself through the
 * master it monitors. Decoded as framing (Effect::Heartbeat): never forwarded or counted.
 */
bool isSentinelHello(const Entry& entry);

/**
 * Decodes `entry`, run in source db `db`, into `out`: effect, and one event per key with the
 * deadline the command itself states (rules Explicit/None/Keep), or the rule by which filters/
 * must resolve it (Current/FromKey). `source_now_ms` converts the relative forms an older source
 * might send (EX/PX, RESTORE without ABSTTL). Returns false and a message for a malformed
 * command (e.g. a non-numeric PXAT), which is then forwarded verbatim and counted.
 */
bool decodeEntry(const Entry& entry, int db, int64_t source_now_ms, Change& out,
                 std::string* problem);

/**
 * What a Source hands downstream: one stream unit (one entry, or a whole MULTI ... EXEC block),
 * or one key of a snapshot, every event resolved (kind, db, key, absolute source deadline) and
 * nothing yet judged for any target. The changes view the source's read buffer: valid until the
 * source is read or consumed again.
 */
struct ResolvedUnit {
  bool transaction = false;
  bool snapshot = false;    // a snapshot key: it stands at the FULLRESYNC offset
  std::string_view replid;  // the source history the offsets belong to (the stream's replid)
  uint64_t offset_end = 0;  // the stream offset just past the unit
  size_t bytes = 0;         // stream (or snapshot) bytes it took
  /** This host's wall clock (epoch ms) when the unit was resolved, read once for many units
   *  (RedisShardSource); the target side judges the unit at the same time. 0 = unknown. */
  int64_t local_ms = 0;
  size_t count = 0;  // changes[0 .. count) are this unit's (the vector is reused)
  std::vector<Change> changes;

  std::span<const Change> view() const { return {changes.data(), count}; }
  /** The next change to fill, reusing a previous unit's vectors. */
  Change& add() {
    if (count == changes.size()) changes.emplace_back();
    Change& c = changes[count++];
    c.rdb = nullptr;
    return c;
  }
};

}  // namespace xdcr::source
