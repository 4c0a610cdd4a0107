// The skew monitor against real redis-servers on 127.0.0.1, one of them under libfaketime:
// offsets measured with TIME, a cluster that goes away keeps its last offset with the error
// attached, and a new config is picked up by the next check.

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include "clock/skew_monitor.h"
#include "config/config.h"
#include "tests/support/harness.h"

namespace xdcr::clock {
namespace {

namespace net = boost::asio;
constexpr int64_t kMs = 1'000'000;

config::ConfigConstSharedPtr configFor(uint16_t a, uint16_t b) {
  const std::string yaml =
      "clusters:\n"
      "  a: {type: redis, address: \"127.0.0.1:" +
      std::to_string(a) +
      "\"}\n"
      "  b: {type: redis, address: \"127.0.0.1:" +
      std::to_string(b) +
      "\"}\n"
      "pipelines:\n"
      "  - {name: p, source: a, target: b}\n";
  auto r = config::loadConfigString(yaml, "test.yaml");
  if (!r.ok()) throw std::runtime_error(r.diagnostics.at(0).format());
  return r.config;
}

ClockReport checkOnce(net::io_context& ioc, SkewMonitor& m) {
  std::optional<ClockReport> out;
  net::co_spawn(ioc, m.checkOnce(), [&](std::exception_ptr e, ClockReport r) {
    if (!e) out = std::move(r);
  });
  ioc.restart();
  ioc.run();
  if (!out) throw std::runtime_error("check failed");
  return *out;
}

TEST(clock_SkewMonitor, MeasuresEachClusterAndKeepsTheLastOffsetWhenOneGoesAway) {
  ASSERT_TRUE(test::fakeTimeAvailable()) << "scripts/install-deps.sh --test installs faketime";
  test::RedisServer a;
  test::FakeTimeRedis b(-2.5);
  net::io_context ioc;
  SkewMonitor monitor(ioc.get_executor(), configFor(a.port(), b->port()));
  int reports = 0;
  monitor.onReport([&](const ClockReport&) { ++reports; });

  ClockReport r = checkOnce(ioc, monitor);
  EXPECT_EQ(r.check, 1u);
  EXPECT_EQ(reports, 1);
  EXPECT_FALSE(r.ntp.configured);
  ASSERT_TRUE(r.cluster("a")->measured) << r.cluster("a")->error;
  ASSERT_TRUE(r.cluster("b")->measured) << r.cluster("b")->error;
  EXPECT_LT(std::llabs(r.cluster("a")->offset_ns), 2 * kMs);
  EXPECT_NEAR(double(r.cluster("b")->offset_ns), -2500.0 * kMs, 2.0 * kMs);
  EXPECT_LT(r.cluster("b")->bound_ns, 5 * kMs);
  auto skew = evaluateSkew(r, "a", "b", 500 * kMs);
  EXPECT_NEAR(double(skew.delta_ns), -2500.0 * kMs, 3.0 * kMs);

  // b changes its clock at run time: the next check sees it on the kept connection.
  b.setSkew(1.0);
  r = checkOnce(ioc, monitor);
  EXPECT_NEAR(double(r.cluster("b")->offset_ns), 1000.0 * kMs, 2.0 * kMs);

  // A reload that moves cluster b to another server: the next check measures the new one, not
  // the old one on the kept connection (b is still up, 1 s ahead).
  test::RedisServer c;
  monitor.setConfig(configFor(a.port(), c.port()));
  r = checkOnce(ioc, monitor);
  ASSERT_TRUE(r.cluster("b")->measured) << r.cluster("b")->error;
  EXPECT_LT(std::llabs(r.cluster("b")->offset_ns), 2 * kMs);

  // b goes away: its last offset stays (clocks do not jump because a probe failed), with why.
  const int64_t last = r.cluster("b")->offset_ns;
  c.stop();
  r = checkOnce(ioc, monitor);
  EXPECT_TRUE(r.cluster("b")->measured);
  EXPECT_EQ(r.cluster("b")->offset_ns, last);
  EXPECT_NE(r.cluster("b")->error.find("cluster b"), std::string::npos) << r.cluster("b")->error;
  EXPECT_TRUE(r.cluster("a")->error.empty());
  EXPECT_EQ(r.check, 4u);
}

}  // namespace
}  // namespace xdcr::clock
