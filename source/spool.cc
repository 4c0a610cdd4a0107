#include "source/spool.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

namespace xdcr::source {
namespace {

constexpr uint64_t kMiB = 1ULL << 20;
constexpr uint64_t kGiB = 1ULL << 30;
// Consumed file space is given back in steps of this much (one fallocate per step).
constexpr uint64_t kDiscardStep = 64 * kMiB;

std::string errnoText(int err) {
  return std::strerror(err);
}

}  // namespace

// ---- FileSpoolStore ---------------------------------------------------------------------------

FileSpoolStore::FileSpoolStore(std::string dir, std::string name)
    : dir_(std::move(dir)), name_(std::move(name)), path_(dir_ + "/" + name_ + ".spool") {}

FileSpoolStore::~FileSpoolStore() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
}

Status FileSpoolStore::open() {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) {
    return fail(Error::storage(
        fmt::format("cannot create the spool directory {}: {}", dir_, ec.message())));
  }
  // O_EXCL: a file of that name is never opened, whoever made it. Leftovers of an agent that
  // ended without closing are removed at start (removeLeftoverSpools); a name in use by another
  // link (never, by construction) gets a suffix.
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string path = attempt == 0 ? dir_ + "/" + name_ + ".spool"
                                    : fmt::format("{}/{}.{}.spool", dir_, name_, attempt);
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
      fd_ = fd;
      path_ = std::move(path);
      return Status{};
    }
    if (errno != EEXIST) {
      return fail(Error::storage(
          fmt::format("cannot create the spool file {}: {}", path, errnoText(errno))));
    }
  }
  return fail(Error::storage(
      fmt::format("cannot create a spool file in {}: {}.spool and 99 others exist", dir_, name_)));
}

Status FileSpoolStore::write(uint64_t offset, std::string_view data) {
  if (fd_ < 0) {
    if (auto s = open(); !s) return s;
  }
  while (!data.empty()) {
    const ssize_t n = ::pwrite(fd_, data.data(), data.size(), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(Error::storage(
          fmt::format("cannot write the spool file {}: {}", path_, errnoText(errno))));
    }
    data.remove_prefix(static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
  }
  return Status{};
}

Status FileSpoolStore::read(uint64_t offset, char* out, size_t n) {
  while (n > 0) {
    const ssize_t got = fd_ < 0 ? -1 : ::pread(fd_, out, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return fail(Error::storage(
          fmt::format("cannot read the spool file {}: {}", path_,
                      got == 0 ? "it is shorter than what was written" : errnoText(errno))));
    }
    out += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return Status{};
}

void FileSpoolStore::discard(uint64_t offset) {
#ifdef FALLOC_FL_PUNCH_HOLE
  // Best effort: a filesystem without hole punching keeps the space until reset().
  if (fd_ >= 0 && offset > 0) {
    (void)::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                      static_cast<off_t>(offset));
  }
#else
  (void)offset;
#endif
}

Status FileSpoolStore::reset() {
  if (fd_ >= 0 && ::ftruncate(fd_, 0) != 0) {
    return fail(Error::storage(
        fmt::format("cannot truncate the spool file {}: {}", path_, errnoText(errno))));
  }
  return Status{};
}

// ---- SpoolFifo --------------------------------------------------------------------------------

SpoolFifo::SpoolFifo(size_t memory_bytes, std::unique_ptr<SpoolStore> store)
    : mem_cap_(memory_bytes), store_(std::move(store)) {}

Status SpoolFifo::append(std::string_view data) {
  const uint64_t n = data.size();
  // Memory while nothing waits in the store (its bytes are newer than memory's): order kept.
  if (file_end_ == file_begin_ && mem_len_ < mem_cap_ && !data.empty()) {
    if (!ring_) ring_ = std::make_unique<char[]>(mem_cap_);
    size_t room = mem_cap_ - mem_len_;
    size_t take = std::min(room, data.size());
    size_t tail = (mem_head_ + mem_len_) % mem_cap_;
    size_t first = std::min(take, mem_cap_ - tail);
    std::memcpy(ring_.get() + tail, data.data(), first);
    std::memcpy(ring_.get(), data.data() + first, take - first);
    mem_len_ += take;
    data.remove_prefix(take);
  }
  if (!data.empty()) {
    if (auto s = store_->write(file_end_, data); !s) {
      mem_len_ -= n - data.size();  // nothing of `data` is taken
      return s;
    }
    file_end_ += data.size();
  }
  total_ += n;
  peak_ = std::max(peak_, size());
  peak_on_disk_ = std::max(peak_on_disk_, onDisk());
  return Status{};
}

Result<size_t> SpoolFifo::take(ReadBuffer& out, size_t max) {
  if (mem_len_ > 0) {
    const size_t n = std::min<size_t>(max, mem_len_);
    size_t free = 0;
    char* p = out.prepare(n, free);
    const size_t first = std::min(n, mem_cap_ - mem_head_);
    std::memcpy(p, ring_.get() + mem_head_, first);
    std::memcpy(p + first, ring_.get(), n - first);
    out.commit(n);
    mem_head_ = (mem_head_ + n) % mem_cap_;
    mem_len_ -= n;
    if (mem_len_ == 0) mem_head_ = 0;
    return n;
  }
  if (file_end_ == file_begin_) return size_t{0};
  const size_t n = static_cast<size_t>(std::min<uint64_t>(max, file_end_ - file_begin_));
  size_t free = 0;
  char* p = out.prepare(n, free);
  if (auto s = store_->read(file_begin_, p, n); !s) return fail(s.error());
  out.commit(n);
  file_begin_ += n;
  if (file_begin_ == file_end_) {
    // Read to its end: start the file again (and memory is used again for what follows).
    file_begin_ = file_end_ = file_discarded_ = 0;
    if (auto s = store_->reset(); !s) return fail(s.error());
  } else if (file_begin_ - file_discarded_ >= kDiscardStep) {
    file_discarded_ = file_begin_ & ~(kMiB - 1);
    store_->discard(file_discarded_);
  }
  return n;
}

// ---- limits and housekeeping ------------------------------------------------------------------

std::optional<DiskSpace> diskSpaceOf(const std::string& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return std::nullopt;
  DiskSpace d;
  d.free = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  d.total = static_cast<uint64_t>(st.f_blocks) * st.f_frsize;
  return d;
}

SpoolLimit spoolLimitFor(std::optional<uint64_t> configured, uint64_t announced,
                         std::optional<DiskSpace> disk, size_t memory_bytes) {
  SpoolLimit l;
  if (configured) {
    l.bytes = *configured;
    l.why = "spool_limit";
  } else if (announced > 0) {
    l.bytes = 2 * announced + 256 * kMiB;
    l.why = fmt::format("2 x the snapshot's announced {} + 256 MiB", formatBytes(announced));
  } else {
    l.bytes = 4 * kGiB;
    l.why = "the snapshot's size not known yet: 4 GiB";
  }
  if (l.bytes <= memory_bytes) return l;  // memory only: no disk needed
  if (!disk) {
    l.why += "; the free space of the spool directory could not be read";
    return l;
  }
  // The checkpoints share that filesystem: leave a margin.
  const uint64_t margin = std::min<uint64_t>(kGiB, disk->total / 10);
  const uint64_t room = disk->free > margin ? disk->free - margin : 0;
  const uint64_t cap = std::max<uint64_t>(room, memory_bytes);
  if (l.bytes > cap) {
    l.bytes = cap;
    l.why += fmt::format(", capped by the free space of its filesystem ({} free, {} kept free)",
                         formatBytes(disk->free), formatBytes(margin));
  }
  return l;
}

size_t removeLeftoverSpools(const std::string& dir) {
  std::error_code ec;
  size_t removed = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".spool") continue;
    std::error_code rm;
    if (std::filesystem::remove(e.path(), rm)) ++removed;
  }
  return removed;
}

std::string formatBytes(uint64_t bytes) {
  if (bytes < 1000) return fmt::format("{} B", bytes);
  if (bytes < 1000 * 1000) return fmt::format("{:.1f} KB", bytes / 1e3);
  if (bytes < 1000ULL * 1000 * 1000) return fmt::format("{:.1f} MB", bytes / 1e6);
  return fmt::format("{:.1f} GB", bytes / 1e9);
}

}  // namespace xdcr::source
