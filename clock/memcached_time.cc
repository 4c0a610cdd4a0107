#include "clock/memcached_time.h"

#include <charconv>
#include <string>

#include <fmt/format.h>

namespace xdcr::clock {

std::optional<int64_t> parseStatTime(std::string_view line) {
  constexpr std::string_view kPrefix = "STAT time ";
  if (line.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  const std::string_view num = line.substr(kPrefix.size());
  int64_t v = 0;
  auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
  if (ec != std::errc() || p != num.data() + num.size() || v <= 0) return std::nullopt;
  return v;
}

RedisTimeSample memcachedSampleFrom(int64_t t1_ns, int64_t server_s, int64_t t4_ns) {
  RedisTimeSample s;
  s.rtt_ns = t4_ns - t1_ns;
  // The middle of the range STAT time stands for (t − 3 s to t + 1 s: memcached_time.h).
  const int64_t server_ns = server_s * 1'000'000'000 + kMemcachedStatMidpointNs;
  s.offset_ns = server_ns - (t1_ns + s.rtt_ns / 2);
  s.bound_ns = s.rtt_ns / 2 + kMemcachedGrainNs;
  s.samples = 1;
  return s;
}

boost::asio::awaitable<Result<RedisTimeSample>> probeMemcachedTime(
    RedisConnection& conn, int samples, std::chrono::milliseconds timeout,
    const WallClockNs& now_ns) {
  std::optional<RedisTimeSample> best;
  int valid = 0;
  for (int i = 0; i < std::max(samples, 1); ++i) {
    const int64_t t1 = now_ns();
    if (auto w = co_await conn.writeAll("stats\r\n"); !w) co_return fail(w.error());
    std::optional<int64_t> server_s;
    for (;;) {
      auto line = co_await conn.readLine(timeout);
      if (!line) co_return fail(line.error());
      if (*line == "END") break;
      if (line->rfind("STAT ", 0) != 0) {
        co_return fail(Error::protocol(fmt::format(
            "{}: `stats` answered \"{}\": is this a memcached server?", conn.label(), *line)));
      }
      if (auto t = parseStatTime(*line)) server_s = t;
    }
    const int64_t t4 = now_ns();
    if (!server_s || t4 < t1) continue;
    ++valid;
    RedisTimeSample s = memcachedSampleFrom(t1, *server_s, t4);
    if (!best || s.rtt_ns < best->rtt_ns) best = s;
  }
  if (!best) {
    co_return fail(Error::protocol(
        fmt::format("{}: no usable `stats` time; the agent cannot measure this memcached's clock",
                    conn.label())));
  }
  best->samples = valid;
  co_return *best;
}

}  // namespace xdcr::clock
