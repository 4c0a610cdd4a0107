// Selection across NTP servers on fixed inputs (RFC 5905 §11.2.1 intersection, median).

#include "clock/ntp_selection.h"

#include <gtest/gtest.h>

namespace xdcr::clock {
namespace {

constexpr int64_t kUs = 1'000;
constexpr int64_t kMs = 1'000'000;
constexpr int64_t kS = 1'000'000'000;

ServerSample srv(std::string name, int64_t offset, int64_t delay = 60 * kUs,
                 int64_t root_distance = 0) {
  return ServerSample{std::move(name), offset, delay, root_distance};
}

const ServerVerdict& verdict(const std::vector<ServerVerdict>& v, const std::string& name) {
  for (const auto& x : v) {
    if (x.name == name) {
      return x;
    }
  }
  ADD_FAILURE() << "no verdict for " << name;
  static ServerVerdict none;
  return none;
}

TEST(clock_NtpSelection, OneThirtySecondFalsetickerOfFour) {
  std::vector<ServerSample> s = {srv("a", 200 * kUs), srv("b", -300 * kUs),
                                 srv("ft", 30 * kS + 100 * kUs), srv("c", 500 * kUs)};
  auto r = selectServers(s);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->truechimers, 3u);
  EXPECT_EQ(r->offset_ns, 200 * kUs);  // median of -0.3, +0.2, +0.5 ms
  for (const char* honest : {"a", "b", "c"}) {
    EXPECT_LE(std::abs(r->offset_ns - verdict(r->servers, honest).offset_ns), kMs);
    EXPECT_TRUE(verdict(r->servers, honest).truechimer) << honest;
  }
  EXPECT_FALSE(verdict(r->servers, "ft").truechimer);
  EXPECT_LE(r->low_ns, -300 * kUs);
  EXPECT_GE(r->high_ns, 500 * kUs);
  EXPECT_EQ(r->servers[2].name, "ft");  // input order kept
}

TEST(clock_NtpSelection, ClockNotesFiveServers) {
  // clock-notes §4: 0, +20 ms, -15 ms honest; +30 s and -45 s falsetickers; floor 50 ms.
  std::vector<ServerSample> s = {srv("1", 15 * kUs), srv("2", 20 * kMs), srv("3", -15 * kMs),
                                 srv("4", 30 * kS), srv("5", -45 * kS)};
  auto r = selectServers(s);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->truechimers, 3u);
  EXPECT_EQ(r->offset_ns, 15 * kUs);
  EXPECT_FALSE(r->servers[3].truechimer);
  EXPECT_FALSE(r->servers[4].truechimer);
  // With a 1 ms floor the honest ones no longer overlap: no majority (as select_servers.py).
  SelectionParams tight;
  tight.tolerance_ns = kMs;
  auto t = selectServers(s, tight);
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().message.find("no majority"), std::string::npos);
}

TEST(clock_NtpSelection, TwoAgainstTwoIsNoMajority) {
  std::vector<ServerSample> s = {srv("a", 0), srv("b", 1 * kMs), srv("c", 30 * kS),
                                 srv("d", 30 * kS + 2 * kMs)};
  auto r = selectServers(s);
  ASSERT_FALSE(r.has_value()) << "selected " << r->offset_ns;
  EXPECT_NE(r.error().message.find("no majority"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("4 NTP servers"), std::string::npos) << r.error().message;
  ASSERT_EQ(r.error().servers.size(), 4u);
  for (const auto& v : r.error().servers) {
    EXPECT_FALSE(v.truechimer);
  }
}

TEST(clock_NtpSelection, ToleranceFloorMakesNearAgreeingServersIntersect) {
  // Loopback servers: microsecond delays, 15-20 ms apart. Without a floor each interval is a few
  // µs wide and nothing overlaps (what chrony did in clock-notes §4).
  std::vector<ServerSample> s = {srv("a", 0, 40 * kUs), srv("b", 20 * kMs, 30 * kUs),
                                 srv("c", -15 * kMs, 50 * kUs)};
  SelectionParams none;
  none.tolerance_ns = 0;
  EXPECT_FALSE(selectServers(s, none).has_value());
  SelectionParams floor;
  floor.tolerance_ns = 50 * kMs;
  auto r = selectServers(s, floor);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->truechimers, 3u);
  EXPECT_EQ(r->offset_ns, 0);
  for (const auto& v : r->servers) {
    EXPECT_EQ(v.lambda_ns, 50 * kMs);
  }
}

TEST(clock_NtpSelection, WideIntervalsAreNotShrunkByTheFloor) {
  ServerSample far = srv("far", 0, 300 * kMs, 20 * kMs);
  EXPECT_EQ(correctnessHalfWidth(far, 50 * kMs), 170 * kMs);
  EXPECT_EQ(correctnessHalfWidth(srv("near", 0, 2 * kMs), 50 * kMs), 50 * kMs);
}

TEST(clock_NtpSelection, LargeTolerancePullsInAModerateOutlier) {
  // clock-notes §4 last row: floor 0.3 s, servers 0, -15 ms, +250 ms, +30 s.
  std::vector<ServerSample> s = {srv("0", 5 * kUs), srv("m15", -15 * kMs), srv("p250", 250 * kMs),
                                 srv("ft", 30 * kS)};
  SelectionParams p;
  p.tolerance_ns = 300 * kMs;
  auto r = selectServers(s, p);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->truechimers, 3u);
  EXPECT_EQ(r->offset_ns, 5 * kUs);
  EXPECT_FALSE(r->servers[3].truechimer);
  p.tolerance_ns = 50 * kMs;  // now +250 ms does not overlap and 2 of 4 is no majority
  EXPECT_FALSE(selectServers(s, p).has_value());
}

TEST(clock_NtpSelection, MajorityCountsSilentServers) {
  std::vector<ServerSample> s = {srv("a", 0), srv("b", 1 * kMs)};
  EXPECT_TRUE(selectServers(s).has_value());  // 2 of 2
  SelectionParams p;
  p.servers_queried = 4;  // two more were asked and gave nothing: 2 of 4 is no majority
  auto r = selectServers(s, p);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("2 server(s) gave no usable sample"), std::string::npos)
      << r.error().message;
  p.servers_queried = 3;
  EXPECT_TRUE(selectServers(s, p).has_value());
}

TEST(clock_NtpSelection, EvenNumberOfTruechimersTakesTheMiddleOfTheTwo) {
  std::vector<ServerSample> s = {srv("a", 1 * kMs), srv("b", 3 * kMs), srv("c", 2 * kMs),
                                 srv("d", 6 * kMs)};
  auto r = selectServers(s);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->truechimers, 4u);
  EXPECT_EQ(r->offset_ns, 2'500 * kUs);
}

TEST(clock_NtpSelection, SingleServerAndNoServers) {
  std::vector<ServerSample> one = {srv("a", 7 * kMs)};
  auto r = selectServers(one);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->offset_ns, 7 * kMs);
  auto e = selectServers(std::vector<ServerSample>{});
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.error().message.find("no majority"), std::string::npos);
}

}  // namespace
}  // namespace xdcr::clock
