// SourceHead and ApplyRate (replicator/source_head.h) on simulated time: what lag, backlog, the
// apply rate and the catch-up ETA say from INFO replication readings and applied offsets.

#include "replicator/source_head.h"

#include <gtest/gtest.h>

#include <cmath>

namespace xdcr::replicator {
namespace {

using namespace std::chrono_literals;
using TimePoint = SourceHead::TimePoint;

SourceHead::Reading reading(std::string replid, uint64_t offset, std::string replid2 = "",
                            int64_t second = -1) {
  SourceHead::Reading r;
  r.replid = std::move(replid);
  r.offset = offset;
  r.replid2 = std::move(replid2);
  r.second_offset = second;
  return r;
}

TEST(SourceHeadTest, ParsesInfoReplication) {
  const auto r = SourceHead::parse(
      "# Replication\r\nrole:master\r\nconnected_slaves:1\r\nmaster_failover_state:no-failover\r\n"
      "master_replid:aaaa\r\nmaster_replid2:bbbb\r\nmaster_repl_offset:12345\r\n"
      "second_repl_offset:100\r\n");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->replid, "aaaa");
  EXPECT_EQ(r->replid2, "bbbb");
  EXPECT_EQ(r->offset, 12345U);
  EXPECT_EQ(r->second_offset, 100);
  EXPECT_FALSE(SourceHead::parse("role:master\r\nmaster_replid:aaaa\r\n").has_value())
      << "no offset: no reading";
  EXPECT_FALSE(SourceHead::parse("-NOPERM this user has no permissions").has_value());
}

TEST(SourceHeadTest, BacklogAndLagFromTheSourcesOffset) {
  SourceHead h;
  const TimePoint t0{};
  EXPECT_FALSE(h.backlog("a", 100).has_value()) << "no reading yet";
  h.record(reading("a", 100), t0);
  h.record(reading("a", 100), t0 + 1s);  // nothing new: no new sample
  h.record(reading("a", 600), t0 + 2s);  // a write: first seen at 2 s
  h.record(reading("a", 900), t0 + 3s);
  EXPECT_EQ(h.backlog("a", 100), 800U);
  EXPECT_EQ(h.backlog("a", 900), 0U);
  EXPECT_EQ(h.backlog("a", 1000), 0U) << "applied past the reading (a later write): 0";
  // The oldest byte not applied: past 100 since 2 s; past 600 since 3 s.
  EXPECT_DOUBLE_EQ(h.lagSeconds("a", 100, t0 + 10s), 8.0);
  EXPECT_DOUBLE_EQ(h.lagSeconds("a", 600, t0 + 10s), 7.0);
  EXPECT_DOUBLE_EQ(h.lagSeconds("a", 900, t0 + 10s), 0.0);
  // Another history: unknown.
  EXPECT_FALSE(h.backlog("b", 100).has_value());
  EXPECT_DOUBLE_EQ(h.lagSeconds("b", 100, t0 + 10s), 0.0);
}

TEST(SourceHeadTest, AFailoverContinuesTheHistoryAndARestartDoesNot) {
  SourceHead h;
  const TimePoint t0{};
  h.record(reading("old", 1000), t0);
  // The promoted replica: replid2 is the old history up to 1000, offsets go on.
  h.record(reading("new", 1500, "old", 1000), t0 + 1s);
  EXPECT_EQ(h.backlog("old", 800), 700U);
  EXPECT_DOUBLE_EQ(h.lagSeconds("old", 800, t0 + 5s), 5.0) << "the samples stand";
  EXPECT_FALSE(h.backlog("old", 1200).has_value()) << "past the fork: not this history";
  EXPECT_EQ(h.backlog("new", 1200), 300U);
  // A source restarted without its data: a new history at a low offset.
  h.record(reading("fresh", 50), t0 + 6s);
  EXPECT_FALSE(h.backlog("new", 1200).has_value());
  EXPECT_DOUBLE_EQ(h.lagSeconds("fresh", 0, t0 + 7s), 1.0) << "old samples dropped";
}

TEST(ApplyRateTest, BytesAppliedRateAndEta) {
  ApplyRate r;
  const TimePoint t0{};
  EXPECT_EQ(r.record("a", 1000, t0), 0U) << "the first reading applies nothing";
  EXPECT_EQ(r.record("a", 3000, t0 + 1s), 2000U);
  EXPECT_EQ(r.record("a", 5000, t0 + 2s), 2000U);
  EXPECT_DOUBLE_EQ(r.bytesPerSecond(), 2000.0);
  EXPECT_DOUBLE_EQ(catchUpSeconds(10'000, r.bytesPerSecond()), 5.0);
  EXPECT_EQ(catchUpSeconds(0, 0), 0.0) << "caught up";
  EXPECT_TRUE(std::isinf(catchUpSeconds(1, 0))) << "a backlog and nothing applied";
  // Nothing applied for longer than the window: the rate falls to 0.
  r.record("a", 5000, t0 + 40s);
  r.record("a", 5000, t0 + 41s);
  EXPECT_DOUBLE_EQ(r.bytesPerSecond(), 0.0);
  // A new history (a full sync) applies nothing by itself.
  EXPECT_EQ(r.record("b", 10, t0 + 42s), 0U);
  EXPECT_EQ(r.record("b", 20, t0 + 43s), 10U);
}

}  // namespace
}  // namespace xdcr::replicator
