#pragma once
// A Redis server's clock, read with `TIME` (clock-notes §9). TIME is a three-timestamp exchange:
// we note T1, the server reads its clock once (T_srv) while executing the command, we note T4.
// The server read its clock somewhere in [T1, T4], so
//
//   offset = T_srv − (T1 + T4) / 2     (server minus this host, positive = server ahead)
//   |error| ≤ (T4 − T1) / 2 + 1 µs     (TIME's resolution)
//
// Of several samples on one warm connection the minimum-RTT one is kept: it is the least
// disturbed by scheduling (outliers of 0.4–0.8 ms appear even on loopback). Averaging would let
// those outliers in.

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <string_view>

#include "clock/sntp_client.h"
#include "common/error.h"
#include "common/redis_conn.h"

namespace xdcr::clock {

struct RedisTimeSample {
  int64_t offset_ns = 0;  // server clock − this host's clock
  int64_t rtt_ns = 0;     // T4 − T1 of the kept sample
  int64_t bound_ns = 0;   // rtt/2 + 1 µs: the true offset lies within offset ± bound
  int samples = 0;        // exchanges that gave a valid reply
};

/** Parses a TIME reply's two elements ("seconds", "microseconds") into Unix ns. */
Result<int64_t> parseTimeReply(std::string_view seconds, std::string_view micros);

/**
 * Offset from one exchange: T_srv against the midpoint of [T1, T4]. Pure, for the unit tests.
 */
RedisTimeSample timeSampleFrom(int64_t t1_ns, int64_t server_ns, int64_t t4_ns);

/**
 * Sends one warm-up TIME (connection buffers, server-side client structures), then `samples`
 * more on `conn` (connected and authenticated), and returns the minimum-RTT one. Fails if no
 * exchange succeeded; the message names the server (the connection's label).
 */
boost::asio::awaitable<Result<RedisTimeSample>> probeRedisTime(
    RedisConnection& conn, int samples, std::chrono::milliseconds timeout,
    const WallClockNs& now_ns = systemNowNs);

}  // namespace xdcr::clock
