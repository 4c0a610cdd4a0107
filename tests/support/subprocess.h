#pragma once
// A child process started with fork/exec and stopped by its PID, never by name.
//
// Test processes (redis-server, xdcr-agent) must not outlive the test binary: the child asks the
// kernel for SIGKILL when the thread that forked it dies (PR_SET_PDEATHSIG), and the destructor
// SIGKILLs and reaps it. Every wait is bounded.

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace xdcr::test {

/** How a child process ended. */
struct ExitStatus {
  bool exited = false;  // true: it called exit() with `code`
  int code = -1;        // exit code when `exited`
  int signal = 0;       // the signal that ended it when !exited
  bool forced = false;  // true: it did not stop within the grace period and was SIGKILLed

  bool success() const { return exited && code == 0; }
  /** "exited with status 0", "killed by signal 9 (Killed) after the grace period", ... */
  std::string describe() const;
};

/** The executable `name` in $PATH (as execvp would find it), or nullopt. */
std::optional<std::string> findInPath(const std::string& name);

class Subprocess {
 public:
  Subprocess() = default;
  /**
   * Starts argv[0] (searched in PATH when it has no '/') with argv[1..]. stdin is /dev/null;
   * stdout and stderr are appended to `log_path`. Throws std::runtime_error when the program
   * cannot be started (not found, not executable, fork failure); the message says which.
   */
  static Subprocess start(const std::vector<std::string>& argv, const std::string& log_path);
  /**
   * As above, with the test's environment plus `extra_env` (NAME, value): a NAME already in the
   * environment is replaced, so e.g. LD_PRELOAD reaches only this child.
   */
  static Subprocess start(const std::vector<std::string>& argv, const std::string& log_path,
                          const std::vector<std::pair<std::string, std::string>>& extra_env);

  ~Subprocess();
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  /** The PID, or -1 for a default-constructed object. Stays valid after the child ended. */
  pid_t pid() const { return pid_; }
  /** True while the child has not ended (reaps it without blocking if it has). */
  bool running();
  /** The exit status once the child has ended and was reaped. */
  const std::optional<ExitStatus>& exitStatus() const { return status_; }

  /** Sends `sig` if the child is still running (and not yet reaped, so the PID is still ours). */
  bool sendSignal(int sig);
  /** Waits up to `timeout` for the child to end; nullopt if it is still running. */
  std::optional<ExitStatus> waitFor(std::chrono::milliseconds timeout);
  /**
   * Sends `sig`, waits up to `grace`, then SIGKILLs (and marks the status `forced`).
   * Returns the status immediately if the child had already ended.
   */
  ExitStatus stop(int sig, std::chrono::milliseconds grace);
  /** SIGKILL and reap. */
  ExitStatus kill();

 private:
  explicit Subprocess(pid_t pid) : pid_(pid) {}
  bool reap(bool block);

  pid_t pid_ = -1;
  std::optional<ExitStatus> status_;
};

/**
 * SIGSTOPs a process (by PID) for the life of this object: a server that stops answering without
 * closing its connections, as a hung or partitioned host does. The destructor (or resume()) sends
 * SIGCONT, so a test that fails while the process is stopped leaves no stopped process behind (a
 * stopped process would not act on the SIGTERM its owner sends before the SIGKILL).
 */
class StoppedProcess {
 public:
  /** Throws std::runtime_error when the process cannot be stopped. */
  explicit StoppedProcess(pid_t pid);
  ~StoppedProcess();
  StoppedProcess(const StoppedProcess&) = delete;
  StoppedProcess& operator=(const StoppedProcess&) = delete;

  /** SIGCONT now; the destructor then does nothing. */
  void resume();
  bool stopped() const { return stopped_; }

 private:
  pid_t pid_;
  bool stopped_ = false;
};

}  // namespace xdcr::test
