#pragma once
// A one-shot agent command (`xdcr-agent clock …`, `xdcr-agent verify …`) run to completion,
// with its exit status and its JSON report (`-o json`) parsed.

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace xdcr::test {

struct AgentCommandResult {
  int exit_code = -1;     // -1: killed after the timeout, or ended by a signal
  nlohmann::json report;  // the JSON object it printed (discarded when not parseable)
  std::string output;     // everything it printed (stdout and stderr)
};

/** Runs `xdcr-agent <args>`, output to `out_path`, for at most `timeout`. */
AgentCommandResult runAgentCommand(const std::vector<std::string>& args,
                                   const std::string& out_path,
                                   std::chrono::milliseconds timeout = std::chrono::seconds(120));

}  // namespace xdcr::test
