// clock::UnitClock: the wall clock of a per-unit path, read at most once per `every` calls within
// one coarse tick with the SystemClock, and every time with any other clock (simulated time).

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "clock/clock.h"

namespace xdcr::clock {
namespace {

TEST(clock_UnitClock, ASimulatedClockIsReadEveryTime) {
  SimulatedClock sim(5'000);
  UnitClock c(sim, 32);
  EXPECT_EQ(c.nowMs(), 5'000);
  sim.advance(7);
  EXPECT_EQ(c.nowMs(), 5'007);  // no caching: a test's advance() is seen at once
}

TEST(clock_UnitClock, TheSystemClockIsNeverOlderThanACoarseTickOrTheCallBudget) {
  SystemClock system;
  UnitClock c(system, 4);
  for (int i = 0; i < 2000; ++i) {
    const int64_t before = system.nowMs();
    const int64_t got = c.nowMs();
    const int64_t after = system.nowMs();
    EXPECT_LE(got, after);
    // Within one coarse tick (CLOCK_MONOTONIC_COARSE: 1-4 ms) of the true time.
    EXPECT_GE(got, before - 5) << "call " << i;
  }
  // A wait longer than a tick: the next value is fresh, whatever the budget.
  const int64_t first = c.nowMs();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const int64_t later = c.nowMs();
  EXPECT_GE(later - first, 25);
}

}  // namespace
}  // namespace xdcr::clock
