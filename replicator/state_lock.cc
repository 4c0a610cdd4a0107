#include "replicator/state_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <thread>

#include <spdlog/spdlog.h>

namespace xdcr::replicator {
namespace {

/** What to do about a state directory this user cannot create or write (as validate says). */
constexpr const char* kStateDirHint =
    "under systemd the unit's StateDirectory=xdcr-agent gives the agent /var/lib/xdcr-agent: set "
    "agent.state_dir: /var/lib/xdcr-agent; elsewhere choose a directory this user can write";

/** The PID the holder wrote, or "unknown": it may hold the lock and not have written it yet. */
std::string holderPid(int fd) {
  for (int attempt = 0; attempt < 10; ++attempt) {
    char buf[32];
    ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    std::string text(buf, n > 0 ? static_cast<size_t>(n) : 0);
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) return text;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return "unknown";
}

}  // namespace

StateDirLock::~StateDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (a later agent reuses it)
}

int StateDirLock::acquire(const std::string& state_dir) {
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec) {
    spdlog::critical("cannot create agent.state_dir {}: {}; {}", state_dir, ec.message(),
                     kStateDirHint);
    return kExitStateDirUnusable;
  }
  const std::string path = (std::filesystem::path(state_dir) / "agent.lock").string();
  // No O_TRUNC: the file may hold the PID of the agent that has the lock.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    spdlog::critical("cannot create the lock file {} in agent.state_dir: {}; {}", path,
                     std::strerror(errno), kStateDirHint);
    return kExitStateDirUnusable;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string pid = err == EWOULDBLOCK ? holderPid(fd) : "";
    ::close(fd);
    if (err == EWOULDBLOCK) {
      spdlog::critical(
          "state directory {} is in use by another xdcr-agent (PID {}; lock file {}): two agents "
          "on one state directory would apply writes twice; stop the other agent or give this "
          "one its own agent.state_dir",
          state_dir, pid, path);
      return kExitStateDirInUse;
    }
    // Without the lock nothing stops a second agent: refuse rather than run unguarded.
    spdlog::critical("cannot lock {}: {}; agent.state_dir must be on a file system with flock",
                     path, std::strerror(err));
    return 1;
  }
  // Ours now; a PID left by an earlier holder (it ended, so the kernel released its lock) goes.
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    spdlog::warn("cannot write this agent's PID into {}: {}; the lock holds all the same", path,
                 std::strerror(errno));
  }
  fd_ = fd;
  path_ = path;
  return 0;
}

}  // namespace xdcr::replicator
