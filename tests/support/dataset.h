#pragma once
// Mixed-type data sets for full-sync tests and benchmarks, and a type-aware reader that renders a
// key's logical contents as canonical text, so that two servers can be compared key by key
// whatever their internal encodings (a hashtable's field order differs between a source and a
// restored copy; the contents do not).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tests/support/resp_client.h"

namespace xdcr::test {

/** What a data-set key holds: one per Redis type and encoding that Redis 7.0 writes. */
enum class ValueKind {
  StringInt,      // SET k 12345: "int" encoding, INT8/16/32 (or plain) in the RDB
  StringEmbstr,   // <= 44 bytes: "embstr"
  StringRaw,      // ~100 random-looking bytes: "raw", poor LZF ratio
  StringLzf,      // 200+ repeated bytes: "raw", LZF-compressed in the RDB
  StringBinary,   // every byte value incl. \0 \r \n: "raw"
  HashSmall,      // a few short fields: "listpack"
  HashLarge,      // > hash-max-listpack-entries (512) fields: "hashtable"
  HashLongValue,  // a value > 64 bytes: "hashtable"
  List,           // "quicklist", one node
  ListLarge,      // "quicklist", several nodes
  SetIntset,      // integer members: "intset"
  SetStrings,     // string members: "hashtable"
  SetLargeInts,   // > set-max-intset-entries (512) integers: "hashtable"
  ZsetSmall,      // "listpack"
  ZsetLarge,      // > zset-max-listpack-entries (128) members: "skiplist"
  Stream,         // entries, a deleted entry, consumer groups with a PEL
  StreamEmpty,    // no entries, one group (XGROUP CREATE ... MKSTREAM)
};
inline constexpr int kValueKindCount = static_cast<int>(ValueKind::StreamEmpty) + 1;

/** Short name, also part of the key name: "si", "hs", "zl", ... */
/** `n` random printable bytes from `rng`: no run that the RDB's LZF could shorten, so a value's
 *  size on the wire is its size (bandwidth, spool and full-sync timing tests). */
std::string randomValue(std::mt19937_64& rng, size_t n);

std::string_view kindTag(ValueKind kind);
/** What TYPE answers for it: string, hash, list, set, zset, stream. */
std::string_view redisTypeOf(ValueKind kind);
/** What OBJECT ENCODING answers for it on Redis 7.0 (writeDataset() sizes the large kinds from
 * the server's CONFIG). */
std::string_view encodingOf(ValueKind kind);

enum class DatasetMix {
  EveryType,      // every ValueKind (tests)
  MostlyStrings,  // 80 % strings of `string_size` bytes; hashes, lists, sets, sorted sets (bench)
};

/** Where key number `index` goes: its db and the start of its name (e.g. a collection prefix). */
using KeyPlacement = std::function<std::pair<int, std::string>(int64_t index)>;

struct DatasetOptions {
  int64_t keys = 1000;
  DatasetMix mix = DatasetMix::EveryType;
  /** Part of every key name, so that two data sets on one server do not collide. */
  std::string tag = "k";
  /** Default: every key in db 0, no prefix. */
  KeyPlacement placement;
  /** Share of the keys that get a deadline (expired keys come on top, from the others). */
  double deadline_fraction = 0.5;
  /** Share of the keys written with a deadline 100 ms ahead that has passed on return. */
  double expired_fraction = 0.0;
  /** Deadlines are spread uniformly over [write start + min, write start + max]. */
  int64_t min_deadline_ms = 10 * 60 * 1000;
  int64_t max_deadline_ms = 2 * 60 * 60 * 1000;
  /** String size for DatasetMix::MostlyStrings. */
  size_t string_size = 100;
  uint64_t seed = 1;
};

struct DatasetKey {
  int db = 0;
  std::string key;
  ValueKind kind = ValueKind::StringEmbstr;
  int64_t deadline_ms = 0;  // absolute deadline set on the source (PEXPIREAT/PXAT); 0 = none
  bool expired = false;     // its deadline had passed when writeDataset() returned
};

struct Dataset {
  std::vector<DatasetKey> keys;
  int64_t write_started_ms = 0;
  int64_t write_ended_ms = 0;

  /** The dbs that hold at least one key. */
  std::set<int> dbs() const;
  /** Keys in `db`; only live ones unless `include_expired`. */
  int64_t count(int db, bool include_expired) const;
  int64_t expiredCount() const;
  /** Keys in `db` with a deadline (expired ones included): what INFO keyspace calls expires=. */
  int64_t withDeadline(int db) const;
  /** Pointers to the live (or the expired) keys, optionally every `step`-th of them. */
  std::vector<const DatasetKey*> live(size_t step = 1) const;
  std::vector<const DatasetKey*> expired(size_t step = 1) const;
};

/**
 * Runs commands pipelined over some connection (a RespClient, a cluster client routing each
 * command to its slot's node) and returns their replies in the commands' order.
 */
using RespPipeline = std::function<std::vector<RespValue>(const std::vector<RespCommand>&)>;

/**
 * Writes a data set to the server on 127.0.0.1:`port`, pipelined. Live keys come first; expired
 * keys last, each with `PEXPIRE k 100` as its final command, after which the call waits until
 * those deadlines have passed. For expired keys to stay in the keyspace (and in the RDB a full
 * sync sends) the server must have active expiry off (`DEBUG SET-ACTIVE-EXPIRE 0`), and nothing
 * may read them there afterwards: a read expires a key lazily (and propagates a DEL).
 * Deterministic for a given `options`, except the absolute deadlines (relative to the start).
 * Throws std::runtime_error if the server rejects a command.
 */
Dataset writeDataset(uint16_t port, const DatasetOptions& options);
/**
 * As above, through `run`: e.g. a cluster client, for a data set spread over a cluster's slots
 * (every key in db 0 there). The commands of one key must reach its node in order; the keyless
 * CONFIG GET of the encoding thresholds goes wherever `run` sends keyless commands.
 */
Dataset writeDataset(const RespPipeline& run, const DatasetOptions& options);

/** A key's state on one server, in a form that does not depend on the server's encodings. */
struct KeyState {
  std::string type;          // TYPE: string, hash, ..., "none"
  int64_t pexpiretime = -2;  // PEXPIRETIME: -2 no key, -1 no deadline
  std::string contents;      // canonical rendering of the logical value (see readKeyStates)

  bool operator==(const KeyState& other) const = default;
};

/**
 * Reads `keys` (all in `db`; the client is SELECTed to it) from one server, pipelined: TYPE,
 * PEXPIRETIME and, by the kind the data set gave the key:
 *   string  GET
 *   hash    HGETALL, as a map sorted by field
 *   list    LRANGE 0 -1
 *   set     SMEMBERS, sorted
 *   zset    ZRANGE 0 -1 WITHSCORES
 *   stream  XRANGE - +, XINFO GROUPS (name, consumers, pending, last-delivered-id, entries-read,
 *           lag) and XINFO STREAM FULL COUNT 0 (length, last/first ids, entries-added, the PELs
 *           with delivery times and counts, consumers), minus the radix-tree-* statistics.
 * A key of another type shows up as an error text in `contents`; a missing key as type "none".
 * Reading a logically expired key expires it on a master: do not pass expired keys for a source.
 */
std::vector<KeyState> readKeyStates(RespClient& client, int db,
                                    const std::vector<const DatasetKey*>& keys);

/**
 * As readKeyStates, for keys whose types are not known in advance (every key a SCAN found):
 * TYPE and PEXPIRETIME of every key first, then the reads of each key's type, both pipelined
 * through `run` (no SELECT: `run` reads the db it is on). A key written between the two passes
 * can show an error text as contents; callers compare quiescent key spaces.
 */
std::vector<KeyState> readKeyStatesOfAnyType(const RespPipeline& run,
                                             const std::vector<std::string>& keys);

/** Printable rendering of arbitrary bytes: printable ASCII as is, the rest as \xHH. */
std::string escapeBytes(std::string_view bytes, size_t max_length = 200);

}  // namespace xdcr::test
