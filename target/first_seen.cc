#include "target/first_seen.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

namespace xdcr::target {

namespace {

constexpr std::string_view kHeader = "XDCRFS1\n";
constexpr size_t kRecord = 16;

Status writeAll(int fd, const char* data, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      return fail(
          Error::storage(fmt::format("cannot write {}: {} (max_lifetime's first-seen "
                                     "record; check the state directory's disk)",
                                     path, std::strerror(errno))));
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return Status{};
}

std::string dirOf(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

uint64_t FirstSeenStore::hashOf(int db, std::string_view key) {
  // As SnapshotKeys::hashOf: the db in the hashed bytes, not in the seed.
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  const uint32_t d = static_cast<uint32_t>(db);
  XXH3_64bits_update(&state, &d, sizeof d);
  XXH3_64bits_update(&state, key.data(), key.size());
  return XXH3_64bits_digest(&state);
}

FirstSeenStore::FirstSeenStore(std::string path, int64_t max_lifetime_ms)
    : path_(std::move(path)), max_lifetime_ms_(max_lifetime_ms), slots_(1024) {}

FirstSeenStore::~FirstSeenStore() {
  (void)flush();
  if (fd_ >= 0) ::close(fd_);
}

size_t FirstSeenStore::slotOf(uint64_t hash, uint16_t db) const {
  const size_t mask = slots_.size() - 1;
  size_t i = (hash ^ (static_cast<uint64_t>(db) * 0x9E3779B97F4A7C15ULL)) & mask;
  while (slots_[i].used && !(slots_[i].hash == hash && slots_[i].db == db)) i = (i + 1) & mask;
  return i;
}

void FirstSeenStore::grow() {
  std::vector<Slot> old;
  old.swap(slots_);
  slots_.assign(old.size() * 2, Slot{});
  for (const Slot& s : old) {
    if (s.used) slots_[slotOf(s.hash, s.db)] = s;
  }
}

void FirstSeenStore::insert(uint64_t hash, uint16_t db, uint32_t second, bool log) {
  if ((live_ + 1) * 4 > slots_.size() * 3) grow();  // load factor <= 3/4
  Slot& s = slots_[slotOf(hash, db)];
  if (!s.used) ++live_;
  s = Slot{hash, second, db, static_cast<uint8_t>(sweeping_ ? 1 : 0), 1};
  if (log) record(kSet, db, second, hash);
}

void FirstSeenStore::erase(size_t i) {
  // Backward-shift deletion (linear probing): no tombstones.
  const size_t mask = slots_.size() - 1;
  slots_[i] = Slot{};
  --live_;
  size_t j = i;
  for (;;) {
    j = (j + 1) & mask;
    if (!slots_[j].used) return;
    const size_t home =
        (slots_[j].hash ^ (static_cast<uint64_t>(slots_[j].db) * 0x9E3779B97F4A7C15ULL)) & mask;
    // Move j back to i when its home is not in (i, j] (cyclically).
    const bool between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (!between) {
      slots_[i] = slots_[j];
      slots_[j] = Slot{};
      i = j;
    }
  }
}

void FirstSeenStore::record(Op op, uint16_t db, uint32_t second, uint64_t hash) {
  if (path_.empty()) return;
  char r[kRecord] = {};
  r[0] = static_cast<char>(op);
  std::memcpy(r + 2, &db, 2);
  std::memcpy(r + 4, &second, 4);
  std::memcpy(r + 8, &hash, 8);
  pending_.append(r, kRecord);
}

int64_t FirstSeenStore::touch(int db, std::string_view key, int64_t now_ms, int64_t lifetime_ms) {
  const uint64_t h = hashOf(db, key);
  const auto d = static_cast<uint16_t>(db);
  Slot& s = slots_[slotOf(h, d)];
  if (s.used && static_cast<int64_t>(s.second) * 1000 + lifetime_ms > now_ms) {
    if (sweeping_) s.marked = 1;
    return s.second;
  }
  // New (or its lifetime is over: the document ended on the target, this write starts anew).
  // Rounded up to the second: a deadline derived from it is never early.
  const auto second = static_cast<uint32_t>((now_ms + 999) / 1000);
  insert(h, d, second, true);
  return second;
}

int64_t FirstSeenStore::find(int db, std::string_view key) const {
  const Slot& s = slots_[slotOf(hashOf(db, key), static_cast<uint16_t>(db))];
  return s.used ? s.second : 0;
}

void FirstSeenStore::forget(int db, std::string_view key) {
  const uint64_t h = hashOf(db, key);
  const auto d = static_cast<uint16_t>(db);
  const size_t i = slotOf(h, d);
  if (!slots_[i].used) return;
  erase(i);
  record(kForget, d, 0, h);
}

void FirstSeenStore::forgetDb(int db) {
  const auto d = static_cast<uint16_t>(db);
  for (size_t i = 0; i < slots_.size();) {
    if (slots_[i].used && slots_[i].db == d) {
      erase(i);  // may shift a later entry into i: look at i again
    } else {
      ++i;
    }
  }
  record(kForgetDb, d, 0, 0);
}

void FirstSeenStore::forgetAll() {
  slots_.assign(slots_.size(), Slot{});
  live_ = 0;
  record(kForgetAll, 0, 0, 0);
}

void FirstSeenStore::beginSweep() {
  for (Slot& s : slots_) s.marked = 0;
  sweeping_ = true;
}

void FirstSeenStore::endSweep() {
  if (!sweeping_) return;
  sweeping_ = false;
  for (size_t i = 0; i < slots_.size();) {
    if (slots_[i].used && slots_[i].marked == 0) {
      const Slot s = slots_[i];
      erase(i);
      record(kForget, s.db, 0, s.hash);
    } else {
      ++i;
    }
  }
}

void FirstSeenStore::applyRecord(const char* r) {
  uint16_t db = 0;
  uint32_t second = 0;
  uint64_t hash = 0;
  std::memcpy(&db, r + 2, 2);
  std::memcpy(&second, r + 4, 4);
  std::memcpy(&hash, r + 8, 8);
  switch (static_cast<Op>(r[0])) {
    case kSet:
      insert(hash, db, second, false);
      break;
    case kForget: {
      const size_t i = slotOf(hash, db);
      if (slots_[i].used) erase(i);
      break;
    }
    case kForgetDb:
      for (size_t i = 0; i < slots_.size();) {
        if (slots_[i].used && slots_[i].db == db) {
          erase(i);
        } else {
          ++i;
        }
      }
      break;
    case kForgetAll:
      slots_.assign(slots_.size(), Slot{});
      live_ = 0;
      break;
  }
}

Status FirstSeenStore::load(int64_t now_ms, size_t* valid_out, bool* found) {
  *valid_out = 0;
  if (found != nullptr) *found = false;
  std::string data;
  {
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno != ENOENT) {
      return fail(Error::storage(fmt::format("cannot read {}: {}", path_, std::strerror(errno))));
    }
    if (fd >= 0) {
      if (found != nullptr) *found = true;
      char buf[1 << 16];
      for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        data.append(buf, static_cast<size_t>(n));
      }
      ::close(fd);
    }
  }
  size_t valid = 0;  // bytes of the file that hold whole, known records
  if (!data.empty()) {
    if (data.size() < kHeader.size() || data.compare(0, kHeader.size(), kHeader) != 0) {
      return fail(Error::storage(fmt::format(
          "{} is not a first-seen file (max_lifetime); move it away: the keys of max_lifetime "
          "collections then count their lifetime from their next write",
          path_)));
    }
    valid = kHeader.size();
    while (valid + kRecord <= data.size()) {
      const char op = data[valid];
      if (op < kSet || op > kForgetAll) break;  // a torn tail (a crash while appending)
      applyRecord(data.data() + valid);
      valid += kRecord;
      ++log_records_;
    }
  }
  // Ended lifetimes are not kept (§8.4): those keys start anew at their next write.
  for (size_t i = 0; i < slots_.size();) {
    if (slots_[i].used &&
        static_cast<int64_t>(slots_[i].second) * 1000 + max_lifetime_ms_ <= now_ms) {
      erase(i);
    } else {
      ++i;
    }
  }
  *valid_out = valid;
  return Status{};
}

Status FirstSeenStore::loadReadOnly(int64_t now_ms, bool* found) {
  if (path_.empty()) return Status{};
  read_only_ = true;
  size_t valid = 0;
  return load(now_ms, &valid, found);
}

Status FirstSeenStore::open(int64_t now_ms) {
  if (path_.empty()) return Status{};
  size_t valid = 0;
  if (auto s = load(now_ms, &valid, nullptr); !s) return s;
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    return fail(
        Error::storage(fmt::format("cannot open {} for writing: {}", path_, std::strerror(errno))));
  }
  if (valid == 0) {
    if (auto s = writeAll(fd_, kHeader.data(), kHeader.size(), path_); !s) return s;
    valid = kHeader.size();
  }
  // Cut a torn tail off, then append after the last whole record.
  if (::ftruncate(fd_, static_cast<off_t>(valid)) != 0 ||
      ::lseek(fd_, static_cast<off_t>(valid), SEEK_SET) < 0) {
    return fail(Error::storage(fmt::format("cannot truncate {}: {}", path_, std::strerror(errno))));
  }
  return Status{};
}

Status FirstSeenStore::flush() {
  if (pending_.empty() || fd_ < 0) {
    if (fd_ < 0) pending_.clear();  // not opened (tests): nothing to write to
    return Status{};
  }
  auto s = writeAll(fd_, pending_.data(), pending_.size(), path_);
  log_records_ += pending_.size() / kRecord;
  pending_.clear();
  return s;
}

Status FirstSeenStore::compact() {
  const std::string tmp = path_ + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return fail(Error::storage(fmt::format("cannot create {}: {}", tmp, std::strerror(errno))));
  }
  std::string out(kHeader);
  out.reserve(kHeader.size() + live_ * kRecord);
  uint64_t n = 0;
  for (const Slot& s : slots_) {
    if (!s.used) continue;
    char r[kRecord] = {};
    r[0] = kSet;
    std::memcpy(r + 2, &s.db, 2);
    std::memcpy(r + 4, &s.second, 4);
    std::memcpy(r + 8, &s.hash, 8);
    out.append(r, kRecord);
    ++n;
  }
  Status st = writeAll(fd, out.data(), out.size(), tmp);
  if (st && ::fsync(fd) != 0) {
    st = fail(Error::storage(fmt::format("fsync {} failed: {}", tmp, std::strerror(errno))));
  }
  ::close(fd);
  if (!st) return st;
  if (::rename(tmp.c_str(), path_.c_str()) != 0) {
    return fail(Error::storage(
        fmt::format("cannot rename {} to {}: {}", tmp, path_, std::strerror(errno))));
  }
  const std::string dir = dirOf(path_);
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    const int rc = ::fsync(dfd);
    ::close(dfd);
    if (rc != 0) {
      return fail(Error::storage(
          fmt::format("fsync of directory {} failed: {}", dir, std::strerror(errno))));
    }
  }
  ::close(fd_);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd_ < 0) {
    return fail(Error::storage(fmt::format("cannot open {}: {}", path_, std::strerror(errno))));
  }
  log_records_ = n;
  return Status{};
}

Status FirstSeenStore::sync(int64_t now_ms) {
  if (path_.empty() || read_only_) return Status{};
  if (auto s = flush(); !s) return s;
  for (size_t i = 0; i < slots_.size();) {
    if (slots_[i].used &&
        static_cast<int64_t>(slots_[i].second) * 1000 + max_lifetime_ms_ <= now_ms) {
      erase(i);  // a log record is not needed: open() drops it the same way
    } else {
      ++i;
    }
  }
  if (log_records_ > 2 * live_ + 4096) return compact();
  if (fd_ >= 0 && ::fdatasync(fd_) != 0) {
    return fail(
        Error::storage(fmt::format("fdatasync {} failed: {}", path_, std::strerror(errno))));
  }
  return Status{};
}

}  // namespace xdcr::target
