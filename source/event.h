#pragma once
// The event model of the whole pipeline. One stream entry (a command) decodes into one event per
// key it touches (or one keyless event: a flush, an unknown command). Events view the source's
// read buffer: they live as long as the unit they came from (no copies on the hot path).
//
//   source/  decodes entries into Events (effect, keys, the deadline the command states)
//   filters/ resolves deadlines from the expiry index, classifies deletions, drops/strips
//   target/  clamps to the target's maxTTL and writes RESP

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/stats.h"
#include "source/command_table.h"
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
  int db = 0;              // source db
  std::string_view key;    // source key; empty for keyless events
  uint16_t key_arg = 0;    // position of `key` in the command's args (0 = keyless)
  int64_t deadline_ms = 0; // E: absolute epoch ms in the SOURCE clock domain; 0 = none
  std::string_view from_key;  // RENAME/COPY: the source key whose deadline moves
  int from_db = 0;
  // Set by filters/:
  bool pass = true;           // false: not replicated
  bool stripped = false;      // strip_ttl removed a deadline / expiry change
};

/** One decoded stream entry. */
struct Change {
  const Entry* entry = nullptr;       // the source command and its offset (entry->offset_end)
  const CommandSpec* spec = nullptr;  // nullptr: a command not in the table
  Effect effect = Effect::Unknown;
  int db = 0;                         // source db the command ran in
  std::vector<Event> events;          // reused between entries
  /** Positions of every key the command names (written first, then read ones): keyPositions(). */
  std::vector<uint16_t> key_args;

  std::string_view arg(size_t i) const { return entry->args[i]; }
  size_t argc() const { return entry->args.size(); }
};

/**
 * Decodes `entry`, run in source db `db`, into `out`: effect, and one event per key with the
 * deadline the command itself states (rules Explicit/None/Keep), or the rule by which filters/
 * must resolve it (Current/FromKey). `source_now_ms` converts the relative forms an older source
 * might send (EX/PX, RESTORE without ABSTTL). Returns false and a message for a malformed
 * command (e.g. a non-numeric PXAT), which is then forwarded verbatim and counted.
 */
bool decodeEntry(const Entry& entry, int db, int64_t source_now_ms, Change& out,
                 std::string* problem);

}  // namespace xdcr::source
