#pragma once
// A structural walker for Redis RDB files (versions 1 to 12: Redis 7.0 writes 10, Redis 7.2 and
// Valkey 7.2-8.x 11, Redis 7.4/8.0 12) and Valkey 9's (magic VALKEY, version 80). Type numbers
// above 21 mean different things in the two (Flavor). It finds where every item starts and ends —
// AUX, FUNCTION2, MODULE_AUX, SELECTDB, RESIZEDB, EXPIRETIME(_MS), IDLE, FREQ, each key with its
// value, EOF with its CRC64 — without decoding values: a value's raw bytes plus the RDB version and
// a CRC64 are a valid DUMP/RESTORE payload (redis-replication-notes.md §7), so the full sync never
// has to understand listpacks, intsets or streams.
//
// The walker is incremental and stateless about the bytes: next() looks at what is buffered,
// and either consumes one complete item or says how many bytes it needs. Keys are returned
// decoded (an RDB string may be an integer or LZF-compressed); values raw.

#include <cstdint>
#include <string>
#include <string_view>

namespace xdcr::source::rdb {

/** Whose type numbers a file uses: its magic ("REDIS" / "VALKEY"). */
enum class Flavor { Redis, Valkey };

/** The newest Redis RDB version read (Redis 7.4 and 8.x write 12). */
inline constexpr int kMaxRedisRdbVersion = 12;
/** Valkey 9's RDB version (magic VALKEY080). */
inline constexpr int kValkeyRdbVersion = 80;
/** The last version both share: Redis 7.2 and Valkey up to 8.1 write 11, and Valkey 9 writes its
 *  types 0-21 exactly as in 11 (what it sends a replica that does not announce 9.0). */
inline constexpr int kLastSharedRdbVersion = 11;

/** Redis's CRC-64 ("Jones": reflected, poly 0xad93d23594c935a9, init 0). */
uint64_t crc64(uint64_t crc, const void* data, size_t n);

enum class Status { Item, NeedMore, Error };

enum class ItemKind {
  Header,     // "REDIS00NN"
  Aux,        // aux_key, aux_value
  Function,   // FUNCTION2 library code (not replicated: functions are not keys)
  ModuleAux,  // module data outside keys, or a cluster node's slot sizes (skipped)
  SelectDb,   // db
  ResizeDb,   // db_size, expires_size of the current db
  Key,        // db, key, type, value (raw), expire_ms, idle_s, freq
  Eof,        // checksum verified (or absent: 0 in the file)
};

struct Item {
  ItemKind kind = ItemKind::Header;
  int db = 0;
  uint64_t db_size = 0;
  uint64_t expires_size = 0;
  std::string_view aux_key;
  std::string_view aux_value;
  uint8_t type = 0;        // value type byte
  std::string_view key;    // decoded key
  std::string_view value;  // raw value bytes, exactly as in the RDB
  int64_t expire_ms = 0;   // absolute, source clock; 0 = none
  int64_t idle_s = -1;     // LRU idle time, -1 = none
  int freq = -1;           // LFU counter, -1 = none
};

struct Result {
  Status status = Status::NeedMore;
  size_t consumed = 0;  // Item: bytes of this item
  size_t need = 0;      // NeedMore: total bytes needed from the start of `data` (a lower bound)
  std::string error;    // Error: what is wrong
};

class Walker {
 public:
  /**
   * Parses the next item at the start of `data`. On Item, `item` views `data` (and the walker's
   * own storage for decoded keys) until the next call. Errors are final: the snapshot is bad.
   */
  Result next(std::string_view data, Item& item);

  int version() const { return version_; }
  Flavor flavor() const { return flavor_; }
  bool done() const { return done_; }
  /** Bytes consumed so far. */
  uint64_t offset() const { return offset_; }

 private:
  Result finish(std::string_view data, size_t consumed);

  int version_ = 0;
  Flavor flavor_ = Flavor::Redis;
  bool done_ = false;
  int db_ = 0;
  int64_t pending_expire_ = 0;
  int64_t pending_idle_ = -1;
  int pending_freq_ = -1;
  uint64_t crc_ = 0;
  uint64_t offset_ = 0;
  std::string key_storage_;
  std::string aux_storage_[2];
};

/**
 * The RDB version to put in a DUMP/RESTORE payload of a value of `type` from the file `walker`
 * reads: the file's own, except that Valkey 9's types 0-21 are written exactly as in RDB 11
 * (what it sends a replica that does not announce 9.0), so they travel as 11 and any server that
 * reads 11 (Redis 7.2+, Valkey 7.2+) takes them; only its HASH_2 (22) needs a Valkey 9 target.
 */
int payloadVersion(const Walker& walker, uint8_t type);

}  // namespace xdcr::source::rdb
