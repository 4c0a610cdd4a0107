// The snapshot key set of full_sync.delete_stale_keys, and its config key.

#include <gtest/gtest.h>

#include "config/config.h"
#include "target/stale_sweep.h"

namespace xdcr::target {
namespace {

TEST(SnapshotKeys, ContainsExactlyTheAddedKeysPerDb) {
  SnapshotKeys keys;
  for (int i = 0; i < 1000; ++i) keys.add(i % 3, "k:" + std::to_string(i));
  keys.seal();
  EXPECT_EQ(keys.size(), 1000u);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_TRUE(keys.contains(i % 3, "k:" + std::to_string(i))) << i;
    EXPECT_FALSE(keys.contains((i + 1) % 3, "k:" + std::to_string(i))) << "other db " << i;
  }
  EXPECT_FALSE(keys.contains(0, "k:1000"));
  EXPECT_FALSE(keys.contains(0, ""));
  keys.clear();
  EXPECT_EQ(keys.size(), 0u);
}

TEST(SnapshotKeys, ConfigKeyDefaultsOffAndIsValidated) {
  const std::string base =
      "clusters:\n  a: {type: redis, address: \"127.0.0.1:1\"}\n"
      "  b: {type: redis, address: \"127.0.0.1:2\"}\n"
      "pipelines:\n  - {name: p, source: a, target: b";
  auto off = config::loadConfigString(base + "}\n", "t.yaml");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off.config->pipelines[0].delete_stale_keys);
  auto on = config::loadConfigString(base + ", full_sync: {delete_stale_keys: true}}\n", "t.yaml");
  ASSERT_TRUE(on.ok()) << on.diagnostics.at(0).format();
  EXPECT_TRUE(on.config->pipelines[0].delete_stale_keys);
  auto bad = config::loadConfigString(base + ", full_sync: {delete_stale: true}}\n", "t.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.diagnostics.at(0).format().find("delete_stale"), std::string::npos)
      << bad.diagnostics.at(0).format();
}

}  // namespace
}  // namespace xdcr::target
