#pragma once
// The xdcr-agent binary under test, run as `xdcr-agent run -c CONFIG` in a child process.

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace xdcr::test {

/**
 * The agent binary: $XDCR_AGENT_BINARY from the environment when set (to test another build),
 * else the xdcr-agent target of this build tree.
 */
std::string defaultAgentBinary();

class AgentProcess {
 public:
  /**
   * Starts `<binary> run -c <config_path> <extra_args>` with stdout and stderr appended to
   * `log_path`. Throws std::runtime_error when the binary cannot be executed.
   */
  AgentProcess(const std::string& config_path, const std::string& log_path,
               const std::vector<std::string>& extra_args = {},
               const std::string& binary = defaultAgentBinary());
  /**
   * Kills the agent (SIGKILL) if it is still running. Then fails the current test (ADD_FAILURE)
   * when the log holds a sanitizer report (see sanitizerReport()), however the agent ended: in a
   * sanitized build (XDCR_SANITIZE) an error in the agent must fail the test that ran it.
   */
  ~AgentProcess();
  AgentProcess(const AgentProcess&) = delete;
  AgentProcess& operator=(const AgentProcess&) = delete;

  pid_t pid() const { return process_.pid(); }
  bool running() { return process_.running(); }
  /** Set once the agent has ended. */
  const std::optional<ExitStatus>& exitStatus() const { return process_.exitStatus(); }

  /**
   * SIGTERM (graceful drain and checkpoint, interface.md §1), then waits up to `timeout`; SIGKILL
   * after that (the result is then marked `forced`). Returns how the agent ended.
   */
  ExitStatus terminate(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  /** SIGKILL: a crash, no checkpoint on the way out. */
  ExitStatus kill();

  const std::string& logPath() const { return log_path_; }
  std::string logText() const;
  std::string logTail(size_t lines = 60) const;
  /**
   * The first AddressSanitizer, LeakSanitizer or UndefinedBehaviorSanitizer report in the log
   * (from its first line, at most 80 lines), or "" when there is none.
   */
  std::string sanitizerReport() const;
  /** "running (pid N)" or how it ended, for failure messages. */
  std::string describeState();

 private:
  std::string log_path_;
  Subprocess process_;
};

}  // namespace xdcr::test
