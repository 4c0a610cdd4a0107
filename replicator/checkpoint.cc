#include "replicator/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <xxhash.h>

namespace xdcr::replicator {
namespace {

constexpr std::string_view kMagic = "XDCRCKPT 1\n";

Status writeAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(Error::storage(fmt::format(
          "cannot write checkpoint {}: {}; check free space and permissions of agent.state_dir",
          path, std::strerror(errno))));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status{};
}

}  // namespace

CheckpointStore::CheckpointStore(std::string state_dir, std::string pipeline)
    : dir_(std::move(state_dir)), pipeline_(std::move(pipeline)) {
  path_ = (std::filesystem::path(dir_) / (pipeline_ + ".ckpt")).string();
}

Status CheckpointStore::prepare() const {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) {
    return fail(Error::storage(fmt::format("cannot create agent.state_dir {}: {}", dir_,
                                           ec.message())));
  }
  return Status{};
}

Result<std::optional<Checkpoint>> CheckpointStore::load(filters::ExpiryIndex& index) const {
  std::ifstream in(path_, std::ios::binary);
  if (!in) {
    if (!std::filesystem::exists(path_)) return std::optional<Checkpoint>{};
    return fail(Error::storage(fmt::format("cannot read checkpoint {}", path_)));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string data = ss.str();
  auto damaged = [&](const char* why) {
    return fail(Error::storage(fmt::format(
        "checkpoint {} is damaged ({}); move it away to start this pipeline with a full resync",
        path_, why)));
  };
  if (data.size() < kMagic.size() + 8 || data.compare(0, kMagic.size(), kMagic) != 0) {
    return damaged("bad header");
  }
  uint64_t stored = 0;
  std::memcpy(&stored, data.data() + data.size() - 8, 8);
  if (XXH64(data.data(), data.size() - 8, 0) != stored) return damaged("checksum mismatch");
  size_t nl = data.find('\n', kMagic.size());
  if (nl == std::string::npos) return damaged("no header line");
  Checkpoint cp;
  try {
    auto j = nlohmann::json::parse(data.substr(kMagic.size(), nl - kMagic.size()));
    cp.position.replid = j.at("replid").get<std::string>();
    cp.position.offset = j.at("offset").get<uint64_t>();
    cp.db = j.at("db").get<int>();
    cp.written_at_ms = j.at("written_at_ms").get<int64_t>();
    cp.source_address = j.value("source", "");
    cp.marker = j.value("marker", "");
    cp.next_marker = j.value("next_marker", "");
  } catch (const std::exception& e) {
    return damaged(e.what());
  }
  std::string_view image(data.data() + nl + 1, data.size() - 8 - (nl + 1));
  if (!index.deserialize(image)) return damaged("bad expiry index");
  return std::optional<Checkpoint>(cp);
}

Status CheckpointStore::commit(const Checkpoint& cp, const filters::ExpiryIndex& index) const {
  nlohmann::json j;
  j["pipeline"] = pipeline_;
  j["replid"] = cp.position.replid;
  j["offset"] = cp.position.offset;
  j["db"] = cp.db;
  j["written_at_ms"] = cp.written_at_ms;
  j["source"] = cp.source_address;
  j["marker"] = cp.marker;
  j["next_marker"] = cp.next_marker;
  j["index_entries"] = index.size();
  std::string data(kMagic);
  data += j.dump();
  data += '\n';
  index.serialize(data);
  uint64_t sum = XXH64(data.data(), data.size(), 0);
  data.append(reinterpret_cast<const char*>(&sum), 8);

  const std::string tmp = path_ + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return fail(Error::storage(fmt::format("cannot create {}: {}; check agent.state_dir", tmp,
                                           std::strerror(errno))));
  }
  Status s = writeAll(fd, data, tmp);
  if (s && ::fsync(fd) != 0) {
    s = fail(Error::storage(fmt::format("fsync {} failed: {}", tmp, std::strerror(errno))));
  }
  ::close(fd);
  if (!s) {
    ::unlink(tmp.c_str());  // the previous checkpoint stays intact
    return s;
  }
  if (::rename(tmp.c_str(), path_.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return fail(Error::storage(fmt::format("cannot rename {} to {}: {}", tmp, path_,
                                           std::strerror(errno))));
  }
  int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    int rc = ::fsync(dfd);
    ::close(dfd);
    if (rc != 0) {
      return fail(Error::storage(fmt::format("fsync of directory {} failed: {}", dir_,
                                             std::strerror(errno))));
    }
  }
  return Status{};
}

Status CheckpointStore::remove() const {
  if (::unlink(path_.c_str()) != 0 && errno != ENOENT) {
    return fail(Error::storage(fmt::format("cannot remove checkpoint {}: {}", path_,
                                           std::strerror(errno))));
  }
  int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status{};
}

}  // namespace xdcr::replicator
