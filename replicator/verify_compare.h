#pragma once
// The pure rules of `xdcr-agent verify` (verify.cc) that need no server: what deadline the target
// should hold for a source deadline, hash-field deadlines (Redis 7.4+/8, Valkey 9: HPEXPIRETIME),
// and Redis 8 vector sets compared by content.
//
// Field deadlines follow the key deadline's rules (expiry-semantics.md), except the target's
// max_ttl, which clamps a key's deadline only: a field deadline travels absolute; with
// filters.strip_ttl the target field has none; otherwise it equals the source's, translated by the
// compensation shift, within the tolerance. A field whose source deadline has passed or is within
// the tolerance of passing, or that the source no longer has, is no difference.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/resp_value.h"
#include "target/expiry_policy.h"

namespace xdcr::replicator::verify {

/** How a target deadline must relate to its source deadline (absolute ms; -1 none). */
struct DeadlineRules {
  bool strip_ttl = false;
  int64_t shift_ms = 0;  // compensation Δ (clock.on_skew compensate, |Δ| over max_skew)
  int64_t tolerance_ms = 1000;

  /** The deadline the target should hold for the source deadline `source`, before any maxTTL:
   *  none with strip_ttl or without a source deadline, else the source's + the shift. */
  int64_t expected(int64_t source) const;
  /** Both none, or both set and within the tolerance of each other. */
  bool matches(int64_t expected, int64_t target) const;
  /**
   * Whether the target deadline `target` (-1 none) is one the rules allow for the source
   * deadline `source` (-1 none) under the target's maxTTL `max_ttl_ms` (0 none): the expected
   * deadline within the tolerance (with a maxTTL, some deadline is required), or a clamp made
   * by a past write — earlier than the expected deadline and no later than `target_now_ms` +
   * maxTTL (the write happened at some instant before now, unknown here).
   */
  bool allows(int64_t source, int64_t target, int64_t max_ttl_ms, int64_t target_now_ms) const;
};

/** "none", "absent" (HPEXPIRETIME's -2: no such field) or the deadline in ms. */
std::string formatDeadline(int64_t deadline);

/** `s` quoted for a message: printable ASCII as is, other bytes \xNN, at most 80 bytes. */
std::string quote(const std::string& s);

// --- a key absent on the target under a max_ttl ------------------------------------------------

/**
 * What verify knows about a source key whose copy the target lacks, where the target's max_ttl
 * M > 0 clamps that copy's deadline to (the time the agent wrote it) + M. The agent wrote it
 * after the key's last write on the source (the stream, by the pipeline's lag) or in a full
 * sync. The copy has provably expired only when both are at least M (+ the tolerance) ago:
 *  - the source key's OBJECT IDLETIME, read before verify read its value: the seconds since the
 *    last access, a read or a write, so a lower bound on the time since its last write; with
 *    1 s resolution, the last access was more than idle - 1 s ago;
 *  - the moment the pipeline's last full sync had written all its keys, at the latest: the
 *    checkpoint image written after it (agent.state_dir).
 * Anything else (an idle time that cannot be read, no checkpoint) proves nothing: missing.
 */
struct AbsenceEvidence {
  int64_t max_ttl_ms = 0;
  int64_t tolerance_ms = 0;
  int64_t idle_s = -1;              // OBJECT IDLETIME of the source key; -1 unreadable
  std::string idle_unreadable;      // why, when idle_s < 0
  int64_t since_full_sync_ms = -1;  // now - the latest the last full sync wrote; -1 unknown
  std::string full_sync_unknown;    // why, when since_full_sync_ms < 0
};

struct AbsenceVerdict {
  bool expired = false;  // else missing
  std::string detail;
};

/** Expired by max_ttl (not a difference) only when the evidence proves it; else missing. */
AbsenceVerdict judgeAbsence(const AbsenceEvidence& e);

/** A duration for a message: "3600 s", "2.5 s". */
std::string formatSeconds(int64_t ms);

// --- a key whose collection has an expiry policy (expiry-semantics.md §8) ----------------------

/** max_lifetime's first-seen second of a key as STATE_DIR/<instance>.first-seen holds it, read
 *  read-only; min_s < max_s when two instances' files disagree (a slot moved). 0: no record. */
struct FirstSeenFact {
  int64_t min_s = 0, max_s = 0;
  bool known() const { return min_s > 0; }
};

/** What verify knows about a key whose collection has a policy beside max_ttl. */
struct PolicyFacts {
  target::KeyPolicy policy;  // M and the collection's policies (MaxTtlPolicy::resolve)
  int64_t e = 0;             // the source deadline in the target's clock (strip_ttl, shift); 0 none
  std::optional<std::string_view> value;  // the source's value when it is a string
  bool in_place_possible = true;          // Redis; memcached deletes the key on in-place writes
  FirstSeenFact first;
  int64_t now = 0;  // the target's clock now
  int64_t tolerance_ms = 1000;
};

/**
 * What target::decide gives a whole-value write of the source's current value and deadline
 * made at some instant w up to `now` (the instant is unknown; the decision is monotone in w):
 * lo at a write long ago, hi at a write now. Both 0: no deadline. With max_lifetime and no
 * first-seen record, the first second is anything up to now (hi: now, lo: long ago).
 */
struct PolicyRange {
  int64_t lo = 0, hi = 0;
  std::string rule;  // the rule that gives hi ("default_ttl", "ttl_field", "E", ...)
};
PolicyRange wholeValueRange(const PolicyFacts& f);

enum class PolicyVerdict {
  Ok,          // the deadline a whole-value write gives (within the tolerance)
  NotChecked,  // not that, but one another write kind could have left (§8.1): counted apart
  Mismatch,    // no write kind gives it
};

struct PolicyJudgement {
  PolicyVerdict verdict = PolicyVerdict::Ok;
  std::string expected;  // "1700000060000 (ttl_field)", "at most 1700003600000 (default_ttl...)"
  std::string detail;    // NotChecked and Mismatch: a sentence for the report
};

/**
 * The target deadline `target` (-1 none) of a key under a policy: Ok when a whole-value write
 * gives it (wholeValueRange, within the tolerance); NotChecked when only another write kind
 * could have left it — a deadline-only write (no field read), or on Redis in a filling
 * collection an in-place or keep-TTL write (the deadline of an earlier write stays; the caps
 * only lower it): at most E, else at most the caps, else (no cap) none or at most now +
 * default_ttl (a string under ttl_field / expire_at_field: any, an older value's field);
 * Mismatch otherwise.
 */
PolicyJudgement judgePolicyDeadline(const PolicyFacts& f, int64_t target);

/**
 * A key absent on the target under a policy: expired when the deadline a whole-value write
 * gives has passed (expired on arrival), or when the evidence (`e`: the source key's idle time,
 * the last full sync; e.max_ttl_ms unused) bounds its last write early enough that the deadline
 * a write then gave has passed; missing otherwise.
 */
AbsenceVerdict judgePolicyAbsence(const PolicyFacts& f, const AbsenceEvidence& e);

/** "default_ttl 3600 s", "ttl_field \"ttl\" (default_ttl -1)", "max_lifetime 90 d", ... */
std::string describePolicy(const target::KeyPolicy& p);

// --- hash-field deadlines ----------------------------------------------------------------------

/** What a side can say about field deadlines, learnt from its first HPEXPIRETIME reply. */
enum class FieldTtlSupport {
  Unknown,     // not asked yet
  Yes,         // it answers HPEXPIRETIME
  None,        // "unknown command": a server without field TTLs, so no field has a deadline
  Unreadable,  // another refusal (NOPERM: the ACL user lacks it): not compared
};

/** The support an error reply to HPEXPIRETIME shows (Yes when it is no such error, or one about
 *  the key, like WRONGTYPE). */
FieldTtlSupport fieldTtlSupportOf(const resp::Value& reply);

constexpr size_t kFieldsPerCommand = 1000;

/** HPEXPIRETIME key FIELDS n f1 ... fn for every field of `fields`, `chunk` fields a command. */
std::vector<std::vector<std::string>> fieldDeadlineCommands(const std::string& key,
                                                            const std::vector<std::string>& fields,
                                                            size_t chunk = kFieldsPerCommand);

/** One deadline per field from the replies to fieldDeadlineCommands(), in order; nullopt when a
 *  reply is not an array of `chunk`-many integers (an error: the key changed meanwhile). */
std::optional<std::vector<int64_t>> parseFieldDeadlines(const std::vector<resp::Value>& replies,
                                                        size_t fields);

/** The fields of a normalised HGETALL reply (field, value, ... sorted by field). */
std::vector<std::string> hashFields(const resp::Value& hgetall);

struct FieldDeadlineDiff {
  std::string field;
  int64_t source = -1, target = -1, expected = -1;  // -1 none, -2 no such field
};

/**
 * The fields of `fields` whose target deadline the rules do not allow. `source` and `target`:
 * each field's deadline on that side (HPEXPIRETIME: -1 none, -2 no such field, else absolute ms).
 * `source_now_ms`: the source's clock now (a source deadline at most now + the tolerance is no
 * difference, nor a field the source no longer has).
 */
std::vector<FieldDeadlineDiff> compareFieldDeadlines(const DeadlineRules& rules,
                                                     const std::vector<std::string>& fields,
                                                     const std::vector<int64_t>& source,
                                                     const std::vector<int64_t>& target,
                                                     int64_t source_now_ms);

/** `field "b": deadline: source 1700000000000, target none, expected 1700000000000` for the
 *  first, then "(and N more fields)". */
std::string describeFieldDiffs(const std::vector<FieldDeadlineDiff>& diffs);

// --- vector sets -------------------------------------------------------------------------------

/** One element of a vector set as read: VEMB's reply (the float vector, or nil) and
 *  VGETATTR's (the JSON attribute, or nil). */
struct VectorElement {
  std::string name;
  resp::Value embedding;
  resp::Value attribute;
};

/**
 * A vector set's content as one comparable value: [VCARD, VDIM, [name, [floats...], attribute]
 * per element, sorted by name]; each float as the number it is (its shortest round-trip form).
 * DUMP is no such value: the same content serialises otherwise after a RESTORE.
 */
resp::Value vectorSetValue(const resp::Value& card, const resp::Value& dim,
                           std::vector<VectorElement> elements);

/** What differs between two vectorSetValue()s, naming the first element that differs:
 *  `VCARD: source 120, target 119; element "e7": absent on the target (1 element differs)`. */
std::string describeVectorSetDifference(const resp::Value& source, const resp::Value& target);

}  // namespace xdcr::replicator::verify
