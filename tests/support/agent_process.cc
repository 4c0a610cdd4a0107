#include "tests/support/agent_process.h"

#include <signal.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <exception>

#include "tests/support/temp_dir.h"

#ifndef XDCR_AGENT_BINARY
#error "XDCR_AGENT_BINARY must be defined by tests/support/CMakeLists.txt"
#endif

namespace xdcr::test {

std::string defaultAgentBinary() {
  const char* from_env = std::getenv("XDCR_AGENT_BINARY");
  if (from_env != nullptr && *from_env != '\0') {
    return from_env;
  }
  return XDCR_AGENT_BINARY;
}

AgentProcess::AgentProcess(const std::string& config_path, const std::string& log_path,
                           const std::vector<std::string>& extra_args, const std::string& binary)
    : log_path_(log_path) {
  std::vector<std::string> argv = {binary, "run", "-c", config_path};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  process_ = Subprocess::start(argv, log_path);
}

AgentProcess::~AgentProcess() {
  process_.kill();
  const std::string report = sanitizerReport();
  if (!report.empty()) {
    ADD_FAILURE() << "sanitizer report in the agent's log " << log_path_ << ":\n" << report;
  }
}

ExitStatus AgentProcess::terminate(std::chrono::milliseconds timeout) {
  return process_.stop(SIGTERM, timeout);
}

ExitStatus AgentProcess::kill() {
  return process_.kill();
}

std::string AgentProcess::logText() const {
  return readFileText(log_path_);
}

std::string AgentProcess::logTail(size_t lines) const {
  return lastLines(logText(), lines);
}

std::string AgentProcess::sanitizerReport() const {
  // "==PID==ERROR: AddressSanitizer: ...", "==PID==ERROR: LeakSanitizer: ...", and UBSan's
  // "FILE:LINE:COL: runtime error: ...".
  std::string log;
  try {
    log = logText();
  } catch (const std::exception&) {  // called from the destructor: never throw
    return {};
  }
  size_t at = std::string::npos;
  for (const char* marker : {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                             "runtime error:", "WARNING: ThreadSanitizer"}) {
    at = std::min(at, log.find(marker));
  }
  if (at == std::string::npos) {
    return {};
  }
  const size_t line_start = log.rfind('\n', at);
  size_t begin = line_start == std::string::npos ? 0 : line_start + 1;
  size_t end = begin;
  for (int lines = 0; lines < 80 && end != std::string::npos; ++lines) {
    end = log.find('\n', end + 1);
  }
  return log.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

std::string AgentProcess::describeState() {
  if (process_.running()) {
    return "running (pid " + std::to_string(process_.pid()) + ")";
  }
  if (process_.exitStatus()) {
    return "not running: " + process_.exitStatus()->describe();
  }
  return "not started";
}

}  // namespace xdcr::test
