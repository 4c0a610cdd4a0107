#pragma once
// Expiry policies of a target collection beside max_ttl (expiry-semantics.md §8): Cosmos DB's
// DefaultTTL and per-document `ttl` (default_ttl, ttl_field), ArangoDB's TTL index
// (expire_at_field, expire_after) and a lifetime cap from the first replicated write
// (max_lifetime). The decision is one pure function, decide(), unit-tested against every
// vector of §8.6; the Applier (applier.cc) feeds it and writes what it decides.
//
// All deadlines are absolute epoch milliseconds in the target's clock domain, 0 = none.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace xdcr::target {

/** A collection's policies as configured (config::CollectionConfig), in ms. */
struct CollectionPolicy {
  static constexpr int64_t kNoDefault = -1;  // default_ttl: -1 (Cosmos "on, no default")
  int64_t default_ttl_ms = 0;                // 0 = off (absent), kNoDefault, or > 0
  std::string ttl_field;                     // Cosmos per-document ttl; empty = none
  std::string expire_at_field;               // ArangoDB date attribute; empty = none
  int64_t expire_after_ms = 0;
  int64_t max_lifetime_ms = 0;  // 0 = none

  /** A policy that fills a deadline (default_ttl, ttl_field, expire_at_field). */
  bool fills() const {
    return default_ttl_ms != 0 || !ttl_field.empty() || !expire_at_field.empty();
  }
  bool reads_value() const { return !ttl_field.empty() || !expire_at_field.empty(); }
  bool any() const { return fills() || max_lifetime_ms > 0; }
};

/** Everything that decides a key's deadline on the target: its collection's policies and M. */
struct KeyPolicy {
  int64_t max_ttl_ms = 0;                    // effective maxTTL M (§3)
  const CollectionPolicy* policy = nullptr;  // nullptr: none (the key's collection has none)
  bool any() const { return policy != nullptr && policy->any(); }
  int64_t maxLifetimeMs() const { return policy ? policy->max_lifetime_ms : 0; }
};

/** What a replicated write carries (§8.1). */
enum class WriteKind {
  WholeValue,    // SET [PXAT], SET without TTL (MSET, SETNX, GETSET, ...), RESTORE, snapshot key
  DeadlineOnly,  // PEXPIREAT, PERSIST, the destination of RENAME / COPY / MOVE
  InPlace,       // APPEND, HSET, INCR, LPUSH, ... (the value is not carried)
  KeepTtl,       // SET ... KEEPTTL (and INCRBYFLOAT): the target keeps its deadline
};

struct PolicyInput {
  WriteKind kind = WriteKind::WholeValue;
  int64_t e = 0;  // E: the source deadline (target domain; 0 after strip_ttl), or for an
                  // in-place write the key's current source deadline
  /** Whole-value writes: the value when it is a Redis string; nullopt otherwise. */
  std::optional<std::string_view> value;
  int64_t now = 0;
  /** max_lifetime: the key's first-seen second on this target (FirstSeenStore), 0 = none. */
  int64_t first_seen_s = 0;
};

struct PolicyDecision {
  enum class Action {
    Set,        // the write carries `deadline` (0 = no deadline); DEL when it is <= now
    Cap,        // after the write: PEXPIREAT key `deadline` LT (lower only, never raise)
    Untouched,  // after the write: nothing (the target keeps its deadline)
  };
  Action action = Action::Set;
  int64_t deadline = 0;
  /** Which rule decided, for tests, logs and explain: "E", "ttl_field", "default_ttl", ... */
  const char* rule = "E";
};

/** The deadline a key's write gets on the target (expiry-semantics.md §8.1–§8.5). */
PolicyDecision decide(const KeyPolicy& p, const PolicyInput& in);

/** The Cosmos `ttl` field of a JSON object (§8.2). */
struct TtlField {
  enum class Kind { Absent, Never, Seconds } kind = Kind::Absent;
  int64_t seconds = 0;
};
TtlField readTtlField(std::string_view value, std::string_view field);

/** The ArangoDB date attribute of a JSON object in epoch ms, rounded up (§8.3); nullopt = no
 *  valid date. */
std::optional<int64_t> readExpireAt(std::string_view value, std::string_view field);

/**
 * ISO-8601 date or date-time in epoch ms, rounded up to the millisecond: `YYYY-MM-DD`,
 * `YYYY-MM-DDTHH:MM[:SS[.fraction]]` followed by nothing (UTC), `Z`, `±HH:MM` or `±HHMM`.
 * nullopt for anything else (an impossible date such as 02-30 included).
 */
std::optional<int64_t> parseIso8601Ms(std::string_view text);

}  // namespace xdcr::target
