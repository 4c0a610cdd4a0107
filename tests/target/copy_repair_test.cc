// The pure parts of restoring target copies that ended before a later write
// (target/copy_repair.h, expiry-semantics.md §12): which events a restored copy holds already,
// and which other keys a repair takes along.

#include "target/copy_repair.h"
#include "target/copy_repair_book.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <unordered_map>

namespace xdcr::target {
namespace {

TEST(RepairSkips, EventsUpToTheReadAreInTheCopyLaterOnesAreNot) {
  RepairSkips s;
  EXPECT_FALSE(s.covers(0, "k", 1));
  s.add(0, "k", 100);
  EXPECT_TRUE(s.covers(0, "k", 50));
  EXPECT_TRUE(s.covers(0, "k", 100));   // the read's offset X itself: in the copy
  EXPECT_FALSE(s.covers(0, "k", 101));  // after X: written
  EXPECT_FALSE(s.covers(1, "k", 50));   // another db
  EXPECT_FALSE(s.covers(0, "j", 50));   // another key
  EXPECT_EQ(s.until(0, "k"), std::optional<uint64_t>(100));
  // A second read moves X on, never back.
  s.add(0, "k", 200);
  s.add(0, "k", 150);
  EXPECT_EQ(s.until(0, "k"), std::optional<uint64_t>(200));
}

TEST(RepairSkips, PassingEveryReadForgetsThemAll) {
  RepairSkips s;
  s.add(0, "a", 10);
  s.add(2, "b", 20);
  s.passed(20);
  EXPECT_EQ(s.size(), 2u);  // a unit ending at 20 is still covered for b
  s.passed(21);
  EXPECT_TRUE(s.empty());
  EXPECT_FALSE(s.covers(2, "b", 15));
  EXPECT_EQ(RepairSkips::field(3, "x:y"), "3:x:y");
}

TEST(MultiKeyLog, AChangeAfterTheGoneWriteLinksItsKeysTransitively) {
  MultiKeyLog log;
  log.add(5, {{0, "k"}, {0, "old"}});  // before the write that found k gone: irrelevant
  log.add(20, {{0, "k"}, {0, "j"}});   // RENAME k j after it: j may hold k's fragment
  log.add(30, {{0, "j"}, {1, "m"}});   // then j into m
  log.add(40, {{0, "x"}, {0, "y"}});   // unrelated
  const auto keys = log.closure({0, "k"}, 10);
  EXPECT_EQ(keys, (std::vector<MultiKeyLog::Key>{{0, "k"}, {0, "j"}, {1, "m"}}));
  log.prune(25);
  EXPECT_EQ(log.size(), 2u);
  EXPECT_EQ(log.closure({0, "k"}, 10), (std::vector<MultiKeyLog::Key>{{0, "k"}}));
}

TEST(CopyDeadlines, AgreesWithAMapThroughGrowthAndDeletions) {
  CopyDeadlines table;
  std::unordered_map<uint64_t, int64_t> model;
  std::mt19937_64 rng(7);
  for (int step = 0; step < 200000; ++step) {
    // Few distinct hashes (collisions and long probe runs), 0 among them.
    const uint64_t h = rng() % 5000 == 0 ? 0 : (rng() % 3000) * 0x100000001ULL;
    switch (rng() % 3) {
      case 0:
      case 1: {
        const int64_t ms = static_cast<int64_t>(rng() % 4) == 0 ? 0 : 1'700'000'000'001 + step;
        table.set(h, ms);
        model[h] = ms == 0 ? 0 : (ms + 999) / 1000 * 1000;  // rounded up, never early
        break;
      }
      default:
        table.erase(h);
        model.erase(h);
    }
  }
  ASSERT_EQ(table.size(), model.size());
  for (uint64_t k = 0; k < 3000; ++k) {
    const uint64_t h = k * 0x100000001ULL;
    auto it = model.find(h);
    ASSERT_EQ(table.find(h), it == model.end() ? std::nullopt : std::optional<int64_t>(it->second))
        << "hash " << h;
  }
  EXPECT_LE(table.bytes(), model.size() * 12 * 4 / 3 * 2 + 12 * 1024);
}

TEST(CopyRepairBookGone, AFieldRenewalIsGoneWhenAnyOfItsCodesIsNoSuchField) {
  Applier::Watch w;
  w.kind = Applier::WatchKind::FieldRenewal;
  using T = resp::ReplyType;
  // HPEXPIREAT's codes: -2 no such field (or no such key), 0 a condition not met, 1 set,
  // 2 deleted (a deadline already past); HPERSIST's -1: no deadline. The sinks pass the least.
  EXPECT_TRUE(CopyRepairBook::gone(w, T::Array, -2, "", 0));
  EXPECT_FALSE(CopyRepairBook::gone(w, T::Array, -1, "", 0));
  EXPECT_FALSE(CopyRepairBook::gone(w, T::Array, 0, "", 0));
  EXPECT_FALSE(CopyRepairBook::gone(w, T::Array, 1, "", 0));
  EXPECT_FALSE(CopyRepairBook::gone(w, T::Array, std::numeric_limits<int64_t>::max(), "", 0));
  // An error (a target that refused the command) or a non-array says nothing about the copy.
  EXPECT_FALSE(CopyRepairBook::gone(w, T::Error, -2, "ERR unknown command", 0));
  EXPECT_FALSE(CopyRepairBook::gone(w, T::Integer, -2, "", 0));
  // A key-level renewal is judged by its own integer, not by an array's.
  w.kind = Applier::WatchKind::Renewal;
  EXPECT_FALSE(CopyRepairBook::gone(w, T::Array, -2, "", 0));
  EXPECT_TRUE(CopyRepairBook::gone(w, T::Integer, 0, "", 0));
}

TEST(CopyRepairBookJournal, ARestoreIsNotedWithTheWriteThatFoundItsCopyGone) {
  PipelineStats stats;
  CopyRepairBook book("test", stats);
  Applier::Watch w;
  w.kind = Applier::WatchKind::Guard;
  w.reason = RepairReason::ClampedBeforeWrite;
  w.db = 2;
  w.key = "cart:\x01";
  w.deadline_ms = 1000;
  book.onWatched(w, 500, resp::ReplyType::Integer, 0, "", 1200);  // after its deadline: gone
  ASSERT_EQ(book.take().size(), 1u);
  const auto asked = book.claim({2, "cart:\x01"});
  ASSERT_TRUE(asked);
  EXPECT_FALSE(book.claim({2, "cart:\x01"}));  // claimed once
  book.restored(2, "cart:\x01", 900, "rec", *asked, 1300, true);
  ASSERT_EQ(stats.restores.notes().size(), 1u);
  const RestoredCopyNote& n = stats.restores.notes().front();
  EXPECT_EQ(n.db, 2);
  EXPECT_EQ(n.key, "cart:\x01");
  EXPECT_EQ(printableKey(n.key), "cart:\\x01");
  EXPECT_EQ(n.reason, "clamped_before_write");
  EXPECT_EQ(n.copy_deadline_ms, 1000);
  EXPECT_EQ(n.write_offset, 500u);
  EXPECT_EQ(n.found_at_ms, 1200);
  EXPECT_EQ(n.read_offset, 900u);
  EXPECT_EQ(n.restored_at_ms, 1300);
  // Bounded: the oldest go first; the total counts them all.
  for (size_t i = 0; i < RestoreJournal::kCapacity + 5; ++i) {
    book.restored(0, "k" + std::to_string(i), 1000 + i, "", *asked, 0, false);
  }
  EXPECT_EQ(stats.restores.notes().size(), RestoreJournal::kCapacity);
  EXPECT_EQ(stats.restores.total(), RestoreJournal::kCapacity + 6);
  EXPECT_EQ(stats.restores.notes().back().key, "k" + std::to_string(RestoreJournal::kCapacity + 4));
  EXPECT_FALSE(stats.restores.notes().back().source_had_it);
}

TEST(RepairReason, NamesAreTheMetricLabels) {
  EXPECT_EQ(repairReasonName(RepairReason::ExpiredBeforeWrite), "expired_before_write");
  EXPECT_EQ(repairReasonName(RepairReason::ClampedBeforeWrite), "clamped_before_write");
  EXPECT_EQ(repairReasonName(RepairReason::FieldExpiredBeforeWrite), "field_expired_before_write");
  EXPECT_EQ(repairReasonName(RepairReason::UnconfirmedBeforeRestart), "unconfirmed_before_restart");
}

// §12.2 step 5: a checkpoint at offset O is written only once every repair a write at or before
// O asked for is on the target — asked for, read back, written, and answered.
TEST(CopyRepairBookSettled, ACheckpointWaitsForTheRepairsOfTheWritesItCovers) {
  PipelineStats stats;
  CopyRepairBook book("test", stats);
  EXPECT_TRUE(book.settled(1000));
  Applier::Watch w;
  w.kind = Applier::WatchKind::Renewal;
  w.key = "sess:1";
  book.onWatched(w, 500, resp::ReplyType::Integer, 0, "", 0);  // PEXPIREAT answered 0
  EXPECT_FALSE(book.settled(500));                             // asked for
  EXPECT_FALSE(book.settled(1000));
  EXPECT_TRUE(book.settled(499));  // a checkpoint before the write may be written
  ASSERT_EQ(book.take().size(), 1u);
  EXPECT_FALSE(book.settled(500));  // taken, not yet read back
  const auto asked = book.claim({0, "sess:1"});
  ASSERT_TRUE(asked);
  book.sent(asked->write_offset);
  EXPECT_FALSE(book.settled(500));  // written, not yet answered
  book.landed(asked->write_offset);
  EXPECT_TRUE(book.settled(500));
  EXPECT_TRUE(book.settled(1000));
  // A repair given up (the source would not give the key) does not hold checkpoints back.
  book.onWatched(w, 600, resp::ReplyType::Integer, 0, "", 0);
  EXPECT_FALSE(book.settled(600));
  (void)book.take();
  ASSERT_TRUE(book.claim({0, "sess:1"}));
  book.unrecoverable({0, "sess:1"}, "refused");
  EXPECT_TRUE(book.settled(600));
}

// The source is ACKed below the oldest write whose repair is not on the target
// (Sink::ackableOffset): a WAIT, or a replica offset equal to the master's, then means the whole
// document is there, not the fragment the write left while its restore is read or in flight.
TEST(CopyRepairBookSettled, TheFirstUnsettledWriteHoldsTheAckBelowIt) {
  PipelineStats stats;
  CopyRepairBook book("test", stats);
  EXPECT_EQ(book.firstUnsettled(), UINT64_MAX);
  Applier::Watch w;
  w.kind = Applier::WatchKind::Renewal;
  w.key = "a";
  book.onWatched(w, 700, resp::ReplyType::Integer, 0, "", 0);
  w.key = "b";
  book.onWatched(w, 500, resp::ReplyType::Integer, 0, "", 0);
  EXPECT_EQ(book.firstUnsettled(), 500u);  // the oldest, whatever the order of the replies
  (void)book.take();
  const auto b = book.claim({0, "b"});
  ASSERT_TRUE(b);
  EXPECT_EQ(book.firstUnsettled(), 700u);  // claimed: no longer asked for ...
  book.sent(b->write_offset);
  EXPECT_EQ(book.firstUnsettled(), 500u);  // ... but written and not answered
  book.landed(b->write_offset);
  EXPECT_EQ(book.firstUnsettled(), 700u);
  ASSERT_TRUE(book.claim({0, "a"}));
  book.unrecoverable({0, "a"}, "refused");
  EXPECT_EQ(book.firstUnsettled(), UINT64_MAX);
}

// Units a replay stamp covers ask for their keys in one batch: the link is woken once, by
// release(), not once a unit; keys a restored copy's record covers are not asked for.
TEST(CopyRepairBookUnconfirmed, UnitsAStampCoversAskOnceReleased) {
  PipelineStats stats;
  CopyRepairBook book("test", stats);
  int woken = 0;
  book.setWanted([&] { ++woken; });
  ASSERT_TRUE(book.loadRecord("rec", "0:restored", 300));  // restored from a read at 300
  book.requestUnconfirmed({{0, "a"}, {0, "restored"}}, 200);
  book.requestUnconfirmed({{0, "b"}, {0, "a"}}, 250);
  book.requestUnconfirmed({{0, "restored"}}, 350);  // past its record: asked for
  EXPECT_EQ(woken, 0);
  EXPECT_FALSE(book.settled(200));
  book.release();
  book.release();
  EXPECT_EQ(woken, 1);
  std::vector<source::DocumentKey> keys = book.take();
  std::sort(keys.begin(), keys.end());
  const std::vector<source::DocumentKey> want = {{0, "a"}, {0, "b"}, {0, "restored"}};
  EXPECT_EQ(keys, want);
  const auto a = book.claim({0, "a"});
  ASSERT_TRUE(a);
  EXPECT_EQ(a->reason, RepairReason::UnconfirmedBeforeRestart);
  EXPECT_EQ(a->write_offset, 200u);  // the first unit that asked
  EXPECT_EQ(book.claim({0, "restored"})->write_offset, 350u);
  // Taken: the next request wakes the link again.
  book.requestUnconfirmed({{0, "c"}}, 400);
  book.release();
  EXPECT_EQ(woken, 2);
}

}  // namespace
}  // namespace xdcr::target
