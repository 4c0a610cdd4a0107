// The clamp rule (expiry-semantics.md §4) on every vector it covers, maxTTL resolution (§3) and
// Redis glob matching.

#include <gtest/gtest.h>

#include "target/max_ttl.h"

namespace xdcr::target {
namespace {

constexpr int64_t kNow = 1'000'000'000'000;
constexpr int64_t S = 1000;

// Effective M (collection if > 0, else bucket), as §3 defines it; used to state the vectors.
int64_t effective(int64_t bucket_s, int64_t coll_s) {
  return (coll_s > 0 ? coll_s : bucket_s) * S;
}

TEST(Clamp, SpecVectors) {
  struct V {
    int id;
    int64_t e;  // replicated deadline, 0 = none
    int64_t bucket_s, coll_s;
    int64_t want;
  } vectors[] = {
      {1, 0, 0, 0, 0},
      {2, 0, 600, 0, kNow + 600 * S},
      {3, 0, 600, 60, kNow + 60 * S},
      {4, kNow + 30 * S, 600, 60, kNow + 30 * S},
      {5, kNow + 300 * S, 600, 60, kNow + 60 * S},
      {6, kNow + 300 * S, 600, 0, kNow + 300 * S},
      {7, kNow + 900 * S, 600, 0, kNow + 600 * S},
      {8, kNow + 900 * S, 0, 1000, kNow + 900 * S},
      {9, kNow + 900 * S, 60, 1000, kNow + 900 * S},  // collection overrides bucket
      {12, kNow + 50 * S, 0, 0, kNow + 50 * S},
      {13, 0, 0, 60, kNow + 60 * S},  // PERSIST into a maxTTL collection
      {14, 0, 0, 0, 0},
      {15, kNow + 500 * S, 0, 60, kNow + 60 * S},
      {16, 0, 0, 60, kNow + 60 * S},
      {26, kNow + 130 * S, 0, 60, kNow + 60 * S},  // min(S+130s, now+60s), S = now
  };
  for (const auto& v : vectors) {
    EXPECT_EQ(clampDeadline(v.e, effective(v.bucket_s, v.coll_s), kNow), v.want)
        << "vector " << v.id;
  }
}

TEST(Clamp, BoundaryIsInclusive) {
  EXPECT_EQ(clampDeadline(kNow + 60 * S, 60 * S, kNow), kNow + 60 * S);
  EXPECT_EQ(clampDeadline(kNow + 60 * S + 1, 60 * S, kNow), kNow + 60 * S);
  EXPECT_EQ(clampDeadline(kNow - 1, 60 * S, kNow), kNow - 1);  // past stays past
}

TEST(MaxTtl, CollectionsBucketsAndInheritance) {
  std::vector<config::BucketConfig> buckets(2);
  buckets[0].db = 0;
  buckets[0].max_ttl = std::chrono::seconds(600);
  buckets[0].collections = {{"sessions", "sess:*", std::chrono::seconds(60), {}},
                            {"inherit", "inh:*", std::chrono::seconds(0), {}},
                            {"tokens", "tok:[0-9]?x", std::chrono::seconds(5), {}},
                            {"shadow", "sess:long:*", std::chrono::seconds(1000), {}}};
  buckets[1].db = 3;
  buckets[1].max_ttl = std::chrono::seconds(0);
  buckets[1].collections = {{"c", "c:*", std::chrono::seconds(1000), {}}};
  MaxTtlPolicy p(buckets);
  EXPECT_FALSE(p.empty());
  EXPECT_EQ(p.effectiveMs(0, "sess:1"), 60 * S);
  EXPECT_EQ(p.effectiveMs(0, "sess:long:1"), 60 * S);  // first match wins
  EXPECT_EQ(p.effectiveMs(0, "inh:1"), 600 * S);       // 0 inherits the bucket's
  EXPECT_EQ(p.effectiveMs(0, "tok:7ax"), 5 * S);
  EXPECT_EQ(p.effectiveMs(0, "tok:77x"), 5 * S);
  EXPECT_EQ(p.effectiveMs(0, "tok:a7x"), 600 * S);
  EXPECT_EQ(p.effectiveMs(0, "other"), 600 * S);  // default collection
  EXPECT_EQ(p.effectiveMs(3, "c:1"), 1000 * S);
  EXPECT_EQ(p.effectiveMs(3, "d:1"), 0);
  EXPECT_EQ(p.effectiveMs(1, "sess:1"), 0);  // no bucket for db 1
  EXPECT_EQ(p.collectionOf(0, "sess:9"), "sessions");
  EXPECT_EQ(p.collectionOf(0, "zzz"), "_default");
  EXPECT_TRUE(MaxTtlPolicy({}).empty());
}

TEST(Glob, RedisMatchSyntax) {
  EXPECT_TRUE(globMatch("*", ""));
  EXPECT_TRUE(globMatch("a*b*c", "axxbyyc"));
  EXPECT_FALSE(globMatch("a*b*c", "axxbyy"));
  EXPECT_TRUE(globMatch("h?llo", "hello"));
  EXPECT_FALSE(globMatch("h?llo", "hllo"));
  EXPECT_TRUE(globMatch("h[ae]llo", "hallo"));
  EXPECT_FALSE(globMatch("h[ae]llo", "hillo"));
  EXPECT_TRUE(globMatch("h[^e]llo", "hallo"));
  EXPECT_FALSE(globMatch("h[^e]llo", "hello"));
  EXPECT_TRUE(globMatch("h[a-c]llo", "hbllo"));
  EXPECT_TRUE(globMatch("a\\*b", "a*b"));
  EXPECT_FALSE(globMatch("a\\*b", "axb"));
  EXPECT_TRUE(globMatch("*:*:*", "a:b:c"));
  // Many stars on a long non-matching input stays fast (no exponential backtracking).
  EXPECT_FALSE(globMatch("*a*a*a*a*a*a*a*b", std::string(5000, 'a')));
}

}  // namespace
}  // namespace xdcr::target
