#include "tests/support/agent_command.h"

#include <cstdio>

#include "tests/support/agent_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace xdcr::test {

AgentCommandResult runAgentCommand(const std::vector<std::string>& args,
                                   const std::string& out_path, std::chrono::milliseconds timeout) {
  std::remove(out_path.c_str());
  std::vector<std::string> argv = {defaultAgentBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  Subprocess p = Subprocess::start(argv, out_path);
  auto st = p.waitFor(timeout);
  if (!st) p.kill();
  AgentCommandResult r;
  r.output = readFileText(out_path);
  if (st && st->exited) r.exit_code = st->code;
  // stdout is the JSON report; anything logged to stderr lands around it.
  const auto b = r.output.find("{\n"), e = r.output.rfind('}');
  if (b != std::string::npos && e != std::string::npos && e > b) {
    r.report = nlohmann::json::parse(r.output.substr(b, e - b + 1), nullptr, false);
  }
  return r;
}

}  // namespace xdcr::test
