// The key space (filters/key_space.h): the dbs map, include/exclude and key_rewrite as one value,
// and its inverses used by the stale-key sweep and verify.

#include <gtest/gtest.h>

#include "filters/key_space.h"

namespace xdcr::filters {
namespace {

config::PipelineConfig pipeline() {
  config::PipelineConfig p;
  p.name = "p";
  return p;
}

TEST(KeySpace, IdentityByDefault) {
  KeySpace ks(pipeline());
  EXPECT_EQ(ks.mapDb(0), 0);
  EXPECT_EQ(ks.mapDb(15), 15);
  EXPECT_TRUE(ks.contains(3, "anything"));
  EXPECT_FALSE(ks.rewrites());
  EXPECT_EQ(ks.sourceDbsByTarget().size(), 16u);
  EXPECT_EQ(ks.rewrite("k").first, "");
  EXPECT_EQ(ks.rewrite("k").second, "k");
}

TEST(KeySpace, DbMapReplicatesOnlyItsDbsAndInverts) {
  auto p = pipeline();
  p.dbs = {{0, 2}, {5, 0}};
  KeySpace ks(p);
  EXPECT_EQ(ks.mapDb(0), 2);
  EXPECT_EQ(ks.mapDb(5), 0);
  EXPECT_EQ(ks.mapDb(1), -1);
  EXPECT_FALSE(ks.contains(1, "k"));
  const auto back = ks.sourceDbsByTarget();
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back.at(2), 0);
  EXPECT_EQ(back.at(0), 5);
}

TEST(KeySpace, IncludeThenExcludeAreUnanchoredSearches) {
  auto p = pipeline();
  p.filters.include_keys.push_back({"^sess:", {}});
  p.filters.include_keys.push_back({"tok", {}});
  p.filters.exclude_keys.push_back({":secret$", {}});
  KeySpace ks(p);
  EXPECT_TRUE(ks.keyPasses("sess:1"));
  EXPECT_TRUE(ks.keyPasses("a:tok:b"));  // unanchored
  EXPECT_FALSE(ks.keyPasses("other"));
  EXPECT_FALSE(ks.keyPasses("sess:1:secret"));
}

TEST(KeySpace, RewriteUsesTheFirstMatchingPrefixAndUnrewriteUndoesIt) {
  auto p = pipeline();
  p.key_rewrite.push_back({"east:", "west:", {}});
  p.key_rewrite.push_back({"e", "E", {}});
  KeySpace ks(p);
  auto [prefix, rest] = ks.rewrite("east:1");
  EXPECT_EQ(prefix, "west:");
  EXPECT_EQ(rest, "1");
  auto [p2, r2] = ks.rewrite("ex");
  EXPECT_EQ(p2, "E");
  EXPECT_EQ(r2, "x");
  EXPECT_EQ(ks.unrewrite("west:1"), "east:1");
  EXPECT_EQ(ks.unrewrite("plain"), "plain");
}

TEST(KeySpace, SourceSlotsSelectKeysByHashSlot) {
  // A cluster split across agents: this one replicates slots 0-5460 (and 12182, alone).
  // CLUSTER KEYSLOT: "foo" 12182, "bar" 5061, "{bar}x" 5061 (its tag), "hello" 866, "a" 15495.
  auto p = pipeline();
  p.filters.exclude_keys.push_back({"^hello", {}});
  const KeySpace ks(p, {{0, 5460}, {12182, 12182}});
  EXPECT_TRUE(ks.keyPasses("bar"));
  EXPECT_TRUE(ks.keyPasses("{bar}x"));
  EXPECT_TRUE(ks.keyPasses("foo"));
  EXPECT_FALSE(ks.keyPasses("a"));
  EXPECT_FALSE(ks.keyPasses("hello"));  // in a selected slot, excluded by the filters
  EXPECT_TRUE(ks.contains(0, "bar"));
  EXPECT_FALSE(ks.contains(0, "a"));
  // No slots given: every slot, as before.
  const KeySpace all(p, {});
  EXPECT_TRUE(all.keyPasses("a"));
  EXPECT_TRUE(all.keyPasses("foo"));
}

TEST(KeySpace, JudgeKeyNamesTheRuleThatDecides) {
  // What `xdcr-agent explain` reports; keyPasses() is the same judgement.
  using Rule = KeySpace::KeyVerdict::Rule;
  auto p = pipeline();
  p.filters.include_keys.push_back({"^sess:", {}});
  p.filters.include_keys.push_back({"^tok:", {}});
  p.filters.exclude_keys.push_back({":tmp$", {}});
  p.filters.exclude_keys.push_back({":secret", {}});
  const KeySpace ks(p);
  EXPECT_EQ(ks.judgeKey("sess:1").rule, Rule::Passes);
  EXPECT_EQ(ks.judgeKey("sess:1").slot, -1);  // no slots set: none computed
  EXPECT_EQ(ks.judgeKey("other").rule, Rule::Include);
  const auto secret = ks.judgeKey("tok:secret:1");
  EXPECT_EQ(secret.rule, Rule::Exclude);
  EXPECT_EQ(secret.pattern, 1);
  const auto both = ks.judgeKey("sess:secret:tmp");  // the first exclude pattern that matches
  EXPECT_EQ(both.rule, Rule::Exclude);
  EXPECT_EQ(both.pattern, 0);
  for (const char* k : {"sess:1", "other", "tok:secret:1", "sess:secret:tmp"}) {
    EXPECT_EQ(ks.keyPasses(k), ks.judgeKey(k).rule == Rule::Passes) << k;
  }
  // The slots come first: "a" (slot 15495) is outside 0-5460 whatever the patterns say.
  const KeySpace sliced(p, {{0, 5460}});
  const auto a = sliced.judgeKey("a");
  EXPECT_EQ(a.rule, Rule::Slot);
  EXPECT_EQ(a.slot, 15495);
  EXPECT_EQ(sliced.judgeKey("{bar}sess:").rule, Rule::Include);  // slot 5061, no pattern
}

TEST(KeySpace, OutlivesTheConfigItWasBuiltFrom) {
  // Shared by the sink, the sweep and verify: it owns copies, not views of the config.
  KeySpaceConstSharedPtr ks;
  {
    auto p = pipeline();
    p.dbs = {{1, 1}};
    p.key_rewrite.push_back({"a:", "b:", {}});
    ks = std::make_shared<const KeySpace>(p);
  }
  EXPECT_EQ(ks->mapDb(1), 1);
  EXPECT_EQ(ks->rewrite("a:x").first, "b:");
}

}  // namespace
}  // namespace xdcr::filters
