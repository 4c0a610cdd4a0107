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
//
// Between two such whole images, checkpoints are appended to a journal, <pipeline>.journal:
// each record is the checkpoint's header plus the expiry-index changes since the previous one
// (ExpiryIndex::Op), so that a checkpoint costs what changed, not the size of the index (a
// million deadlines are 16 MB to rewrite each second; a second of 50,000 writes is 1.2 MB). A
// record is "XJR1", its length, the base image's generation, the header and the ops, and an
// XXH64; it counts once fdatasync has returned. Loading applies the records of the base's
// generation in order and stops at the first incomplete or damaged one (the torn tail of a
// crash while appending: that checkpoint was never reported written), which the next append
// cuts off. A new base image (after a full sync, at compaction) gets a new generation, so a
// journal left over by a crash between the two renames is ignored.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "source/expiry_index.h"
#include "source/redis_source.h"

namespace xdcr::replicator {

struct Checkpoint {
  source::Position position;
  int db = 0;                  // source db in effect at `position`
  int64_t written_at_ms = 0;   // wall clock when written
  std::string source_address;  // which cluster it belongs to
  /**
   * Target-loss marker tokens (marker.h): the one written to the target, after the data, just
   * before this checkpoint, and the one the next checkpoint will write. On reconnect the target
   * must hold one of the two. Empty in checkpoints of older versions: no check then.
   */
  std::string marker;
  std::string next_marker;
  /**
   * Where the stream last carried data: the end of the last unit up to `position` that was not
   * only framing (PING, REPLCONF, SELECT, a Sentinel's hello), and the source db in effect there.
   * Resuming there is resuming at `position` (framing changes nothing on a target or in the
   * expiry index). After a failover it is what counts: a promoted replica shares the old
   * master's history only up to the failover point, and what the old master sent after it is
   * often framing only (the Sentinels' hellos, cluster-notes.md §3.6). Equal to `position`/`db`
   * when nothing but data came before it, and in checkpoints of older versions.
   */
  uint64_t data_offset = 0;
  int data_db = 0;
};

class CheckpointStore {
 public:
  CheckpointStore(std::string state_dir, std::string pipeline);

  /** Creates the state directory if needed; a clear error if it cannot. */
  Status prepare() const;
  /**
   * Reads the last checkpoint (the base image, then the journal's records) into `index`;
   * nullopt (no error) when there is none yet.
   */
  Result<std::optional<Checkpoint>> load(source::ExpiryIndex& index);
  /** Writes a whole image atomically as the new base; the journal starts empty. */
  Status commit(const Checkpoint& cp, const source::ExpiryIndex& index);
  /**
   * Appends a checkpoint to the journal: `cp` and the index changes since the previous
   * checkpoint. Needs a base (hasBase()). On failure the journal may end in a torn record and
   * the changes are lost to it: the next checkpoint must be a whole image (commit).
   */
  Status appendDelta(const Checkpoint& cp, const std::vector<source::ExpiryIndex::Op>& ops);

  /**
   * Runs before every checkpoint (commit, appendDelta) is written; a failure fails it. The
   * first-seen store of max_lifetime (target/first_seen.h) syncs there, so no checkpoint ever
   * covers a target write whose first-seen record is not on disk.
   */
  void setBeforeCommit(std::function<Status()> hook) { before_commit_ = std::move(hook); }

  /** Deletes the checkpoint and its journal (durably). No checkpoint is not an error. */
  Status remove();

  bool hasBase() const { return has_base_; }
  uint64_t baseBytes() const { return base_bytes_; }
  uint64_t journalBytes() const { return journal_bytes_; }
  const std::string& path() const { return path_; }
  const std::string& journalPath() const { return journal_path_; }
  /** The record of the keys a full sync wrote (target::FullSyncJournal): kept by remove(),
   *  which a full sync's start calls, and deleted once the checkpoint after it is written. */
  std::string fullSyncKeysPath() const;

  ~CheckpointStore();
  CheckpointStore(const CheckpointStore&) = delete;
  CheckpointStore& operator=(const CheckpointStore&) = delete;

 private:
  void closeJournal();
  Status syncDirectory() const;

  std::string dir_;
  std::string pipeline_;
  std::string path_;
  std::string journal_path_;
  bool has_base_ = false;
  uint64_t generation_ = 0;  // of the base image; the journal's records carry it
  uint64_t base_bytes_ = 0;
  uint64_t journal_bytes_ = 0;  // valid length of the journal (a torn tail is beyond it)
  int journal_fd_ = -1;
  std::function<Status()> before_commit_;
};

/**
 * For readers beside the agent (`verify`): the latest moment, on this host's wall clock (epoch
 * ms), at which pipeline `pipeline`'s last full sync can still have written to its target. A
 * full sync removes the pipeline's checkpoint when it starts and writes a whole image (the base,
 * `<instance>.ckpt`) at the first checkpoint after its snapshot, once the target acknowledged all
 * of it; a later base (compaction) is later still. So: the base's `written_at_ms`, the latest
 * over the instances of a Redis Cluster source (`<pipeline>@<id>.ckpt`). An error (with the
 * reason) when it cannot be told: no checkpoint (no full sync finished yet, one under way, or
 * another host's state directory), a full sync's key record present (one under way), a file
 * that cannot be read.
 */
Result<int64_t> lastFullSyncBoundMs(const std::string& state_dir, const std::string& pipeline);

}  // namespace xdcr::replicator
