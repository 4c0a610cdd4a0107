#pragma once
// One agent per state directory. Two agents on one agent.state_dir would both resume from the
// same checkpoints and apply every non-idempotent write (INCR, RPUSH, ...) twice, so `run` takes
// an exclusive flock on <state_dir>/agent.lock before any pipeline starts and holds it for the
// life of the process. The kernel drops the lock when the process ends, however it ends, so a
// crashed agent never leaves a stale lock behind; the PID written into the file is only for the
// message the second agent prints.

#include <string>

namespace xdcr::replicator {

/** Exit status of `run` when another agent holds the state directory (EX_TEMPFAIL). */
inline constexpr int kExitStateDirInUse = 75;
/**
 * Exit status of `run` when agent.state_dir cannot be created or written (EX_CONFIG, as for an
 * invalid file: a restart does not help; the unit's RestartPreventExitStatus=78 stops the loop).
 */
inline constexpr int kExitStateDirUnusable = 78;

class StateDirLock {
 public:
  StateDirLock() = default;
  ~StateDirLock();
  StateDirLock(const StateDirLock&) = delete;
  StateDirLock& operator=(const StateDirLock&) = delete;

  /**
   * Creates `state_dir` if needed and locks <state_dir>/agent.lock (without waiting), writing
   * this process's PID into it. Returns 0, or logs one error line and returns the exit status:
   * kExitStateDirInUse when another process holds the lock (the message names the directory and
   * the holder's PID), kExitStateDirUnusable when the directory or the lock file cannot be
   * created or opened (the message suggests StateDirectory=), 1 when it cannot be locked.
   */
  int acquire(const std::string& state_dir);

  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace xdcr::replicator
