#include "target/max_ttl.h"

#include <algorithm>

namespace xdcr::target {

bool globMatch(std::string_view p, std::string_view s) {
  // Iterative matcher with single-star backtracking: linear for one `*`, and never recursive,
  // so a hostile pattern cannot blow the stack.
  size_t pi = 0, si = 0;
  size_t star_p = std::string_view::npos, star_s = 0;
  while (si < s.size()) {
    if (pi < p.size()) {
      char c = p[pi];
      if (c == '*') {
        while (pi < p.size() && p[pi] == '*') ++pi;
        if (pi == p.size()) return true;
        star_p = pi;
        star_s = si;
        continue;
      }
      if (c == '?') {
        ++pi;
        ++si;
        continue;
      }
      if (c == '[') {
        size_t q = pi + 1;
        bool negate = q < p.size() && p[q] == '^';
        if (negate) ++q;
        bool matched = false;
        while (q < p.size() && p[q] != ']') {
          if (p[q] == '\\' && q + 1 < p.size()) {
            matched |= p[q + 1] == s[si];
            q += 2;
          } else if (q + 2 < p.size() && p[q + 1] == '-' && p[q + 2] != ']') {
            char lo = p[q], hi = p[q + 2];
            if (lo > hi) std::swap(lo, hi);
            matched |= s[si] >= lo && s[si] <= hi;
            q += 3;
          } else {
            matched |= p[q] == s[si];
            ++q;
          }
        }
        if (negate) matched = !matched;
        if (matched) {
          pi = q < p.size() ? q + 1 : q;
          ++si;
          continue;
        }
      } else {
        char lit = c;
        size_t adv = 1;
        if (c == '\\' && pi + 1 < p.size()) {
          lit = p[pi + 1];
          adv = 2;
        }
        if (lit == s[si]) {
          pi += adv;
          ++si;
          continue;
        }
      }
    }
    if (star_p == std::string_view::npos) return false;
    pi = star_p;
    si = ++star_s;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

MaxTtlPolicy::MaxTtlPolicy(const std::vector<config::BucketConfig>& buckets) {
  for (const auto& b : buckets) {
    if (b.db < 0) continue;
    if (static_cast<size_t>(b.db) >= by_db_.size()) by_db_.resize(b.db + 1);
    Bucket& out = by_db_[b.db];
    out.max_ttl_ms = b.max_ttl.count();
    out.any = out.max_ttl_ms > 0;
    for (const auto& c : b.collections) {
      Collection col{c.name, c.keys, {}, false, c.max_ttl.count(), {}};
      col.policy.default_ttl_ms = c.default_ttl.count();
      col.policy.ttl_field = c.ttl_field;
      col.policy.expire_at_field = c.expire_at_field;
      col.policy.expire_after_ms = c.expire_after.count();
      col.policy.max_lifetime_ms = c.max_lifetime.count();
      out.policies = out.policies || col.policy.any();
      max_lifetime_ms_ = std::max(max_lifetime_ms_, col.policy.max_lifetime_ms);
      // "literal*" is by far the common shape (sess:*): match it with a prefix compare.
      size_t special = c.keys.find_first_of("*?[\\");
      if (special != std::string::npos && special == c.keys.size() - 1 && c.keys.back() == '*') {
        col.prefix = c.keys.substr(0, special);
        col.prefix_only = true;
      }
      out.any = out.any || col.max_ttl_ms > 0;
      out.collections.push_back(std::move(col));
    }
    empty_ = empty_ && !out.any;
    has_policies_ = has_policies_ || out.policies;
  }
}

const MaxTtlPolicy::Collection* MaxTtlPolicy::match(const Bucket& b, std::string_view key) const {
  for (const auto& c : b.collections) {
    bool m = c.prefix_only ? key.substr(0, c.prefix.size()) == c.prefix : globMatch(c.glob, key);
    if (m) return &c;  // first match wins
  }
  return nullptr;
}

int64_t MaxTtlPolicy::effectiveMs(int db, std::string_view key) const {
  if (db < 0 || static_cast<size_t>(db) >= by_db_.size()) return 0;
  const Bucket& b = by_db_[db];
  if (!b.any) return 0;
  const Collection* c = match(b, key);
  // A collection max_ttl of 0 inherits the bucket's (§3); it does not mean "unlimited".
  return (c != nullptr && c->max_ttl_ms > 0) ? c->max_ttl_ms : b.max_ttl_ms;
}

KeyPolicy MaxTtlPolicy::resolve(int db, std::string_view key) const {
  KeyPolicy out;
  if (db < 0 || static_cast<size_t>(db) >= by_db_.size()) return out;
  const Bucket& b = by_db_[db];
  if (!b.any && !b.policies) return out;
  const Collection* c = match(b, key);
  out.max_ttl_ms = (c != nullptr && c->max_ttl_ms > 0) ? c->max_ttl_ms : b.max_ttl_ms;
  if (c != nullptr && c->policy.any()) out.policy = &c->policy;
  return out;
}

std::string_view MaxTtlPolicy::collectionOf(int db, std::string_view key) const {
  if (db < 0 || static_cast<size_t>(db) >= by_db_.size()) return "_default";
  const Collection* c = match(by_db_[db], key);
  return c ? std::string_view(c->name) : std::string_view("_default");
}

}  // namespace xdcr::target
