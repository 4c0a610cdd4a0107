// The per-pipeline judgement of resolved changes (filters/event_filter.h): one Resolver's output
// judged by two pipelines with different filters, each on its own copy — the fan-out contract.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "clock/clock.h"
#include "filters/event_filter.h"
#include "source/resolver.h"

namespace xdcr::filters {
namespace {

constexpr int64_t kNow = 1'000'000'000'000;

struct Cmd {
  std::vector<std::string> args;
  std::vector<std::string_view> views;
  source::Entry entry;
  explicit Cmd(std::vector<std::string> a) : args(std::move(a)) {
    for (const auto& s : args) views.emplace_back(s);
    entry.args = views;
    entry.offset_end = 1;
  }
};

class EventFilterTest : public ::testing::Test {
 protected:
  EventFilterTest() : src_(clock_), resolver_(index_, src_) {}
  source::Change resolve(std::vector<std::string> args) {
    cmds_.push_back(std::make_unique<Cmd>(std::move(args)));
    source::Change c;
    resolver_.resolve(cmds_.back()->entry, c);
    return c;
  }
  clock::SimulatedClock clock_{kNow};
  clock::ClusterClock src_;
  source::ExpiryIndex index_;
  source::Resolver resolver_;
  std::vector<std::unique_ptr<Cmd>> cmds_;
};

TEST_F(EventFilterTest, TwoPipelinesJudgeTheSameResolvedChangeIndependently) {
  config::PipelineConfig a, b;
  a.name = "a";
  a.filters.exclude_keys.push_back({"^secret:", {}});
  b.name = "b";
  b.filters.strip_ttl = true;
  PipelineStats sa, sb;
  EventFilter fa(a, std::make_shared<const KeySpace>(a), sa);
  EventFilter fb(b, std::make_shared<const KeySpace>(b), sb);

  const source::Change resolved =
      resolve({"SET", "secret:1", "v", "PXAT", std::to_string(kNow + 5000)});
  source::Change ca = resolved, cb = resolved;
  fa.judge(ca);
  fb.judge(cb);
  EXPECT_FALSE(ca.events[0].pass);
  EXPECT_EQ(sa.filtered[idx(FilterReason::Key)], 1u);
  EXPECT_TRUE(cb.events[0].pass);
  EXPECT_TRUE(cb.events[0].stripped);
  EXPECT_EQ(cb.events[0].deadline_ms, 0);
  // The shared change is untouched.
  EXPECT_TRUE(resolved.events[0].pass);
  EXPECT_EQ(resolved.events[0].deadline_ms, kNow + 5000);
}

// Two agents splitting a cluster by slot judge the same source command: each writes the keys of
// its slots and counts the others as a key filter (interface.md's reasons; not a split, not a
// failure: nothing an operator must act on).
TEST_F(EventFilterTest, SourceSlotsSplitTheKeysBetweenAgents) {
  config::PipelineConfig a, b;
  a.name = "a";
  b.name = "b";
  PipelineStats sa, sb;
  // CLUSTER KEYSLOT: "bar" 5061, "foo" 12182.
  EventFilter fa(
      a, std::make_shared<const KeySpace>(a, std::vector<std::pair<int, int>>{{0, 8191}}), sa);
  EventFilter fb(
      b, std::make_shared<const KeySpace>(b, std::vector<std::pair<int, int>>{{8192, 16383}}), sb);
  for (const char* key : {"bar", "foo"}) {
    const source::Change set = resolve({"SET", key, "v"});
    const source::Change del = resolve({"DEL", key});
    for (const source::Change* c : {&set, &del}) {
      source::Change ca = *c, cb = *c;
      fa.judge(ca);
      fb.judge(cb);
      EXPECT_EQ(ca.events[0].pass, std::string_view(key) == "bar") << key;
      EXPECT_EQ(cb.events[0].pass, std::string_view(key) == "foo") << key;
    }
  }
  EXPECT_EQ(sa.filtered[idx(FilterReason::Key)], 2u);
  EXPECT_EQ(sb.filtered[idx(FilterReason::Key)], 2u);
  EXPECT_EQ(sa.filter_splits + sb.filter_splits, 0u);
}

TEST_F(EventFilterTest, ExpirationAndDeletionAreClassifiedOnceAndFilteredPerPipeline) {
  config::PipelineConfig keep, drop;
  keep.name = "keep";
  drop.name = "drop";
  drop.filters.drop_expirations = true;
  PipelineStats sk, sd;
  EventFilter fk(keep, std::make_shared<const KeySpace>(keep), sk);
  EventFilter fd(drop, std::make_shared<const KeySpace>(drop), sd);

  resolve({"SET", "k", "v", "PXAT", std::to_string(kNow + 100)});
  clock_.advance(200);  // past the deadline: the source's DEL is an expiration
  source::Change del = resolve({"DEL", "k"});
  ASSERT_EQ(del.events[0].kind, EventKind::Expiration);
  source::Change ck = del, cd = del;
  fk.judge(ck);
  fd.judge(cd);
  EXPECT_TRUE(ck.events[0].pass);
  EXPECT_FALSE(cd.events[0].pass);
  EXPECT_EQ(sd.filtered[idx(FilterReason::Expiration)], 1u);
  EXPECT_EQ(sk.source_events[idx(EventKind::Expiration)], 1u);

  // A second DEL of the expired key was a no-op at the source: nobody replicates it.
  source::Change again = resolve({"DEL", "k"});
  EXPECT_FALSE(again.events[0].pass);
  source::Change ck2 = again;
  fk.judge(ck2);
  EXPECT_FALSE(ck2.events[0].pass);
  EXPECT_EQ(sk.source_events[idx(EventKind::Expiration)], 1u);  // not counted twice
}

TEST_F(EventFilterTest, SnapshotKeysAreCreatesForTheKeySpaceAndStripTtl) {
  config::PipelineConfig p;
  p.name = "p";
  p.filters.strip_ttl = true;
  p.filters.include_keys.push_back({"^sess:", {}});
  PipelineStats st;
  EventFilter f(p, std::make_shared<const KeySpace>(p), st);
  source::RdbPayload payload;
  source::Change in, out;
  resolver_.resolveSnapshotKey(0, "sess:1", kNow + 60'000, payload, in);
  EXPECT_EQ(index_.get(0, "sess:1").ms, kNow + 60'000);  // the resolver keeps the index
  f.judge(in);
  EXPECT_TRUE(in.events[0].pass);
  EXPECT_EQ(in.events[0].deadline_ms, 0);  // strip_ttl: a snapshot entry is a create (§4, §6)
  EXPECT_TRUE(in.events[0].stripped);
  resolver_.resolveSnapshotKey(0, "other", 0, payload, out);
  f.judge(out);
  EXPECT_FALSE(out.events[0].pass);
  EXPECT_EQ(st.filtered[idx(FilterReason::Key)], 1u);
}

TEST_F(EventFilterTest, RenameOutOfTheKeySpaceBecomesADeletionOfTheSource) {
  config::PipelineConfig p;
  p.name = "p";
  p.filters.include_keys.push_back({"^in:", {}});
  PipelineStats st;
  EventFilter f(p, std::make_shared<const KeySpace>(p), st);
  source::Change c = resolve({"RENAME", "in:a", "out:a"});
  f.judge(c);
  ASSERT_TRUE(c.events[0].pass);
  EXPECT_EQ(c.events[0].kind, EventKind::Deletion);
  EXPECT_EQ(c.events[0].key, "in:a");
}

}  // namespace
}  // namespace xdcr::filters
