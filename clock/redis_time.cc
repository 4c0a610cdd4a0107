#include "clock/redis_time.h"

#include <fmt/format.h>

#include <charconv>
#include <optional>
#include <vector>

namespace xdcr::clock {

Result<int64_t> parseTimeReply(std::string_view seconds, std::string_view micros) {
  int64_t s = 0, us = 0;
  auto parse = [](std::string_view t, int64_t& v) {
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    return ec == std::errc() && p == t.data() + t.size() && v >= 0;
  };
  if (!parse(seconds, s) || !parse(micros, us) || us >= 1'000'000) {
    return fail(Error::protocol(fmt::format(
        "TIME reply is not [seconds, microseconds]: [\"{}\", \"{}\"]", seconds, micros)));
  }
  return s * 1'000'000'000 + us * 1'000;
}

RedisTimeSample timeSampleFrom(int64_t t1_ns, int64_t server_ns, int64_t t4_ns) {
  RedisTimeSample s;
  s.rtt_ns = t4_ns - t1_ns;
  // T1 + (T4 − T1)/2 rather than (T1 + T4)/2: no overflow, same value.
  s.offset_ns = server_ns - (t1_ns + s.rtt_ns / 2);
  s.bound_ns = s.rtt_ns / 2 + 1'000;
  s.samples = 1;
  return s;
}

boost::asio::awaitable<Result<RedisTimeSample>> probeRedisTime(RedisConnection& conn, int samples,
                                                               std::chrono::milliseconds timeout,
                                                               const WallClockNs& now_ns) {
  std::optional<RedisTimeSample> best;
  std::string last_problem;
  int valid = 0;
  const std::vector<std::string_view> time_cmd = {"TIME"};  // named: GCC 12 miscompiles a
                                                            // braced list inside co_await
  for (int i = 0; i <= samples; ++i) {
    const int64_t t1 = now_ns();
    auto r = co_await conn.call(time_cmd, timeout, /*collect_elements=*/true);
    const int64_t t4 = now_ns();
    if (!r) co_return fail(r.error());  // the connection is broken: no point in going on
    if (r->has_error || r->elements.size() != 2) {
      last_problem = r->has_error ? r->text : "TIME did not return two elements";
      continue;
    }
    auto server = parseTimeReply(r->elements[0], r->elements[1]);
    if (!server) {
      last_problem = server.error().message;
      continue;
    }
    if (i == 0) continue;  // warm-up
    if (t4 < t1) {
      last_problem = "this host's clock stepped backwards during the exchange";
      continue;
    }
    ++valid;
    RedisTimeSample s = timeSampleFrom(t1, *server, t4);
    if (!best || s.rtt_ns < best->rtt_ns) best = s;
  }
  if (!best) {
    co_return fail(
        Error::protocol(fmt::format("{}: no usable TIME reply ({}); the agent cannot "
                                    "measure this cluster's clock",
                                    conn.label(), last_problem)));
  }
  best->samples = valid;
  co_return *best;
}

}  // namespace xdcr::clock
