// Marker tokens carry their writer's start time, so that of two agents writing one pipeline's
// marker the later one gives way (target/marker.h).

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "target/marker.h"

namespace xdcr::target {
namespace {

TEST(MarkerToken, CarriesTheProcessStartAndIsFresh) {
  const std::string a = newMarkerToken(), b = newMarkerToken();
  EXPECT_NE(a, b);
  ASSERT_NE(a.find('.'), std::string::npos);
  EXPECT_EQ(a.substr(0, a.find('.')), b.substr(0, b.find('.')));  // one process, one start
  EXPECT_EQ(a.size() - a.find('.') - 1, 16u);
}

TEST(MarkerToken, TheLaterStartedWriterIsNewer) {
  EXPECT_TRUE(markerWriterIsNewer("19a.0000000000000001", "199.ffffffffffffffff"));
  EXPECT_FALSE(markerWriterIsNewer("199.ffffffffffffffff", "19a.0000000000000001"));
  // The same millisecond: a fixed order, so exactly one of the two gives way.
  EXPECT_NE(markerWriterIsNewer("19a.02", "19a.01"), markerWriterIsNewer("19a.01", "19a.02"));
  // A token of an earlier version (no start time) counts as the oldest writer.
  EXPECT_FALSE(markerWriterIsNewer("0123456789abcdef", "19a.01"));
  EXPECT_TRUE(markerWriterIsNewer("19a.01", "0123456789abcdef"));
}

// A master whose marker a reshard carried away (target/marker.h, markerMovedAway).
UnmarkedMaster upFor(int64_t ms, bool promoted = false) {
  UnmarkedMaster u;
  u.address = "127.0.0.1:7000";
  u.uptime_ms = ms;
  u.promoted = promoted;
  return u;
}

TEST(MarkerMovedAway, EveryMarkerOnTheTargetAndAMasterThatRanThroughTheCheckpoint) {
  const std::map<std::string, int64_t> three = {{"t1", 3}};
  const auto why = markerMovedAway(upFor(600'000), 3, three, 10'000);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("3 markers of token t1 on 3 masters"), std::string::npos) << *why;
  // Either accepted token may be the complete one (a crash between two checkpoints' writes).
  EXPECT_TRUE(markerMovedAway(upFor(600'000), 3, {{"t1", 1}, {"t2", 3}}, 10'000));
}

TEST(MarkerMovedAway, AMarkerMissingFromTheTargetIsALoss) {
  // 2 of 3: the master's own marker is gone (FLUSHALL, a restart), not moved.
  EXPECT_FALSE(markerMovedAway(upFor(600'000), 3, {{"t1", 2}}, 10'000));
  EXPECT_FALSE(markerMovedAway(upFor(600'000), 3, {{"t1", 2}, {"t2", 2}}, 10'000));
  EXPECT_FALSE(markerMovedAway(upFor(600'000), 3, {}, 10'000));
  EXPECT_FALSE(markerMovedAway(upFor(600'000), 0, {{"t1", 3}}, 10'000));
}

TEST(MarkerMovedAway, AMasterStartedSinceTheCheckpointIsALoss) {
  const std::map<std::string, int64_t> three = {{"t1", 3}};
  // Restarted 5 s ago, checkpoint 10 s ago: it may have come back empty or from older data.
  EXPECT_FALSE(markerMovedAway(upFor(5'000), 3, three, 10'000));
  // Within the margin (second-grained uptime, two hosts' clocks): not proof.
  EXPECT_FALSE(markerMovedAway(upFor(10'000 + kUnmarkedUptimeMarginMs), 3, three, 10'000));
  EXPECT_TRUE(markerMovedAway(upFor(10'001 + kUnmarkedUptimeMarginMs), 3, three, 10'000));
  // Unknown uptime or checkpoint time: not proof.
  EXPECT_FALSE(markerMovedAway(upFor(-1), 3, three, 10'000));
  EXPECT_FALSE(markerMovedAway(upFor(600'000), 3, three, -1));
}

TEST(MarkerMovedAway, APromotedReplicaIsALoss) {
  // A replica that took over may have lagged its master: only a marker could say it did not.
  EXPECT_FALSE(markerMovedAway(upFor(600'000, true), 3, {{"t1", 3}}, 10'000));
}

}  // namespace
}  // namespace xdcr::target
