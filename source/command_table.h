#pragma once
// What each command of the Redis 7.0 replication stream does to keys and their deadlines
// (redis-replication-notes.md §5, expiry-semantics.md §4 table). The stream is an effects log:
// relative expiries have already been rewritten to absolute ones by the source.

#include <cstdint>
#include <string_view>

namespace xdcr::source {

/** The effect class of a stream command; drives the expiry index and the target write. */
enum class Effect : uint8_t {
  Set,        // SET k v [PXAT E | KEEPTTL] [NX|XX]: E explicit, 0, or keep
  SetNoTtl,   // MSET/MSETNX (key value pairs), SETNX, GETSET: written with E = 0
  Store,      // overwriting *STORE commands: the destination (first key) gets E = 0
  InPlace,    // HSET, INCR, LPUSH, ...: modifies values, leaves the deadline alone
  ExpireAt,   // PEXPIREAT k E [NX|XX|GT|LT]
  Persist,    // PERSIST k
  Delete,     // DEL/UNLINK k...: a deletion or an expiration (classified per key)
  Restore,    // RESTORE k E payload [ABSTTL] [REPLACE] [IDLETIME n] [FREQ n]
  Rename,     // RENAME/RENAMENX a b: b takes a's deadline
  Copy,       // COPY a b [DB n] [REPLACE]: b gets a's deadline
  Flush,      // FLUSHDB / FLUSHALL [ASYNC|SYNC]
  Select,     // SELECT db
  Multi,      // transaction start
  Exec,       // transaction end
  Heartbeat,  // ping, REPLCONF GETACK: no effect on data
  Unknown,    // not in the table: forwarded verbatim and counted
};

/**
 * Key positions, Redis-style: keys are args[first], args[first+step], ... up to args[last]
 * (last < 0 counts from the end: -1 = the last argument). first == 0 means no keys.
 */
struct CommandSpec {
  std::string_view name;  // lower case
  Effect effect;
  int8_t first_key;
  int8_t last_key;
  int8_t key_step;
};

/** The spec for a command name (any case), or nullptr for a command not in the table. */
const CommandSpec* lookupCommand(std::string_view name);

}  // namespace xdcr::source
