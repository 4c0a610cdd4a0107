#pragma once
// The target's maxTTL (expiry-semantics.md §3) and the clamp (§4).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "target/expiry_policy.h"

namespace xdcr::target {

/**
 * The clamp: the deadline a create or mutation gets on the target.
 *   M == 0                     -> E           (0 stays 0)
 *   E == 0 or E > now + M      -> now + M
 *   otherwise                  -> E
 * All values in ms: E and the result absolute (target domain), M a duration, `now` the target's
 * clock at the write.
 */
constexpr int64_t clampDeadline(int64_t e, int64_t m, int64_t now) {
  if (m == 0) return e;
  if (e == 0 || e > now + m) return now + m;
  return e;
}

/** Redis glob matching (the MATCH syntax: `*`, `?`, `[a-z]`, `[^x]`, `\` escapes). */
bool globMatch(std::string_view pattern, std::string_view text);

/** A target cluster's buckets and collections, resolved per key. Immutable. */
class MaxTtlPolicy {
 public:
  explicit MaxTtlPolicy(const std::vector<config::BucketConfig>& buckets);

  /** Effective maxTTL M in ms of `key` in target db `db` (0 = none). */
  int64_t effectiveMs(int db, std::string_view key) const;
  /** true if no bucket has any maxTTL (the clamp can be skipped altogether). */
  bool empty() const { return empty_; }
  /** Name of the collection `key` belongs to ("_default" if none). */
  std::string_view collectionOf(int db, std::string_view key) const;

  /**
   * Everything that decides `key`'s deadline (expiry-semantics.md §8): M and its collection's
   * policies (default_ttl, ttl_field, expire_at_field, max_lifetime), for decide().
   */
  KeyPolicy resolve(int db, std::string_view key) const;
  /** true if a collection has a policy beside max_ttl (resolve() is then needed). */
  bool hasPolicies() const { return has_policies_; }
  /** The largest max_lifetime of any collection, 0 = none (FirstSeenStore is then not needed). */
  int64_t maxLifetimeMs() const { return max_lifetime_ms_; }

 private:
  struct Collection {
    std::string name;
    std::string glob;
    std::string prefix;  // when glob is "<literal prefix>*": a fast path
    bool prefix_only = false;
    int64_t max_ttl_ms;  // 0 = inherit
    CollectionPolicy policy;
  };
  struct Bucket {
    int64_t max_ttl_ms = 0;
    std::vector<Collection> collections;
    bool any = false;       // any maxTTL at all in this bucket
    bool policies = false;  // any collection with a policy beside max_ttl
  };
  const Collection* match(const Bucket& b, std::string_view key) const;

  std::vector<Bucket> by_db_;
  bool empty_ = true;
  bool has_policies_ = false;
  int64_t max_lifetime_ms_ = 0;
};

}  // namespace xdcr::target
