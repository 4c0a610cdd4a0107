#pragma once
// full_sync.delete_stale_keys: after a full sync, the target's keys in this pipeline's key space
// that the snapshot did not hold are deleted, so that the target mirrors the source.
//
// Why: a full sync that follows a new source history (the source restarted empty, failed over)
// leaves the old history's keys on the target; a collection command (HSET, SADD, ZADD, RPUSH…)
// that re-creates such a key on the source then merges into the stale copy. Native replicas
// flush on a full sync; the agent cannot (other writers may share the target), so this is
// opt-in, limited to the pipeline's key space: its target dbs, key filters and key_rewrite.
//
// The sweep runs after the snapshot is applied and before the stream resumes (the source holds
// it meanwhile), so no key written after the snapshot can be taken for stale. It needs 8 bytes a
// snapshot key (a sorted vector of 64-bit hashes; a collision keeps a stale key, never deletes a
// live one).
//
// Without delete_stale_keys the sweep still runs after a full sync that follows an interrupted
// one (the agent crashed or its session ended before the checkpoint after the snapshot): the
// target then holds keys of the interrupted snapshot, and those the new snapshot lacks (deleted
// on the source meanwhile) would be stale copies a later RPUSH or HSET merges into. Only the
// keys the interrupted full sync wrote are deleted (FullSyncJournal): what a native replica
// flushes, no more.

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "config/config.h"
#include "filters/key_space.h"
#include "target/applier.h"
#include "target/redis_target.h"

namespace xdcr::target {

/** The (db, key) pairs of a snapshot, as 64-bit hashes. */
class SnapshotKeys {
 public:
  void add(int db, std::string_view key);
  /** Sorts and drops repeats; call once all keys are added, before contains(). */
  void seal();
  bool contains(int db, std::string_view key) const;
  size_t size() const { return hashes_.size(); }
  void clear() {
    hashes_.clear();
    hashes_.shrink_to_fit();
  }
  /** The hash add() records for (db, key). */
  static uint64_t hashOf(int db, std::string_view key);
  void addHash(uint64_t hash) { hashes_.push_back(hash); }
  const std::vector<uint64_t>& hashes() const { return hashes_; }

 private:
  std::vector<uint64_t> hashes_;
};

/**
 * The keys a full sync has written to the target, as SnapshotKeys hashes in a file of the state
 * directory (`<instance>.fullsync-keys`), from the snapshot's first key until the checkpoint
 * after it. add() buffers; flush() appends the buffer, and the target's writer calls it before
 * every send (RedisTarget::setBeforeSend), so a key reaches the file before the target: after a
 * crash (SIGKILL; the page cache keeps the file) the file holds every key the interrupted full
 * syncs wrote. The next full sync reads it (load) and appends to it; the checkpoint after its
 * snapshot removes it.
 */
class FullSyncJournal {
 public:
  explicit FullSyncJournal(std::string path) : path_(std::move(path)) {}
  ~FullSyncJournal();
  FullSyncJournal(const FullSyncJournal&) = delete;
  FullSyncJournal& operator=(const FullSyncJournal&) = delete;

  /** Adds the file's hashes (none when there is no file) to `into`; a torn last record is
   *  ignored. */
  Status load(SnapshotKeys& into) const;
  void add(int db, std::string_view key) { addHash(SnapshotKeys::hashOf(db, key)); }
  void addHash(uint64_t hash) { buffer_.push_back(hash); }
  /** Appends what add() buffered. An error names the file and says what to do: the target must
   *  not be written meanwhile. */
  Status flush();
  /** Replaces the file by `keys` (sealed), through a temporary file and a rename: the full
   *  syncs interrupted in a row each appended their keys, so the file is kept at one record a
   *  key. Before the first flush(). */
  Status rewrite(const SnapshotKeys& keys);
  /** Deletes the file: the full sync is checkpointed. No file is not an error. */
  Status remove();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<uint64_t> buffer_;
  int fd_ = -1;
};

/**
 * Scans the target's dbs of the pipeline (on a connection of its own, to the writer's node) and
 * deletes, through the target's pipelined writer (in order after the snapshot's writes), every
 * key of the pipeline's key space that `snapshot` lacks and, when `only` is given, `only` holds.
 * The agent's marker keys are left alone. Returns how many keys were deleted once the target has
 * acknowledged all of it.
 */
net::awaitable<Result<uint64_t>> deleteStaleKeys(std::string_view label,
                                                 const config::ClusterConfig& target_cluster,
                                                 const filters::KeySpace& keys,
                                                 const SnapshotKeys& snapshot,
                                                 const SnapshotKeys* only, Applier& applier,
                                                 RedisTarget& target, uint64_t offset);

}  // namespace xdcr::target
