// The test vectors of expiry-semantics.md §9 through the real filter stage and applier on a
// simulated clock: stream entries in, the exact target commands out.

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "clock/clock.h"
#include "common/resp.h"
#include "filters/event_filter.h"
#include "source/resolver.h"
#include "target/applier.h"

namespace xdcr::target {
namespace {

using Cmds = std::vector<std::vector<std::string>>;
constexpr int64_t kNow = 1'000'000'000'000;
constexpr int64_t S = 1000;

std::string n(int64_t v) {
  return std::to_string(v);
}

class Chain {
 public:
  config::PipelineConfig pipe;
  std::vector<config::BucketConfig> buckets;
  clock::SimulatedClock clock{kNow};
  clock::ClusterClock src{clock}, dst{clock};
  source::ExpiryIndex index;
  PipelineStats stats;

  void maxTtl(int64_t bucket_s, int64_t coll_s, const std::string& glob = "k*", int db = 0) {
    config::BucketConfig b;
    b.db = db;
    b.max_ttl = std::chrono::seconds(bucket_s);
    b.collections.push_back({"c", glob, std::chrono::seconds(coll_s), {}});
    buckets.push_back(b);
  }

  /**
   * Feeds one unit; returns the target commands it produced. With `stamp`, a replay-unsafe
   * unit is finished as the pipeline does (a stamped group of one, stamp key "stamp").
   */
  Cmds feed(const Cmds& unit, bool transaction = false, bool stamp = false) {
    return feedUnits({unit}, {transaction}, stamp);
  }
  /**
   * Feeds consecutive units as the pipeline's read loop does: once one is replay-unsafe (with
   * `stamp`), it and every unit after it join one stamped group, closed at the end.
   */
  Cmds feedUnits(const std::vector<Cmds>& units, std::vector<bool> transactions, bool stamp) {
    std::string out;
    size_t count = 0;
    for (size_t u = 0; u < units.size(); ++u) {
      count += feedOne(units[u], u < transactions.size() && transactions[u], stamp, out);
    }
    if (stamp) count += applier_->closeGroup(out, "stamp", "r:1");
    return parse(out, count);
  }

 private:
  size_t feedOne(const Cmds& unit, bool transaction, bool stamp, std::string& out) {
    build();
    std::vector<std::vector<std::string_view>> views(unit.size());
    std::vector<source::Entry> entries(unit.size());
    for (size_t i = 0; i < unit.size(); ++i) {
      for (const auto& a : unit[i]) views[i].emplace_back(a);
      entries[i].args = views[i];
      entries[i].offset_end = i + 1;
    }
    applier_->beginUnit(transaction);
    source::Change change;
    for (const auto& e : entries) {
      resolver_->resolve(e, change);  // the source side: shared by every pipeline
      filter_->judge(change);         // this pipeline's filters
      applier_->watchableKeys(change, watchable);
      applier_->apply(change);
    }
    const size_t before = parsedCount(out);
    size_t n = 0;
    if (stamp && (applier_->groupOpen() || applier_->unitReplayUnsafe())) {
      n = applier_->appendUnitToGroup(out);
    } else {
      n = applier_->finishUnit(out);
    }
    for (Applier::Watch w : applier_->watches()) {
      if (!w.in_group) w.reply += before;
      watches.push_back(std::move(w));
    }
    return n;
  }
  static size_t parsedCount(const std::string& out) {
    std::vector<resp::ArgSpan> spans;
    std::string_view rest = out;
    size_t n = 0;
    while (!rest.empty()) {
      auto r = resp::parseCommand(rest, spans);
      if (r.status != resp::ParseStatus::Complete) break;
      rest.remove_prefix(r.consumed);
      ++n;
    }
    return n;
  }
  Cmds parse(const std::string& out, size_t count) {
    Cmds cmds;
    std::vector<resp::ArgSpan> spans;
    std::string_view rest = out;
    while (!rest.empty()) {
      auto r = resp::parseCommand(rest, spans);
      EXPECT_EQ(r.status, resp::ParseStatus::Complete) << r.error;
      if (r.status != resp::ParseStatus::Complete) break;
      std::vector<std::string> c;
      for (auto s : spans) c.emplace_back(rest.substr(s.pos, s.len));
      cmds.push_back(c);
      rest.remove_prefix(r.consumed);
    }
    EXPECT_EQ(count, cmds.size());
    return cmds;
  }

 public:
  Cmds feed1(std::vector<std::string> cmd) { return feed({std::move(cmd)}); }
  void compensate(int64_t delta) {
    build();
    applier_->setCompensationMs(delta);
  }
  /** One snapshot key with the raw RDB value `value` of `type`; its target commands. */
  Cmds feedSnapshot(const std::string& key, uint8_t type, const std::string& value,
                    source::rdb::Flavor flavor, int rdb_version, int64_t expire_ms = 0) {
    build();
    source::RdbPayload payload;
    payload.type = type;
    payload.value = value;
    payload.rdb_version = rdb_version;
    payload.flavor = flavor;
    source::Change change;
    resolver_->resolveSnapshotKey(0, key, expire_ms, payload, change);
    filter_->judge(change);
    applier_->beginUnit(false);
    applier_->apply(change);
    std::string out;
    const size_t count = applier_->finishUnit(out);
    return parse(out, count);
  }
  Applier::SnapshotWrite lastSnapshotWrite() const { return applier_->lastSnapshotWrite(); }
  /** Copy watches on (expiry-semantics.md §12). */
  void watchCopies(int64_t margin_ms = 5000, int64_t late_ms = 60000) {
    build();
    applier_->setCopyWatch(true, margin_ms, late_ms);
  }
  /** The watches of the units fed so far, each `reply` counted in the commands its feed
   *  returned. */
  std::vector<Applier::Watch> watches;
  /** Applier::watchableKeys of every change fed so far (what a replay after a crash would read
   *  back, had a replay stamp covered them). */
  std::vector<source::DocumentKey> watchable;
  /** A document read back at offset `x` (Applier::appendRestoredCopy); its target commands. */
  Cmds restoreCopy(const std::string& key, bool exists, uint8_t type, const std::string& value,
                   int rdb_version, int64_t expire_ms, uint64_t x) {
    build();
    source::RdbPayload payload;
    payload.type = type;
    payload.value = value;
    payload.rdb_version = rdb_version;
    source::Change change;
    change.effect = source::Effect::SnapshotKey;
    change.rdb = exists ? &payload : nullptr;
    source::Event ev;
    ev.kind = EventKind::Mutation;
    ev.rule = source::DeadlineRule::Explicit;
    ev.key = key;
    ev.deadline_ms = expire_ms;
    change.events = {ev};
    filter_->judge(change);
    applier_->beginUnit(true);
    EXPECT_TRUE(applier_->appendRestoredCopy(change, exists, "rec", x));
    std::string out;
    const size_t count = applier_->finishUnit(out);
    return parse(out, count);
  }
  /** The target's INFO server (Applier::setTarget), e.g. "redis_version:7.0.15". */
  void targetInfo(const std::string& info) {
    build();
    applier_->setTarget(ServerInfo::parse(info), 512ULL << 20, "pipeline p");
  }

 private:
  void build() {
    if (applier_) return;
    policy_ = std::make_unique<MaxTtlPolicy>(buckets);
    keys_ = std::make_shared<const filters::KeySpace>(pipe);
    resolver_ = std::make_unique<source::Resolver>(index, src);
    filter_ = std::make_unique<filters::EventFilter>(pipe, keys_, stats);
    applier_ = std::make_unique<Applier>(*policy_, *keys_, dst, stats);
    if (policy_->maxLifetimeMs() > 0) {
      first_seen = std::make_unique<FirstSeenStore>("", policy_->maxLifetimeMs());
      applier_->setFirstSeenStore(first_seen.get());
    }
  }

 public:
  std::unique_ptr<FirstSeenStore> first_seen;  // max_lifetime (in memory)
  /** A collection "c" of `glob` in db 0 with the policies of expiry-semantics.md §8. */
  config::CollectionConfig& collection(const std::string& glob = "k*", int64_t coll_s = 0) {
    config::BucketConfig b;
    b.collections.push_back({"c", glob, std::chrono::seconds(coll_s), {}});
    buckets.push_back(b);
    return buckets.back().collections.back();
  }

 private:
  std::unique_ptr<MaxTtlPolicy> policy_;
  filters::KeySpaceConstSharedPtr keys_;
  std::unique_ptr<source::Resolver> resolver_;
  std::unique_ptr<filters::EventFilter> filter_;
  std::unique_ptr<Applier> applier_;
};

TEST(Vectors, V1to9_SetWithBucketAndCollectionMaxTtl) {
  struct V {
    int id;
    int64_t bucket_s, coll_s;
    int64_t e_rel_s;     // -1 = no TTL in the SET
    int64_t want_rel_s;  // -1 = no deadline expected
  } vs[] = {{1, 0, 0, -1, -1},     {2, 600, 0, -1, 600},   {3, 600, 60, -1, 60},
            {4, 600, 60, 30, 30},  {5, 600, 60, 300, 60},  {6, 600, 0, 300, 300},
            {7, 600, 0, 900, 600}, {8, 0, 1000, 900, 900}, {9, 60, 1000, 900, 900}};
  for (const auto& v : vs) {
    Chain c;
    c.maxTtl(v.bucket_s, v.coll_s);
    std::vector<std::string> set = {"SET", "k", "v"};
    if (v.e_rel_s >= 0) set.insert(set.end(), {"PXAT", n(kNow + v.e_rel_s * S)});
    Cmds want = {v.want_rel_s < 0 ? std::vector<std::string>{"SET", "k", "v"}
                                  : std::vector<std::string>{"SET", "k", "v", "PXAT",
                                                             n(kNow + v.want_rel_s * S)}};
    EXPECT_EQ(c.feed1(set), want) << "vector " << v.id;
  }
}

TEST(Vectors, V10_11_StripTtl) {
  Chain c10;
  c10.pipe.filters.strip_ttl = true;
  EXPECT_EQ(c10.feed1({"SET", "k", "v", "PXAT", n(kNow + 300 * S)}), (Cmds{{"SET", "k", "v"}}));
  EXPECT_EQ(c10.stats.expiry_stripped, 1u);
  Chain c11;
  c11.pipe.filters.strip_ttl = true;
  c11.maxTtl(600, 0);
  EXPECT_EQ(c11.feed1({"SET", "k", "v", "PXAT", n(kNow + 300 * S)}),
            (Cmds{{"SET", "k", "v", "PXAT", n(kNow + 600 * S)}}));
}

TEST(Vectors, StripTtlLeavesKeepTtlAlone) {
  // Found by the differential test: KEEPTTL has no E to strip; the target keeps its deadline.
  Chain c;
  c.pipe.filters.strip_ttl = true;
  c.maxTtl(60, 0);
  EXPECT_EQ(c.feed1({"SET", "k", "v", "KEEPTTL"}), (Cmds{{"SET", "k", "v", "KEEPTTL"}}));
  EXPECT_EQ(c.stats.expiry_stripped, 0u);
}

TEST(Vectors, V12_14_ExpiryChanges) {
  Chain c12;
  EXPECT_EQ(c12.feed1({"PEXPIREAT", "k", n(kNow + 50 * S)}),
            (Cmds{{"PEXPIREAT", "k", n(kNow + 50 * S)}}));
  // The flag is dropped: the source only propagates flags that took effect.
  EXPECT_EQ(c12.feed1({"PEXPIREAT", "k", n(kNow + 40 * S), "LT"}),
            (Cmds{{"PEXPIREAT", "k", n(kNow + 40 * S)}}));
  Chain c13;
  c13.maxTtl(0, 60);
  EXPECT_EQ(c13.feed1({"PERSIST", "k"}), (Cmds{{"PEXPIREAT", "k", n(kNow + 60 * S)}}));
  Chain c14;
  EXPECT_EQ(c14.feed1({"PERSIST", "k"}), (Cmds{{"PERSIST", "k"}}));
}

TEST(Vectors, V15_16_InPlaceWritesExtendUpToMaxTtl) {
  Chain c;
  c.maxTtl(0, 60);
  c.feed1({"SET", "k", "v", "PXAT", n(kNow + 500 * S)});  // source deadline now+500s
  EXPECT_EQ(
      c.feed1({"HSET", "k", "f", "v"}),
      (Cmds{{"MULTI"}, {"HSET", "k", "f", "v"}, {"PEXPIREAT", "k", n(kNow + 60 * S)}, {"EXEC"}}));
  Chain c16;
  c16.maxTtl(0, 60);
  c16.feed1({"HSET", "k", "f", "v"});
  c16.clock.advance(10 * S);
  EXPECT_EQ(
      c16.feed1({"HSET", "k", "f", "w"}),
      (Cmds{{"MULTI"}, {"HSET", "k", "f", "w"}, {"PEXPIREAT", "k", n(kNow + 70 * S)}, {"EXEC"}}));
  // M == 0: forwarded alone, the target's deadline untouched.
  Chain c0;
  EXPECT_EQ(c0.feed1({"INCR", "k"}), (Cmds{{"INCR", "k"}}));
}

// The replay stamp (exactly-once replay of non-idempotent commands) rides in the unit's own
// MULTI/EXEC: never a nested MULTI, whatever the unit already needed.
TEST(Vectors, ReplayStampNeverNestsMulti) {
  Chain c;
  c.maxTtl(0, 60, "l*");
  // A lone unsafe entry: wrapped with the stamp.
  EXPECT_EQ(c.feed({{"RPUSH", "x", "a"}}, false, true),
            (Cmds{{"MULTI"}, {"RPUSH", "x", "a"}, {"SET", "stamp", "r:1"}, {"EXEC"}}));
  // An unsafe in-place write into a maxTTL collection already needs its own MULTI (for the
  // PEXPIREAT): the stamp joins it.
  c.feed1({"SET", "l:1", "v", "PXAT", n(kNow + 500 * S)});
  EXPECT_EQ(c.feed({{"APPEND", "l:1", "w"}}, false, true),
            (Cmds{{"MULTI"},
                  {"APPEND", "l:1", "w"},
                  {"PEXPIREAT", "l:1", n(kNow + 60 * S)},
                  {"SET", "stamp", "r:1"},
                  {"EXEC"}}));
  // A source transaction: one MULTI/EXEC around it and the stamp.
  EXPECT_EQ(c.feed({{"MULTI"}, {"INCR", "y"}, {"EXEC"}}, true, true),
            (Cmds{{"MULTI"}, {"INCR", "y"}, {"SET", "stamp", "r:1"}, {"EXEC"}}));
  // In another db: the stamp is written in db 0 inside the transaction.
  Chain d;
  d.maxTtl(0, 60, "l*");
  d.feed1({"SELECT", "3"});
  EXPECT_EQ(d.feed({{"INCR", "z"}}, false, true), (Cmds{{"MULTI"},
                                                        {"SELECT", "3"},
                                                        {"INCR", "z"},
                                                        {"SELECT", "0"},
                                                        {"SET", "stamp", "r:1"},
                                                        {"SELECT", "3"},
                                                        {"EXEC"}}));
}

// Consecutive units share one stamp: from the first replay-unsafe unit on, every unit joins one
// MULTI/EXEC (their own MULTI/EXEC dropped: the group's makes them atomic), stamped once.
TEST(Vectors, ConsecutiveUnitsShareOneStampedTransaction) {
  Chain c;
  c.maxTtl(0, 60, "l*");
  c.feed1({"SET", "l:1", "v", "PXAT", n(kNow + 500 * S)});
  EXPECT_EQ(c.feedUnits({{{"SET", "a", "1"}},                   // safe, before: not grouped
                         {{"INCR", "n"}},                       // opens the group
                         {{"SET", "b", "2"}},                   // joins it
                         {{"MULTI"}, {"INCR", "m"}, {"EXEC"}},  // a source transaction
                         {{"APPEND", "l:1", "w"}}},             // needed its own MULTI
                        {false, false, false, true, false}, true),
            (Cmds{{"SET", "a", "1"},
                  {"MULTI"},
                  {"INCR", "n"},
                  {"SET", "b", "2"},
                  {"INCR", "m"},
                  {"APPEND", "l:1", "w"},
                  {"PEXPIREAT", "l:1", n(kNow + 60 * S)},
                  {"SET", "stamp", "r:1"},
                  {"EXEC"}}));
}

TEST(Vectors, V17_ExpiredOnArrivalIsNeverWritten) {
  Chain c;
  EXPECT_EQ(c.feed1({"SET", "k", "v", "PXAT", n(kNow - 1 * S)}), (Cmds{{"DEL", "k"}}));
  EXPECT_EQ(c.stats.expired_on_arrival, 1u);
}

TEST(Vectors, V18_KeepTtlPreservesTheTargetDeadline) {
  Chain c;
  c.maxTtl(0, 60);
  EXPECT_EQ(c.feed1({"SET", "k", "v", "KEEPTTL"}), (Cmds{{"SET", "k", "v", "KEEPTTL"}}));
}

TEST(Vectors, V19_21_DeletionFilters) {
  Chain c19;
  c19.pipe.filters.drop_expirations = true;
  c19.feed1({"SET", "k", "v", "PXAT", n(kNow - 5)});
  EXPECT_EQ(c19.feed1({"DEL", "k"}), Cmds{});
  EXPECT_EQ(c19.stats.source_events[idx(EventKind::Expiration)], 1u);
  EXPECT_EQ(c19.stats.filtered[idx(FilterReason::Expiration)], 1u);

  Chain c20;
  c20.pipe.filters.drop_expirations = true;
  c20.feed1({"SET", "k", "v", "PXAT", n(kNow + 10 * S)});
  EXPECT_EQ(c20.feed1({"DEL", "k"}), (Cmds{{"DEL", "k"}}));
  EXPECT_EQ(c20.stats.source_events[idx(EventKind::Deletion)], 1u);

  Chain c21;
  c21.pipe.filters.drop_deletions = true;
  EXPECT_EQ(c21.feed1({"UNLINK", "k"}), Cmds{});
  EXPECT_EQ(c21.stats.filtered[idx(FilterReason::Deletion)], 1u);
}

TEST(Vectors, V22_MultiKeyDelClassifiedKeyByKey) {
  Chain c;
  c.pipe.filters.drop_expirations = true;
  c.feed1({"SET", "a", "v", "PXAT", n(kNow - 5)});
  c.feed1({"SET", "b", "v"});
  EXPECT_EQ(c.feed({{"MULTI"}, {"DEL", "a"}, {"DEL", "a", "b"}, {"EXEC"}}, true),
            (Cmds{{"MULTI"}, {"DEL", "b"}, {"EXEC"}}));
  // Without the filter the expiry is replicated once, the tombstoned key not again.
  Chain d;
  d.feed1({"SET", "a", "v", "PXAT", n(kNow - 5)});
  EXPECT_EQ(d.feed({{"MULTI"}, {"DEL", "a"}, {"DEL", "a", "b"}, {"EXEC"}}, true),
            (Cmds{{"MULTI"}, {"DEL", "a"}, {"DEL", "b"}, {"EXEC"}}));
}

TEST(Vectors, V23_FlushIsNotReplicatedByDefault) {
  Chain c;
  EXPECT_EQ(c.feed1({"FLUSHALL"}), Cmds{});
  EXPECT_EQ(c.stats.filtered[idx(FilterReason::Flush)], 1u);
  Chain r;
  r.pipe.filters.replicate_flush = true;
  EXPECT_EQ(r.feed1({"FLUSHALL"}), (Cmds{{"FLUSHALL"}}));
}

TEST(Vectors, V24_26_SkewCompensation) {
  const int64_t s100 = kNow + 100 * S;
  Chain c24;
  c24.compensate(30 * S);
  EXPECT_EQ(c24.feed1({"SET", "k", "v", "PXAT", n(s100)}),
            (Cmds{{"SET", "k", "v", "PXAT", n(s100 + 30 * S)}}));
  Chain c25;  // warn: unchanged
  EXPECT_EQ(c25.feed1({"SET", "k", "v", "PXAT", n(s100)}),
            (Cmds{{"SET", "k", "v", "PXAT", n(s100)}}));
  Chain c26;
  c26.maxTtl(0, 60);
  c26.compensate(30 * S);
  EXPECT_EQ(c26.feed1({"SET", "k", "v", "PXAT", n(s100)}),
            (Cmds{{"SET", "k", "v", "PXAT", n(kNow + 60 * S)}}));
}

TEST(Pipeline, DbMapKeyRewriteAndKeyFilters) {
  Chain c;
  c.pipe.dbs = {{1, 2}, {0, 0}};
  c.pipe.key_rewrite = {{"sess:", "eu:sess:", {}}};
  c.pipe.filters.exclude_keys.push_back({"^tmp:", {}});
  c.maxTtl(0, 60, "eu:sess:*", 2);  // the target's collection is on the rewritten key
  EXPECT_EQ(c.feed1({"SELECT", "1"}), Cmds{});
  EXPECT_EQ(c.feed1({"SET", "sess:1", "v"}),
            (Cmds{{"SELECT", "2"}, {"SET", "eu:sess:1", "v", "PXAT", n(kNow + 60 * S)}}));
  EXPECT_EQ(c.feed1({"SET", "tmp:1", "v"}), Cmds{});
  EXPECT_EQ(c.stats.filtered[idx(FilterReason::Key)], 1u);
  EXPECT_EQ(c.feed1({"SELECT", "5"}), Cmds{});
  EXPECT_EQ(c.feed1({"SET", "x", "v"}), Cmds{});  // db 5 is not in the map
  EXPECT_EQ(c.feed1({"SELECT", "0"}), Cmds{});
  EXPECT_EQ(c.feed1({"MSET", "a", "1", "tmp:2", "2", "b", "3"}),
            (Cmds{{"SELECT", "0"}, {"MULTI"}, {"SET", "a", "1"}, {"SET", "b", "3"}, {"EXEC"}}));
}

TEST(Pipeline, RenameGivesTheDestinationTheSourceDeadlineUnderItsOwnCollection) {
  Chain c;
  c.maxTtl(0, 60, "short:*");
  c.feed1({"SET", "a", "v", "PXAT", n(kNow + 500 * S)});
  EXPECT_EQ(c.feed1({"RENAME", "a", "short:b"}), (Cmds{{"MULTI"},
                                                       {"RENAME", "a", "short:b"},
                                                       {"PEXPIREAT", "short:b", n(kNow + 60 * S)},
                                                       {"EXEC"}}));
  EXPECT_EQ(
      c.feed1({"RENAME", "short:b", "c"}),
      (Cmds{
          {"MULTI"}, {"RENAME", "short:b", "c"}, {"PEXPIREAT", "c", n(kNow + 500 * S)}, {"EXEC"}}));
  EXPECT_EQ(c.index.get(0, "c").ms, kNow + 500 * S);
  EXPECT_EQ(c.index.get(0, "a").state, source::ExpiryIndex::State::None);
}

TEST(Pipeline, RestoreIsAbsoluteAndReplaces) {
  Chain c;
  c.maxTtl(0, 60);
  EXPECT_EQ(c.feed1({"RESTORE", "k", n(kNow + 500 * S), "payload", "ABSTTL"}),
            (Cmds{{"RESTORE", "k", n(kNow + 60 * S), "payload", "REPLACE", "ABSTTL"}}));
  EXPECT_EQ(c.feed1({"RESTORE", "z", "0", "payload", "IDLETIME", "100"}),
            (Cmds{{"RESTORE", "z", "0", "payload", "REPLACE", "IDLETIME", "100"}}));
}

TEST(Pipeline, UnknownCommandsAreForwardedAndCounted) {
  Chain c;
  EXPECT_EQ(c.feed1({"FUNCTION", "LOAD", "REPLACE", "code"}),
            (Cmds{{"FUNCTION", "LOAD", "REPLACE", "code"}}));
  EXPECT_EQ(c.stats.unknown_commands, 1u);
}

TEST(Commands, StoreCommandsRewriteEveryKeyTheyName) {
  Chain c;
  c.pipe.key_rewrite = {{"a:", "eu:a:", {}}};
  c.maxTtl(0, 60, "eu:a:*");
  EXPECT_EQ(c.feed1({"ZUNIONSTORE", "a:dst", "2", "a:x", "b:y", "WEIGHTS", "1", "2"}),
            (Cmds{{"MULTI"},
                  {"ZUNIONSTORE", "eu:a:dst", "2", "eu:a:x", "b:y", "WEIGHTS", "1", "2"},
                  {"PEXPIREAT", "eu:a:dst", n(kNow + 60 * S)},
                  {"EXEC"}}));
  EXPECT_EQ(c.feed1({"SORT", "a:list", "ALPHA", "STORE", "a:sorted"}),
            (Cmds{{"MULTI"},
                  {"SORT", "eu:a:list", "ALPHA", "STORE", "eu:a:sorted"},
                  {"PEXPIREAT", "eu:a:sorted", n(kNow + 60 * S)},
                  {"EXEC"}}));
  EXPECT_EQ(c.feed1({"BITOP", "AND", "a:d", "a:1", "a:2"}).at(1),
            (std::vector<std::string>{"BITOP", "AND", "eu:a:d", "eu:a:1", "eu:a:2"}));
  // PFMERGE writes only its destination (which keeps its deadline: in place).
  EXPECT_EQ(c.feed1({"PFMERGE", "b:d", "a:1"}), (Cmds{{"PFMERGE", "b:d", "eu:a:1"}}));
}

TEST(Commands, AStoreReadingAnExcludedKeyIsReportedNotHalfApplied) {
  Chain c;
  c.pipe.filters.exclude_keys.push_back({"^secret", {}});
  EXPECT_EQ(c.feed1({"SUNIONSTORE", "dst", "public", "secret:1"}), Cmds{});
  EXPECT_EQ(c.stats.filter_splits, 1u);
  EXPECT_EQ(c.stats.filtered[idx(FilterReason::Key)], 1u);
  EXPECT_EQ(c.feed1({"SUNIONSTORE", "dst", "public", "public2"}),
            (Cmds{{"SUNIONSTORE", "dst", "public", "public2"}}));
}

TEST(Commands, MoveCarriesTheDeadlineToTheOtherDbUnderItsClamp) {
  Chain c;
  c.maxTtl(0, 60, "k*", 4);
  c.feed1({"SET", "k", "v", "PXAT", n(kNow + 500 * S)});
  EXPECT_EQ(c.feed1({"MOVE", "k", "4"}), (Cmds{{"MULTI"},
                                               {"MOVE", "k", "4"},
                                               {"SELECT", "4"},
                                               {"PEXPIREAT", "k", n(kNow + 60 * S)},
                                               {"SELECT", "0"},
                                               {"EXEC"}}));
  EXPECT_EQ(c.index.get(4, "k").ms, kNow + 500 * S);
  EXPECT_EQ(c.index.get(0, "k").state, source::ExpiryIndex::State::None);
}

TEST(Commands, SwapDbFollowsTheDbMapAndSwapsTheIndex) {
  Chain c;
  c.pipe.dbs = {{0, 10}, {1, 11}};
  c.feed1({"SET", "k", "v", "PXAT", n(kNow + 500 * S)});
  EXPECT_EQ(c.feed1({"SWAPDB", "0", "1"}), (Cmds{{"SWAPDB", "10", "11"}}));
  EXPECT_EQ(c.index.get(1, "k").ms, kNow + 500 * S);
  Chain d;
  d.pipe.dbs = {{0, 0}};
  EXPECT_EQ(d.feed1({"SWAPDB", "0", "1"}), Cmds{});
  EXPECT_EQ(d.stats.filter_splits, 1u);
}

}  // namespace
}  // namespace xdcr::target

// hash-field-expiry.md §10: the field deadlines of stream commands (H3, H4, H7; vector H-12).
namespace xdcr::target {
namespace {

TEST(ApplierFieldDeadline, H12_CompensationTranslatesHpexpireatAndHsetexDeadlines) {
  Chain c;
  c.compensate(30 * S);
  EXPECT_EQ(c.feed1({"HPEXPIREAT", "h", n(kNow + 100 * S), "FIELDS", "1", "a"}),
            (Cmds{{"HPEXPIREAT", "h", n(kNow + 130 * S), "FIELDS", "1", "a"}}));
  EXPECT_EQ(c.feed1({"HSETEX", "h", "PXAT", n(kNow + 100 * S), "FIELDS", "1", "a", "1"}),
            (Cmds{{"HSETEX", "h", "PXAT", n(kNow + 130 * S), "FIELDS", "1", "a", "1"}}));
  // FNX before the deadline (Redis keeps it), and KEEPTTL (no deadline): as they came.
  EXPECT_EQ(c.feed1({"HSETEX", "h", "FNX", "PXAT", n(kNow + 100 * S), "FIELDS", "1", "a", "1"}),
            (Cmds{{"HSETEX", "h", "FNX", "PXAT", n(kNow + 130 * S), "FIELDS", "1", "a", "1"}}));
  EXPECT_EQ(c.feed1({"HSETEX", "h", "KEEPTTL", "FIELDS", "1", "a", "1"}),
            (Cmds{{"HSETEX", "h", "KEEPTTL", "FIELDS", "1", "a", "1"}}));
}

TEST(ApplierFieldDeadline, H4_StripTtlDropsHpexpireatAndTheDeadlineOfHsetex) {
  Chain c;
  c.pipe.filters.strip_ttl = true;
  EXPECT_EQ(c.feed1({"HPEXPIREAT", "h", n(kNow + 100 * S), "FIELDS", "1", "a"}), Cmds{});
  EXPECT_EQ(c.feed1({"HSETEX", "h", "PXAT", n(kNow + 100 * S), "FIELDS", "1", "a", "1"}),
            (Cmds{{"HSETEX", "h", "FIELDS", "1", "a", "1"}}));
  EXPECT_EQ(c.stats.expiry_stripped, 2u);
  // HPERSIST passes (it removes deadlines the target does not have anyway).
  EXPECT_EQ(c.feed1({"HPERSIST", "h", "FIELDS", "1", "a"}),
            (Cmds{{"HPERSIST", "h", "FIELDS", "1", "a"}}));
}

TEST(ApplierFieldDeadline, H1_StripTtlStillClampsTheKeyInAMaxTtlCollection) {
  Chain c;
  c.pipe.filters.strip_ttl = true;
  c.maxTtl(0, 60, "h*");
  EXPECT_EQ(c.feed1({"HPEXPIREAT", "h", n(kNow + 100 * S), "FIELDS", "1", "a"}),
            (Cmds{{"PEXPIREAT", "h", n(kNow + 60 * S)}}));
}

TEST(ApplierFieldDeadline, H7_ATargetWithoutFieldTtlsGetsTheFieldsWithoutDeadlines) {
  Chain c;
  c.targetInfo("# Server\r\nredis_version:7.0.15\r\n");
  EXPECT_EQ(c.feed1({"HPEXPIREAT", "h", n(kNow + 100 * S), "FIELDS", "1", "a"}), Cmds{});
  EXPECT_EQ(c.feed1({"HSETEX", "h", "PXAT", n(kNow + 100 * S), "FIELDS", "2", "a", "1", "b", "2"}),
            (Cmds{{"HSET", "h", "a", "1", "b", "2"}}));
  EXPECT_EQ(c.feed1({"HSETEX", "h", "KEEPTTL", "FIELDS", "1", "a", "3"}),
            (Cmds{{"HSET", "h", "a", "3"}}));
  EXPECT_EQ(c.stats.field_ttls_dropped, 2u);
  // Valkey 8 is such a target too; Valkey 9 and Redis 7.4 are not.
  Chain v8;
  v8.targetInfo("redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n");
  EXPECT_EQ(v8.feed1({"HPEXPIREAT", "h", n(kNow + 100 * S), "FIELDS", "1", "a"}), Cmds{});
  Chain v9;
  v9.targetInfo("redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n");
  EXPECT_EQ(v9.feed1({"HPEXPIREAT", "h", n(kNow + 100 * S), "FIELDS", "1", "a"}),
            (Cmds{{"HPEXPIREAT", "h", n(kNow + 100 * S), "FIELDS", "1", "a"}}));
}

TEST(ApplierFieldDeadline, H1_FieldCommandsFollowKeyRewrite) {
  Chain c;
  config::KeyRewrite rule;
  rule.from = "sess:";
  rule.to = "eu:sess:";
  c.pipe.key_rewrite.push_back(rule);
  c.compensate(-5 * S);
  EXPECT_EQ(c.feed1({"HSETEX", "sess:1", "PXAT", n(kNow + 100 * S), "FIELDS", "1", "a", "1"}),
            (Cmds{{"HSETEX", "eu:sess:1", "PXAT", n(kNow + 95 * S), "FIELDS", "1", "a", "1"}}));
}

}  // namespace
}  // namespace xdcr::target

// Snapshot hashes with field TTLs, written as commands (H3, H4, H5 through the rebuild).
namespace xdcr::target {
namespace {

/** A Valkey 9 HASH_2 value (RDB type 22): count, then per field name, value, 8-byte LE expiry
 *  (-1: none) — the layout a live Valkey 9.1.2 DUMP has (tests/source/rdb_value_test.cc). */
std::string valkeyHash2(const std::vector<std::tuple<std::string, std::string, int64_t>>& fields) {
  std::string v(1, static_cast<char>(fields.size()));
  for (const auto& [name, value, expire] : fields) {
    v.push_back(static_cast<char>(name.size()));
    v += name;
    v.push_back(static_cast<char>(value.size()));
    v += value;
    for (int i = 0; i < 8; ++i) v.push_back(static_cast<char>((expire >> (8 * i)) & 0xff));
  }
  return v;
}

const std::string kValkey9 = "redis_version:7.2.4\r\nvalkey_version:9.1.2\r\n";

TEST(SnapshotFieldDeadline, H5_FieldsPastTheirDeadlineAreNotWrittenNorAnAllExpiredHash) {
  Chain c;
  c.targetInfo(kValkey9);
  c.compensate(1);  // field deadlines to shift: the hash must be rebuilt, not RESTOREd
  const Cmds some = c.feedSnapshot(
      "h", 22,
      valkeyHash2({{"gone", "1", kNow - S}, {"kept", "2", kNow + 100 * S}, {"x", "3", -1}}),
      source::rdb::Flavor::Valkey, 80);
  EXPECT_EQ(some, (Cmds{{"MULTI"},
                        {"DEL", "h"},
                        {"HSET", "h", "kept", "2", "x", "3"},
                        {"HPEXPIREAT", "h", n(kNow + 100 * S + 1), "FIELDS", "1", "kept"},
                        {"EXEC"}}));
  EXPECT_EQ(c.lastSnapshotWrite(), Applier::SnapshotWrite::Rebuilt);
  const Cmds none =
      c.feedSnapshot("h2", 22, valkeyHash2({{"a", "1", kNow - S}, {"b", "2", kNow - 2 * S}}),
                     source::rdb::Flavor::Valkey, 80);
  EXPECT_EQ(none, (Cmds{{"DEL", "h2"}}));
  EXPECT_EQ(c.lastSnapshotWrite(), Applier::SnapshotWrite::Expired);
}

TEST(SnapshotFieldDeadline, H3_CompensationShiftsEveryFieldDeadline) {
  Chain c;
  c.targetInfo(kValkey9);
  c.compensate(30 * S);
  const Cmds cmds =
      c.feedSnapshot("h", 22, valkeyHash2({{"a", "1", kNow + 100 * S}, {"b", "2", kNow + 100 * S}}),
                     source::rdb::Flavor::Valkey, 80);
  EXPECT_EQ(cmds, (Cmds{{"MULTI"},
                        {"DEL", "h"},
                        {"HSET", "h", "a", "1", "b", "2"},
                        {"HPEXPIREAT", "h", n(kNow + 130 * S), "FIELDS", "2", "a", "b"},
                        {"EXEC"}}));
}

TEST(SnapshotFieldDeadline, WithoutAnythingToChangeTheHashIsRestored) {
  Chain c;
  c.targetInfo(kValkey9);
  const Cmds cmds = c.feedSnapshot("h", 22, valkeyHash2({{"a", "1", kNow + 100 * S}}),
                                   source::rdb::Flavor::Valkey, 80);
  ASSERT_EQ(cmds.size(), 1u);
  EXPECT_EQ(cmds[0][0], "RESTORE");
  EXPECT_EQ(c.lastSnapshotWrite(), Applier::SnapshotWrite::Restored);
  // The same into Redis 8: it cannot read Valkey's RDB 80, so the hash is rebuilt, deadline kept.
  Chain r;
  r.targetInfo("redis_version:8.0.6\r\n");
  EXPECT_EQ(r.feedSnapshot("h", 22, valkeyHash2({{"a", "1", kNow + 100 * S}}),
                           source::rdb::Flavor::Valkey, 80),
            (Cmds{{"MULTI"},
                  {"DEL", "h"},
                  {"HSET", "h", "a", "1"},
                  {"HPEXPIREAT", "h", n(kNow + 100 * S), "FIELDS", "1", "a"},
                  {"EXEC"}}));
}

TEST(SnapshotFieldDeadline, AModuleValueThatCannotBeRebuiltFailsWithAReason) {
  Chain c;
  c.targetInfo("redis_version:7.0.15\r\n");
  EXPECT_EQ(c.feedSnapshot("v", 7, std::string("\x01\x02", 2), source::rdb::Flavor::Redis, 12),
            Cmds{});
  EXPECT_EQ(c.lastSnapshotWrite(), Applier::SnapshotWrite::Failed);
}

}  // namespace
}  // namespace xdcr::target

// A field's expiry reaches the stream as HDEL of that field; with the field deadline index it is
// an expiration, which drop_expirations keeps from the target (docs/hash-field-expiry.md H6).
namespace xdcr::target {
namespace {

TEST(FieldExpiry, H6_AnHdelOfAFieldPastItsDeadlineIsAnExpiration) {
  Chain c;
  c.pipe.filters.drop_expirations = true;
  EXPECT_EQ(c.feed1({"HSET", "h", "a", "1", "b", "2", "c", "3"}).size(), 1u);
  EXPECT_EQ(c.feed1({"HPEXPIREAT", "h", n(kNow + 10 * S), "FIELDS", "2", "a", "c"}).size(), 1u);
  EXPECT_EQ(c.feed1({"HSET", "h", "c", "4"}).size(), 1u);  // writing c clears its TTL
  c.clock.advance(11 * S);
  EXPECT_EQ(c.feed1({"HDEL", "h", "a"}), Cmds{}) << "the expiry of a";
  EXPECT_EQ(c.stats.filtered[idx(FilterReason::Expiration)], 1u);
  EXPECT_EQ(c.feed1({"HDEL", "h", "b"}), (Cmds{{"HDEL", "h", "b"}})) << "b had no deadline";
  EXPECT_EQ(c.feed1({"HDEL", "h", "c"}), (Cmds{{"HDEL", "h", "c"}})) << "HSET cleared c's TTL";
  EXPECT_EQ(c.stats.filtered[idx(FilterReason::Expiration)], 1u);
}

TEST(FieldExpiry, H6_ValkeysUnlinkOfTheHashItsLastFieldLeftIsPartOfTheExpiration) {
  Chain c;
  c.pipe.filters.drop_expirations = true;
  c.feed1({"HSETEX", "h", "PXAT", n(kNow + 5 * S), "FIELDS", "1", "x", "1"});
  c.clock.advance(6 * S);
  EXPECT_EQ(c.feed({{"MULTI"}, {"HDEL", "h", "x"}, {"UNLINK", "h"}, {"EXEC"}}, true), Cmds{});
  EXPECT_EQ(c.stats.filtered[idx(FilterReason::Expiration)], 2u);
  // Without drop_expirations both are replicated, as one transaction.
  Chain d;
  d.feed1({"HSETEX", "h", "PXAT", n(kNow + 5 * S), "FIELDS", "1", "x", "1"});
  d.clock.advance(6 * S);
  EXPECT_EQ(d.feed({{"MULTI"}, {"HDEL", "h", "x"}, {"UNLINK", "h"}, {"EXEC"}}, true),
            (Cmds{{"MULTI"}, {"HDEL", "h", "x"}, {"UNLINK", "h"}, {"EXEC"}}));
}

TEST(FieldExpiry, H6_OnlyASingleFieldHdelOfAnIndexedPastDeadlineIsAnExpiration) {
  Chain c;
  c.pipe.filters.drop_expirations = true;
  c.feed1({"HPEXPIREAT", "h", n(kNow + 5 * S), "FIELDS", "2", "a", "b"});
  c.feed1({"HPERSIST", "h", "FIELDS", "1", "b"});
  c.feed1({"HPEXPIREAT", "k", n(kNow + 5 * S), "FIELDS", "1", "a"});
  c.feed1({"DEL", "k"});  // the key is gone: so are its fields' deadlines
  c.clock.advance(6 * S);
  EXPECT_EQ(c.feed1({"HDEL", "h", "a", "b"}).size(), 1u) << "a user's HDEL of two fields";
  EXPECT_EQ(c.feed1({"HDEL", "h", "b"}).size(), 1u) << "HPERSIST removed b's deadline";
  EXPECT_EQ(c.feed1({"HDEL", "k", "a"}).size(), 1u) << "k was deleted and written again";
  EXPECT_EQ(c.stats.filtered[idx(FilterReason::Expiration)], 0u);
}

// ---- expiry-semantics.md §8: collection policies, exact target commands ---------------------

TEST(PolicyVectors, P1_P5_P7_P8_DefaultTtl) {
  Chain c;
  c.collection().default_ttl = std::chrono::hours(1);
  EXPECT_EQ(c.feed1({"SET", "k", "v"}), (Cmds{{"SET", "k", "v", "PXAT", n(kNow + 3600 * S)}}));
  EXPECT_EQ(c.feed1({"SET", "k", "v", "PXAT", n(kNow + 5 * 3600 * S)}),
            (Cmds{{"SET", "k", "v", "PXAT", n(kNow + 5 * 3600 * S)}}));                  // P-2
  EXPECT_EQ(c.feed1({"PERSIST", "k"}), (Cmds{{"PEXPIREAT", "k", n(kNow + 3600 * S)}}));  // P-5
  EXPECT_EQ(
      c.feed1({"MSET", "k1", "a", "x", "b"}),
      (Cmds{
          {"MULTI"}, {"SET", "k1", "a", "PXAT", n(kNow + 3600 * S)}, {"SET", "x", "b"}, {"EXEC"}}));
  EXPECT_EQ(c.feed1({"HSET", "kh", "f", "v"}), (Cmds{{"HSET", "kh", "f", "v"}}));  // P-7
  Chain c8;
  c8.collection("k*", 600).default_ttl = std::chrono::hours(1);
  EXPECT_EQ(c8.feed1({"HSET", "kh", "f", "v"}), (Cmds{{"MULTI"},
                                                      {"HSET", "kh", "f", "v"},
                                                      {"PEXPIREAT", "kh", n(kNow + 600 * S), "LT"},
                                                      {"EXEC"}}));  // P-8
  EXPECT_EQ(c8.feed1({"SET", "k", "v"}), (Cmds{{"SET", "k", "v", "PXAT", n(kNow + 600 * S)}}));
  Chain c3;
  c3.collection().default_ttl = std::chrono::milliseconds(-1);
  EXPECT_EQ(c3.feed1({"SET", "k", "v"}), (Cmds{{"SET", "k", "v"}}));  // P-3
  EXPECT_EQ(c3.feed1({"PERSIST", "k"}), (Cmds{{"PERSIST", "k"}}));
}

TEST(PolicyVectors, P46_AnOverwritingStoreIsACreate) {
  // Found by the differential test: *STORE replaces the value and clears its TTL (§4: E = 0),
  // so a default fills it; it was treated as an in-place write (deadline kept).
  Chain c;
  c.collection().default_ttl = std::chrono::hours(1);
  EXPECT_EQ(c.feed1({"SUNIONSTORE", "k", "a", "b"}), (Cmds{{"MULTI"},
                                                           {"SUNIONSTORE", "k", "a", "b"},
                                                           {"PEXPIREAT", "k", n(kNow + 3600 * S)},
                                                           {"EXEC"}}));
  EXPECT_EQ(c.feed1({"APPEND", "k", "x"}), (Cmds{{"APPEND", "k", "x"}}));  // in place: kept
}

TEST(PolicyVectors, P9_StripTtlThenTheDefault) {
  Chain c;
  c.pipe.filters.strip_ttl = true;
  c.collection().default_ttl = std::chrono::hours(1);
  EXPECT_EQ(c.feed1({"SET", "k", "v", "PXAT", n(kNow + 5 * 3600 * S)}),
            (Cmds{{"SET", "k", "v", "PXAT", n(kNow + 3600 * S)}}));
}

TEST(PolicyVectors, P10_P20_TtlFieldFromSetRestoreAndSnapshot) {
  Chain c;
  auto& col = c.collection();
  col.default_ttl = std::chrono::milliseconds(-1);
  col.ttl_field = "ttl";
  const std::string doc = R"({"ttl":60})";
  EXPECT_EQ(c.feed1({"SET", "k", doc}), (Cmds{{"SET", "k", doc, "PXAT", n(kNow + 60 * S)}}));
  EXPECT_EQ(c.feed1({"SET", "k", "plain"}), (Cmds{{"SET", "k", "plain"}}));  // P-14
  // P-20: a snapshot key whose RDB string value (length-prefixed) is the JSON document.
  const std::string rdb_string = std::string(1, static_cast<char>(doc.size())) + doc;
  EXPECT_EQ(c.feedSnapshot("k2", 0, rdb_string, source::rdb::Flavor::Redis, 10)[0][2],
            n(kNow + 60 * S));
  // P-20: RESTORE of a DUMP payload: type 0, the value, RDB version, CRC (not checked here).
  const std::string dump = std::string(1, '\0') + rdb_string + std::string(10, '\0');
  EXPECT_EQ(c.feed1({"RESTORE", "k3", "0", dump}),
            (Cmds{{"RESTORE", "k3", n(kNow + 60 * S), dump, "REPLACE", "ABSTTL"}}));
}

TEST(PolicyVectors, P22_P29_ExpireAtFieldAndExpiredOnArrival) {
  Chain c;
  c.collection().expire_at_field = "expireAt";
  const std::string doc = R"({"expireAt":"2001-09-09T01:46:50Z"})";
  EXPECT_EQ(c.feed1({"SET", "k", doc}), (Cmds{{"SET", "k", doc, "PXAT", n(kNow + 10 * S)}}));
  EXPECT_EQ(c.feed1({"SET", "k", R"({"expireAt":999999990})"}), (Cmds{{"DEL", "k"}}));  // P-29
  EXPECT_EQ(c.stats.expired_on_arrival, 1u);
  EXPECT_EQ(c.feed1({"MSET", "k", R"({"expireAt":999999990})"}), (Cmds{{"DEL", "k"}}));
}

TEST(PolicyVectors, P33_P36_P39_P42_MaxLifetime) {
  Chain c;
  c.collection().max_lifetime = std::chrono::seconds(100);
  EXPECT_EQ(c.feed1({"SET", "k", "v"}), (Cmds{{"SET", "k", "v", "PXAT", n(kNow + 100 * S)}}));
  c.clock.advance(40 * S);
  EXPECT_EQ(c.feed1({"SET", "k", "w"}), (Cmds{{"SET", "k", "w", "PXAT", n(kNow + 100 * S)}}));
  EXPECT_EQ(c.feed1({"SET", "k", "w", "KEEPTTL"}),
            (Cmds{{"MULTI"},
                  {"SET", "k", "w", "KEEPTTL"},
                  {"PEXPIREAT", "k", n(kNow + 100 * S), "LT"},
                  {"EXEC"}}));  // P-39
  EXPECT_EQ(c.feed1({"DEL", "k"}), (Cmds{{"DEL", "k"}}));
  c.clock.advance(10 * S);
  EXPECT_EQ(c.feed1({"SET", "k", "v"}),
            (Cmds{{"SET", "k", "v", "PXAT", n(kNow + 150 * S)}}));  // P-36: anew
  EXPECT_EQ(c.feed1({"HSET", "kh", "f", "v"}), (Cmds{{"MULTI"},
                                                     {"HSET", "kh", "f", "v"},
                                                     {"PEXPIREAT", "kh", n(kNow + 150 * S)},
                                                     {"EXEC"}}));  // P-42
  const uint64_t clamped = c.stats.expiry_clamped;  // a cap counts as a clamp (as max_ttl's)
  EXPECT_EQ(c.feed1({"PEXPIREAT", "k", n(kNow + 900 * S)}),
            (Cmds{{"PEXPIREAT", "k", n(kNow + 150 * S)}}));
  EXPECT_EQ(c.stats.expiry_clamped, clamped + 1);
  // RENAME: the destination is a first write of its own, the source forgotten.
  c.clock.advance(5 * S);
  EXPECT_EQ(
      c.feed1({"RENAME", "k", "k9"}),
      (Cmds{{"MULTI"}, {"RENAME", "k", "k9"}, {"PEXPIREAT", "k9", n(kNow + 155 * S)}, {"EXEC"}}));
  EXPECT_EQ(c.first_seen->find(0, "k"), 0);
}

// ---------------------------------------------------------------------------------------------
// Copy watches (expiry-semantics.md §12): which writes are watched, what guards them, and where
// each watch's reply comes among the commands written.

/** The command a watch's reply answers: the write itself, or the `element`-th queued command of
 *  the MULTI whose EXEC is `exec` (for a group: the last EXEC). */
std::vector<std::string> watched(const Cmds& cmds, const Applier::Watch& w) {
  size_t reply = w.in_group ? cmds.size() - 1 : w.reply;
  if (reply >= cmds.size()) return {"(reply out of range)"};
  if (w.element < 0) return cmds[reply];
  if (cmds[reply] != std::vector<std::string>{"EXEC"}) return {"(not an EXEC)"};
  size_t multi = reply;
  while (multi > 0 && cmds[multi] != std::vector<std::string>{"MULTI"}) --multi;
  const size_t at = multi + 1 + static_cast<size_t>(w.element);
  return at < reply ? cmds[at] : std::vector<std::string>{"(element out of range)"};
}

TEST(CopyWatch, ARenewalIsItsOwnWatch) {
  Chain c;
  c.watchCopies();
  const Cmds cmds = c.feed1({"PEXPIREAT", "k", n(kNow + 10 * S)});
  EXPECT_EQ(cmds, (Cmds{{"PEXPIREAT", "k", n(kNow + 10 * S)}}));
  ASSERT_EQ(c.watches.size(), 1u);
  EXPECT_EQ(c.watches[0].kind, Applier::WatchKind::Renewal);
  EXPECT_EQ(c.watches[0].key, "k");
  EXPECT_EQ(c.watches[0].reason, RepairReason::ExpiredBeforeWrite);
  EXPECT_EQ(watched(cmds, c.watches[0]), cmds[0]);
}

TEST(CopyWatch, OffByDefaultNothingIsWatchedOrGuarded) {
  Chain c;
  c.feed1({"SET", "k", "1", "PXAT", n(kNow + 2 * S)});
  EXPECT_EQ(c.feed1({"INCR", "k"}), (Cmds{{"INCR", "k"}}));
  c.feed1({"PEXPIREAT", "k", n(kNow + 10 * S)});
  EXPECT_TRUE(c.watches.empty());
}

TEST(CopyWatch, AnInPlaceWriteNearItsDeadlineIsGuardedInItsMulti) {
  Chain c;
  c.watchCopies();
  c.feed1({"SET", "k", "1", "PXAT", n(kNow + 3 * S)});
  EXPECT_TRUE(c.watches.empty());  // a whole value needs no guard
  const Cmds cmds = c.feed1({"INCR", "k"});
  EXPECT_EQ(cmds, (Cmds{{"MULTI"}, {"EXISTS", "k"}, {"INCR", "k"}, {"EXEC"}}));
  ASSERT_EQ(c.watches.size(), 1u);
  EXPECT_EQ(c.watches[0].kind, Applier::WatchKind::Guard);
  EXPECT_EQ(watched(cmds, c.watches[0]), (std::vector<std::string>{"EXISTS", "k"}));
}

TEST(CopyWatch, FarFromItsDeadlineNoGuardAWatchOnlyWithinTheLateHorizon) {
  Chain c;
  c.watchCopies(5000, 60000);
  c.feed1({"SET", "far", "1", "PXAT", n(kNow + 3600 * S)});
  c.feed1({"SET", "near", "1", "PXAT", n(kNow + 30 * S)});
  EXPECT_EQ(c.feed1({"INCR", "far"}), (Cmds{{"INCR", "far"}}));
  EXPECT_TRUE(c.watches.empty());
  const Cmds cmds = c.feed1({"INCR", "near"});
  EXPECT_EQ(cmds, (Cmds{{"INCR", "near"}}));
  ASSERT_EQ(c.watches.size(), 1u);
  EXPECT_EQ(c.watches[0].kind, Applier::WatchKind::Late);
  EXPECT_EQ(c.watches[0].deadline_ms, kNow + 30 * S);
  EXPECT_EQ(watched(cmds, c.watches[0]), cmds[0]);
}

TEST(CopyWatch, InAClampedCollectionTheCopysOwnDeadlineDecides) {
  Chain c;
  c.maxTtl(0, 60);
  c.watchCopies(5000, 30000);
  // A key this applier never wrote: a create (its copy cannot have ended): no guard.
  EXPECT_EQ(
      c.feed1({"HSET", "k", "a", "1"}),
      (Cmds{{"MULTI"}, {"HSET", "k", "a", "1"}, {"PEXPIREAT", "k", n(kNow + 60 * S)}, {"EXEC"}}));
  EXPECT_TRUE(c.watches.empty());
  // 57 s later the copy (no source deadline: the clamp's now+60 s) ends within the margin.
  c.clock.advance(57 * S);
  const Cmds cmds = c.feed1({"HSET", "k", "b", "2"});
  EXPECT_EQ(cmds, (Cmds{{"MULTI"},
                        {"EXISTS", "k"},
                        {"HSET", "k", "b", "2"},
                        {"PEXPIREAT", "k", n(kNow + 117 * S)},
                        {"EXEC"}}));
  ASSERT_EQ(c.watches.size(), 1u);
  EXPECT_EQ(c.watches[0].reason, RepairReason::ClampedBeforeWrite);
  EXPECT_EQ(watched(cmds, c.watches[0]), (std::vector<std::string>{"EXISTS", "k"}));
  // Just written: now+60 s again, nothing to guard.
  c.watches.clear();
  c.feed1({"HSET", "k", "c", "3"});
  EXPECT_TRUE(c.watches.empty());
}

TEST(CopyWatch, PersistAndKeepTtlAreGuarded) {
  Chain c;
  c.watchCopies();
  c.feed1({"SET", "k", "1", "PXAT", n(kNow + 2 * S)});
  const Cmds keep = c.feed1({"SET", "k", "2", "KEEPTTL"});
  EXPECT_EQ(keep, (Cmds{{"MULTI"}, {"EXISTS", "k"}, {"SET", "k", "2", "KEEPTTL"}, {"EXEC"}}));
  const Cmds persist = c.feed1({"PERSIST", "k"});
  EXPECT_EQ(persist, (Cmds{{"MULTI"}, {"EXISTS", "k"}, {"PERSIST", "k"}, {"EXEC"}}));
  ASSERT_EQ(c.watches.size(), 2u);
  EXPECT_EQ(watched(keep, c.watches[0]), (std::vector<std::string>{"EXISTS", "k"}));
  EXPECT_EQ(watched(persist, c.watches[1]), (std::vector<std::string>{"EXISTS", "k"}));
}

TEST(CopyWatch, RenameWatchesItsSourceKey) {
  Chain c;
  c.watchCopies();
  c.feed1({"SET", "a", "1", "PXAT", n(kNow + 2 * S)});
  const Cmds cmds = c.feed1({"RENAME", "a", "b"});
  ASSERT_FALSE(cmds.empty());
  ASSERT_EQ(c.watches.size(), 1u);
  EXPECT_EQ(c.watches[0].kind, Applier::WatchKind::Rename);
  EXPECT_EQ(c.watches[0].key, "b");
  EXPECT_EQ(c.watches[0].from_key, "a");
  EXPECT_EQ(watched(cmds, c.watches[0]), (std::vector<std::string>{"RENAME", "a", "b"}));
}

TEST(CopyWatch, InASourceTransactionTheReplyIsAnElementOfItsExec) {
  Chain c;
  c.watchCopies();
  c.feed1({"SET", "k", "1", "PXAT", n(kNow + 2 * S)});
  const Cmds cmds = c.feed({{"SET", "j", "x"}, {"INCR", "k"}, {"PEXPIREAT", "j", n(kNow + 9 * S)}},
                           /*transaction=*/true);
  EXPECT_EQ(cmds, (Cmds{{"MULTI"},
                        {"SET", "j", "x"},
                        {"EXISTS", "k"},
                        {"INCR", "k"},
                        {"PEXPIREAT", "j", n(kNow + 9 * S)},
                        {"EXEC"}}));
  ASSERT_EQ(c.watches.size(), 2u);
  EXPECT_EQ(watched(cmds, c.watches[0]), (std::vector<std::string>{"EXISTS", "k"}));
  EXPECT_EQ(watched(cmds, c.watches[1]), cmds[4]);
}

TEST(CopyWatch, InAStampedGroupTheReplyIsAnElementOfTheGroupsExec) {
  Chain c;
  c.watchCopies();
  c.feed1({"SET", "k", "1", "PXAT", n(kNow + 2 * S)});
  c.feed1({"SET", "m", "1", "PXAT", n(kNow + 2 * S)});
  c.watches.clear();
  // Two replay-unsafe units, each guarded, in one group; a renewal between them.
  const Cmds cmds =
      c.feedUnits({{{"INCR", "k"}}, {{"PEXPIREAT", "k", n(kNow + 20 * S)}}, {{"RPUSH", "m", "a"}}},
                  {false, false, false}, /*stamp=*/true);
  ASSERT_EQ(cmds.front(), (std::vector<std::string>{"MULTI"}));
  ASSERT_EQ(cmds.back(), (std::vector<std::string>{"EXEC"}));
  ASSERT_EQ(c.watches.size(), 3u);
  for (const auto& w : c.watches) EXPECT_TRUE(w.in_group);
  EXPECT_EQ(watched(cmds, c.watches[0]), (std::vector<std::string>{"EXISTS", "k"}));
  EXPECT_EQ(watched(cmds, c.watches[1]),
            (std::vector<std::string>{"PEXPIREAT", "k", n(kNow + 20 * S)}));
  EXPECT_EQ(watched(cmds, c.watches[2]), (std::vector<std::string>{"EXISTS", "m"}));
}

TEST(CopyWatch, AHashFieldsRenewalIsWatchedForAFieldTheTargetNoLongerHas) {
  Chain c;
  c.watchCopies();
  const Cmds renew = c.feed1({"HPEXPIREAT", "h", n(kNow + 10 * S), "FIELDS", "2", "a", "b"});
  EXPECT_EQ(renew, (Cmds{{"HPEXPIREAT", "h", n(kNow + 10 * S), "FIELDS", "2", "a", "b"}}));
  ASSERT_EQ(c.watches.size(), 1u);
  EXPECT_EQ(c.watches[0].kind, Applier::WatchKind::FieldRenewal);
  EXPECT_EQ(c.watches[0].reason, RepairReason::FieldExpiredBeforeWrite);
  EXPECT_EQ(c.watches[0].key, "h");
  EXPECT_EQ(watched(renew, c.watches[0]), renew[0]);
  c.watches.clear();
  const Cmds persist = c.feed1({"HPERSIST", "h", "FIELDS", "1", "a"});
  ASSERT_EQ(c.watches.size(), 1u);
  EXPECT_EQ(c.watches[0].kind, Applier::WatchKind::FieldRenewal);
  EXPECT_EQ(watched(persist, c.watches[0]), persist[0]);
  c.watches.clear();
  // A plain field write is not a renewal (HSET writes the field whole; far from the key's
  // deadline, nothing to guard).
  c.feed1({"HSET", "h", "a", "1"});
  EXPECT_TRUE(c.watches.empty());

  // In a max_ttl collection the renewal is followed by the key's clamp, in one MULTI: the
  // watch is the HPEXPIREAT's element of the EXEC.
  Chain m;
  m.maxTtl(0, 60, "h*");
  m.watchCopies();
  const Cmds clamped = m.feed1({"HPEXPIREAT", "h", n(kNow + 10 * S), "FIELDS", "1", "a"});
  ASSERT_EQ(clamped.size(), 4u) << ::testing::PrintToString(clamped);
  const auto field_watch = std::find_if(
      m.watches.begin(), m.watches.end(),
      [](const Applier::Watch& w) { return w.kind == Applier::WatchKind::FieldRenewal; });
  ASSERT_NE(field_watch, m.watches.end());
  EXPECT_EQ(watched(clamped, *field_watch),
            (std::vector<std::string>{"HPEXPIREAT", "h", n(kNow + 10 * S), "FIELDS", "1", "a"}));

  // Where no field deadline is written, nothing answers: a target without field TTLs, strip_ttl.
  Chain v8;
  v8.watchCopies();
  v8.targetInfo("redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n");
  EXPECT_EQ(v8.feed1({"HPEXPIREAT", "h", n(kNow + 10 * S), "FIELDS", "1", "a"}), Cmds{});
  EXPECT_TRUE(v8.watches.empty());
  Chain stripped;
  stripped.pipe.filters.strip_ttl = true;
  stripped.watchCopies();
  EXPECT_EQ(stripped.feed1({"HPEXPIREAT", "h", n(kNow + 10 * S), "FIELDS", "1", "a"}), Cmds{});
  EXPECT_TRUE(stripped.watches.empty());
}

// §12.2 step 5: a replay the target's stamp covers reads back every key a write of it could
// have watched. That set must hold every key the applier does watch, at any time of the write
// and with any margins: a watch that asked for a read-back the crash lost is found again.
TEST(CopyWatch, EveryWatchedKeyIsWatchableAtAnyTime) {
  const Cmds writes = {{"SET", "k", "1", "PXAT", n(kNow + 3 * S)},
                       {"INCR", "k"},
                       {"PEXPIREAT", "k", n(kNow + 20 * S)},
                       {"SET", "k", "2", "KEEPTTL"},
                       {"APPEND", "k", "x"},
                       {"PERSIST", "k"},
                       {"SET", "a", "1", "PXAT", n(kNow + 4 * S)},
                       {"RENAME", "a", "b"},
                       {"SADD", "s1", "x"},
                       {"PEXPIREAT", "s1", n(kNow + 2 * S)},
                       {"SUNIONSTORE", "d", "s1", "s2"},
                       {"HSET", "h", "f", "1"},
                       {"HPEXPIREAT", "h", n(kNow + 3 * S), "FIELDS", "1", "f"},
                       {"HINCRBY", "h", "f", "1"},
                       {"HSETEX", "h", "FXX", "PXAT", n(kNow + 9 * S), "FIELDS", "1", "f", "2"},
                       {"LPUSH", "kl", "x"},
                       {"COPY", "b", "c"},
                       {"HSET", "kc", "a", "1"},
                       {"HSET", "kc", "b", "1"}};
  size_t watched_total = 0;
  for (const int64_t margin_ms : {0, 5000, 60000}) {
    for (const int64_t step_ms : {0, 1000, 2500}) {
      Chain c;
      c.maxTtl(0, 60, "kc");  // a clamped collection: its copies' deadlines are the clamp's
      c.watchCopies(margin_ms, 60000);
      for (const auto& w : writes) {
        c.feed1(w);
        c.clock.advance(step_ms);
      }
      watched_total += c.watches.size();
      for (const Applier::Watch& w : c.watches) {
        EXPECT_NE(
            std::find(c.watchable.begin(), c.watchable.end(), source::DocumentKey{w.db, w.key}),
            c.watchable.end())
            << w.key << " watched, not watchable (margin " << margin_ms << ", step " << step_ms
            << ")";
        if (!w.from_key.empty()) {
          EXPECT_NE(std::find(c.watchable.begin(), c.watchable.end(),
                              source::DocumentKey{w.from_db, w.from_key}),
                    c.watchable.end())
              << w.from_key;
        }
      }
    }
  }
  EXPECT_GE(watched_total, 20u);  // (the writes above are watched: the check is not empty)
}

TEST(CopyWatch, WatchableKeysLeaveOutWritesWhoseCopiesCannotEnd) {
  Chain c;
  c.maxTtl(0, 60, "kc");
  c.watchCopies();
  c.feed1({"SET", "plain", "1"});  // a whole value: never watched
  c.feed1({"INCR", "plain"});      // no deadline anywhere: its copy cannot end
  c.feed1({"DEL", "plain"});
  c.feed1({"SADD", "set", "x"});
  c.feed1({"SUNIONSTORE", "d", "set", "other"});  // reads keys without deadlines
  EXPECT_TRUE(c.watchable.empty());
  c.feed1({"SET", "e", "1", "PXAT", n(kNow + 3600 * S)});
  c.feed1({"INCR", "e"});  // far from its deadline: not watched now, watchable all the same
  c.feed1({"HSET", "kc", "a", "1"});  // a clamped copy, never written before: watchable too
  const std::vector<source::DocumentKey> want = {{0, "e"}, {0, "kc"}};
  EXPECT_EQ(c.watchable, want);
  EXPECT_TRUE(c.watches.empty());
}

TEST(CopyWatch, AFieldChangedInPlaceNearItsDeadlineIsGuardedByHexists) {
  Chain c;
  c.watchCopies();
  c.feed1({"HSET", "h", "n", "1", "far", "1"});
  c.feed1({"HPEXPIREAT", "h", n(kNow + 3 * S), "FIELDS", "1", "n"});
  c.feed1({"HPEXPIREAT", "h", n(kNow + 3600 * S), "FIELDS", "1", "far"});
  c.watches.clear();
  const Cmds near = c.feed1({"HINCRBY", "h", "n", "1"});
  EXPECT_EQ(near, (Cmds{{"MULTI"}, {"HEXISTS", "h", "n"}, {"HINCRBY", "h", "n", "1"}, {"EXEC"}}));
  ASSERT_EQ(c.watches.size(), 1u);
  EXPECT_EQ(c.watches[0].kind, Applier::WatchKind::Guard);
  EXPECT_EQ(c.watches[0].reason, RepairReason::FieldExpiredBeforeWrite);
  EXPECT_EQ(c.watches[0].deadline_ms, kNow + 3 * S);  // answered 0 before it: not expired
  EXPECT_EQ(watched(near, c.watches[0]), (std::vector<std::string>{"HEXISTS", "h", "n"}));
  c.watches.clear();
  // Far from its deadline, or a field without one: the common path, nothing added.
  EXPECT_EQ(c.feed1({"HINCRBYFLOAT", "h", "far", "0.5"}),
            (Cmds{{"HINCRBYFLOAT", "h", "far", "0.5"}}));
  EXPECT_EQ(c.feed1({"HINCRBY", "h", "other", "1"}), (Cmds{{"HINCRBY", "h", "other", "1"}}));
  EXPECT_TRUE(c.watches.empty());
  // HSET writes the field whole and clears its deadline: the next HINCRBY is not guarded.
  c.feed1({"HSET", "h", "n", "5"});
  EXPECT_EQ(c.feed1({"HINCRBY", "h", "n", "1"}), (Cmds{{"HINCRBY", "h", "n", "1"}}));
  EXPECT_TRUE(c.watches.empty());
}

TEST(CopyWatch, HsetexOnlyIfTheFieldsExistIsWatchedForItsZero) {
  Chain c;
  c.watchCopies();
  const Cmds fxx =
      c.feed1({"HSETEX", "h", "FXX", "PXAT", n(kNow + 10 * S), "FIELDS", "1", "a", "2"});
  ASSERT_EQ(fxx.size(), 1u);
  ASSERT_EQ(c.watches.size(), 1u);
  EXPECT_EQ(c.watches[0].kind, Applier::WatchKind::Renewal);  // 0: nothing set, a field gone
  EXPECT_EQ(c.watches[0].reason, RepairReason::FieldExpiredBeforeWrite);
  EXPECT_EQ(watched(fxx, c.watches[0]), fxx[0]);
  c.watches.clear();
  c.feed1({"HSETEX", "h", "PXAT", n(kNow + 10 * S), "FIELDS", "1", "a", "2"});
  c.feed1({"HSETEX", "h", "FNX", "PXAT", n(kNow + 10 * S), "FIELDS", "1", "b", "2"});
  EXPECT_TRUE(c.watches.empty());
}

TEST(CopyWatch, AStoreReadingAKeyWhoseCopyMayHaveEndedGuardsThatKey) {
  Chain c;
  c.watchCopies();
  c.feed1({"SADD", "near", "x"});
  c.feed1({"PEXPIREAT", "near", n(kNow + 3 * S)});
  c.feed1({"SADD", "far", "y"});
  c.feed1({"PEXPIREAT", "far", n(kNow + 3600 * S)});
  c.watches.clear();
  const Cmds store = c.feed1({"SUNIONSTORE", "d", "far", "near"});
  EXPECT_EQ(store,
            (Cmds{{"MULTI"}, {"EXISTS", "near"}, {"SUNIONSTORE", "d", "far", "near"}, {"EXEC"}}));
  ASSERT_EQ(c.watches.size(), 1u);
  EXPECT_EQ(c.watches[0].kind, Applier::WatchKind::Guard);
  EXPECT_EQ(c.watches[0].key, "near");
  EXPECT_EQ(c.watches[0].from_key, "d");  // gone: the destination is read back with it
  EXPECT_EQ(c.watches[0].deadline_ms, kNow + 3 * S);
  EXPECT_EQ(watched(store, c.watches[0]), (std::vector<std::string>{"EXISTS", "near"}));
  c.watches.clear();
  // Inputs far from their deadlines, or without one: nothing added.
  EXPECT_EQ(c.feed1({"SUNIONSTORE", "d2", "far", "none"}),
            (Cmds{{"SUNIONSTORE", "d2", "far", "none"}}));
  EXPECT_TRUE(c.watches.empty());
}

TEST(CopyWatch, ARestoredCopyIsRestoredWithTheClampAndRecordedInOneTransaction) {
  Chain c;
  c.maxTtl(0, 60);
  const std::string value = "\x05hello";  // any payload bytes: the applier does not decode it
  const Cmds cmds = c.restoreCopy("k", true, 0, value, 10, kNow + 3600 * S, 12345);
  ASSERT_EQ(cmds.size(), 4u);
  EXPECT_EQ(cmds[0], (std::vector<std::string>{"MULTI"}));
  ASSERT_GE(cmds[1].size(), 6u);
  EXPECT_EQ(cmds[1][0], "RESTORE");
  EXPECT_EQ(cmds[1][1], "k");
  EXPECT_EQ(cmds[1][2], n(kNow + 60 * S));  // min(E, now+M)
  EXPECT_EQ(cmds[1][4], "REPLACE");
  EXPECT_EQ(cmds[1][5], "ABSTTL");
  EXPECT_EQ(cmds[2], (std::vector<std::string>{"HSET", "rec", "0:k", "12345"}));
  EXPECT_EQ(cmds[3], (std::vector<std::string>{"EXEC"}));

  Chain gone;
  EXPECT_EQ(gone.restoreCopy("k", false, 0, "", 0, 0, 7),
            (Cmds{{"MULTI"}, {"DEL", "k"}, {"HSET", "rec", "0:k", "7"}, {"EXEC"}}));
  // A document whose deadline has passed by now is deleted, as a snapshot key would be.
  Chain past;
  const Cmds expired = past.restoreCopy("k", true, 0, value, 10, kNow - S, 9);
  EXPECT_EQ(expired, (Cmds{{"MULTI"}, {"DEL", "k"}, {"HSET", "rec", "0:k", "9"}, {"EXEC"}}));
}

}  // namespace
}  // namespace xdcr::target
