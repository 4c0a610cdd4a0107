#pragma once
// A model of what xdcr-agent must leave on the TARGET, written from the specification
// (expiry-semantics.md §3–§6, interface.md §2) and nothing else: it does not include or call any
// of the agent's code. The differential test feeds it one event per source key and stream entry
// (a write with its replicated deadline, an expiry change, a deletion or an expiration, a
// rename, a flush) and compares the target against it at the end.
//
// Values are opaque to the model: a value is what the SOURCE held after the write (TYPE and DUMP
// payload, read back by the test). The model's own job is the part the source cannot tell:
// whether the target holds the key at all, under which name and in which db, and with which
// deadline.

#include <cstdint>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/target_layout.h"

namespace xdcr::test {

/** A key on one server: (db, name). */
using KeyId = std::pair<int, std::string>;

// ---------------------------------------------------------------------------------------------
// The configuration the model reads. The test writes the agent's YAML from the same struct, so
// the two cannot disagree about the settings.

// BucketSpec / CollectionSpec: tests/support/target_layout.h.

struct KeyRewriteSpec {
  std::string from;  // prefix
  std::string to;
};

struct ModelConfig {
  std::string name;
  std::vector<BucketSpec> buckets;
  std::map<int, int> dbs;                 // source db -> target db; empty = every db to itself
  std::vector<std::string> include_keys;  // regexes, unanchored search; empty = every key
  std::vector<std::string> exclude_keys;
  bool drop_expirations = false;
  bool drop_deletions = false;
  bool strip_ttl = false;
  bool replicate_flush = false;
  std::vector<KeyRewriteSpec> key_rewrite;  // first matching prefix
};

// ---------------------------------------------------------------------------------------------

/** A value as the source held it: TYPE ("none" = no key) and the DUMP payload. */
struct Value {
  std::string type = "none";
  std::string payload;

  bool exists() const { return type != "none"; }
  bool operator==(const Value& other) const = default;
};

/** What the model expects one TARGET key to be. */
struct TargetKey {
  KeyId id;
  // Written and not removed since. Whether it is still there also depends on `deadline`.
  bool exists = false;
  // False once a write reached a target copy that did not hold the source's value before it
  // (an in-place write onto a diverged copy): the model then knows the deadline and presence
  // only ("value unknown, deadline only"). The generator avoids these writes; the flag keeps
  // the model honest when one happens anyway.
  bool value_known = true;
  Value value;
  int64_t deadline = 0;  // absolute ms; 0 = none
  // A source expiration of this key was due too close to the final check to know whether the
  // agent had applied it: present (with the right value) and absent are both right.
  bool removal_ambiguous = false;
  // max_lifetime (expiry-semantics.md §8.4): the first-seen second the agent holds for this
  // target key, 0 = none.
  int64_t first_s = 0;
  std::vector<std::string> history;
  // Absent because the target ended it (expired on arrival), not because the source removed it.
  bool ended_by_target = false;

  /** Present at time `t`: written, not removed, and its deadline (if any) after `t`. */
  bool presentAt(int64_t t) const { return exists && (deadline == 0 || deadline > t); }
  /**
   * expiry-semantics.md §12: the copy is absent at `t` because the target ended it — its
   * deadline passed, or it was expired on arrival — while the source still holds the key. A
   * deadline change or a write that reaches it restores the whole source document (the value
   * the model last knew the source to hold).
   */
  bool endedByTargetAt(int64_t t) const {
    return value_known && value.exists() &&
           (exists ? deadline != 0 && deadline <= t : ended_by_target);
  }
};

enum class RemoveCause { Deletion, Expiration };

/** How a write carries its deadline (the rows of the §4 table). */
enum class WriteKind {
  Deadline,    // SET … PXAT E, RESTORE … E ABSTTL: E as given (0 = none)
  NoDeadline,  // SET (no TTL), MSET, MSETNX, SETNX, GETSET, overwriting *STORE, RESTORE … 0
  KeepTtl,     // SET … KEEPTTL (INCRBYFLOAT arrives as this too): the target keeps its deadline
  InPlace,     // HSET, INCR, APPEND, LPUSH, SADD, ZADD, XADD, PFADD, SREM, LPOP, …
};

class ExpiryModel {
 public:
  explicit ExpiryModel(ModelConfig config);

  const ModelConfig& config() const { return config_; }

  /** Where a source key goes on the target: nullopt when the pipeline drops it (the dbs map has
   * no entry for its db, include_keys does not match it, or exclude_keys does). */
  std::optional<KeyId> targetOf(const KeyId& source) const;
  /** Effective maxTTL M in ms of a TARGET key (§3): collection if > 0, else bucket; 0 = none. */
  int64_t maxTtlMs(const KeyId& target) const;
  /** "collection t (C=3s, B=60s) M=3s", for messages. */
  std::string describeMaxTtl(const KeyId& target) const;

  /** Rule 4 (§4): the target deadline for replicated deadline `e` under `m` at `now`. */
  static int64_t clamp(int64_t e, int64_t m, int64_t now);

  /** A target key's collection policies (§8): default_ttl and max_lifetime in ms. */
  struct Policy {
    int64_t m = 0;
    int64_t default_ttl = 0;  // 0 off, -1 "no default", > 0
    int64_t lifetime = 0;
    bool any() const { return default_ttl != 0 || lifetime != 0; }
  };
  Policy policyOf(const KeyId& target) const;

  // ---- events, in stream order; `now` is the test's clock at the write, `what` the command ----

  /** A write of `after` (the source's value after the command; type "none" if the command left
   * no key, e.g. an LPOP of the last element). `before` is the source's value before it, which
   * is what an in-place write needs the target copy to hold. `e` is the replicated deadline for
   * WriteKind::Deadline and the source's current deadline for WriteKind::InPlace. */
  void write(const KeyId& source, WriteKind kind, int64_t e, const Value& before,
             const Value& after, int64_t now, const std::string& what);
  /** expiry-semantics.md §12: the copy the target ended, restored with the source's deadline
   *  `e` (the value is the one the model holds for the key). */
  void restoreCopy(TargetKey& t, int64_t e, int64_t now, const std::string& what);
  /** PEXPIREAT k E (any flag) that took effect on the source, with E in the future. */
  void expireAt(const KeyId& source, int64_t e, int64_t now, const std::string& what);
  /** PERSIST k that took effect on the source. */
  void persist(const KeyId& source, int64_t now, const std::string& what);
  /** DEL/UNLINK of one key, classified as §5 says (the caller knows the source's deadline). */
  void remove(const KeyId& source, RemoveCause cause, int64_t now, const std::string& what);
  /** RENAME a b (keep_from = false) or COPY a b [REPLACE] (keep_from = true): b gets the value
   * of a and clamp(source deadline of a) under b's collection. `from_value` is the source's
   * value of a before the command, which the target copy of a must hold for b's value to be
   * known; `to_value` the source's value of b after it (the same contents; a COPY of a
   * hashtable may serialize its members in another order). */
  void move(const KeyId& from, const KeyId& to, int64_t from_deadline, const Value& from_value,
            const Value& to_value, bool keep_from, int64_t now, const std::string& what);
  /** FLUSHDB on source db `db`. */
  void flush(int db, int64_t now, const std::string& what);
  /** The test wrote a new deadline directly on the TARGET copy of `source` (not through the
   * agent): the target's own write. */
  void targetOwnWrite(const KeyId& source, int64_t deadline, int64_t now, const std::string& what);
  /** A history line for the key's target copy (or for the dropped key) without a change. */
  void note(const KeyId& source, const std::string& what);

  /** The source's expiration of `source` is due near the final check: mark its target copy so
   * that both outcomes are accepted (only if the expiration would change the target). */
  void markRemovalAmbiguous(const KeyId& source, int64_t now, const std::string& what);
  /** After a comparison: the source keys concerned are still tracked, their expirations come
   * as events later. */
  void clearRemovalAmbiguity();

  /**
   * Whether the target copy of `source` holds `source_value` at time `t` with its value known:
   * both absent counts. Keys the pipeline drops are always "in sync" (the target never sees
   * them). The generator uses this to stay away from writes whose target result the source
   * cannot tell (an in-place write onto a diverged copy).
   */
  bool inSync(const KeyId& source, const Value& source_value, int64_t t) const;
  /** The target copy of `source`, or nullptr (dropped key, or never written). */
  const TargetKey* targetKey(const KeyId& source) const;

  const std::map<KeyId, TargetKey>& targets() const { return targets_; }
  /** History lines of keys the pipeline drops (for failure messages). */
  const std::map<KeyId, std::vector<std::string>>& droppedHistory() const { return dropped_; }

  /** Relative times in history lines are printed against this instant (the run's start). */
  void setEpoch(int64_t epoch_ms) { epoch_ms_ = epoch_ms; }
  std::string rel(int64_t abs_ms) const;

  // Counters for the run's summary.
  struct Stats {
    int64_t writes = 0;
    int64_t expired_on_arrival = 0;
    int64_t deletions = 0;
    int64_t deletions_dropped = 0;
    int64_t expirations = 0;
    int64_t expirations_dropped = 0;
    int64_t dropped_by_key_or_db = 0;
    int64_t expiry_changes = 0;
    int64_t flushes = 0;
    int64_t flushes_dropped = 0;
    int64_t value_unknown = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  TargetKey& slot(const KeyId& target);
  void log(TargetKey& t, const std::string& line);
  /** Sets the target deadline; a deadline at or before `now` removes the key (expired on
   * arrival). Returns the text for the history line. */
  std::string setDeadline(TargetKey& t, int64_t deadline, int64_t now);
  std::string describeDeadline(int64_t deadline) const;
  /** §8.4: the key's first-seen second, recorded at `now` (rounded up) if it has none or its
   * lifetime is over. 0 without max_lifetime. */
  int64_t touchFirst(TargetKey& t, const Policy& p, int64_t now);
  /** §8.1 for a whole-value or deadline-only write: fill (default_ttl), cap (max_lifetime),
   * clamp (max_ttl). */
  static int64_t policyDeadline(int64_t e, const Policy& p, int64_t first_s, int64_t now);
  /** PEXPIREAT / PERSIST (`e` = 0) in a collection with a policy. */
  void deadlineOnly(TargetKey& t, const Policy& pol, int64_t e, int64_t now,
                    const std::string& what);

  ModelConfig config_;
  std::vector<std::regex> include_;
  std::vector<std::regex> exclude_;
  std::map<KeyId, TargetKey> targets_;
  std::map<KeyId, std::vector<std::string>> dropped_;
  int64_t epoch_ms_ = 0;
  Stats stats_;
};

}  // namespace xdcr::test
