#pragma once
// The expiry index (expiry-semantics.md §2): the current SOURCE deadline of every source key that
// has one, learned from the snapshot and the stream, plus tombstones of keys that expired
// (§5). Rules 4 (in-place writes, RENAME/COPY) and 5 (expiration vs deletion) read it.
//
// Memory: only keys with a deadline (or a tombstone) are held, as a 64-bit hash of the key and a
// 64-bit value, in an open-addressing table per db: 16 bytes a slot, at most 3/4 full. Two keys
// whose hashes collide (probability ~n^2/2^65) would share a deadline; that is the price of not
// storing keys.
//
// Not thread-safe; owned by one pipeline.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace xdcr::filters {

class ExpiryIndex {
 public:
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

  size_t size() const;
  size_t memoryBytes() const;
  /** Number of changes since the last call to clearDirty(). */
  uint64_t dirty() const { return dirty_; }
  void clearDirty() { dirty_ = 0; }

  /** Appends a binary image of the index to `out`. */
  void serialize(std::string& out) const;
  /** Replaces the contents from an image made by serialize(); false if it is malformed. */
  bool deserialize(std::string_view in);

 private:
  struct Slot {
    uint64_t hash;  // 0 = empty
    int64_t value;  // > 0 deadline, < 0 tombstone (-time)
  };
  struct Table {
    std::vector<Slot> slots;  // size is a power of two
    size_t used = 0;
  };

  static uint64_t hashKey(std::string_view key);
  Table* table(int db, bool create);
  const Table* table(int db) const;
  static void put(Table& t, uint64_t h, int64_t value);
  static void remove(Table& t, uint64_t h);
  static void grow(Table& t);

  std::vector<Table> dbs_;
  uint64_t dirty_ = 0;
};

}  // namespace xdcr::filters
