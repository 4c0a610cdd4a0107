#pragma once
// max_lifetime's memory (expiry-semantics.md §8.4): when each key of a max_lifetime collection
// was first written to this target, per pipeline instance, as a 64-bit hash of (db, key) and a
// 32-bit Unix second. 16 bytes an entry in an open-addressing table.
//
// Durable in the state directory (`<instance>.first-seen`): a header and 16-byte records (set,
// forget, forget a db, forget all) appended with write(2) before the target write that used
// them is handed to the sink (flush(), from Applier::finishUnit), so an agent that crashes has
// every first-seen second any target write used. fsync happens before each checkpoint is
// written (sync(), CheckpointStore's before-commit hook): after a crash of the machine, records
// newer than the last checkpoint may be lost, but the writes that used them are after that
// checkpoint too and are replayed, recording the replay's second instead: the bound of §8.4.
// The log is rewritten whole (temp file, fsync, rename, fsync the directory) when it holds more
// than twice the live entries.
//
// Bounded memory: an entry whose lifetime ended (first + the largest max_lifetime <= now) is
// dropped at sync() and not loaded; touch() starts such a key anew.
//
// Not thread-safe: the pipeline's link thread only.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace xdcr::target {

class FirstSeenStore {
 public:
  /** `path` empty: in memory only (tests). `max_lifetime_ms`: the largest configured. */
  FirstSeenStore(std::string path, int64_t max_lifetime_ms);
  ~FirstSeenStore();
  FirstSeenStore(const FirstSeenStore&) = delete;
  FirstSeenStore& operator=(const FirstSeenStore&) = delete;

  /** Loads the file (none: empty) and opens it for appending. Errors name the file. */
  Status open(int64_t now_ms);
  /**
   * Loads the file READ-ONLY (`xdcr-agent verify` and `explain`, beside a running agent): never
   * creates, truncates or appends to it; a torn tail is skipped, not cut. `*found` (when given)
   * tells whether the file exists. Nothing is ever written by a store loaded this way (flush()
   * and sync() do nothing without open()).
   */
  Status loadReadOnly(int64_t now_ms, bool* found = nullptr);

  /**
   * The key's first-seen second. When it has none, or the one it has is over (first * 1000 +
   * `lifetime_ms` <= now), records ceil(now / 1000) and returns it.
   */
  int64_t touch(int db, std::string_view key, int64_t now_ms, int64_t lifetime_ms);
  /** The recorded second, 0 = none (does not record). */
  int64_t find(int db, std::string_view key) const;
  void forget(int db, std::string_view key);
  void forgetDb(int db);
  void forgetAll();

  /** Appends the records buffered since the last flush (write(2)). */
  Status flush();
  /** flush(), drop ended entries, compact if worth it, fsync. Before a checkpoint. */
  Status sync(int64_t now_ms);

  /** A full sync: every entry not touched between these two is forgotten at endSweep(). */
  void beginSweep();
  void endSweep();
  bool sweeping() const { return sweeping_; }

  size_t size() const { return live_; }
  const std::string& path() const { return path_; }
  uint64_t logRecords() const { return log_records_; }

  static uint64_t hashOf(int db, std::string_view key);

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t second = 0;
    uint16_t db = 0;
    uint8_t marked = 0;
    uint8_t used = 0;
  };
  enum Op : uint8_t { kSet = 1, kForget = 2, kForgetDb = 3, kForgetAll = 4 };

  size_t slotOf(uint64_t hash, uint16_t db) const;  // where it is or would go
  void insert(uint64_t hash, uint16_t db, uint32_t second, bool log);
  void erase(size_t i);
  void grow();
  void record(Op op, uint16_t db, uint32_t second, uint64_t hash);
  void applyRecord(const char* r);
  Status compact();
  /** Reads the file into the table, drops ended lifetimes; `*valid`: the bytes of whole, known
   *  records (0 when there is no file or it is empty). */
  Status load(int64_t now_ms, size_t* valid, bool* found);

  std::string path_;
  int64_t max_lifetime_ms_;
  std::vector<Slot> slots_;
  size_t live_ = 0;
  bool sweeping_ = false;
  std::string pending_;  // records not yet written
  uint64_t log_records_ = 0;
  int fd_ = -1;
  bool read_only_ = false;  // loadReadOnly(): sync() and compaction never touch the file
};

}  // namespace xdcr::target
