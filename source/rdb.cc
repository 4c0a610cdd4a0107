#include "source/rdb.h"

#include <array>
#include <charconv>
#include <cstring>

#include <liblzf/lzf.h>

namespace xdcr::source::rdb {
namespace {

// ---- CRC-64/Jones, slice-by-8 (the same function as Redis's crc64.c / crcspeed) ----

constexpr uint64_t kPolyReflected = 0x95ac9329ac4bc9b5ULL;

struct CrcTables {
  std::array<std::array<uint64_t, 256>, 8> t{};
  CrcTables() {
    for (uint64_t i = 0; i < 256; ++i) {
      uint64_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolyReflected : c >> 1;
      t[0][i] = c;
    }
    for (int s = 1; s < 8; ++s) {
      for (int i = 0; i < 256; ++i) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
    }
  }
};
const CrcTables& tables() {
  static const CrcTables t;
  return t;
}

// ---- opcodes and types (src/rdb.h) ----
constexpr uint8_t kOpSlotInfo = 0xF4, kOpFunction2 = 0xF5, kOpFunctionPreGa = 0xF6,
                  kOpModuleAux = 0xF7, kOpIdle = 0xF8, kOpFreq = 0xF9, kOpAux = 0xFA,
                  kOpResizeDb = 0xFB, kOpExpireMs = 0xFC, kOpExpireS = 0xFD, kOpSelectDb = 0xFE,
                  kOpEof = 0xFF;
// Types 0-21 mean the same in every Redis and Valkey file (21: STREAM_LISTPACKS_3, RDB 11).
constexpr uint8_t kLastRedisSharedType = 21;
constexpr uint64_t kMaxStringLength = 1ULL << 32;  // far above proto-max-bulk-len
constexpr uint64_t kMaxKeyLength = 512ULL << 20;
constexpr uint64_t kLzfMaxExpansion = 88;
// Redis writes an LRU idle time in seconds (of a 24-bit clock); RESTORE ... IDLETIME takes a
// non-negative long long that Redis multiplies by 1000.
constexpr uint64_t kMaxIdleSeconds = INT64_MAX / 1000;

/** Bounds-checked reading over the buffered bytes. Running out sets `short_`, never throws. */
class Cursor {
 public:
  explicit Cursor(std::string_view d) : d_(d) {}

  size_t pos() const { return p_; }
  bool ok() const { return !short_ && error_.empty(); }
  bool isShort() const { return short_; }
  size_t need() const { return need_; }
  const std::string& error() const { return error_; }
  bool fail(std::string m) {
    if (error_.empty()) error_ = std::move(m) + " at byte " + std::to_string(p_);
    return false;
  }

  bool have(uint64_t n) {
    if (n > d_.size() - p_) {
      short_ = true;
      need_ = p_ + n;
      return false;
    }
    return true;
  }
  bool byte(uint8_t& b) {
    if (!have(1)) return false;
    b = static_cast<uint8_t>(d_[p_++]);
    return true;
  }
  bool skip(uint64_t n) {
    if (!have(n)) return false;
    p_ += n;
    return true;
  }
  bool bytes(uint64_t n, std::string_view& out) {
    if (!have(n)) return false;
    out = d_.substr(p_, n);
    p_ += n;
    return true;
  }
  template <class T>
  bool little(T& v) {
    std::string_view s;
    if (!bytes(sizeof(T), s)) return false;
    std::memcpy(&v, s.data(), sizeof(T));  // RDB is little-endian; so is every target we build for
    return true;
  }

  /** An RDB length; `encoded` is set for the special string encodings (11xxxxxx). */
  bool length(uint64_t& len, bool* encoded = nullptr) {
    uint8_t b;
    if (!byte(b)) return false;
    if (encoded) *encoded = false;
    switch (b >> 6) {
      case 0:
        len = b & 0x3f;
        return true;
      case 1: {
        uint8_t b2;
        if (!byte(b2)) return false;
        len = (static_cast<uint64_t>(b & 0x3f) << 8) | b2;
        return true;
      }
      case 3:
        if (!encoded) return fail("unexpected string encoding where a length belongs");
        *encoded = true;
        len = b & 0x3f;
        return true;
      default:
        if (b == 0x80) {
          uint32_t v;
          if (!little(v)) return false;
          len = __builtin_bswap32(v);  // big-endian on disk
          return true;
        }
        if (b == 0x81) {
          uint64_t v = 0;
          if (!little(v)) return false;
          len = __builtin_bswap64(v);
          return true;
        }
        return fail("bad length encoding");
    }
  }

  bool count(uint64_t& n) {
    if (!length(n)) return false;
    // Every element takes at least one byte: a larger count cannot be honest.
    if (n > (1ULL << 40)) return fail("absurd element count");
    return true;
  }

  /**
   * An RDB string. With `out`, the decoded text (integers formatted, LZF decompressed into
   * `storage` up to `max_len`); without, just skipped.
   */
  bool string(std::string_view* out = nullptr, std::string* storage = nullptr,
              uint64_t max_len = kMaxStringLength) {
    bool encoded = false;
    uint64_t len = 0;
    if (!length(len, &encoded)) return false;
    if (!encoded) {
      if (len > kMaxStringLength) return fail("absurd string length");
      if (out) return bytes(len, *out);
      return skip(len);
    }
    switch (len) {
      case 0:
      case 1:
      case 2: {
        const int width = len == 0 ? 1 : len == 1 ? 2 : 4;
        std::string_view raw;
        if (!bytes(width, raw)) return false;
        if (out) {
          int64_t v = 0;
          if (width == 1) {
            // RDB's 8-bit integer encoding is signed.
            v = static_cast<int8_t>(raw[0]);  // NOLINT(bugprone-signed-char-misuse)
          } else if (width == 2) {
            int16_t x;
            std::memcpy(&x, raw.data(), 2);
            v = x;
          } else {
            int32_t x;
            std::memcpy(&x, raw.data(), 4);
            v = x;
          }
          char buf[24];
          auto [e, ec] = std::to_chars(buf, buf + sizeof buf, v);
          storage->assign(buf, e);
          *out = *storage;
        }
        return true;
      }
      case 3: {
        uint64_t clen = 0, ulen = 0;
        if (!length(clen) || !length(ulen)) return false;
        if (clen > kMaxStringLength || ulen > kMaxStringLength) return fail("absurd LZF length");
        // LZF expands at most 88 x (a 3-byte back-reference copies 264 bytes): a larger
        // declared length is corrupt, and must not become an allocation of that size.
        if (ulen > clen * kLzfMaxExpansion) return fail("LZF length inconsistent");
        std::string_view comp;
        if (!bytes(clen, comp)) return false;
        if (out) {
          if (ulen > max_len) return fail("LZF string too long to decode");
          storage->resize(ulen);
          if (ulen > 0 && lzf_decompress(comp.data(), static_cast<unsigned>(clen), storage->data(),
                                         static_cast<unsigned>(ulen)) != ulen) {
            return fail("LZF data does not decompress");
          }
          *out = *storage;
        }
        return true;
      }
      default:
        return fail("unknown string encoding " + std::to_string(len));
    }
  }

  /** Module data: (opcode, value) pairs until RDB_MODULE_OPCODE_EOF. */
  bool moduleOpcodes() {
    for (int guard = 0;; ++guard) {
      uint64_t op = 0;
      if (!length(op)) return false;
      switch (op) {
        case 0:
          return true;  // EOF
        case 1:
        case 2: {
          uint64_t v = 0;
          if (!length(v)) return false;
          break;
        }
        case 3:
          if (!skip(4)) return false;
          break;
        case 4:
          if (!skip(8)) return false;
          break;
        case 5:
          if (!string()) return false;
          break;
        default:
          return fail("bad module opcode " + std::to_string(op));
      }
    }
  }

  /** Skips one value of `type` (redis-replication-notes.md §6.4) from a file of `flavor`. */
  bool value(uint8_t type, Flavor flavor) {
    uint64_t n = 0;
    switch (type) {
      case 0:   // STRING
      case 9:   // HASH_ZIPMAP
      case 10:  // LIST_ZIPLIST
      case 11:  // SET_INTSET
      case 12:  // ZSET_ZIPLIST
      case 13:  // HASH_ZIPLIST
      case 16:  // HASH_LISTPACK
      case 17:  // ZSET_LISTPACK
      case 20:  // SET_LISTPACK (RDB 11)
        return string();
      case 1:   // LIST
      case 2:   // SET
      case 14:  // LIST_QUICKLIST
        if (!count(n)) return false;
        for (uint64_t i = 0; i < n; ++i) {
          if (!string()) return false;
        }
        return true;
      case 4:  // HASH
        if (!count(n)) return false;
        for (uint64_t i = 0; i < 2 * n; ++i) {
          if (!string()) return false;
        }
        return true;
      case 3:  // ZSET (scores as text)
        if (!count(n)) return false;
        for (uint64_t i = 0; i < n; ++i) {
          uint8_t len;
          if (!string() || !byte(len)) return false;
          if (len < 253 && !skip(len)) return false;  // 253..255: nan, +inf, -inf
        }
        return true;
      case 5:  // ZSET_2 (binary double scores)
        if (!count(n)) return false;
        for (uint64_t i = 0; i < n; ++i) {
          if (!string() || !skip(8)) return false;
        }
        return true;
      case 18:  // LIST_QUICKLIST_2
        if (!count(n)) return false;
        for (uint64_t i = 0; i < n; ++i) {
          uint64_t container = 0;
          if (!length(container) || !string()) return false;
        }
        return true;
      case 7: {  // MODULE_2: module id, then self-describing opcodes
        uint64_t id = 0;
        return length(id) && moduleOpcodes();
      }
      case 15:
      case 19:
      case 21:
        return stream(type);
      case 24: {  // HASH_METADATA (Redis 7.4+, RDB 12): a hashtable hash with field TTLs
        // minExpire (8 bytes), the field count, then per field: its TTL as a length (0: none,
        // else expireAt - minExpire + 1), the field, the value (redis/redis src/rdb.c).
        if (flavor != Flavor::Redis) return fail("value type 24 in a Valkey file");
        if (!skip(8) || !count(n)) return false;
        for (uint64_t i = 0; i < n; ++i) {
          uint64_t ttl = 0;
          if (!length(ttl) || !string() || !string()) return false;
        }
        return true;
      }
      case 25:  // HASH_LISTPACK_EX (Redis 7.4+): minExpire (8 bytes), then a listpack of
                // field, value, TTL triplets
        if (flavor != Flavor::Redis) return fail("value type 25 in a Valkey file");
        return skip(8) && string();
      case 22:  // Valkey 9 HASH_2: per field its name, value and an 8-byte expiry (-1: none)
                // (valkey src/rdb.c rdbSaveObject). Redis's 22 was a 7.4 release candidate's.
        if (flavor != Flavor::Valkey) {
          return fail(
              "value type 22 (a Redis 7.4 release candidate's hash with field TTLs) is "
              "not supported");
        }
        if (!count(n)) return false;
        for (uint64_t i = 0; i < n; ++i) {
          if (!string() || !string() || !skip(8)) return false;
        }
        return true;
      case 6:
        return fail("module value of the old MODULE format (type 6) cannot be walked");
      default:
        return fail("unknown value type " + std::to_string(type));
    }
  }

  bool stream(uint8_t type) {
    uint64_t n = 0, v = 0;
    if (!count(n)) return false;
    for (uint64_t i = 0; i < n; ++i) {
      if (!string() || !string()) return false;  // master ID, listpack
    }
    for (int i = 0; i < 3; ++i) {  // length, last-ID ms and seq
      if (!length(v)) return false;
    }
    if (type >= 19) {
      for (int i = 0; i < 5; ++i) {  // first ID, max deleted ID, entries_added
        if (!length(v)) return false;
      }
    }
    uint64_t groups = 0;
    if (!count(groups)) return false;
    for (uint64_t g = 0; g < groups; ++g) {
      if (!string() || !length(v) || !length(v)) return false;  // name, last ID
      if (type >= 19 && !length(v)) return false;               // entries_read
      uint64_t pel = 0;
      if (!count(pel)) return false;
      for (uint64_t i = 0; i < pel; ++i) {
        if (!skip(16 + 8) || !length(v)) return false;  // raw ID, delivery time, count
      }
      uint64_t consumers = 0;
      if (!count(consumers)) return false;
      for (uint64_t c = 0; c < consumers; ++c) {
        if (!string() || !skip(type >= 21 ? 16 : 8)) return false;  // name, seen (+active) time
        uint64_t cpel = 0;
        if (!count(cpel)) return false;
        if (!skip(cpel * 16)) return false;
      }
    }
    return true;
  }

 private:
  std::string_view d_;
  size_t p_ = 0;
  bool short_ = false;
  size_t need_ = 0;
  std::string error_;
};

}  // namespace

uint64_t crc64(uint64_t crc, const void* data, size_t n) {
  const auto& t = tables().t;
  auto p = static_cast<const unsigned char*>(data);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    w ^= crc;
    crc = t[7][w & 0xff] ^ t[6][(w >> 8) & 0xff] ^ t[5][(w >> 16) & 0xff] ^ t[4][(w >> 24) & 0xff] ^
          t[3][(w >> 32) & 0xff] ^ t[2][(w >> 40) & 0xff] ^ t[1][(w >> 48) & 0xff] ^ t[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) crc = t[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return crc;
}

int payloadVersion(const Walker& walker, uint8_t type) {
  if (walker.flavor() == Flavor::Valkey && type <= kLastRedisSharedType)
    return kLastSharedRdbVersion;
  return walker.version();
}

Result Walker::finish(std::string_view data, size_t consumed) {
  crc_ = crc64(crc_, data.data(), consumed);
  offset_ += consumed;
  Result r;
  r.status = Status::Item;
  r.consumed = consumed;
  return r;
}

Result Walker::next(std::string_view data, Item& item) {
  Result r;
  if (done_) {
    if (data.empty()) return r;  // NeedMore: nothing follows the end
    r.status = Status::Error;
    r.error = "data after the end of the snapshot";
    return r;
  }
  Cursor c(data);
  auto outcome = [&](bool ok) -> Result {
    Result res;
    if (!c.error().empty()) {
      res.status = Status::Error;
      res.error = "snapshot byte " + std::to_string(offset_) + "+: " + c.error();
    } else if (!ok || c.isShort()) {
      res.status = Status::NeedMore;
      res.need = c.need();
    } else {
      res = finish(data, c.pos());
    }
    return res;
  };

  if (version_ == 0) {
    std::string_view magic;
    if (!c.bytes(9, magic)) return outcome(false);
    // "REDIS0012", or Valkey 9's "VALKEY080" (valkey src/rdb.h: RDB 80 and up carry their own
    // magic, since Valkey's type numbers above 21 are not Redis's).
    const bool valkey = magic.substr(0, 6) == "VALKEY";
    const size_t digits = valkey ? 6 : 5;
    int v = 0;
    auto [p, ec] = std::from_chars(magic.data() + digits, magic.data() + 9, v);
    const bool known = valkey ? v == kValkeyRdbVersion
                              : magic.substr(0, 5) == "REDIS" && v >= 1 && v <= kMaxRedisRdbVersion;
    if (ec != std::errc() || p != magic.data() + 9 || !known) {
      c.fail("not an RDB file this agent can read (header \"" + std::string(magic) +
             "\"; it reads REDIS0001 to REDIS00" + std::to_string(kMaxRedisRdbVersion) +
             " and VALKEY0" + std::to_string(kValkeyRdbVersion) + ")");
      return outcome(false);
    }
    version_ = v;
    flavor_ = valkey ? Flavor::Valkey : Flavor::Redis;
    item.kind = ItemKind::Header;
    return outcome(true);
  }

  uint8_t op;
  if (!c.byte(op)) return outcome(false);
  item.db = db_;
  switch (op) {
    case kOpAux: {
      item.kind = ItemKind::Aux;
      bool ok =
          c.string(&item.aux_key, &aux_storage_[0]) && c.string(&item.aux_value, &aux_storage_[1]);
      return outcome(ok);
    }
    case kOpFunction2:
      item.kind = ItemKind::Function;
      return outcome(c.string());
    case kOpFunctionPreGa:
      c.fail("functions in the 7.0 release-candidate format (0xF6) are not supported");
      return outcome(false);
    case kOpModuleAux: {
      item.kind = ItemKind::ModuleAux;
      uint64_t id = 0, when_op = 0, when = 0;
      return outcome(c.length(id) && c.length(when_op) && c.length(when) && c.moduleOpcodes());
    }
    case kOpSelectDb: {
      uint64_t db = 0;
      if (!c.length(db)) return outcome(false);
      if (db > 1'000'000) {
        c.fail("absurd db number");
        return outcome(false);
      }
      Result res = outcome(true);
      if (res.status == Status::Item) {
        db_ = static_cast<int>(db);
        item.kind = ItemKind::SelectDb;
        item.db = db_;
      }
      return res;
    }
    case kOpSlotInfo: {
      // A cluster node's per-slot sizes (Redis 7.4+, Valkey 8+): slot, keys, keys with a TTL.
      item.kind = ItemKind::ModuleAux;
      uint64_t v = 0;
      return outcome(c.length(v) && c.length(v) && c.length(v));
    }
    case kOpResizeDb:
      item.kind = ItemKind::ResizeDb;
      return outcome(c.length(item.db_size) && c.length(item.expires_size));
    case kOpExpireMs:
    case kOpExpireS:
    case kOpIdle:
    case kOpFreq: {
      // Key metadata: recorded, and returned with the key that follows. Consumed as a unit with
      // that key so that a NeedMore never splits them.
      int64_t expire = 0, idle = -1;
      int freq = -1;
      for (;;) {
        if (op == kOpExpireMs) {
          int64_t ms;
          if (!c.little(ms)) return outcome(false);
          expire = ms > 0 ? ms : 1;  // an absolute past time, not "no expiry"
        } else if (op == kOpExpireS) {
          int32_t s;
          if (!c.little(s)) return outcome(false);
          expire = s > 0 ? int64_t(s) * 1000 : 1;
        } else if (op == kOpIdle) {
          uint64_t v = 0;
          if (!c.length(v)) return outcome(false);
          if (v > kMaxIdleSeconds) {
            c.fail("absurd LRU idle time");
            return outcome(false);
          }
          idle = static_cast<int64_t>(v);
        } else {
          uint8_t f;
          if (!c.byte(f)) return outcome(false);
          freq = f;
        }
        if (!c.byte(op)) return outcome(false);
        if (op != kOpExpireMs && op != kOpExpireS && op != kOpIdle && op != kOpFreq) break;
      }
      pending_expire_ = expire;
      pending_idle_ = idle;
      pending_freq_ = freq;
      if (op >= kOpFunction2) {
        c.fail("key metadata not followed by a key");
        return outcome(false);
      }
      [[fallthrough]];
    }
    default: {
      if (op == kOpEof) break;
      // A key: type byte, key, value.
      item.kind = ItemKind::Key;
      item.type = op;
      item.expire_ms = pending_expire_;
      item.idle_s = pending_idle_;
      item.freq = pending_freq_;
      if (!c.string(&item.key, &key_storage_, kMaxKeyLength)) {
        pending_expire_ = 0, pending_idle_ = -1, pending_freq_ = -1;
        return outcome(false);
      }
      size_t value_start = c.pos();
      bool ok = c.value(op, flavor_);
      pending_expire_ = 0, pending_idle_ = -1, pending_freq_ = -1;
      if (ok) item.value = data.substr(value_start, c.pos() - value_start);
      return outcome(ok);
    }
  }
  // EOF: the CRC covers every byte before the checksum, the EOF opcode included.
  item.kind = ItemKind::Eof;
  uint64_t expected = crc64(crc_, data.data(), c.pos());
  uint64_t stored = 0;
  if (version_ >= 5 && !c.little(stored)) return outcome(false);
  if (stored != 0 && stored != expected) {
    c.fail("snapshot checksum mismatch (CRC64 " + std::to_string(stored) + " in the file, " +
           std::to_string(expected) + " computed)");
    return outcome(false);
  }
  Result res = outcome(true);
  if (res.status == Status::Item) done_ = true;
  return res;
}

}  // namespace xdcr::source::rdb
