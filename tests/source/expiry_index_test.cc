#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <unordered_map>

#include "source/expiry_index.h"

namespace xdcr::source {
namespace {

using State = ExpiryIndex::State;

TEST(ExpiryIndex, SetGetEraseTombstone) {
  ExpiryIndex idx;
  EXPECT_EQ(idx.get(0, "k").state, State::None);
  idx.set(0, "k", 1234);
  EXPECT_EQ(idx.get(0, "k").state, State::Live);
  EXPECT_EQ(idx.get(0, "k").ms, 1234);
  EXPECT_EQ(idx.get(1, "k").state, State::None);  // dbs are separate
  idx.tombstone(0, "k", 2000);
  EXPECT_EQ(idx.get(0, "k").state, State::Tombstone);
  EXPECT_EQ(idx.get(0, "k").ms, 2000);
  EXPECT_EQ(idx.purgeTombstones(1500), 0u);
  EXPECT_EQ(idx.purgeTombstones(2001), 1u);
  EXPECT_EQ(idx.get(0, "k").state, State::None);
  idx.set(0, "k", 5);
  idx.set(0, "k", 0);  // 0 = no deadline = not held
  EXPECT_EQ(idx.size(), 0u);
}

TEST(ExpiryIndex, MatchesAReferenceMapUnderRandomOperations) {
  ExpiryIndex idx;
  std::unordered_map<std::string, int64_t> ref;
  std::mt19937_64 rng(42);
  for (int i = 0; i < 200'000; ++i) {
    std::string key = "key:" + std::to_string(rng() % 5000);
    int op = static_cast<int>(rng() % 3);
    if (op == 0) {
      int64_t d = 1 + static_cast<int64_t>(rng() % 1'000'000);
      idx.set(2, key, d);
      ref[key] = d;
    } else if (op == 1) {
      idx.erase(2, key);
      ref.erase(key);
    } else {
      auto e = idx.get(2, key);
      auto it = ref.find(key);
      ASSERT_EQ(e.state == State::Live, it != ref.end()) << key;
      if (it != ref.end()) {
        ASSERT_EQ(e.ms, it->second);
      }
    }
  }
  EXPECT_EQ(idx.size(), ref.size());
  // Round trip through the checkpoint image.
  std::string image;
  idx.serialize(image);
  ExpiryIndex copy;
  ASSERT_TRUE(copy.deserialize(image));
  EXPECT_EQ(copy.size(), ref.size());
  for (const auto& [k, d] : ref) EXPECT_EQ(copy.get(2, k).ms, d);
  // Damaged images are refused, not half-loaded.
  EXPECT_FALSE(copy.deserialize(image.substr(0, image.size() - 3)));
  EXPECT_EQ(copy.size(), ref.size());
}

TEST(ExpiryIndex, MemoryStaysWithinBudgetPerDeadline) {
  ExpiryIndex idx;
  const int n = 1'000'000;
  for (int i = 0; i < n; ++i) idx.set(0, "session:" + std::to_string(i), 1'000'000 + i);
  EXPECT_EQ(idx.size(), static_cast<size_t>(n));
  // Slots are 16 bytes, the table grows by 7/16 at 3/4 full: never under 52 % full, so at most
  // ~31 bytes a deadline (issue 8's budget is 32), at every size on the way.
  double per = static_cast<double>(idx.memoryBytes()) / n;
  EXPECT_LE(per, 32.0);
  idx.clearDb(0);
  EXPECT_EQ(idx.size(), 0u);
}

TEST(ExpiryIndex, NeverMoreThan32BytesADeadlineWhileGrowing) {
  ExpiryIndex idx;
  double worst = 0;
  // (From 10,000 on: below that the fixed per-db overhead of a few dozen bytes shows.)
  for (int i = 1; i <= 300'000; ++i) {
    idx.set(0, "k" + std::to_string(i), i);
    if (i >= 10000) worst = std::max(worst, static_cast<double>(idx.memoryBytes()) / i);
  }
  EXPECT_LE(worst, 31.0);
}

TEST(ExpiryIndex, JournalReplayedOnAnImageGivesTheSameIndex) {
  ExpiryIndex idx;
  std::mt19937_64 rng(7);
  auto key = [&] { return "key:" + std::to_string(rng() % 3000); };
  for (int i = 0; i < 5000; ++i) idx.set(static_cast<int>(rng() % 3), key(), 1 + rng() % 1000);
  std::string image;
  idx.serialize(image);
  idx.setJournaling(true);
  for (int i = 0; i < 50'000; ++i) {
    const int db = static_cast<int>(rng() % 3);
    switch (rng() % 20) {
      case 0:
        idx.swapDbs(db, (db + 1) % 3);
        break;
      case 1:
        if (rng() % 50 == 0) idx.clearDb(db);
        break;
      case 2:
        idx.tombstone(db, key(), 1 + rng() % 100);
        break;
      case 3:
        idx.purgeTombstonesStep(50, 500);
        break;
      case 4:
      case 5:
      case 6:
        idx.erase(db, key());
        break;
      default:
        idx.set(db, key(), 1 + rng() % 1'000'000);
    }
  }
  std::vector<ExpiryIndex::Op> ops;
  idx.takeJournal(ops);
  EXPECT_EQ(idx.journalSize(), 0u);
  std::string bytes;
  ExpiryIndex::serializeOps(ops, bytes);
  EXPECT_EQ(bytes.size(), ops.size() * ExpiryIndex::kOpBytes);

  ExpiryIndex copy;
  ASSERT_TRUE(copy.deserialize(image));
  ASSERT_TRUE(copy.replayOps(bytes));
  EXPECT_EQ(copy.size(), idx.size());
  std::string a, b;
  // Same contents: compare entry by entry over the key space.
  for (int db = 0; db < 3; ++db) {
    for (int k = 0; k < 3000; ++k) {
      const std::string key_k = "key:" + std::to_string(k);
      auto x = idx.get(db, key_k), y = copy.get(db, key_k);
      ASSERT_EQ(x.state, y.state) << db << " " << key_k;
      ASSERT_EQ(x.ms, y.ms) << db << " " << key_k;
    }
  }
  // A malformed journal leaves the index as it was.
  const size_t before = copy.size();
  EXPECT_FALSE(copy.replayOps(bytes.substr(0, bytes.size() - 1)));
  std::string bad(ExpiryIndex::kOpBytes, '\0');  // kind 0
  EXPECT_FALSE(copy.replayOps(bad));
  EXPECT_EQ(copy.size(), before);
}

TEST(ExpiryIndex, JournalIsCappedAndReportsTheLoss) {
  ExpiryIndex idx;
  idx.set(0, "before", 1);  // not journaling yet: not recorded
  idx.setJournaling(true);
  EXPECT_EQ(idx.journalSize(), 0u);
  for (size_t i = 0; i <= ExpiryIndex::kMaxJournalOps; ++i)
    idx.set(0, "k" + std::to_string(i % 10), 5);
  EXPECT_TRUE(idx.journalLost());
  EXPECT_EQ(idx.journalSize(), 0u);
  std::vector<ExpiryIndex::Op> ops;
  idx.takeJournal(ops);  // a whole image was taken: recording starts again
  EXPECT_FALSE(idx.journalLost());
  idx.set(0, "after", 2);
  EXPECT_EQ(idx.journalSize(), 1u);
}

TEST(ExpiryIndex, PurgeStepsGoRoundTheWholeIndex) {
  ExpiryIndex idx;
  for (int i = 0; i < 10'000; ++i) idx.tombstone(i % 2, "t" + std::to_string(i), 100);
  for (int i = 0; i < 10'000; ++i) idx.set(i % 2, "live" + std::to_string(i), 5);
  size_t purged = 0;
  for (int step = 0; step < 200 && idx.size() > 10'000; ++step) {
    purged += idx.purgeTombstonesStep(101, 1000);
  }
  EXPECT_EQ(purged, 10'000u);
  EXPECT_EQ(idx.size(), 10'000u);
  EXPECT_EQ(idx.purgeTombstonesStep(101, 1000000), 0u);
}

}  // namespace
}  // namespace xdcr::source
