#pragma once
// A memcached server's clock, read with `stats` → `STAT time <unix seconds>`. memcached keeps
// its own timeline: the wall clock read ONCE at its start plus CLOCK_MONOTONIC since, updated by
// a timer once a second (memcached.c clock_handler). Absolute deadlines (`T<unix s>`) are
// converted on that timeline, so it — not the host's clock — is what a memcached target's
// deadlines are measured against (seed-systems notes §1: a host clock step after memcached's
// start does not move it).
//
// The reading has a 1 s grain and lags: STAT time is a whole second, refreshed once a second,
// so at a true instant t it reads between about t − 2 s and t (measured here: t − 0.76 s to
// t − 1.72 s). The estimate takes the middle of that range (STAT time + 1 s against the midpoint
// of the exchange) and says so in its bound: 1 s + RTT/2. evaluateSkew widens max_skew by the
// bound of such a coarse clock (ClusterClockReport::grain_ns), so the grain alone never raises
// a skew alarm.

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

/** The grain of a memcached clock reading (its bound beyond RTT/2). */
inline constexpr int64_t kMemcachedGrainNs = 1'000'000'000;

/** `STAT time N` of a `stats` reply line: N in Unix seconds; nullopt for another line. */
std::optional<int64_t> parseStatTime(std::string_view line);

/** Offset from one exchange: memcached read `server_s` somewhere in [t1, t4]. Pure. */
RedisTimeSample memcachedSampleFrom(int64_t t1_ns, int64_t server_s, int64_t t4_ns);

/** `samples` exchanges of `stats` on `conn` (connected); the minimum-RTT one. */
boost::asio::awaitable<Result<RedisTimeSample>> probeMemcachedTime(
    RedisConnection& conn, int samples, std::chrono::milliseconds timeout,
    const WallClockNs& now_ns = systemNowNs);

}  // namespace xdcr::clock
