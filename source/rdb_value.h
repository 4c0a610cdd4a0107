#pragma once
// Decoding one RDB value into its contents: the elements of a list, the members and scores of a
// sorted set, a hash's fields with their TTLs, a stream's entries, groups, pending entries and
// consumers. The full sync normally never needs this — a value's raw bytes are a RESTORE payload
// (rdb.h) — but a target older than the source cannot read a newer payload (DUMP payload
// version), a value larger than the target's proto-max-bulk-len cannot travel as one payload,
// and a hash's field TTLs cannot be translated (skew compensation) or removed (strip_ttl) inside
// one. Then the target rebuilds the key from commands (target/rebuild.h), made from this.
//
// Every encoding a supported server writes is decoded: strings (raw, integer, LZF), lists
// (linked list, ziplist, quicklist 1 and 2 with plain and packed nodes), sets (hashtable,
// intset, listpack), sorted sets (text and binary scores, ziplist, listpack), hashes (hashtable,
// zipmap, ziplist, listpack; Redis 7.4+ field TTLs: HASH_METADATA 24, HASH_LISTPACK_EX 25;
// Valkey 9: HASH_2 22), streams (15, 19, 21). Type numbers collide between Redis and Valkey
// (22 is Valkey's HASH_2, Redis's pre-GA 7.4 HASH_METADATA), so the caller says whose file the
// value came from. Module values (type 7) cannot be decoded: an error.
//
// Input is untrusted (a source's bytes): every length is checked, nothing is read out of bounds,
// a malformed value is an error with what is wrong, never a crash.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "source/rdb.h"  // Flavor: whose type numbers a value uses

namespace xdcr::source::rdb {

struct StreamId {
  uint64_t ms = 0;
  uint64_t seq = 0;
  friend bool operator==(const StreamId&, const StreamId&) = default;
};

struct HashField {
  std::string name;
  std::string value;
  int64_t expire_ms = 0;  // absolute Unix ms (source clock); 0 = no TTL
};

struct StreamEntry {
  StreamId id;
  std::vector<std::pair<std::string, std::string>> fields;  // in order
};

struct StreamPending {
  StreamId id;
  std::string consumer;  // the consumer that owns it (from the consumer's own PEL)
  int64_t delivery_ms = 0;
  uint64_t delivery_count = 0;
};

struct StreamConsumer {
  std::string name;
  int64_t seen_ms = 0;
  int64_t active_ms = -1;  // -1: not in this RDB version (type < 21)
};

struct StreamGroup {
  std::string name;
  StreamId last_id;
  int64_t entries_read = -1;           // -1: unknown (type 15, or Redis's SCG_INVALID_ENTRIES_READ)
  std::vector<StreamPending> pending;  // ordered by id
  std::vector<StreamConsumer> consumers;
};

struct Stream {
  std::vector<StreamEntry> entries;  // live entries, ordered by id (deleted ones skipped)
  uint64_t length = 0;               // as the RDB states it (= entries.size() when consistent)
  StreamId last_id;
  StreamId first_id;           // type >= 19
  StreamId max_deleted_id;     // type >= 19
  uint64_t entries_added = 0;  // type >= 19; 0 = unknown
  bool has_v2_meta = false;    // first_id, max_deleted_id, entries_added are present
  std::vector<StreamGroup> groups;
};

struct Value {
  enum class Kind { String, List, Set, ZSet, Hash, Stream };
  Kind kind = Kind::String;
  std::string string;                                // String
  std::vector<std::string> elements;                 // List (head to tail), Set
  std::vector<std::pair<std::string, double>> zset;  // ZSet: member, score
  std::vector<HashField> hash;                       // Hash
  Stream stream;                                     // Stream

  /** Any hash field has a TTL. */
  bool hasFieldTtls() const;
};

/**
 * Decodes the raw value bytes of one key (rdb::Item::value, the bytes after the key) of `type`,
 * from a file of `flavor`. Returns false with `error` set ("what is wrong", without the key)
 * for a malformed or undecodable value; `out` is then unspecified.
 */
bool decodeValue(uint8_t type, std::string_view raw, Flavor flavor, Value& out, std::string& error);

}  // namespace xdcr::source::rdb
