#pragma once
// The spool of a full sync (issue 17 point 4): a FIFO of the bytes read from the source, in
// memory up to a small bound and beyond it in a file under the state directory.
//
// During a full sync the source keeps everything it must still send the agent — the rest of the
// snapshot, then the writes made meanwhile — in its output buffer for that replica, bounded by
// `client-output-buffer-limit replica` (256mb 64mb 60 by default). An agent that reads the
// snapshot only as fast as its targets apply it makes the transfer last as long as the apply,
// the buffer fills, the source drops the link and the next attempt starts from key 0 again.
// With a spool, RedisSource reads the source as fast as the link delivers into a SpoolFifo and
// parses from there: the source's buffer for the agent stays small, and what the targets have
// not taken yet waits on the agent's disk instead (source/redis_source.h has the pump).
//
// Not thread-safe; one strand. The file is written and read with plain pwrite/pread on the
// link's thread: page-cache writes of the pump's reads (<= 256 KiB) and reads of <= 1 MiB.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/limits.h"
#include "common/redis_conn.h"

namespace xdcr::source {

/** The spool's memory part: what a FIFO holds before it writes to its store. */
inline constexpr size_t kSpoolMemoryBytes = spool_limits::kMemoryBytes;

/**
 * Where a SpoolFifo keeps what does not fit in memory: a file (FileSpoolStore), or in tests a
 * store that fails on demand. Offsets grow as bytes are appended and start at 0 again after
 * reset().
 */
class SpoolStore {
 public:
  virtual ~SpoolStore() = default;
  /** Writes all of `data` at `offset` (the end of what was written since the last reset()). */
  virtual Status write(uint64_t offset, std::string_view data) = 0;
  /** Reads exactly `n` bytes at `offset` (written before). */
  virtual Status read(uint64_t offset, char* out, size_t n) = 0;
  /** The bytes before `offset` were read: their disk space may be given back (best effort). */
  virtual void discard(uint64_t offset) = 0;
  /** Everything written was read: the next write is at offset 0 (frees the space). */
  virtual Status reset() = 0;
  /** What messages name: the file's path. */
  virtual const std::string& path() const = 0;
};

/**
 * A spool file: `<dir>/<name>.spool`, created (mode 0600, O_EXCL: never someone else's file) at
 * the first write, so a spool that stays in memory creates none; a name taken already gets a
 * suffix (`<name>.1.spool`). Deleted by the destructor. Errors name the path and the errno text.
 */
class FileSpoolStore final : public SpoolStore {
 public:
  FileSpoolStore(std::string dir, std::string name);
  ~FileSpoolStore() override;
  FileSpoolStore(const FileSpoolStore&) = delete;
  FileSpoolStore& operator=(const FileSpoolStore&) = delete;

  Status write(uint64_t offset, std::string_view data) override;
  Status read(uint64_t offset, char* out, size_t n) override;
  void discard(uint64_t offset) override;
  Status reset() override;
  const std::string& path() const override { return path_; }

 private:
  Status open();

  std::string dir_;
  std::string name_;
  std::string path_;  // the file once created; before, what it will be called
  int fd_ = -1;
};

/**
 * A byte FIFO: appended bytes go to memory while it has room and nothing waits in the store,
 * otherwise to the store (so every byte in memory is older than every byte in the store); take()
 * reads memory first, then the store. When the store has been read to its end it is reset (the
 * file truncated) and memory is used again. Consumed parts of the file are given back to the
 * filesystem every 64 MiB (hole punching, where the filesystem can).
 */
class SpoolFifo {
 public:
  SpoolFifo(size_t memory_bytes, std::unique_ptr<SpoolStore> store);

  /** Appends `data`. On a store error nothing of `data` is taken; the error names the file. */
  Status append(std::string_view data);
  /** Moves up to `max` bytes from the front to the end of `out`; 0 when empty. */
  Result<size_t> take(ReadBuffer& out, size_t max);

  /** Bytes held (memory + store). */
  uint64_t size() const { return mem_len_ + (file_end_ - file_begin_); }
  uint64_t inMemory() const { return mem_len_; }
  uint64_t onDisk() const { return file_end_ - file_begin_; }
  /** The most held at once, and of that the most in the store at once. */
  uint64_t peak() const { return peak_; }
  uint64_t peakOnDisk() const { return peak_on_disk_; }
  /** Bytes ever appended. */
  uint64_t total() const { return total_; }
  const std::string& path() const { return store_->path(); }

 private:
  size_t mem_cap_;
  std::unique_ptr<char[]> ring_;  // allocated at the first append
  size_t mem_head_ = 0;           // index of the oldest byte in ring_
  size_t mem_len_ = 0;
  std::unique_ptr<SpoolStore> store_;
  uint64_t file_begin_ = 0;  // the store's unread part: [file_begin_, file_end_)
  uint64_t file_end_ = 0;
  uint64_t file_discarded_ = 0;  // discard() was called up to here
  uint64_t peak_ = 0;
  uint64_t peak_on_disk_ = 0;
  uint64_t total_ = 0;
};

/** Where and how a full sync spools (RedisSource::setSpool). */
struct SpoolOptions {
  std::string dir;                // <state_dir>/spool
  std::string name;               // the file is <dir>/<name>.spool
  std::string cluster;            // the source cluster's name, for messages
  std::optional<uint64_t> limit;  // its spool_limit: nullopt = derived, 0 = no spool
};

/** The spool of the current full sync (or the last one), for status and metrics. */
struct SpoolStats {
  bool active = false;        // in place now: the source is read into it
  uint64_t bytes = 0;         // held now (memory + disk)
  uint64_t on_disk = 0;       // of those, in the file
  uint64_t peak = 0;          // the most held at once (this full sync's, or the last one's)
  uint64_t peak_on_disk = 0;  // the most in the file at once
  uint64_t limit = 0;         // this (or the last) full sync's limit; 0 = no spool
  bool at_limit = false;      // reading waits for the targets now (the limit is reached)
};

/** A filesystem's space (statvfs), for the default limit. */
struct DiskSpace {
  uint64_t free = 0;   // available to this (unprivileged) process
  uint64_t total = 0;  // the filesystem's size
};
/** The space of the filesystem that holds `dir`; nullopt when it cannot be read. */
std::optional<DiskSpace> diskSpaceOf(const std::string& dir);

/** What a full sync may hold in its spool, and why that much (for the log). */
struct SpoolLimit {
  uint64_t bytes = 0;
  std::string why;  // e.g. "2 x the snapshot's 512.0 MB + 256 MiB"
};

/**
 * The limit of one full sync's spool. `configured`: the cluster's spool_limit (nullopt: derive
 * it; 0 is handled by the caller: no spool). `announced`: the snapshot's size, as its `$<len>`
 * says (disk-based) or the RDB's used-mem (diskless); 0 = not known. Derived: 2 x announced +
 * 256 MiB, or 4 GiB while unknown. Never more than the free space of the spool's filesystem minus
 * a margin (min(1 GiB, 10% of its size)) — the checkpoints live there too — but at least the
 * memory part (which needs no disk).
 */
SpoolLimit spoolLimitFor(std::optional<uint64_t> configured, uint64_t announced,
                         std::optional<DiskSpace> disk, size_t memory_bytes = kSpoolMemoryBytes);

/**
 * Deletes the spool files a process that ended without closing them left in `dir`
 * (`*.spool`; the state directory is locked to one agent, so none is in use). Returns how many.
 */
size_t removeLeftoverSpools(const std::string& dir);

/** "512.0 MB", "3.2 GB", "900 B": byte counts for messages (powers of 1000). */
std::string formatBytes(uint64_t bytes);

}  // namespace xdcr::source
