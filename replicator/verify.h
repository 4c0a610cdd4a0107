#pragma once
// `xdcr-agent verify -c FILE -p PIPELINE` (interface.md §1): does the target hold what the
// pipeline's rules say it should, for every source key (or a sample)?
//
// For each source key that the pipeline replicates (its db is mapped, its name passes the key
// filters), the target key (db map, key_rewrite) must exist with an equal value (compared per
// type, element by element) and a deadline that the rules of expiry-semantics.md allow:
//   - the source deadline E (none with strip_ttl), translated by the measured skew Δ when
//     clock.on_skew is compensate and |Δ| is over max_skew, within the tolerance; or
//   - with a target maxTTL M: a clamped deadline, earlier than E, and no later than the
//     target's now + M (the write it came from happened at some past instant, unknown here).
// A hash's fields (Redis 7.4+/8, Valkey 9: HPEXPIRETIME, read in batches) follow the same rules
// with no maxTTL clamp: none with strip_ttl, else the source field's deadline (shifted),
// within the tolerance; a field whose source deadline is within the tolerance of passing is no
// difference. A side without field TTLs (HPEXPIRETIME "unknown command") has none on any field.
// A Redis 8 vector set is compared by content (VCARD, VDIM, each element's VEMB and VGETATTR),
// other module types by DUMP.
// A key that differs is read again after a pause (up to --rechecks times): on a live pipeline
// the target is a little behind, and only differences that persist are reported. With a maxTTL
// a key may legitimately be gone from the target before it is gone from the source, but only
// once its copy's clamped deadline has passed: a key absent on the target is "expired" (counted
// apart, listed with examples) only when the rules prove it — the source key idle (OBJECT
// IDLETIME, read before its value, with CLIENT NO-TOUCH where the server has it) and the
// pipeline's last full sync (its checkpoint in agent.state_dir) both over max_ttl + tolerance
// ago (verify_compare.h, judgeAbsence); otherwise it is missing, a difference.
// A key of a collection with an expiry policy beside max_ttl (default_ttl, ttl_field,
// expire_at_field, max_lifetime; expiry-semantics.md §8.7) is judged with the agent's own
// decision (target::decide) on the source's value, max_lifetime's first-seen files read
// read-only (replicator/first_seen_view.h); a deadline only another write kind than a
// whole-value one could have left is counted as not checked, not as a difference nor a pass.
//
// It is meant for production clusters: SCAN with COUNT, pipelined batches, and a rate limit.

#include <chrono>
#include <cstdint>
#include <string>

#include "config/config.h"

namespace xdcr::replicator {

struct VerifyOptions {
  std::string pipeline;
  std::chrono::milliseconds ttl_tolerance{1000};
  uint64_t sample = 0;  // 0 = every key; else about this many, spread over the key space
  double rate = 5000;   // keys per second at most (both clusters together see 2–3 commands a key)
  int rechecks = 3;     // how often a differing key is read again before it counts
  std::chrono::milliseconds recheck_delay{1000};
  bool json = false;  // the summary and examples as JSON on stdout
};

/** Exit status: 0 in sync, 1 differences, 2 cannot connect, 78 invalid pipeline name. */
int runVerify(const config::ConfigConstSharedPtr& config, const VerifyOptions& options);

}  // namespace xdcr::replicator
