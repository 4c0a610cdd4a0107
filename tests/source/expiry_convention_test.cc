#include <gtest/gtest.h>

#include "source/expiry_convention.h"

namespace xdcr::source {
namespace {

constexpr int64_t kNow = 1'000'000'000'000;

TEST(MemcachedExpiry, Vector27_ThirtyDaysIsStillRelative) {
  EXPECT_EQ(memcachedExpiryToDeadlineMs(2'592'000, kNow), kNow + 2'592'000'000LL);
}

TEST(MemcachedExpiry, Vector28_OneSecondMoreIsAnAbsoluteUnixTime) {
  // Unix second 2592001 (1970-01-31): long past, so the document is expired on arrival.
  EXPECT_EQ(memcachedExpiryToDeadlineMs(2'592'001, kNow), 2'592'001'000LL);
  EXPECT_LT(*memcachedExpiryToDeadlineMs(2'592'001, kNow), kNow);
}

TEST(MemcachedExpiry, ZeroNoneNegativeInvalid) {
  EXPECT_EQ(memcachedExpiryToDeadlineMs(0, kNow), 0);
  EXPECT_EQ(memcachedExpiryToDeadlineMs(1, kNow), kNow + 1000);
  EXPECT_EQ(memcachedExpiryToDeadlineMs(-1, kNow), std::nullopt);
  EXPECT_EQ(memcachedExpiryToDeadlineMs(1'800'000'000, kNow), 1'800'000'000'000LL);
  static_assert(memcachedExpiryToDeadlineMs(10, 0) == 10'000);
}

}  // namespace
}  // namespace xdcr::source
