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
  /** Sorts; call once all keys are added, before contains(). */
  void seal();
  bool contains(int db, std::string_view key) const;
  size_t size() const { return hashes_.size(); }
  void clear() {
    hashes_.clear();
    hashes_.shrink_to_fit();
  }

 private:
  std::vector<uint64_t> hashes_;
};

/**
 * Scans the target's dbs of the pipeline (on a connection of its own, to the writer's node) and
 * deletes, through the target's pipelined writer (in order after the snapshot's writes), every
 * key of the pipeline's key space that `snapshot` lacks. The agent's marker keys are left alone.
 * Returns how many keys were deleted once the target has acknowledged all of it.
 */
net::awaitable<Result<uint64_t>> deleteStaleKeys(std::string_view label,
                                                 const config::ClusterConfig& target_cluster,
                                                 const filters::KeySpace& keys,
                                                 const SnapshotKeys& snapshot, Applier& applier,
                                                 RedisTarget& target, uint64_t offset);

}  // namespace xdcr::target
