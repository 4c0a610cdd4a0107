#pragma once
// A memcached server's clock, read with `stats` → `STAT time <unix seconds>`. memcached keeps
// its own timeline: the wall clock read ONCE at its start plus CLOCK_MONOTONIC since, updated by
// a timer once a second (memcached.c clock_handler). Absolute deadlines (`T<unix s>`) are
// converted on that timeline, so it — not the host's clock — is what a memcached target's
// deadlines are measured against (seed-systems notes §1: a host clock step after memcached's
// start does not move it).
//
// The reading is coarse: STAT time is `floor(wall at start) + floor(monotonic at the last tick) -
// floor(monotonic at start)`, the tick once a second. Each floor takes up to 1 s off, the one at
// start adds up to 1 s back, and the tick lags up to 1 s: at a true instant t it reads anywhere
// in (t − 3 s, t + 1 s), depending on the sub-second phase memcached started at (measured here
// on one server: t − 0.76 s to t − 1.72 s; on a fresh machine's: t + 0.885 s). The estimate takes
// the middle of that range (STAT time + 1 s against the midpoint of the exchange) and says so in
// its bound: 2 s + RTT/2. evaluateSkew widens max_skew by the bound of such a coarse clock
// (ClusterClockReport::grain_ns), so the grain alone never raises a skew alarm.

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

#include "clock/redis_time.h"
#include "clock/sntp_client.h"
#include "common/error.h"
#include "common/redis_conn.h"

namespace xdcr::clock {

/** What STAT time lags the true time by, in the middle of its range (the estimate adds it). */
inline constexpr int64_t kMemcachedStatMidpointNs = 1'000'000'000;
/** The grain of a memcached clock reading: half its range, its bound beyond RTT/2. */
inline constexpr int64_t kMemcachedGrainNs = 2'000'000'000;

/** `STAT time N` of a `stats` reply line: N in Unix seconds; nullopt for another line. */
std::optional<int64_t> parseStatTime(std::string_view line);

/** Offset from one exchange: memcached read `server_s` somewhere in [t1, t4]. Pure. */
RedisTimeSample memcachedSampleFrom(int64_t t1_ns, int64_t server_s, int64_t t4_ns);

/** `samples` exchanges of `stats` on `conn` (connected); the minimum-RTT one. */
boost::asio::awaitable<Result<RedisTimeSample>> probeMemcachedTime(
    RedisConnection& conn, int samples, std::chrono::milliseconds timeout,
    const WallClockNs& now_ns = systemNowNs);

}  // namespace xdcr::clock
