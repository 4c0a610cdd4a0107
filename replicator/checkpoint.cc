#include "replicator/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>
#include <nlohmann/json.hpp>

#include "common/fd_io.h"

namespace xdcr::replicator {
namespace {

constexpr std::string_view kMagic = "XDCRCKPT 1\n";
constexpr std::string_view kJournalMagic = "XJR1";

Status writeAll(int fd, std::string_view data, const std::string& path) {
  if (const int err = writeFully(fd, data); err != 0) {
    return fail(Error::storage(fmt::format(
        "cannot write checkpoint {}: {}; check free space and permissions of agent.state_dir", path,
        std::strerror(err))));
  }
  return Status{};
}

nlohmann::json headerJson(const std::string& pipeline, const Checkpoint& cp) {
  nlohmann::json j;
  j["pipeline"] = pipeline;
  j["replid"] = cp.position.replid;
  j["offset"] = cp.position.offset;
  j["db"] = cp.db;
  j["written_at_ms"] = cp.written_at_ms;
  j["source"] = cp.source_address;
  j["marker"] = cp.marker;
  j["next_marker"] = cp.next_marker;
  j["data_offset"] = cp.data_offset;
  j["data_db"] = cp.data_db;
  return j;
}

void parseHeader(std::string_view text, Checkpoint& cp) {
  auto j = nlohmann::json::parse(text);
  cp.position.replid = j.at("replid").get<std::string>();
  cp.position.offset = j.at("offset").get<uint64_t>();
  cp.db = j.at("db").get<int>();
  cp.written_at_ms = j.at("written_at_ms").get<int64_t>();
  cp.source_address = j.value("source", "");
  cp.marker = j.value("marker", "");
  cp.next_marker = j.value("next_marker", "");
  cp.data_offset = std::min(j.value("data_offset", cp.position.offset), cp.position.offset);
  cp.data_db = j.contains("data_offset") ? j.value("data_db", cp.db) : cp.db;
}

template <class T>
void putRaw(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

uint64_t newGeneration() {
  std::random_device rd;
  uint64_t g = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return g == 0 ? 1 : g;
}

}  // namespace

Result<int64_t> lastFullSyncBoundMs(const std::string& state_dir, const std::string& pipeline) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::directory_iterator it(state_dir, ec);
  if (ec) {
    return fail(
        Error::storage(fmt::format("cannot read agent.state_dir {}: {}", state_dir, ec.message())));
  }
  // This pipeline's instances: "<pipeline>" and, with a Redis Cluster source, "<pipeline>@<id>".
  auto instanceFile = [&](const std::string& name, std::string_view ext) {
    if (name.size() <= ext.size() || name.compare(name.size() - ext.size(), ext.size(), ext) != 0) {
      return false;
    }
    const std::string instance = name.substr(0, name.size() - ext.size());
    return instance == pipeline || instance.rfind(pipeline + "@", 0) == 0;
  };
  int64_t latest = -1;
  for (const fs::directory_entry& e : it) {
    const std::string name = e.path().filename().string();
    if (instanceFile(name, ".fullsync-keys")) {
      return fail(Error::storage(
          fmt::format("a full sync of pipeline {} is under way or was interrupted ({})", pipeline,
                      e.path().string())));
    }
    if (!instanceFile(name, ".ckpt")) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::string head(4096, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(in.gcount()));
    const size_t nl = head.find('\n', kMagic.size());
    if (head.compare(0, kMagic.size(), kMagic) != 0 || nl == std::string::npos) {
      return fail(Error::storage(fmt::format("checkpoint {} has no header", e.path().string())));
    }
    try {
      Checkpoint cp;
      parseHeader(std::string_view(head).substr(kMagic.size(), nl - kMagic.size()), cp);
      latest = std::max(latest, cp.written_at_ms);
    } catch (const std::exception& ex) {
      return fail(Error::storage(
          fmt::format("checkpoint {} has a damaged header ({})", e.path().string(), ex.what())));
    }
  }
  if (latest < 0) {
    return fail(Error::storage(fmt::format(
        "no checkpoint of pipeline {} in agent.state_dir {}: no full sync has finished there",
        pipeline, state_dir)));
  }
  return latest;
}

CheckpointStore::CheckpointStore(std::string state_dir, std::string pipeline)
    : dir_(std::move(state_dir)), pipeline_(std::move(pipeline)) {
  path_ = (std::filesystem::path(dir_) / (pipeline_ + ".ckpt")).string();
  journal_path_ = (std::filesystem::path(dir_) / (pipeline_ + ".journal")).string();
}

std::string CheckpointStore::fullSyncKeysPath() const {
  return (std::filesystem::path(dir_) / (pipeline_ + ".fullsync-keys")).string();
}

CheckpointStore::~CheckpointStore() {
  closeJournal();
}

void CheckpointStore::closeJournal() {
  if (journal_fd_ >= 0) ::close(journal_fd_);
  journal_fd_ = -1;
}

Status CheckpointStore::prepare() const {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) {
    return fail(
        Error::storage(fmt::format("cannot create agent.state_dir {}: {}", dir_, ec.message())));
  }
  return Status{};
}

Status CheckpointStore::syncDirectory() const {
  int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return Status{};
  int rc = ::fsync(dfd);
  int err = errno;
  ::close(dfd);
  if (rc != 0) {
    return fail(
        Error::storage(fmt::format("fsync of directory {} failed: {}", dir_, std::strerror(err))));
  }
  return Status{};
}

Result<std::optional<Checkpoint>> CheckpointStore::load(source::ExpiryIndex& index) {
  closeJournal();
  has_base_ = false;
  base_bytes_ = journal_bytes_ = 0;
  std::ifstream in(path_, std::ios::binary);
  if (!in) {
    if (!std::filesystem::exists(path_)) return std::optional<Checkpoint>{};
    return fail(Error::storage(fmt::format("cannot read checkpoint {}", path_)));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string data = ss.str();
  auto damaged = [&](const std::string& file, const std::string& why) {
    return fail(Error::storage(fmt::format(
        "checkpoint {} is damaged ({}); move {} and {} away to start this pipeline with a full "
        "resync",
        file, why, path_, journal_path_)));
  };
  if (data.size() < kMagic.size() + 8 || data.compare(0, kMagic.size(), kMagic) != 0) {
    return damaged(path_, "bad header");
  }
  uint64_t stored = 0;
  std::memcpy(&stored, data.data() + data.size() - 8, 8);
  if (XXH64(data.data(), data.size() - 8, 0) != stored) return damaged(path_, "checksum mismatch");
  size_t nl = data.find('\n', kMagic.size());
  if (nl == std::string::npos) return damaged(path_, "no header line");
  Checkpoint cp;
  uint64_t generation = 0;
  try {
    const std::string_view header(data.data() + kMagic.size(), nl - kMagic.size());
    parseHeader(header, cp);
    generation = nlohmann::json::parse(header).value("generation", uint64_t{0});
  } catch (const std::exception& e) {
    return damaged(path_, e.what());
  }
  std::string_view image(data.data() + nl + 1, data.size() - 8 - (nl + 1));
  if (!index.deserialize(image)) return damaged(path_, "bad expiry index");
  has_base_ = true;
  generation_ = generation;
  base_bytes_ = data.size();
  data.clear();
  data.shrink_to_fit();

  // The journal: records of this base's generation, in order, up to the first torn one.
  std::ifstream jin(journal_path_, std::ios::binary);
  if (!jin) return std::optional<Checkpoint>(cp);
  std::stringstream js;
  js << jin.rdbuf();
  const std::string journal = js.str();
  size_t pos = 0;
  size_t applied = 0, foreign = 0;
  std::string why_stopped;
  while (pos < journal.size()) {
    // "XJR1" u32 body_len | body | u64 XXH64(magic, length, body)
    if (journal.size() - pos < 8 + 8 || journal.compare(pos, 4, kJournalMagic) != 0) {
      why_stopped = "a record without its header";
      break;
    }
    uint32_t body_len = 0;
    std::memcpy(&body_len, journal.data() + pos + 4, 4);
    if (journal.size() - pos - 8 < static_cast<size_t>(body_len) + 8) {
      why_stopped = "an incomplete record";
      break;
    }
    uint64_t sum = 0;
    std::memcpy(&sum, journal.data() + pos + 8 + body_len, 8);
    if (XXH64(journal.data() + pos, 8 + body_len, 0) != sum) {
      why_stopped = "a record with a bad checksum";
      break;
    }
    // body: u64 generation | u32 header_len | header | ops
    std::string_view body(journal.data() + pos + 8, body_len);
    uint64_t gen = 0;
    uint32_t header_len = 0;
    if (body.size() < 12) return damaged(journal_path_, "short record");
    std::memcpy(&gen, body.data(), 8);
    std::memcpy(&header_len, body.data() + 8, 4);
    if (body.size() - 12 < header_len) return damaged(journal_path_, "bad record header length");
    if (gen != generation_) {
      // Left over from before the base was replaced (a crash between the two steps of a
      // compaction): the base already holds all of it.
      ++foreign;
    } else {
      Checkpoint next = cp;
      try {
        parseHeader(body.substr(12, header_len), next);
      } catch (const std::exception& e) {
        return damaged(journal_path_, e.what());
      }
      if (!index.replayOps(body.substr(12 + header_len))) {
        return damaged(journal_path_, "bad expiry-index changes");
      }
      cp = next;
      ++applied;
    }
    pos += 8 + body_len + 8;
  }
  journal_bytes_ = pos;
  if (!why_stopped.empty()) {
    spdlog::warn(
        "checkpoint journal {}: {} at byte {} (a crash while it was written); the {} "
        "record(s) before it are used, the last {} byte(s) are cut off at the next "
        "checkpoint",
        journal_path_, why_stopped, pos, applied, journal.size() - pos);
  }
  if (foreign > 0) {
    spdlog::info("checkpoint journal {}: {} record(s) of an older base ignored", journal_path_,
                 foreign);
  }
  return std::optional<Checkpoint>(cp);
}

Status CheckpointStore::commit(const Checkpoint& cp, const source::ExpiryIndex& index) {
  if (before_commit_) {
    if (auto s = before_commit_(); !s) return s;
  }
  const uint64_t generation = newGeneration();
  nlohmann::json j = headerJson(pipeline_, cp);
  j["generation"] = generation;
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
    return fail(Error::storage(
        fmt::format("cannot create {}: {}; check agent.state_dir", tmp, std::strerror(errno))));
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
    return fail(Error::storage(
        fmt::format("cannot rename {} to {}: {}", tmp, path_, std::strerror(errno))));
  }
  // From here the new base counts; the old journal's records carry the old generation, so a
  // crash before the unlink below leaves them ignored.
  has_base_ = true;
  generation_ = generation;
  base_bytes_ = data.size();
  closeJournal();
  journal_bytes_ = 0;
  if (auto d = syncDirectory(); !d) return d;
  if (::unlink(journal_path_.c_str()) != 0 && errno != ENOENT) {
    spdlog::warn("cannot remove the old checkpoint journal {}: {} (it is ignored)", journal_path_,
                 std::strerror(errno));
  }
  return Status{};
}

Status CheckpointStore::appendDelta(const Checkpoint& cp,
                                    const std::vector<source::ExpiryIndex::Op>& ops) {
  if (before_commit_) {
    if (auto s = before_commit_(); !s) return s;
  }
  if (!has_base_) {
    return fail(Error::storage(
        fmt::format("internal: checkpoint journal {} has no base image to follow", journal_path_)));
  }
  if (journal_fd_ < 0) {
    journal_fd_ = ::open(journal_path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (journal_fd_ < 0) {
      return fail(Error::storage(fmt::format("cannot open {}: {}; check agent.state_dir",
                                             journal_path_, std::strerror(errno))));
    }
    // Cut off a torn tail (and anything after the valid records) before appending.
    if (::ftruncate(journal_fd_, static_cast<off_t>(journal_bytes_)) != 0 ||
        ::lseek(journal_fd_, static_cast<off_t>(journal_bytes_), SEEK_SET) < 0) {
      const int err = errno;
      closeJournal();
      return fail(
          Error::storage(fmt::format("cannot prepare {}: {}", journal_path_, std::strerror(err))));
    }
  }
  const std::string header = headerJson(pipeline_, cp).dump();
  std::string record(kJournalMagic);
  putRaw(record, uint32_t{0});  // body length, filled in below
  putRaw(record, generation_);
  putRaw(record, static_cast<uint32_t>(header.size()));
  record += header;
  source::ExpiryIndex::serializeOps(ops, record);
  const uint64_t body_len = record.size() - 8;
  if (body_len > UINT32_MAX) {
    return fail(Error::storage("internal: checkpoint journal record too large"));
  }
  const auto body_len32 = static_cast<uint32_t>(body_len);
  std::memcpy(record.data() + 4, &body_len32, 4);
  putRaw(record, XXH64(record.data(), record.size(), 0));

  Status s = writeAll(journal_fd_, record, journal_path_);
  if (s && ::fdatasync(journal_fd_) != 0) {
    s = fail(Error::storage(
        fmt::format("fdatasync {} failed: {}", journal_path_, std::strerror(errno))));
  }
  if (!s) {
    // The file may now end in part of this record; the next open cuts it off.
    closeJournal();
    return s;
  }
  if (journal_bytes_ == 0) {
    // A journal file that did not exist until now: make its directory entry durable too.
    if (auto d = syncDirectory(); !d) return d;
  }
  journal_bytes_ += record.size();
  return Status{};
}

Status CheckpointStore::remove() {
  closeJournal();
  has_base_ = false;
  base_bytes_ = journal_bytes_ = 0;
  for (const std::string& p : {path_, journal_path_}) {
    if (::unlink(p.c_str()) != 0 && errno != ENOENT) {
      return fail(
          Error::storage(fmt::format("cannot remove checkpoint {}: {}", p, std::strerror(errno))));
    }
  }
  (void)syncDirectory();
  return Status{};
}

}  // namespace xdcr::replicator
