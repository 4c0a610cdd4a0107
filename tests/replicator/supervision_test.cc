// The link's time-driven decisions on simulated time (replicator/supervision.h): reconnect
// backoff, the silence watchdog, the ACK period, and when a pipeline leaves a shared link.

#include <gtest/gtest.h>

#include <random>

#include "clock/clock.h"
#include "config/config.h"
#include "replicator/pipeline.h"
#include "replicator/supervision.h"

namespace xdcr::replicator {
namespace {

using namespace std::chrono_literals;
using ms = std::chrono::milliseconds;

ms asMs(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<ms>(d);
}

TEST(LimitsFor, TheWatchdogsComeFromEachClustersLinkTimeout) {
  // The source's silence from the source cluster's link_timeout, the target's unanswered
  // commands from the target's; a cluster without one keeps 60 s (Redis's repl-timeout).
  auto loaded = config::loadConfigString(R"(clusters:
  far: {address: "127.0.0.1:7001", link_timeout: 15s}
  near: {address: "127.0.0.1:7002"}
  slow: {address: "127.0.0.1:7003", link_timeout: 2m}
pipelines:
  - {name: a, source: far, target: near}
  - {name: b, source: near, target: slow}
)",
                                         "t.yaml");
  ASSERT_TRUE(loaded.ok());
  const config::Config& cfg = *loaded.config;
  const Limits a = limitsFor(cfg, cfg.pipelines[0]);
  EXPECT_EQ(asMs(a.source_silence), 15s);
  EXPECT_EQ(asMs(a.target_stall), 60s);
  const Limits b = limitsFor(cfg, cfg.pipelines[1]);
  EXPECT_EQ(asMs(b.source_silence), 60s);
  EXPECT_EQ(asMs(b.target_stall), 120s);
}

TEST(Backoff, DoublesWithJitterUpToTheCapAndResetsAfterALongSession) {
  Limits limits;  // 500 ms .. 30 s, reset after a 60 s session
  Backoff b(limits);
  std::mt19937_64 rng(7);
  ms expected_cap = 500ms;
  for (int i = 0; i < 10; ++i) {
    const ms wait = asMs(b.next(1s, rng));
    EXPECT_GE(wait, expected_cap / 2) << "failure " << i;
    EXPECT_LE(wait, expected_cap) << "failure " << i;
    expected_cap = std::min<ms>(expected_cap * 2, 30s);
  }
  EXPECT_EQ(expected_cap, 30s);  // the cap was reached within the loop
  // A session that lasted backoff_reset_after was a success: back to the initial delay.
  EXPECT_LE(asMs(b.next(60s, rng)), 500ms);
}

TEST(Backoff, ShrunkLimitsShrinkEveryWait) {
  Limits limits;
  limits.backoff_initial = 10ms;
  limits.backoff_max = 40ms;
  Backoff b(limits);
  std::mt19937_64 rng(1);
  for (int i = 0; i < 20; ++i) EXPECT_LE(asMs(b.next(0s, rng)), 40ms);
}

TEST(Watchdog, FiresOnlyAfterItsPeriodWithoutFeeding) {
  clock::SimulatedClock clock;
  Watchdog w(60s, clock.monotonicNow());
  clock.advance(59'000);
  EXPECT_FALSE(w.expired(clock.monotonicNow()));
  w.feed(clock.monotonicNow());
  clock.advance(60'000);
  EXPECT_FALSE(w.expired(clock.monotonicNow()));  // exactly the period: not yet
  clock.advance(1);
  EXPECT_TRUE(w.expired(clock.monotonicNow()));
}

TEST(AckPeriod, FastDuringTheFirstSecondsThenOnceASecond) {
  Limits limits;
  EXPECT_EQ(ackPeriod(limits, 0s), 100ms);
  EXPECT_EQ(ackPeriod(limits, 2999ms), 100ms);
  EXPECT_EQ(ackPeriod(limits, 3s), 1s);
}

TEST(DetachReason, ATargetOverItsLimitsLeavesAfterDetachAfterWhileOthersRun) {
  clock::SimulatedClock clock;
  Limits limits;  // detach_after 5 s
  MemberHold m;
  m.over_limits = true;
  EXPECT_EQ(detachReason(m, true, clock.monotonicNow(), limits), "");
  clock.advance(4'999);
  EXPECT_EQ(detachReason(m, true, clock.monotonicNow(), limits), "");
  clock.advance(1);
  EXPECT_NE(
      detachReason(m, true, clock.monotonicNow(), limits).find("held the others back for 5.0 s"),
      std::string::npos);
}

TEST(DetachReason, CatchingUpResetsTheHoldTimer) {
  clock::SimulatedClock clock;
  Limits limits;
  MemberHold m;
  m.over_limits = true;
  detachReason(m, true, clock.monotonicNow(), limits);
  clock.advance(4'000);
  m.over_limits = false;  // it answered enough: the link reads on
  EXPECT_EQ(detachReason(m, true, clock.monotonicNow(), limits), "");
  m.over_limits = true;
  clock.advance(4'000);
  EXPECT_EQ(detachReason(m, true, clock.monotonicNow(), limits), "");  // 0 s held, not 8
}

TEST(DetachReason, NobodyLeavesWhenEveryTargetIsHolding) {
  clock::SimulatedClock clock;
  Limits limits;
  MemberHold m;
  m.over_limits = true;
  m.silent_s = 30;
  detachReason(m, false, clock.monotonicNow(), limits);
  clock.advance(60'000);
  EXPECT_EQ(detachReason(m, false, clock.monotonicNow(), limits), "");
}

TEST(DetachReason, SilentPausedOrFailedTargetsLeaveAtOnce) {
  clock::SimulatedClock clock;
  Limits limits;
  MemberHold silent;
  silent.silent_s = 5.5;
  EXPECT_NE(detachReason(silent, true, clock.monotonicNow(), limits).find("not answered for 5.5 s"),
            std::string::npos);
  MemberHold quiet;
  quiet.silent_s = 4.9;
  EXPECT_EQ(detachReason(quiet, true, clock.monotonicNow(), limits), "");
  MemberHold paused;
  paused.paused = true;
  EXPECT_EQ(detachReason(paused, true, clock.monotonicNow(), limits), "it is paused");
  MemberHold failed;
  failed.failed = true;
  EXPECT_EQ(detachReason(failed, false, clock.monotonicNow(), limits), "its target failed");
}

TEST(DetachReason, ShrunkLimitsDetachInMilliseconds) {
  clock::SimulatedClock clock;
  Limits limits;
  limits.detach_after = 50ms;
  MemberHold m;
  m.over_limits = true;
  detachReason(m, true, clock.monotonicNow(), limits);
  clock.advance(50);
  EXPECT_NE(detachReason(m, true, clock.monotonicNow(), limits), "");
}

}  // namespace
}  // namespace xdcr::replicator
