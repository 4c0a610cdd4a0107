#include "source/rdb_value.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <limits>

#include <liblzf/lzf.h>

// The layouts followed here (read, not copied): redis/redis src/rdb.c (rdbSaveObject,
// rdbLoadObject, rdbLoadDoubleValue), src/listpack.c (lpGetWithSize, lpEncodeBacklen),
// src/ziplist.c (ZIP_DECODE_PREVLEN, ZIP_DECODE_LENGTH, zipLoadInteger), src/zipmap.c,
// src/intset.c, src/t_stream.c (streamAppendItem: the master entry and the entry layout),
// src/t_hash.c (HASH_LP_NO_TTL, EB_EXPIRE_TIME_MAX); valkey-io/valkey src/rdb.c for HASH_2
// (checked against a DUMP of Valkey 9.1.2: the 8-byte expiry follows each field's value).

namespace xdcr::source::rdb {

bool Value::hasFieldTtls() const {
  return std::any_of(hash.begin(), hash.end(), [](const HashField& f) { return f.expire_ms != 0; });
}

namespace {

// Value types (src/rdb.h; Valkey's are the same up to 21, then 22 = HASH_2).
enum : uint8_t {
  kString = 0,
  kList = 1,
  kSet = 2,
  kZset = 3,
  kHash = 4,
  kZset2 = 5,
  kModulePreGa = 6,
  kModule2 = 7,
  kHashZipmap = 9,
  kListZiplist = 10,
  kSetIntset = 11,
  kZsetZiplist = 12,
  kHashZiplist = 13,
  kListQuicklist = 14,
  kStreamListpacks = 15,
  kHashListpack = 16,
  kZsetListpack = 17,
  kListQuicklist2 = 18,
  kStreamListpacks2 = 19,
  kSetListpack = 20,
  kStreamListpacks3 = 21,
  kValkeyHash2 = 22,               // Valkey 9 (RDB 80)
  kRedisHashMetadataPreGa = 22,    // Redis 7.4 release candidates
  kRedisHashListpackExPreGa = 23,  // Redis 7.4 release candidates
  kHashMetadata = 24,              // Redis 7.4+
  kHashListpackEx = 25,            // Redis 7.4+
};

constexpr uint64_t kMaxStringLength = 1ULL << 32;  // as rdb.cc: far above proto-max-bulk-len
constexpr uint64_t kLzfMaxExpansion = 88;          // as rdb.cc
// Redis keeps field deadlines in 48 bits (src/ebuckets.h EB_EXPIRE_TIME_MAX): a larger one in
// a file is corrupt, and Redis itself refuses it.
constexpr uint64_t kMaxFieldExpire = (1ULL << 48) - 1;
constexpr uint64_t kQuicklistPlain = 1, kQuicklistPacked = 2;  // QUICKLIST_NODE_CONTAINER_*
constexpr int64_t kStreamFlagDeleted = 1, kStreamFlagSameFields = 2;
constexpr size_t kRawIdSize = 16;  // a stream ID in a rax key or a PEL: ms, seq, big-endian

std::string formatInt(int64_t v) {
  std::array<char, 24> buf{};
  auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), v);
  return {buf.data(), end};
}

/** Text as Redis reads a score (strtod in zzlStrtod / rdbLoadDoubleValue), but the whole text
 *  must be a number: "inf", "-inf", "nan" included; a leading '+' too (strtod takes it). */
bool parseDouble(std::string_view s, double& d) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
  return ec == std::errc() && end == s.data() + s.size();
}

StreamId rawId(std::string_view raw) {
  uint64_t ms = 0, seq = 0;
  std::memcpy(&ms, raw.data(), 8);
  std::memcpy(&seq, raw.data() + 8, 8);
  return {__builtin_bswap64(ms), __builtin_bswap64(seq)};  // big-endian, so rax order is ID order
}

bool idLess(const StreamId& a, const StreamId& b) {
  return a.ms != b.ms ? a.ms < b.ms : a.seq < b.seq;
}

std::string idText(const StreamId& id) {
  return std::to_string(id.ms) + "-" + std::to_string(id.seq);
}

/** Bounds-checked reading of RDB primitives. Errors name the byte offset in what it reads. */
class Reader {
 public:
  explicit Reader(std::string_view d) : d_(d) {}

  size_t left() const { return d_.size() - p_; }
  const std::string& error() const { return error_; }
  bool fail(const std::string& m) {
    if (error_.empty()) error_ = m + " at byte " + std::to_string(p_);
    return false;
  }

  bool bytes(uint64_t n, std::string_view& out) {
    if (n > left()) {
      return fail("truncated: " + std::to_string(n) + " bytes needed, " + std::to_string(left()) +
                  " left");
    }
    out = d_.substr(p_, n);
    p_ += n;
    return true;
  }
  bool byte(uint8_t& b) {
    std::string_view s;
    if (!bytes(1, s)) return false;
    b = static_cast<uint8_t>(s[0]);
    return true;
  }
  template <class T>
  bool little(T& v) {
    std::string_view s;
    if (!bytes(sizeof(T), s)) return false;
    std::memcpy(&v, s.data(), sizeof(T));  // little-endian on disk and on every host we build for
    return true;
  }

  /** An RDB length; `encoded` is set for the special string encodings (11xxxxxx). */
  bool length(uint64_t& len, bool* encoded = nullptr) {
    uint8_t b = 0;
    if (!byte(b)) return false;
    if (encoded) *encoded = false;
    switch (b >> 6) {
      case 0:
        len = b & 0x3f;
        return true;
      case 1: {
        uint8_t b2 = 0;
        if (!byte(b2)) return false;
        len = (static_cast<uint64_t>(b & 0x3f) << 8) | b2;
        return true;
      }
      case 3:
        if (!encoded) return fail("a string encoding where a length belongs");
        *encoded = true;
        len = b & 0x3f;
        return true;
      default:
        if (b == 0x80) {
          uint32_t v = 0;
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

  /**
   * A count of things that take at least `min_each` bytes each: a count the remaining bytes
   * cannot hold is a lie, refused before anything is reserved for it.
   */
  bool count(uint64_t& n, uint64_t min_each, const char* what) {
    if (!length(n)) return false;
    if (n > left() / min_each) {
      return fail(std::string(what) + " count " + std::to_string(n) + " larger than the " +
                  std::to_string(left()) + " remaining bytes can hold");
    }
    return true;
  }

  /**
   * An RDB string (raw, integer or LZF; the rules of rdb.cc's Cursor::string). A raw string is
   * a view of the input; an integer or LZF one is decoded into `storage`.
   */
  bool string(std::string_view& out, std::string& storage) {
    bool encoded = false;
    uint64_t len = 0;
    if (!length(len, &encoded)) return false;
    if (!encoded) {
      if (len > kMaxStringLength) return fail("absurd string length");
      return bytes(len, out);
    }
    switch (len) {
      case 0: {
        int8_t v = 0;
        if (!little(v)) return false;
        storage = formatInt(v);
        break;
      }
      case 1: {
        int16_t v = 0;
        if (!little(v)) return false;
        storage = formatInt(v);
        break;
      }
      case 2: {
        int32_t v = 0;
        if (!little(v)) return false;
        storage = formatInt(v);
        break;
      }
      case 3: {
        uint64_t clen = 0, ulen = 0;
        if (!length(clen) || !length(ulen)) return false;
        if (clen > kMaxStringLength || ulen > kMaxStringLength) return fail("absurd LZF length");
        // LZF expands at most 88 x: a larger declared length is corrupt, and must not become an
        // allocation of that size.
        if (ulen > clen * kLzfMaxExpansion) return fail("LZF length inconsistent");
        std::string_view comp;
        if (!bytes(clen, comp)) return false;
        storage.resize(ulen);
        if (ulen > 0 && lzf_decompress(comp.data(), static_cast<unsigned>(clen), storage.data(),
                                       static_cast<unsigned>(ulen)) != ulen) {
          return fail("LZF data does not decompress to its stated length");
        }
        break;
      }
      default:
        return fail("unknown string encoding " + std::to_string(len));
    }
    out = storage;
    return true;
  }

  /** An RDB string into an owned string: the one copy the output needs. */
  bool string(std::string& out) {
    std::string storage;
    std::string_view v;
    if (!string(v, storage)) return false;
    if (!v.empty() && v.data() == storage.data()) {
      out = std::move(storage);
    } else {
      out.assign(v);
    }
    return true;
  }

 private:
  std::string_view d_;
  size_t p_ = 0;
  std::string error_;
};

// ---- ziplist, listpack, zipmap, intset: the blobs inside RDB strings ----

/** One element of a ziplist or listpack: a string (a view of the blob) or an integer. */
struct Packed {
  std::string_view str;
  int64_t num = 0;
  bool is_int = false;

  std::string text() const { return is_int ? formatInt(num) : std::string(str); }
};

bool blobFail(std::string& error, const char* what, const std::string& m, size_t at) {
  error = std::string(what) + ": " + m + " at byte " + std::to_string(at);
  return false;
}

uint32_t le32(const unsigned char* p) {
  uint32_t v = 0;
  std::memcpy(&v, p, 4);
  return v;
}
uint16_t le16(const unsigned char* p) {
  uint16_t v = 0;
  std::memcpy(&v, p, 2);
  return v;
}

/** Bytes of a listpack entry's backlen for an entry of `len` bytes (listpack.c). */
size_t backlenSize(uint64_t len) {
  if (len <= 127) return 1;
  if (len < 16383) return 2;
  if (len < 2097151) return 3;
  if (len < 268435455) return 4;
  return 5;
}

/** The backlen is written most significant group first, every byte but the first with bit 7. */
bool backlenMatches(const unsigned char* p, size_t size, uint64_t len) {
  for (size_t i = 0; i < size; ++i) {
    const unsigned shift = 7 * (size - 1 - i);
    uint8_t want = (len >> shift) & 127;
    if (i > 0) want |= 128;
    if (p[i] != want) return false;
  }
  return true;
}

/** Sign-extends the low `bits` bits of `u` (listpack integers are two's complement). */
int64_t signExtend(uint64_t u, unsigned bits) {
  if (bits < 64 && (u & (1ULL << (bits - 1)))) u |= ~0ULL << bits;
  return static_cast<int64_t>(u);
}

/**
 * Every element of a listpack: 6-byte header (total bytes, element count or 65535), entries
 * (encoding, data, backlen), 0xFF. The header's size and count, every entry's bounds and
 * backlen, and the terminator being the last byte are checked.
 */
bool listpack(std::string_view blob, std::vector<Packed>& out, std::string& error) {
  constexpr const char* kWhat = "listpack";
  out.clear();
  const auto* b = reinterpret_cast<const unsigned char*>(blob.data());
  const size_t n = blob.size();
  if (n < 7) return blobFail(error, kWhat, "shorter than its header and terminator", 0);
  if (le32(b) != n) {
    return blobFail(
        error, kWhat,
        "header says " + std::to_string(le32(b)) + " bytes, it has " + std::to_string(n), 0);
  }
  const uint16_t declared = le16(b + 4);
  size_t p = 6;
  while (true) {
    if (p >= n) return blobFail(error, kWhat, "no terminator", p);
    const uint8_t e = b[p];
    if (e == 0xFF) break;
    // Header (encoding and length bytes) and data sizes of this entry.
    size_t head = 1;
    uint64_t data = 0;
    Packed v;
    unsigned bits = 0;
    if ((e & 0x80) == 0) {  // 7-bit unsigned integer
      v.is_int = true;
      v.num = e & 0x7f;
    } else if ((e & 0xC0) == 0x80) {  // string up to 63 bytes
      data = e & 0x3f;
    } else if ((e & 0xE0) == 0xC0) {  // 13-bit integer
      head = 2;
      bits = 13;
    } else if ((e & 0xF0) == 0xE0) {  // string up to 4095 bytes
      head = 2;
    } else if (e == 0xF0) {  // string, 32-bit length
      head = 5;
    } else if (e >= 0xF1 && e <= 0xF4) {  // 16/24/32/64-bit integer
      static constexpr std::array<unsigned, 4> kBits = {16, 24, 32, 64};
      bits = kBits[e - 0xF1];
      head = 1 + bits / 8;
    } else {
      return blobFail(error, kWhat, "bad entry encoding " + std::to_string(e), p);
    }
    if (head > n - p) return blobFail(error, kWhat, "entry runs past the end", p);
    if ((e & 0xF0) == 0xE0) data = (static_cast<uint64_t>(e & 0x0F) << 8) | b[p + 1];
    if (e == 0xF0) data = le32(b + p + 1);
    if (bits == 13) {
      v.is_int = true;
      v.num = signExtend((static_cast<uint64_t>(e & 0x1F) << 8) | b[p + 1], 13);
    } else if (bits > 0) {
      uint64_t u = 0;
      for (unsigned i = 0; i < bits / 8; ++i) u |= static_cast<uint64_t>(b[p + 1 + i]) << (8 * i);
      v.is_int = true;
      v.num = signExtend(u, bits);
    }
    const uint64_t len = head + data;
    const size_t back = backlenSize(len);
    if (data > n - p - head || back > n - p - head - data) {
      return blobFail(error, kWhat, "entry runs past the end", p);
    }
    if (!v.is_int) v.str = blob.substr(p + head, data);
    if (!backlenMatches(b + p + len, back, len)) {
      return blobFail(error, kWhat, "entry backlen does not match its size", p);
    }
    out.push_back(v);
    p += len + back;
  }
  if (p + 1 != n) return blobFail(error, kWhat, "bytes after the terminator", p);
  if (declared != 0xFFFF && declared != out.size()) {
    return blobFail(error, kWhat,
                    "header says " + std::to_string(declared) + " entries, it has " +
                        std::to_string(out.size()),
                    4);
  }
  return true;
}

/**
 * Every element of a ziplist: 10-byte header (total bytes, offset of the last entry, count or
 * 65535), entries (previous entry's length in 1 or 5 bytes, encoding, data), 0xFF.
 */
bool ziplist(std::string_view blob, std::vector<Packed>& out, std::string& error) {
  constexpr const char* kWhat = "ziplist";
  out.clear();
  const auto* b = reinterpret_cast<const unsigned char*>(blob.data());
  const size_t n = blob.size();
  if (n < 11) return blobFail(error, kWhat, "shorter than its header and terminator", 0);
  if (le32(b) != n) {
    return blobFail(
        error, kWhat,
        "header says " + std::to_string(le32(b)) + " bytes, it has " + std::to_string(n), 0);
  }
  const uint32_t tail = le32(b + 4);
  const uint16_t declared = le16(b + 8);
  size_t p = 10, prev_start = 0, prev_len = 0;
  while (true) {
    if (p >= n) return blobFail(error, kWhat, "no terminator", p);
    if (b[p] == 0xFF) break;
    const size_t start = p;
    uint64_t prevlen = b[p];
    if (prevlen == 254) {
      if (n - p < 5) return blobFail(error, kWhat, "entry runs past the end", p);
      prevlen = le32(b + p + 1);
      p += 5;
    } else {
      p += 1;
    }
    if (prevlen != prev_len) {
      return blobFail(error, kWhat, "entry's previous-entry length is wrong", start);
    }
    if (p >= n) return blobFail(error, kWhat, "entry runs past the end", start);
    const uint8_t e = b[p];
    Packed v;
    uint64_t data = 0;
    size_t head = 1;
    switch (e >> 6) {
      case 0:  // string up to 63 bytes
        data = e & 0x3f;
        break;
      case 1:  // string up to 16383 bytes, 14-bit big-endian length
        head = 2;
        if (n - p < head) return blobFail(error, kWhat, "entry runs past the end", start);
        data = (static_cast<uint64_t>(e & 0x3f) << 8) | b[p + 1];
        break;
      case 2:  // string, 32-bit big-endian length
        head = 5;
        if (n - p < head) return blobFail(error, kWhat, "entry runs past the end", start);
        data = __builtin_bswap32(le32(b + p + 1));
        break;
      default: {  // integers, little-endian
        v.is_int = true;
        unsigned bytes = 0;
        if (e == 0xC0) {
          bytes = 2;
        } else if (e == 0xD0) {
          bytes = 4;
        } else if (e == 0xE0) {
          bytes = 8;
        } else if (e == 0xF0) {
          bytes = 3;
        } else if (e == 0xFE) {
          bytes = 1;
        } else if (e >= 0xF1 && e <= 0xFD) {
          v.num = (e & 0x0F) - 1;  // 4-bit immediate 0..12
        } else {
          return blobFail(error, kWhat, "bad entry encoding " + std::to_string(e), p);
        }
        if (n - p - 1 < bytes) return blobFail(error, kWhat, "entry runs past the end", start);
        if (bytes > 0) {
          uint64_t u = 0;
          for (unsigned i = 0; i < bytes; ++i) u |= static_cast<uint64_t>(b[p + 1 + i]) << (8 * i);
          v.num = signExtend(u, 8 * bytes);
        }
        data = bytes;
        break;
      }
    }
    if (data > n - p - head) return blobFail(error, kWhat, "entry runs past the end", start);
    if (!v.is_int) v.str = blob.substr(p + head, data);
    p += head + data;
    out.push_back(v);
    prev_start = start;
    prev_len = p - start;
  }
  if (p + 1 != n) return blobFail(error, kWhat, "bytes after the terminator", p);
  // The tail offset points at the last entry (at the terminator when there is none).
  if (tail != (out.empty() ? p : prev_start)) {
    return blobFail(error, kWhat, "tail offset does not point at the last entry", 4);
  }
  if (declared != 0xFFFF && declared != out.size()) {
    return blobFail(error, kWhat,
                    "header says " + std::to_string(declared) + " entries, it has " +
                        std::to_string(out.size()),
                    8);
  }
  return true;
}

/**
 * A zipmap (Redis 2.4 and older): a count byte (254: unknown), then per pair the field's
 * length and bytes, the value's length, a free-bytes count, the value and that many unused
 * bytes; lengths are one byte below 254, else 254 and 4 little-endian bytes; 0xFF ends it.
 */
bool zipmap(std::string_view blob, std::vector<HashField>& out, std::string& error) {
  constexpr const char* kWhat = "zipmap";
  const auto* b = reinterpret_cast<const unsigned char*>(blob.data());
  const size_t n = blob.size();
  if (n < 2) return blobFail(error, kWhat, "shorter than its header and terminator", 0);
  const uint8_t declared = b[0];
  size_t p = 1;
  auto len = [&](uint64_t& l) {
    if (p >= n) return blobFail(error, kWhat, "no terminator", p);
    if (b[p] == 0xFF) return blobFail(error, kWhat, "pair cut short by the terminator", p);
    if (b[p] < 254) {
      l = b[p++];
      return true;
    }
    if (n - p < 5) return blobFail(error, kWhat, "length runs past the end", p);
    l = le32(b + p + 1);
    p += 5;
    return true;
  };
  while (true) {
    if (p >= n) return blobFail(error, kWhat, "no terminator", p);
    if (b[p] == 0xFF) break;
    HashField f;
    uint64_t l = 0;
    if (!len(l)) return false;
    if (l > n - p) return blobFail(error, kWhat, "field runs past the end", p);
    f.name.assign(blob.substr(p, l));
    p += l;
    if (!len(l)) return false;
    if (p >= n) return blobFail(error, kWhat, "value runs past the end", p);
    const uint8_t free = b[p++];
    if (l > n - p || free > n - p - l) return blobFail(error, kWhat, "value runs past the end", p);
    f.value.assign(blob.substr(p, l));
    p += l + free;
    out.push_back(std::move(f));
  }
  if (p + 1 != n) return blobFail(error, kWhat, "bytes after the terminator", p);
  if (declared < 254 && declared != out.size()) {
    return blobFail(
        error, kWhat,
        "header says " + std::to_string(declared) + " pairs, it has " + std::to_string(out.size()),
        0);
  }
  return true;
}

/** An intset: encoding (2, 4 or 8: bytes per integer), count, sorted little-endian integers. */
bool intset(std::string_view blob, std::vector<std::string>& out, std::string& error) {
  constexpr const char* kWhat = "intset";
  const auto* b = reinterpret_cast<const unsigned char*>(blob.data());
  if (blob.size() < 8) return blobFail(error, kWhat, "shorter than its header", 0);
  const uint32_t width = le32(b), count = le32(b + 4);
  if (width != 2 && width != 4 && width != 8) {
    return blobFail(error, kWhat, "bad encoding " + std::to_string(width), 0);
  }
  if ((blob.size() - 8) % width != 0 || (blob.size() - 8) / width != count) {
    return blobFail(error, kWhat,
                    "header says " + std::to_string(count) + " integers of " +
                        std::to_string(width) + " bytes in " + std::to_string(blob.size() - 8),
                    4);
  }
  out.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t u = 0;
    for (uint32_t k = 0; k < width; ++k)
      u |= static_cast<uint64_t>(b[8 + i * width + k]) << (8 * k);
    out.push_back(formatInt(signExtend(u, 8 * width)));
  }
  return true;
}

// ---- the value types ----

class Decoder {
 public:
  Decoder(std::string_view raw, Flavor flavor, Value& out) : r_(raw), flavor_(flavor), out_(out) {}

  bool decode(uint8_t type, std::string& error) {
    const bool ok = dispatch(type);
    if (ok && r_.left() != 0) {
      r_.fail(std::to_string(r_.left()) + " bytes after the value");
    } else if (ok) {
      return true;
    }
    error = "value type " + std::to_string(type) + ": " +
            (!blob_error_.empty() ? blob_error_ : r_.error());
    return false;
  }

 private:
  bool dispatch(uint8_t type) {
    switch (type) {
      case kString:
        out_.kind = Value::Kind::String;
        return r_.string(out_.string);
      case kList:
      case kSet:
        out_.kind = type == kList ? Value::Kind::List : Value::Kind::Set;
        return strings(out_.elements);
      case kListZiplist:
      case kListQuicklist:
      case kListQuicklist2:
        out_.kind = Value::Kind::List;
        return list(type);
      case kSetIntset:
      case kSetListpack:
        out_.kind = Value::Kind::Set;
        return packedSet(type);
      case kZset:
      case kZset2:
        out_.kind = Value::Kind::ZSet;
        return zset(type);
      case kZsetZiplist:
      case kZsetListpack:
        out_.kind = Value::Kind::ZSet;
        return packedZset(type);
      case kHash:
        out_.kind = Value::Kind::Hash;
        return hash();
      case kHashZipmap:
      case kHashZiplist:
      case kHashListpack:
        out_.kind = Value::Kind::Hash;
        return packedHash(type);
      case kStreamListpacks:
      case kStreamListpacks2:
      case kStreamListpacks3:
        out_.kind = Value::Kind::Stream;
        return stream(type);
      case kModulePreGa:
      case kModule2:
        return r_.fail("module values cannot be decoded");
      default:
        break;
    }
    if (flavor_ == Flavor::Valkey) {
      if (type == kValkeyHash2) {
        out_.kind = Value::Kind::Hash;
        return valkeyHash2();
      }
    } else {
      if (type == kHashMetadata) {
        out_.kind = Value::Kind::Hash;
        return hashMetadata();
      }
      if (type == kHashListpackEx) {
        out_.kind = Value::Kind::Hash;
        return hashListpackEx();
      }
      if (type == kRedisHashMetadataPreGa || type == kRedisHashListpackExPreGa) {
        return r_.fail(
            "a Redis 7.4 release candidate's hash with field TTLs is not supported (a "
            "Valkey 9 HASH_2 needs Flavor::Valkey)");
      }
    }
    return r_.fail("unknown value type " + std::to_string(type) +
                   (flavor_ == Flavor::Valkey ? " (Valkey)" : " (Redis)"));
  }

  /** An RDB string holding a blob, then its elements. */
  bool packed(bool is_listpack, std::vector<Packed>& entries) {
    std::string_view blob;
    if (!r_.string(blob, scratch_)) return false;
    return is_listpack ? listpack(blob, entries, blob_error_) : ziplist(blob, entries, blob_error_);
  }

  bool strings(std::vector<std::string>& out) {
    uint64_t n = 0;
    if (!r_.count(n, 1, "element")) return false;
    out.resize(n);
    for (auto& s : out) {
      if (!r_.string(s)) return false;
    }
    return true;
  }

  bool list(uint8_t type) {
    std::vector<Packed> entries;
    if (type == kListZiplist) {
      if (!packed(false, entries)) return false;
      for (const auto& e : entries) out_.elements.push_back(e.text());
      return true;
    }
    uint64_t nodes = 0;
    if (!r_.count(nodes, type == kListQuicklist2 ? 2 : 1, "quicklist node")) return false;
    for (uint64_t i = 0; i < nodes; ++i) {
      uint64_t container = kQuicklistPacked;
      if (type == kListQuicklist2) {
        if (!r_.length(container)) return false;
        if (container != kQuicklistPlain && container != kQuicklistPacked) {
          return r_.fail("bad quicklist node container " + std::to_string(container));
        }
      }
      if (container == kQuicklistPlain) {
        // One element too large for a listpack, as it is.
        std::string element;
        if (!r_.string(element)) return false;
        if (element.empty()) return r_.fail("empty plain quicklist node");
        out_.elements.push_back(std::move(element));
        continue;
      }
      if (!packed(type == kListQuicklist2, entries)) return false;
      for (const auto& e : entries) out_.elements.push_back(e.text());
    }
    return true;
  }

  bool packedSet(uint8_t type) {
    std::string_view blob;
    if (!r_.string(blob, scratch_)) return false;
    if (type == kSetIntset) return intset(blob, out_.elements, blob_error_);
    std::vector<Packed> entries;
    if (!listpack(blob, entries, blob_error_)) return false;
    out_.elements.reserve(entries.size());
    for (const auto& e : entries) out_.elements.push_back(e.text());
    return true;
  }

  /** ZSET: scores as text (one length byte; 253 nan, 254 +inf, 255 -inf); ZSET_2: binary. */
  bool zset(uint8_t type) {
    uint64_t n = 0;
    if (!r_.count(n, type == kZset ? 2 : 9, "sorted set member")) return false;
    out_.zset.resize(n);
    for (auto& [member, score] : out_.zset) {
      if (!r_.string(member)) return false;
      if (type == kZset2) {
        if (!r_.little(score)) return false;
        continue;
      }
      uint8_t len = 0;
      if (!r_.byte(len)) return false;
      if (len == 253) {
        score = std::numeric_limits<double>::quiet_NaN();
      } else if (len == 254) {
        score = std::numeric_limits<double>::infinity();
      } else if (len == 255) {
        score = -std::numeric_limits<double>::infinity();
      } else {
        std::string_view text;
        if (!r_.bytes(len, text)) return false;
        if (!parseDouble(text, score)) return r_.fail("score is not a number");
      }
    }
    return true;
  }

  /** Member, score pairs; a score is an integer entry or its text. */
  bool packedZset(uint8_t type) {
    std::vector<Packed> entries;
    if (!packed(type == kZsetListpack, entries)) return false;
    if (entries.size() % 2 != 0) return r_.fail("odd number of sorted set entries");
    out_.zset.reserve(entries.size() / 2);
    for (size_t i = 0; i < entries.size(); i += 2) {
      double score = 0;
      const Packed& s = entries[i + 1];
      if (s.is_int) {
        score = static_cast<double>(s.num);
      } else if (!parseDouble(s.str, score)) {
        return r_.fail("sorted set score " + std::to_string(i / 2) + " is not a number");
      }
      out_.zset.emplace_back(entries[i].text(), score);
    }
    return true;
  }

  bool hash() {
    uint64_t n = 0;
    if (!r_.count(n, 2, "hash field")) return false;
    out_.hash.resize(n);
    for (auto& f : out_.hash) {
      if (!r_.string(f.name) || !r_.string(f.value)) return false;
    }
    return true;
  }

  bool packedHash(uint8_t type) {
    if (type == kHashZipmap) {
      std::string_view blob;
      if (!r_.string(blob, scratch_)) return false;
      return zipmap(blob, out_.hash, blob_error_);
    }
    std::vector<Packed> entries;
    if (!packed(type == kHashListpack, entries)) return false;
    if (entries.size() % 2 != 0) return r_.fail("odd number of hash entries");
    out_.hash.reserve(entries.size() / 2);
    for (size_t i = 0; i < entries.size(); i += 2) {
      out_.hash.push_back({entries[i].text(), entries[i + 1].text(), 0});
    }
    return true;
  }

  /**
   * Redis 7.4+ HASH_METADATA: minExpire (8 bytes), the field count, then per field its TTL as a
   * length (0: none, else expireAt - minExpire + 1), the field, the value.
   */
  bool hashMetadata() {
    uint64_t min_expire = 0, n = 0;
    if (!r_.little(min_expire)) return false;
    if (!r_.count(n, 3, "hash field")) return false;
    out_.hash.resize(n);
    for (auto& f : out_.hash) {
      uint64_t ttl = 0;
      if (!r_.length(ttl)) return false;
      if (ttl != 0) {
        // Redis computes ttl + minExpire - 1 in uint64 and refuses more than 48 bits.
        const uint64_t at = ttl - 1 + min_expire;
        if (at < min_expire || at > kMaxFieldExpire) return r_.fail("field TTL out of range");
        f.expire_ms = static_cast<int64_t>(at);
      }
      if (!r_.string(f.name) || !r_.string(f.value)) return false;
    }
    return true;
  }

  /** Redis 7.4+ HASH_LISTPACK_EX: minExpire (8 bytes), then a listpack of field, value, TTL
   *  triplets; the TTL is absolute, 0 (HASH_LP_NO_TTL) for none. */
  bool hashListpackEx() {
    uint64_t min_expire = 0;
    if (!r_.little(min_expire)) return false;
    std::vector<Packed> entries;
    if (!packed(true, entries)) return false;
    if (entries.size() % 3 != 0) return r_.fail("hash listpack not made of field, value, TTL");
    out_.hash.reserve(entries.size() / 3);
    for (size_t i = 0; i < entries.size(); i += 3) {
      const Packed& ttl = entries[i + 2];
      if (!ttl.is_int || ttl.num < 0 || static_cast<uint64_t>(ttl.num) > kMaxFieldExpire) {
        return r_.fail("hash field " + std::to_string(i / 3) + " has a bad TTL");
      }
      out_.hash.push_back({entries[i].text(), entries[i + 1].text(), ttl.num});
    }
    return true;
  }

  /** Valkey 9 HASH_2: the field count, then per field its name, value and an 8-byte expiry in
   *  Unix ms, -1 for none. */
  bool valkeyHash2() {
    uint64_t n = 0;
    if (!r_.count(n, 10, "hash field")) return false;
    out_.hash.resize(n);
    for (auto& f : out_.hash) {
      int64_t expire = 0;
      if (!r_.string(f.name) || !r_.string(f.value) || !r_.little(expire)) return false;
      // 0 would read as "no TTL" here; Valkey writes -1 for that and never a deadline <= 0.
      if (expire == -1) continue;
      if (expire <= 0) return r_.fail("field expiry " + std::to_string(expire));
      f.expire_ms = expire;
    }
    return true;
  }

  // ---- streams ----

  /**
   * One rax node's listpack (t_stream.c streamAppendItem): the master entry — live count,
   * deleted count, the master field count, the master fields, 0 — then per entry: flags,
   * ms and seq differences from the node's master ID, the field count and field/value pairs
   * (only the values when the flags say SAMEFIELDS), and the entry's element count (lp-count).
   */
  bool streamNode(const StreamId& master, const std::vector<Packed>& es) {
    size_t i = 0;
    auto integer = [&](int64_t& v, const char* what) {
      if (i >= es.size()) return r_.fail(std::string("stream node ends before its ") + what);
      if (!es[i].is_int) return r_.fail(std::string("stream node's ") + what + " not an integer");
      v = es[i++].num;
      return true;
    };
    int64_t live = 0, deleted = 0, master_fields = 0, zero = 0;
    if (!integer(live, "live count") || !integer(deleted, "deleted count") ||
        !integer(master_fields, "master field count")) {
      return false;
    }
    if (master_fields < 0 || static_cast<uint64_t>(master_fields) > es.size() - i) {
      return r_.fail("stream node's master field count is wrong");
    }
    const size_t master_at = i;
    i += master_fields;
    if (!integer(zero, "master entry terminator")) return false;
    if (zero != 0) return r_.fail("stream node's master entry is not terminated by 0");
    int64_t seen_live = 0, seen_deleted = 0;
    while (i < es.size()) {
      int64_t flags = 0, ms_diff = 0, seq_diff = 0, fields = master_fields, lp_count = 0;
      if (!integer(flags, "entry flags") || !integer(ms_diff, "entry ID") ||
          !integer(seq_diff, "entry ID")) {
        return false;
      }
      const bool same = (flags & kStreamFlagSameFields) != 0;
      if (!same && !integer(fields, "entry field count")) return false;
      const uint64_t elements = same ? fields : 2 * static_cast<uint64_t>(fields);
      if (fields < 0 || elements >= es.size() - i + 1) {
        return r_.fail("stream entry's field count is wrong");
      }
      const bool live_entry = (flags & kStreamFlagDeleted) == 0;
      if (live_entry) {
        StreamEntry& e = out_.stream.entries.emplace_back();
        // Unsigned, as Redis adds them (a difference is never negative in a sane node).
        e.id = {master.ms + static_cast<uint64_t>(ms_diff),
                master.seq + static_cast<uint64_t>(seq_diff)};
        e.fields.reserve(fields);
        for (int64_t k = 0; k < fields; ++k) {
          std::string name = same ? es[master_at + k].text() : es[i++].text();
          e.fields.emplace_back(std::move(name), es[i++].text());
        }
        ++seen_live;
      } else {
        i += elements;
        ++seen_deleted;
      }
      if (!integer(lp_count, "entry element count")) return false;
      const int64_t expected = same ? fields + 3 : 2 * fields + 4;
      if (lp_count != expected) return r_.fail("stream entry's element count is wrong");
    }
    if (seen_live != live || seen_deleted != deleted) {
      return r_.fail("stream node's master entry counts " + std::to_string(live) + " live, " +
                     std::to_string(deleted) + " deleted; it holds " + std::to_string(seen_live) +
                     " and " + std::to_string(seen_deleted));
    }
    return true;
  }

  bool streamId(StreamId& id) { return r_.length(id.ms) && r_.length(id.seq); }

  bool rawStreamId(StreamId& id) {
    std::string_view raw;
    if (!r_.bytes(kRawIdSize, raw)) return false;
    id = rawId(raw);
    return true;
  }

  bool stream(uint8_t type) {
    Stream& s = out_.stream;
    uint64_t nodes = 0;
    if (!r_.count(nodes, 2, "stream node")) return false;
    std::string key_storage;
    std::vector<Packed> entries;
    for (uint64_t i = 0; i < nodes; ++i) {
      std::string_view key;
      if (!r_.string(key, key_storage)) return false;
      if (key.size() != kRawIdSize) return r_.fail("stream node key is not a 16-byte ID");
      const StreamId master = rawId(key);
      if (!packed(true, entries)) return false;
      if (entries.empty()) return r_.fail("empty stream node");
      if (!streamNode(master, entries)) return false;
    }
    if (!r_.length(s.length) || !streamId(s.last_id)) return false;
    if (type >= kStreamListpacks2) {
      s.has_v2_meta = true;
      if (!streamId(s.first_id) || !streamId(s.max_deleted_id) || !r_.length(s.entries_added)) {
        return false;
      }
    }
    uint64_t groups = 0;
    if (!r_.count(groups, 4, "consumer group")) return false;
    s.groups.resize(groups);
    for (auto& g : s.groups) {
      if (!r_.string(g.name) || !streamId(g.last_id)) return false;
      if (type >= kStreamListpacks2) {
        uint64_t read = 0;
        if (!r_.length(read)) return false;
        // SCG_INVALID_ENTRIES_READ (-1) is written as a 64-bit length.
        g.entries_read = static_cast<int64_t>(read);
      }
      uint64_t pel = 0;
      if (!r_.count(pel, kRawIdSize + 8 + 1, "pending entry")) return false;
      g.pending.resize(pel);
      for (size_t k = 0; k < g.pending.size(); ++k) {
        StreamPending& p = g.pending[k];
        if (!rawStreamId(p.id) || !r_.little(p.delivery_ms) || !r_.length(p.delivery_count)) {
          return false;
        }
        // In rax (ID) order: what lets the consumers' PELs be looked up below.
        if (k > 0 && !idLess(g.pending[k - 1].id, p.id)) {
          return r_.fail("group PEL not in ID order");
        }
      }
      uint64_t consumers = 0;
      if (!r_.count(consumers, 9, "consumer")) return false;
      g.consumers.resize(consumers);
      for (auto& c : g.consumers) {
        if (!r_.string(c.name) || !r_.little(c.seen_ms)) return false;
        if (type >= kStreamListpacks3 && !r_.little(c.active_ms)) return false;
        uint64_t owned = 0;
        if (!r_.count(owned, kRawIdSize, "consumer pending entry")) return false;
        for (uint64_t k = 0; k < owned; ++k) {
          StreamId id;
          if (!rawStreamId(id)) return false;
          auto it = std::lower_bound(
              g.pending.begin(), g.pending.end(), id,
              [](const StreamPending& p, const StreamId& v) { return idLess(p.id, v); });
          if (it == g.pending.end() || !(it->id == id)) {
            return r_.fail("consumer's pending entry " + idText(id) + " not in the group's PEL");
          }
          if (!it->consumer.empty()) {
            return r_.fail("pending entry " + idText(id) + " owned by two consumers");
          }
          it->consumer = c.name;
        }
      }
    }
    return true;
  }

  Reader r_;
  Flavor flavor_;
  Value& out_;
  std::string scratch_;     // a blob decoded from an integer or LZF string
  std::string blob_error_;  // what is wrong inside a ziplist/listpack/zipmap/intset
};

}  // namespace

bool decodeValue(uint8_t type, std::string_view raw, Flavor flavor, Value& out,
                 std::string& error) {
  out = Value{};
  Decoder d(raw, flavor, out);
  return d.decode(type, error);
}

}  // namespace xdcr::source::rdb
