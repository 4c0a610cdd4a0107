// AckLedger: the acknowledged offset of a pipelined target connection (target/ack_ledger.h),
// shared by RedisTarget and MemcachedWriter.

#include "target/ack_ledger.h"

#include <gtest/gtest.h>

#include "clock/clock.h"
#include "common/stats.h"

namespace xdcr::target {
namespace {

TEST(AckLedger, AUnitIsAcknowledgedOnlyOnceItsLastCommandIsAnswered) {
  clock::SimulatedClock clock;
  LatencyHistogram latency;
  AckLedger ledger(clock, latency);
  ledger.reset(100);
  ledger.commit(2, 150);  // a unit of two commands ending at 150
  ledger.commit(1, 170);  // then one of one command
  EXPECT_EQ(ledger.acked(), 100u);
  EXPECT_EQ(ledger.inflight(), 3u);
  clock.advance(7);
  ledger.answered();
  EXPECT_EQ(ledger.acked(), 100u) << "half of the first unit answered";
  ledger.answered();
  EXPECT_EQ(ledger.acked(), 150u);
  EXPECT_EQ(latency.count, 1u);
  EXPECT_DOUBLE_EQ(latency.sum, 0.007);
  ledger.answered();
  EXPECT_EQ(ledger.acked(), 170u);
  EXPECT_TRUE(ledger.drained());
  EXPECT_EQ(ledger.sent(), 3u);
  EXPECT_EQ(ledger.replied(), 3u);
}

TEST(AckLedger, AUnitWithoutCommandsFollowsTheOneBeforeIt) {
  clock::SimulatedClock clock;
  LatencyHistogram latency;
  AckLedger ledger(clock, latency);
  ledger.commit(0, 10);  // nothing in flight: applied at once
  EXPECT_EQ(ledger.acked(), 10u);
  ledger.commit(1, 20);
  ledger.commit(0, 30);  // a ping after a write: acknowledged with it, not before
  EXPECT_EQ(ledger.acked(), 10u);
  ledger.answered();
  EXPECT_EQ(ledger.acked(), 30u);
  EXPECT_EQ(latency.count, 1u) << "one mark for both units";
}

TEST(AckLedger, StalledCountsFromTheLastReplyWhileCommandsAreInFlight) {
  clock::SimulatedClock clock;
  LatencyHistogram latency;
  AckLedger ledger(clock, latency);
  EXPECT_EQ(ledger.stalledSeconds(), 0);
  ledger.commit(2, 5);
  clock.advance(1500);
  EXPECT_DOUBLE_EQ(ledger.stalledSeconds(), 1.5);
  ledger.answered();
  ledger.progressed();
  EXPECT_EQ(ledger.stalledSeconds(), 0) << "a reply restarts the stall clock";
  clock.advance(250);
  EXPECT_DOUBLE_EQ(ledger.stalledSeconds(), 0.25);
  ledger.answered();
  EXPECT_EQ(ledger.stalledSeconds(), 0) << "nothing in flight";
}

TEST(AckLedger, ResetDropsMarksNotYetReached) {
  clock::SimulatedClock clock;
  LatencyHistogram latency;
  AckLedger ledger(clock, latency);
  ledger.commit(1, 40);
  ledger.reset(60);  // a new session's handshake
  EXPECT_EQ(ledger.acked(), 60u);
  ledger.answered();
  EXPECT_EQ(ledger.acked(), 60u) << "the old session's mark is gone";
  EXPECT_EQ(latency.count, 0u);
}

}  // namespace
}  // namespace xdcr::target
