#pragma once
// Small POSIX file-descriptor helpers shared by the files the agent keeps in agent.state_dir
// (the checkpoint and its journal, the record of a full sync's keys).

#include <unistd.h>

#include <cerrno>
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

}  // namespace xdcr
