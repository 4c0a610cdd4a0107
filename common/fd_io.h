#pragma once
// Small POSIX file-descriptor helpers shared by the files the agent keeps in agent.state_dir
// (the checkpoint and its journal, the record of a full sync's keys).

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <string_view>

namespace xdcr {

/** Writes all of `data` to `fd`, across short writes and EINTR: 0, or the errno that stopped it. */
inline int writeFully(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

/** fsync of the directory holding `path` (a rename or unlink in it is durable after): 0 or errno.
 */
inline int syncParentDirectory(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return errno;
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  return rc == 0 ? 0 : err;
}

/**
 * Replaces `path` with `data` so that a crash leaves the old content or the new, never a part:
 * a temporary file beside it, written, fsynced, renamed over it, the directory fsynced.
 * 0, or the errno of the step that failed (the old file is then intact).
 */
inline int replaceFileDurably(const std::string& path, std::string_view data, mode_t mode) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return errno;
  int err = writeFully(fd, data);
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  ::close(fd);
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return err;
  }
  return syncParentDirectory(path);
}

/** Removes `path` durably (absent already counts as removed): 0 or errno. */
inline int removeFileDurably(const std::string& path) {
  if (::unlink(path.c_str()) != 0) return errno == ENOENT ? 0 : errno;
  return syncParentDirectory(path);
}

}  // namespace xdcr
