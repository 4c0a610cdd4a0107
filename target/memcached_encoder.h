#pragma once
// The memcached meta protocol as a memcached target needs it (memcached 1.6, protocol.txt;
// measured in docs/expiry-semantics.md §10): pure functions, no I/O, unit-tested on their own
// (tests/target/memcached_encoder_test.cc).
//
//  - keys: printable ASCII without spaces as they are, anything else base64 with the `b` flag;
//    memcached takes at most 250 bytes of key on the wire (so at most 186 raw bytes in base64);
//  - deadlines: always ABSOLUTE Unix seconds `T<ceil(E_ms / 1000)>` (never early, at most 1 s
//    late). Every real deadline is far above 30 days in Unix seconds, so memcached never reads it
//    as a relative TTL; `T0` = no deadline. memcached parses exptime as a signed 32-bit integer
//    and wraps anything above INT32_MAX (2038-01-19T03:14:07Z) silently: such a deadline is
//    refused, never sent;
//  - values: memcached refuses (and then DELETES the old value of) an item over item_size_max
//    including its header: maxValueSize() keeps a margin so such a write is never sent.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace xdcr::target::mc {

/** memcached's longest key on the wire (KEY_MAX_LENGTH). */
inline constexpr size_t kMaxKeyLength = 250;
/** The largest exptime memcached stores without wrapping (int32). */
inline constexpr int64_t kMaxExptimeS = 2147483647;
/** Client flags (`F`) naming a value's encoding: 0 is a Redis string, as it is. */
inline constexpr uint32_t kFlagString = 0;
inline constexpr uint32_t kFlagDump = 1;  // the Redis DUMP payload (RESTORE format)
inline constexpr uint32_t kFlagJson = 2;  // a JSON rendering of a non-string value
/** Bytes of an item beyond its key and value (item header, CAS, client flags, CRLF), with a
 *  margin: 1.6.18 stores a 1048514-byte value under a 3-byte key with -I 1m (62 bytes). */
inline constexpr size_t kItemOverhead = 72;

/** A key as sent: `text` (the key itself, or its base64) and whether `b` is needed. */
struct WireKey {
  std::string text;
  bool base64 = false;
};
/** The key on the wire, or nullopt when it is longer than memcached takes (250 bytes on the
 *  wire: 250 printable bytes, or 186 raw bytes of a key that needs base64). */
std::optional<WireKey> wireKey(std::string_view key);
/** Standard base64 (with padding); decodeBase64 returns nullopt for invalid input. */
std::string encodeBase64(std::string_view raw);
std::optional<std::string> decodeBase64(std::string_view text);

/** The deadline decision for one write (memcached target), in one place. */
struct FinalDeadline {
  enum class Kind {
    None,     // no deadline: T0
    At,       // `exptime_s` (absolute Unix seconds, > 30 days)
    Expired,  // at or before the target's now: the key is deleted (expired on arrival)
    TooFar,   // beyond 2038-01-19T03:14:07Z: memcached cannot store it (refused, counted)
  };
  Kind kind = Kind::None;
  int64_t ms = 0;         // the final deadline in the target's clock (0 = none)
  int64_t exptime_s = 0;  // Kind::At: ceil(ms / 1000)
  bool clamped = false;   // the target's maxTTL shortened it (or gave one)
};
/**
 * `e_ms`: the source deadline (source clock domain, 0 = none); `compensation_ms`: skew
 * compensation (target − source, 0 = none); `max_ttl_ms`: the key's effective maxTTL (0 = none);
 * `target_now_ms`: the target's clock now. The clamp is max_ttl.h's clampDeadline.
 */
FinalDeadline finalDeadline(int64_t e_ms, int64_t compensation_ms, int64_t max_ttl_ms,
                            int64_t target_now_ms);
/** ceil(ms / 1000) for ms > 0. */
constexpr int64_t exptimeOf(int64_t ms) {
  return (ms + 999) / 1000;
}

/** The largest value memcached stores under a key of `raw_key_len` bytes. */
constexpr size_t maxValueSize(uint64_t item_size_max, size_t raw_key_len) {
  const uint64_t overhead = kItemOverhead + raw_key_len;
  return item_size_max > overhead ? static_cast<size_t>(item_size_max - overhead) : 0;
}

/** `ms <key> <len> T<exptime> [F<flags>] [b]` + value: a whole write (one reply: HD). */
void appendSet(std::string& out, const WireKey& key, std::string_view value, int64_t exptime_s,
               uint32_t flags = kFlagString);
/** `mg <key> T<exptime> [b]`: a touch (HD, or EN when the key is missing — harmless). */
void appendTouch(std::string& out, const WireKey& key, int64_t exptime_s);
/** `md <key> [b]` (HD, or NF). */
void appendDelete(std::string& out, const WireKey& key);
/** `mg <key> v [b]`: the value (VA <len> + data, or EN). */
void appendGet(std::string& out, const WireKey& key);

/** One reply of the meta protocol, parsed from the front of a buffer. */
struct Reply {
  enum class Kind {
    Ok,           // HD
    Value,        // VA <len> <flags>* + data
    Miss,         // EN (mg) or NF (md, ms in replace mode)
    NotStored,    // NS
    Exists,       // EX
    Noop,         // MN
    ServerError,  // SERVER_ERROR <text>
    ClientError,  // CLIENT_ERROR <text>
    Error,        // ERROR (unknown command)
    Stat,         // STAT <name> <value> (stats)
    End,          // END
  };
  Kind kind = Kind::Ok;
  std::string text;   // the error's text, STAT's "name value", VA's flags
  std::string value;  // VA's data
  bool isError() const {
    return kind == Kind::ServerError || kind == Kind::ClientError || kind == Kind::Error;
  }
};
/** Parses one reply at the front of `buf`: the bytes consumed, 0 when more are needed, or
 *  nullopt (with `error`) for something that is not the meta protocol. */
std::optional<size_t> parseReply(std::string_view buf, Reply& out, std::string& error);

/** The value of `t<seconds>` in a reply's flags (mg ... t): -1 = no deadline; nullopt: absent. */
std::optional<int64_t> flagValue(std::string_view flags, char flag);

}  // namespace xdcr::target::mc
