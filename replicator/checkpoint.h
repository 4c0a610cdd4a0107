#pragma once
// Checkpoints: {replid, applied offset, source db} plus the expiry index, one file per pipeline
// under agent.state_dir, written crash-safely: temp file, fsync, rename over the old one, fsync
// the directory (LevelDB's SetCurrentFile). A checkpoint only ever covers source offsets the
// target has acknowledged, and the expiry index it holds is the one at exactly that offset
// (the pipeline quiesces before committing).
//
// File layout: "XDCRCKPT 1\n", a JSON header line, the binary expiry-index image, and an 8-byte
// XXH64 of everything before it. A damaged file is an error naming the file, never silently
// ignored: deleting it makes the next start a full resync.

#include <cstdint>
#include <optional>
#include <string>

#include "common/error.h"
#include "filters/expiry_index.h"
#include "source/redis_source.h"

namespace xdcr::replicator {

struct Checkpoint {
  source::Position position;
  int db = 0;                 // source db in effect at `position`
  int64_t written_at_ms = 0;  // wall clock when written
  std::string source_address; // which cluster it belongs to
  /**
   * Target-loss marker tokens (marker.h): the one written to the target, after the data, just
   * before this checkpoint, and the one the next checkpoint will write. On reconnect the target
   * must hold one of the two. Empty in checkpoints of older versions: no check then.
   */
  std::string marker;
  std::string next_marker;
};

class CheckpointStore {
 public:
  CheckpointStore(std::string state_dir, std::string pipeline);

  /** Creates the state directory if needed; a clear error if it cannot. */
  Status prepare() const;
  /** Reads the checkpoint into `cp` and `index`; nullopt (no error) when there is none yet. */
  Result<std::optional<Checkpoint>> load(filters::ExpiryIndex& index) const;
  /** Writes a checkpoint atomically. */
  Status commit(const Checkpoint& cp, const filters::ExpiryIndex& index) const;

  /** Deletes the checkpoint (durably). No checkpoint is not an error. */
  Status remove() const;

  const std::string& path() const { return path_; }

 private:
  std::string dir_;
  std::string pipeline_;
  std::string path_;
};

}  // namespace xdcr::replicator
