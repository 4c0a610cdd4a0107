#include <gtest/gtest.h>

#include <random>
#include <string>
#include <unordered_map>

#include "filters/expiry_index.h"

namespace xdcr::filters {
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
  // Slots are 16 bytes at a load factor of at most 3/4 after doubling: <= 43 bytes worst case,
  // ~33.5 at one million. The issue 8 target (32 bytes) is tracked in bench/.
  double per = static_cast<double>(idx.memoryBytes()) / n;
  EXPECT_LT(per, 43.0);
  idx.clearDb(0);
  EXPECT_EQ(idx.size(), 0u);
}

}  // namespace
}  // namespace xdcr::filters
