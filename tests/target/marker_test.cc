// Marker tokens carry their writer's start time, so that of two agents writing one pipeline's
// marker the later one gives way (target/marker.h).

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace xdcr::target
