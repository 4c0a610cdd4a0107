// The +switch-master payload Sentinel publishes (cluster-notes.md §3.6):
// "<name> <old-ip> <old-port> <new-ip> <new-port>".

#include <gtest/gtest.h>

#include <string>

#include "common/sentinel.h"

namespace xdcr::sentinel {
namespace {

TEST(SentinelSwitchMaster, ParsesTheNewAddress) {
  std::string name, moved_to;
  ASSERT_TRUE(parseSwitchMaster("mym 127.0.0.1 7321 127.0.0.1 7322", name, moved_to));
  EXPECT_EQ(name, "mym");
  EXPECT_EQ(moved_to, "127.0.0.1:7322");  // as RedisEndpoint::address() writes it
  ASSERT_TRUE(parseSwitchMaster("m ::1 6379 ::1 6380", name, moved_to));
  EXPECT_EQ(moved_to, "::1:6380");
}

TEST(SentinelSwitchMaster, RefusesMalformedPayloads) {
  std::string name, moved_to;
  EXPECT_FALSE(parseSwitchMaster("", name, moved_to));
  EXPECT_FALSE(parseSwitchMaster("mym 127.0.0.1 7321 127.0.0.1", name, moved_to));
  EXPECT_FALSE(parseSwitchMaster("mym 127.0.0.1 7321 127.0.0.1 port", name, moved_to));
  EXPECT_FALSE(parseSwitchMaster("mym 127.0.0.1 7321 127.0.0.1 70000", name, moved_to));
  EXPECT_FALSE(parseSwitchMaster("mym 127.0.0.1 7321 127.0.0.1 7322 extra", name, moved_to));
}

}  // namespace
}  // namespace xdcr::sentinel
