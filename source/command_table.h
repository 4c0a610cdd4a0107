#pragma once
// What each command of the Redis 7.0 replication stream does to keys and their deadlines
// (redis-replication-notes.md §5, expiry-semantics.md §4 table). The stream is an effects log:
// relative expiries have already been rewritten to absolute ones by the source.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/resp_value.h"

namespace xdcr::source {

/** The effect class of a stream command; drives the expiry index and the target write. */
enum class Effect : uint8_t {
  Set,          // SET k v [PXAT E | KEEPTTL] [NX|XX]: E explicit, 0, or keep
  SetNoTtl,     // MSET/MSETNX (key value pairs), SETNX, GETSET: written with E = 0
  Store,        // overwriting *STORE commands: the destination (first key) gets E = 0
  InPlace,      // HSET, INCR, LPUSH, ...: modifies values, leaves the deadline alone
  ExpireAt,     // PEXPIREAT k E [NX|XX|GT|LT]
  Persist,      // PERSIST k
  Delete,       // DEL/UNLINK k...: a deletion or an expiration (classified per key)
  Restore,      // RESTORE k E payload [ABSTTL] [REPLACE] [IDLETIME n] [FREQ n]
  Rename,       // RENAME/RENAMENX a b: b takes a's deadline
  Copy,         // COPY a b [DB n] [REPLACE]: b gets a's deadline
  Move,         // MOVE k db: k moves to another db with its deadline
  SwapDb,       // SWAPDB a b: two whole dbs trade places
  Flush,        // FLUSHDB / FLUSHALL [ASYNC|SYNC]
  Select,       // SELECT db
  Multi,        // transaction start
  Exec,         // transaction end
  Heartbeat,    // ping, REPLCONF GETACK: no effect on data
  Unknown,      // not in the table: forwarded verbatim and counted
  SnapshotKey,  // not a command: one key of a full sync's snapshot (Change::rdb), a create
};

/** Where a command's keys are (beyond the simple range). */
enum class KeyLayout : uint8_t {
  Range,     // args[first], args[first+step], ... args[last] (last < 0: from the end)
  NumKeys,   // ZUNIONSTORE dst numkeys k1..kn: dst at `first`, the count right after it
  StoreOpt,  // SORT / GEORADIUS[BYMEMBER] key ... [STORE|STOREDIST dst]: the destination follows
             // the option (none: a read, nothing to replicate)
};

/**
 * Key positions, Redis-style: keys are args[first], args[first+step], ... up to args[last]
 * (last < 0 counts from the end: -1 = the last argument). first == 0 means no keys.
 * `dest_only`: only the first key is written (a *STORE destination, PFMERGE); the others are
 * read, so the target must hold them for the result to be the same.
 */
struct CommandSpec {
  std::string_view name;  // lower case
  Effect effect;
  int8_t first_key;
  int8_t last_key;
  int8_t key_step;
  KeyLayout layout = KeyLayout::Range;
  bool dest_only = false;
  /** HPEXPIREAT, HSETEX: the command states hash-field deadlines (hash-field-expiry.md): they
   *  are translated by skew compensation and removed by strip_ttl. */
  bool field_deadline = false;
  /** HPEXPIREAT, HPERSIST: a renewal of hash fields, whose reply codes say (-2) that a field's
   *  copy on the target is gone (expiry-semantics.md §12). */
  bool field_renewal = false;
};

/**
 * Positions in `args` of every key the command names, written ones first (for a *STORE: the
 * destination first). Appends to `out`. Malformed arguments yield fewer positions, never
 * out-of-range ones.
 */
void keyPositions(const CommandSpec& spec, const std::string_view* args, size_t argc,
                  std::vector<uint16_t>& out);

/**
 * True for a command whose second application changes the result (INCR, RPUSH, LPOP, LREM,
 * ZPOPMIN, …). Delivery is at-least-once: after a crash the agent replays from its last
 * checkpoint, so a unit holding such a command is written with a stamp of its offset, atomically
 * (MULTI/EXEC), and a replay skips what the stamp shows applied. `spec` from lookupCommand();
 * unknown commands (nullptr) count as unsafe.
 */
bool isReplayUnsafe(const CommandSpec* spec);

/** The spec for a command name (any case), or nullptr for a command not in the table (nor
 *  learned). */
const CommandSpec* lookupCommand(std::string_view name);

/** A command as a source's `COMMAND` reply describes it (its legacy key triple). */
struct LearnedCommand {
  std::string name;  // lower case
  bool write = false;
  int first_key = 0, last_key = 0, step = 0;
};

/**
 * Adds the write commands with keys at fixed positions that the table lacks, as in-place writes
 * (Effect::InPlace: key filters, rewrite, the db map and the key clamp apply; their replay counts
 * as unsafe). A newer source's commands then never pass with their keys unseen. Thread-safe;
 * process-wide. Returns how many were added.
 */
size_t learnCommands(const std::vector<LearnedCommand>& commands);
/** `spec` came from learnCommands(). */
bool isLearned(const CommandSpec* spec);

/** Parses a `COMMAND` reply (an array of [name, arity, flags, first, last, step, ...]);
 *  malformed entries are skipped. */
std::vector<LearnedCommand> parseCommandReply(const resp::Value& reply);

}  // namespace xdcr::source
