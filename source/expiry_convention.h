#pragma once
// Expiries that arrive as a bare number of SECONDS (memcached and Couchbase protocols, document
// fields: expiry-semantics.md §2, seed 001): 0 = none, 1..2592000 (30 days) = relative to now,
// larger = an absolute Unix time in seconds. Redis sources never need this (they send absolute
// milliseconds); it is here so that sources with this convention convert once, at the edge,
// into the pipeline's only representation: an absolute deadline in epoch milliseconds.

#include <cstdint>
#include <optional>

namespace xdcr::source {

inline constexpr int64_t kMemcachedRelativeLimitS = 30LL * 24 * 3600;  // 2,592,000

/**
 * The absolute deadline (epoch ms, 0 = none) of a memcached-style expiry `seconds` received at
 * `now_ms` (the clock of the system that sent it). nullopt for a negative value (invalid input).
 */
constexpr std::optional<int64_t> memcachedExpiryToDeadlineMs(int64_t seconds, int64_t now_ms) {
  if (seconds < 0) return std::nullopt;
  if (seconds == 0) return 0;
  if (seconds <= kMemcachedRelativeLimitS) return now_ms + seconds * 1000;
  return seconds * 1000;
}

}  // namespace xdcr::source
