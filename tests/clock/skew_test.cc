// The pure parts of the skew monitor: a TIME exchange's offset and bound, TIME reply parsing,
// and a pipeline's evaluation against max_skew (expiry-semantics.md §7) on fixed inputs.

#include <gtest/gtest.h>

#include "clock/redis_time.h"
#include "clock/skew.h"

namespace xdcr::clock {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kS = 1'000 * kMs;

TEST(clock_RedisTime, OffsetIsAgainstTheMidpointAndBoundIsHalfTheRtt) {
  // Sent at 1000 s, answered at 1000 s + 40 µs; the server read 1030 s + 20 µs.
  const int64_t t1 = 1000 * kS, t4 = t1 + 40'000, srv = 1030 * kS + 20'000;
  RedisTimeSample s = timeSampleFrom(t1, srv, t4);
  EXPECT_EQ(s.offset_ns, 30 * kS);
  EXPECT_EQ(s.rtt_ns, 40'000);
  EXPECT_EQ(s.bound_ns, 20'000 + 1'000);  // RTT/2 + TIME's 1 µs resolution
  // A server behind us.
  s = timeSampleFrom(t1, t1 - 250 * kMs + 20'000, t4);
  EXPECT_EQ(s.offset_ns, -250 * kMs);
}

TEST(clock_RedisTime, ParsesTimeRepliesAndRejectsGarbage) {
  auto v = parseTimeReply("1795280368", "123456");
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(*v, 1795280368 * kS + 123456 * 1000);
  for (auto [s, us] : std::vector<std::pair<const char*, const char*>>{
           {"", "1"}, {"12x", "1"}, {"1", "1000000"}, {"-1", "0"}, {"1", ""}, {"1", " 2"}}) {
    EXPECT_FALSE(parseTimeReply(s, us).has_value()) << s << " / " << us;
  }
}

ClockReport report(int64_t src_offset, int64_t dst_offset, std::optional<int64_t> ntp) {
  ClockReport r;
  r.clusters["src"] = {.cluster = "src",
                       .measured = true,
                       .offset_ns = src_offset,
                       .bound_ns = 10'000,
                       .rtt_ns = 20'000,
                       .measured_at_ms = 1,
                       .error = {}};
  r.clusters["dst"] = {.cluster = "dst",
                       .measured = true,
                       .offset_ns = dst_offset,
                       .bound_ns = 10'000,
                       .rtt_ns = 20'000,
                       .measured_at_ms = 1,
                       .error = {}};
  if (ntp) {
    r.ntp.configured = true;
    r.ntp.ok = true;
    r.ntp.offset_ns = *ntp;
  }
  return r;
}

TEST(clock_Skew, DeltaIsTargetMinusSource) {
  auto s = evaluateSkew(report(2 * kMs, 30 * kS, std::nullopt), "src", "dst", 500 * kMs);
  ASSERT_TRUE(s.measured);
  EXPECT_EQ(s.delta_ns, 30 * kS - 2 * kMs);
  EXPECT_TRUE(s.exceeded);
  EXPECT_NE(s.reason.find("target dst is +29.998 s from source src"), std::string::npos)
      << s.reason;
  // Reversed direction: the same skew, negative.
  s = evaluateSkew(report(30 * kS, 0, std::nullopt), "src", "dst", 500 * kMs);
  EXPECT_EQ(s.delta_ns, -30 * kS);
  EXPECT_TRUE(s.exceeded);
}

TEST(clock_Skew, TheBoundIsStrictlyGreaterThanMaxSkew) {
  EXPECT_FALSE(evaluateSkew(report(0, 100 * kMs, std::nullopt), "src", "dst", 100 * kMs).exceeded);
  EXPECT_TRUE(
      evaluateSkew(report(0, 100 * kMs + 1, std::nullopt), "src", "dst", 100 * kMs).exceeded);
  EXPECT_FALSE(evaluateSkew(report(0, 20 * kMs, std::nullopt), "src", "dst", 100 * kMs).exceeded);
  EXPECT_TRUE(evaluateSkew(report(0, 250 * kMs, std::nullopt), "src", "dst", 100 * kMs).exceeded);
}

TEST(clock_Skew, BothClustersOffByTheSameAmountFromNtpIsFlaggedThoughDeltaIsZero) {
  // NTP is 1 s ahead of this host; both clusters agree with this host: each is −1 s from true
  // time. Δ = 0, but the clusters' error against NTP is over max_skew.
  ClockReport r = report(0, 0, 1 * kS);
  EXPECT_EQ(*r.clusterErrorNs("src"), -1 * kS);
  EXPECT_EQ(*r.ntp.localErrorNs(), -1 * kS);
  auto s = evaluateSkew(r, "src", "dst", 500 * kMs);
  EXPECT_EQ(s.delta_ns, 0);
  EXPECT_TRUE(s.exceeded);
  EXPECT_NE(s.reason.find("cluster src is -1.000 s from NTP time"), std::string::npos) << s.reason;
  // Within bounds against NTP: not flagged.
  EXPECT_FALSE(evaluateSkew(report(0, 0, 20 * kMs), "src", "dst", 500 * kMs).exceeded);
}

TEST(clock_Skew, NoNtpMajorityMeansNoErrorAgainstNtpRatherThanAGuess) {
  ClockReport r = report(0, 0, 1 * kS);
  r.ntp.ok = false;
  EXPECT_FALSE(r.clusterErrorNs("src").has_value());
  EXPECT_FALSE(r.ntp.localErrorNs().has_value());
  EXPECT_FALSE(evaluateSkew(r, "src", "dst", 500 * kMs).exceeded);
}

TEST(clock_Skew, AnUnmeasuredClusterIsReportedNotAssumedInSync) {
  ClockReport r = report(0, 0, std::nullopt);
  r.clusters["dst"].measured = false;
  r.clusters["dst"].error = "connection refused";
  auto s = evaluateSkew(r, "src", "dst", 500 * kMs);
  EXPECT_FALSE(s.measured);
  EXPECT_FALSE(s.exceeded);
  EXPECT_NE(s.reason.find("cluster dst is not measured yet (connection refused)"),
            std::string::npos)
      << s.reason;
  s = evaluateSkew(r, "src", "nowhere", 500 * kMs);
  EXPECT_FALSE(s.measured);
}

TEST(clock_Skew, FormatsSignedDurations) {
  EXPECT_EQ(formatOffset(30 * kS), "+30.000 s");
  EXPECT_EQ(formatOffset(-250 * kMs), "-250.0 ms");
  EXPECT_EQ(formatOffset(12'000), "+12 µs");
  EXPECT_EQ(formatOffset(0), "+0 µs");
}

}  // namespace
}  // namespace xdcr::clock
