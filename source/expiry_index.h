#pragma once
// The expiry index (expiry-semantics.md §2): the current SOURCE deadline of every source key that
// has one, learned from the snapshot and the stream, plus tombstones of keys that expired
// (§5). Rules 4 (in-place writes, RENAME/COPY) and 5 (expiration vs deletion) read it.
//
// Memory: only keys with a deadline (or a tombstone) are held, as a 64-bit hash of the key and a
// 64-bit value, in open-addressing tables (1,024 shards per db): 16 bytes a slot, at most 3/4
// full, grown by 7/16 (not doubled) so that a shard is never less than 52 % full: at most ~31
// bytes a deadline (issue 8's budget is 32), ~27 measured. Two keys whose hashes collide
// (probability ~n^2/2^65) would share a deadline; that is the price of not storing keys.
//
// Journal: while journaling is on, every change is also recorded as an Op, so that a checkpoint
// can persist what changed since the last one (CheckpointStore::appendDelta) instead of the
// whole image. The journal holds at most kMaxJournalOps; beyond that it is dropped and
// journalLost() tells the owner that only a whole image is a valid checkpoint now.
//
// Not thread-safe; owned by one pipeline.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace xdcr::source {

class ExpiryIndex {
 public:
  /** One recorded change. */
  struct Op {
    enum Kind : uint32_t { Put = 1, Remove = 2, ClearDb = 3, SwapDbs = 4, ClearAll = 5 };
    uint32_t kind = 0;
    uint32_t db = 0;
    uint64_t hash = 0;  // Put/Remove: the key's hash; SwapDbs: the other db
    int64_t value = 0;  // Put: the slot value (> 0 deadline, < 0 tombstone)
  };
  static constexpr size_t kMaxJournalOps = size_t{1} << 20;
  /** Bytes of one Op in serializeOps' format. */
  static constexpr size_t kOpBytes = 4 + 4 + 8 + 8;

  enum class State { None, Live, Tombstone };
  struct Entry {
    State state = State::None;
    int64_t ms = 0;  // Live: the deadline (epoch ms, source domain); Tombstone: when it expired
  };

  Entry get(int db, std::string_view key) const;
  /** Sets the key's deadline; 0 removes it (the key has no deadline). */
  void set(int db, std::string_view key, int64_t deadline_ms);
  void erase(int db, std::string_view key) { set(db, key, 0); }
  /** Records that the key expired at `at_ms` (source clock). */
  void tombstone(int db, std::string_view key, int64_t at_ms);
  void clearDb(int db);
  /** SWAPDB a b. */
  void swapDbs(int a, int b);
  void clearAll();
  /** Removes tombstones recorded before `before_ms`. */
  size_t purgeTombstones(int64_t before_ms);
  /**
   * The same, a bounded step at a time: examines at most `max_slots` slots from where the last
   * call stopped (wrapping around), so that a checkpoint never scans a large index whole.
   * Best effort: backward-shift deletion can move an old tombstone behind the cursor, where the
   * next pass finds it.
   */
  size_t purgeTombstonesStep(int64_t before_ms, size_t max_slots);

  size_t size() const;
  size_t memoryBytes() const;
  /** Number of changes since the last call to clearDirty(). */
  uint64_t dirty() const { return dirty_; }
  void clearDirty() { dirty_ = 0; }

  /** Appends a binary image of the index to `out`. */
  void serialize(std::string& out) const;
  /** Replaces the contents from an image made by serialize(); false if it is malformed. */
  bool deserialize(std::string_view in);

  /** Starts (and empties) or stops recording changes. Off by default. */
  void setJournaling(bool on);
  bool journaling() const { return journaling_; }
  /** True when changes were not recorded since journaling began (the cap was exceeded). */
  bool journalLost() const { return journal_lost_; }
  /** Moves the recorded changes into `out` (replacing its contents) and starts a new journal. */
  void takeJournal(std::vector<Op>& out);
  size_t journalSize() const { return journal_.size(); }
  /** Appends `ops` in a compact, portable-enough (little-endian host) format. */
  static void serializeOps(const std::vector<Op>& ops, std::string& out);
  /** Applies ops made by serializeOps (not journaled); false, index untouched, if malformed. */
  bool replayOps(std::string_view in);

 private:
  struct Slot {
    uint64_t hash;  // 0 = empty
    int64_t value;  // > 0 deadline, < 0 tombstone (-time)
  };
  /** One open-addressing table (any size: the home slot is a multiply-shift of the hash). */
  struct Shard {
    std::vector<Slot> slots;  // empty until the first entry
    size_t used = 0;
  };
  /**
   * A db: 1,024 shards chosen by the hash's top bits, each grown on its own, so that growing
   * moves 1/1024 of the db's entries at a time. Unsharded, a growth at 1.2 M deadlines stalled
   * ~30 ms (measured: the live-lag benchmark's max); at 100 M a shard growth moves ~100,000
   * entries (an estimate of a few ms, not measured).
   */
  struct Table {
    std::vector<Shard> shards;  // kShards once used
    size_t used = 0;
  };
  static constexpr int kShardBits = 10;
  static constexpr size_t kShards = size_t{1} << kShardBits;

  static uint64_t hashKey(std::string_view key);
  static size_t shardOf(uint64_t h) { return static_cast<size_t>(h >> (64 - kShardBits)); }
  /** The home slot in a shard of n slots, from the hash bits below the shard's. */
  static size_t home(uint64_t h, size_t n) {
    return static_cast<size_t>((static_cast<unsigned __int128>(h << kShardBits) * n) >> 64);
  }
  Table* table(int db, bool create);
  const Table* table(int db) const;
  static void put(Table& t, uint64_t h, int64_t value);
  /** True if a slot was removed. */
  static bool remove(Table& t, uint64_t h);
  /** True if a new slot was taken. */
  static bool putShard(Shard& t, uint64_t h, int64_t value);
  static bool removeShard(Shard& t, uint64_t h);
  static void grow(Shard& t);
  void record(uint32_t kind, uint32_t db, uint64_t hash, int64_t value);
  void applyOp(const Op& op);

  std::vector<Table> dbs_;
  uint64_t dirty_ = 0;
  bool journaling_ = false;
  bool journal_lost_ = false;
  std::vector<Op> journal_;
  size_t purge_db_ = 0;  // purgeTombstonesStep's cursor
  size_t purge_shard_ = 0;
  size_t purge_slot_ = 0;
};

}  // namespace xdcr::source
