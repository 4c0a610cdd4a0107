#include "target/stale_sweep.h"

#include <boost/asio/this_coro.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include "common/fd_io.h"
#include "common/redis_conn.h"
#include "target/marker.h"

namespace xdcr::target {
namespace {

constexpr auto kTimeout = std::chrono::seconds(10);
constexpr uint64_t kMaxInflight = 50'000;

}  // namespace

// The db goes into the hashed bytes, not into XXH3's seed: for inputs of 1–3 bytes the seed
// combines with the input almost linearly ("k:2" in db 2 and "k:3" in db 1 collide).
uint64_t SnapshotKeys::hashOf(int db, std::string_view key) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  const uint32_t d = static_cast<uint32_t>(db);
  XXH3_64bits_update(&state, &d, sizeof d);
  XXH3_64bits_update(&state, key.data(), key.size());
  return XXH3_64bits_digest(&state);
}

void SnapshotKeys::add(int db, std::string_view key) {
  hashes_.push_back(hashOf(db, key));
}

void SnapshotKeys::seal() {
  std::sort(hashes_.begin(), hashes_.end());
  hashes_.erase(std::unique(hashes_.begin(), hashes_.end()), hashes_.end());
}

bool SnapshotKeys::contains(int db, std::string_view key) const {
  return std::binary_search(hashes_.begin(), hashes_.end(), hashOf(db, key));
}

FullSyncJournal::~FullSyncJournal() {
  if (fd_ >= 0) ::close(fd_);
}

Status FullSyncJournal::load(SnapshotKeys& into) const {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status{};
    return fail(Error::io(fmt::format("cannot read {}: {}", path_, std::strerror(errno))));
  }
  std::vector<uint64_t> chunk(8192);
  size_t carry = 0;  // bytes of a record split across reads
  for (;;) {
    const ssize_t n = ::read(fd, reinterpret_cast<char*>(chunk.data()) + carry,
                             chunk.size() * sizeof(uint64_t) - carry);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return fail(Error::io(fmt::format("cannot read {}: {}", path_, std::strerror(err))));
    }
    const size_t have = carry + static_cast<size_t>(n);
    const size_t whole = have / sizeof(uint64_t);
    for (size_t i = 0; i < whole; ++i) into.addHash(chunk[i]);
    carry = have % sizeof(uint64_t);
    if (carry > 0) {
      std::memmove(chunk.data(), reinterpret_cast<char*>(chunk.data()) + whole * sizeof(uint64_t),
                   carry);
    }
    if (n == 0) break;  // a torn last record (carry) is left out
  }
  ::close(fd);
  return Status{};
}

Status FullSyncJournal::flush() {
  if (buffer_.empty()) return Status{};
  auto failed = [&](const char* what, int err = errno) {
    return fail(Error::io(fmt::format(
        "cannot {} {}, the record of the keys this full sync writes to the target: {}; the "
        "target is not written until it can (free space in agent.state_dir)",
        what, path_, std::strerror(err))));
  };
  if (fd_ < 0) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd_ < 0) return failed("create");
    // A record torn by a crash in an earlier write: cut it, or every record after it would be
    // read shifted.
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return failed("read the size of");
    const auto torn = static_cast<uint64_t>(st.st_size) % sizeof(uint64_t);
    if (torn != 0 && ::ftruncate(fd_, st.st_size - static_cast<off_t>(torn)) != 0) {
      return failed("truncate");
    }
  }
  const std::string_view bytes(reinterpret_cast<const char*>(buffer_.data()),
                               buffer_.size() * sizeof(uint64_t));
  if (const int err = writeFully(fd_, bytes); err != 0) return failed("write to", err);
  buffer_.clear();
  return Status{};
}

Status FullSyncJournal::rewrite(const SnapshotKeys& keys) {
  const std::string tmp = path_ + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return fail(Error::io(fmt::format("cannot create {}: {}", tmp, std::strerror(errno))));
  }
  const std::string_view bytes(reinterpret_cast<const char*>(keys.hashes().data()),
                               keys.hashes().size() * sizeof(uint64_t));
  const int err = writeFully(fd, bytes);
  ::close(fd);
  if (err != 0 || ::rename(tmp.c_str(), path_.c_str()) != 0) {
    const int e = err != 0 ? err : errno;
    ::unlink(tmp.c_str());  // the old file stays: it still names every key
    return fail(Error::io(fmt::format("cannot rewrite {}: {}; free space in agent.state_dir", path_,
                                      std::strerror(e))));
  }
  return Status{};
}

Status FullSyncJournal::remove() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  buffer_.clear();
  if (::unlink(path_.c_str()) != 0 && errno != ENOENT) {
    return fail(Error::io(fmt::format("cannot delete {}: {}", path_, std::strerror(errno))));
  }
  return Status{};
}

net::awaitable<Result<uint64_t>> deleteStaleKeys(std::string_view label,
                                                 const config::ClusterConfig& target_cluster,
                                                 const filters::KeySpace& space,
                                                 const SnapshotKeys& snapshot,
                                                 const SnapshotKeys* only, Applier& applier,
                                                 RedisTarget& target, uint64_t offset) {
  RedisConnection conn(co_await net::this_coro::executor, fmt::format("{} stale-key scan", label));
  // The writer's node (a Sentinel-managed target's master as discovered): TCP, TLS, AUTH.
  Status s = co_await conn.connect(target.node(), kTimeout);
  if (!s) co_return fail(s.error());

  uint64_t deleted = 0;
  for (auto [tdb, sdb] : space.sourceDbsByTarget()) {
    const std::vector<std::vector<std::string>> select = {{"SELECT", std::to_string(tdb)}};
    auto sel = co_await conn.callMany(select, kTimeout);
    if (!sel) co_return fail(sel.error());
    if ((*sel)[0].isError()) break;  // fewer dbs than 16 on this server: done
    std::string cursor = "0";
    do {
      auto keys = co_await conn.scanPage(cursor, 1000, kTimeout);
      if (!keys) co_return fail(keys.error());
      applier.beginUnit(false);
      for (const auto& tkey : *keys) {
        if (isMarkerKey(tkey)) continue;
        const std::string skey = space.unrewrite(tkey);
        if (!space.keyPasses(skey) || snapshot.contains(sdb, skey)) continue;
        if (only != nullptr && !only->contains(sdb, skey)) continue;
        applier.appendDelete(tdb, tkey);
        ++deleted;
      }
      target.commit(applier.finishUnit(target.pending()), offset);
      while (target.inflightCommands() > kMaxInflight) {
        co_await target.waitProgress(std::chrono::milliseconds(100));
      }
    } while (cursor != "0");
  }
  conn.close();
  while (!target.drained()) co_await target.waitProgress(std::chrono::milliseconds(50));
  co_return deleted;
}

}  // namespace xdcr::target
