// The fields JSON log lines carry (common/logging.h parseLogFields), from the prefixes the
// agent's messages start with.

#include <gtest/gtest.h>

#include "common/logging.h"

namespace xdcr {
namespace {

TEST(LogFields, APipelineItsClusterAndNode) {
  const LogFields f = parseLogFields(
      "pipeline east-to-west: source src (127.0.0.1:41479) node 127.0.0.1:41480: spooling the "
      "full sync");
  ASSERT_EQ(f.pipelines.size(), 1U);
  EXPECT_EQ(f.pipelines[0], "east-to-west");
  EXPECT_EQ(f.cluster, "src");
  EXPECT_EQ(f.cluster_role, "source");
  EXPECT_EQ(f.node, "127.0.0.1:41480") << "the node, not the cluster's address";
  const LogFields t = parseLogFields(
      "pipeline east-to-west: target dst (127.0.0.1:55627): Redis 7.0.15; snapshot keys it cannot "
      "RESTORE are written as commands");
  EXPECT_EQ(t.cluster, "dst");
  EXPECT_EQ(t.cluster_role, "target");
  EXPECT_EQ(t.node, "127.0.0.1:55627");
}

TEST(LogFields, ASharedLinkAShardAndAKey) {
  const LogFields f = parseLogFields("pipelines a, b-2: source src ([::1]:7000): resuming");
  EXPECT_EQ(f.pipelines, (std::vector<std::string>{"a", "b-2"}));
  EXPECT_EQ(f.node, "[::1]:7000");
  const LogFields s = parseLogFields("pipeline p@0-5460: paused by the operator");
  EXPECT_EQ(s.pipelines, std::vector<std::string>{"p"});
  EXPECT_EQ(s.shard, "0-5460");
  const LogFields k = parseLogFields(
      R"(pipeline p: source src (h:1) node h:1: snapshot key "we\"ird key" (db 0) NOT copied)");
  EXPECT_EQ(k.key, R"(we\"ird key)");
}

TEST(LogFields, OtherSentencesHaveNone) {
  const LogFields f = parseLogFields("reload: pipeline x was removed; stopping it");
  EXPECT_TRUE(f.pipelines.empty());
  EXPECT_TRUE(f.cluster.empty());
  const LogFields g = parseLogFields("pipeline of doom: something");  // not a name list
  EXPECT_TRUE(g.pipelines.empty());
  const LogFields h = parseLogFields("the source of the problem (unknown)");
  EXPECT_TRUE(h.cluster.empty()) << h.cluster;
}

}  // namespace
}  // namespace xdcr
