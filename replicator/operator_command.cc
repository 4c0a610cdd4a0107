#include "replicator/operator_command.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>

#include "replicator/admin_server.h"
#include "replicator/one_shot.h"
#include "replicator/operator_state.h"
#include "replicator/state_lock.h"

namespace xdcr::replicator {
namespace {

/** Records `action` in the state directory while holding its lock (no agent runs on it). */
int recordOffline(const config::Config& config, const std::string& action,
                  const std::string& pipeline, const std::string& why_offline) {
  StateDirLock lock;
  const auto level = spdlog::get_level();
  spdlog::set_level(spdlog::level::off);  // (acquire's messages are for `run`)
  const int locked = lock.acquire(config.agent.state_dir);
  spdlog::set_level(level);
  if (locked == kExitStateDirInUse) {
    std::fprintf(stderr,
                 "xdcr-agent %s: an agent runs on %s but %s; ask it through its admin server "
                 "(--admin HOST:PORT) or stop it first\n",
                 action.c_str(), config.agent.state_dir.c_str(), why_offline.c_str());
    return 2;
  }
  if (locked != 0) {
    std::fprintf(stderr,
                 "xdcr-agent %s: cannot use agent.state_dir %s (check that it exists "
                 "and is writable by this user)\n",
                 action.c_str(), config.agent.state_dir.c_str());
    return 2;
  }
  OperatorState st(config.agent.state_dir, pipeline);
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  Status s =
      action == "resync" ? st.requestResync(now_ms) : st.setPaused(action == "pause", now_ms);
  if (!s) {
    std::fprintf(stderr, "xdcr-agent %s: %s\n", action.c_str(), s.error().message.c_str());
    return 2;
  }
  const char* what = action == "pause"    ? "starts paused"
                     : action == "resume" ? "starts unpaused"
                                          : "starts with a full sync";
  std::printf("%s: no agent is running (%s); recorded in %s: it %s at the next start\n",
              pipeline.c_str(), why_offline.c_str(), config.agent.state_dir.c_str(), what);
  return 0;
}

}  // namespace

int runOperatorCommand(const config::Config& config, const std::string& action,
                       const std::string& pipeline, const std::string& admin_override) {
  if (config.pipeline(pipeline) == nullptr) {
    std::fprintf(stderr, "xdcr-agent %s: %s\n", action.c_str(),
                 noSuchPipeline(config, pipeline).c_str());
    return 1;
  }
  const std::string admin =
      !admin_override.empty() ? admin_override : config.agent.admin_listen.value_or("");
  if (admin.empty()) {
    return recordOffline(config, action, pipeline, "the config has no agent.admin_listen");
  }
  const std::string token =
      config.agent.admin_token.present() ? config.agent.admin_token.value : "";
  auto r = adminRequest(admin, "POST", "/pipelines/" + pipeline + "/" + action,
                        std::chrono::seconds(10), token);
  if (!r) {
    // Nothing answers there: an agent that is not running, or one that cannot be reached.
    return recordOffline(
        config, action, pipeline,
        fmt::format("its admin server {} does not answer: {}", admin, r.error().message));
  }
  const auto& [code, body] = *r;
  if (code == 200 || code == 202) {
    std::printf("%s", body.c_str());
    return 0;
  }
  std::fprintf(stderr, "xdcr-agent %s: the agent at %s answered HTTP %d: %s", action.c_str(),
               admin.c_str(), code, body.c_str());
  return code == 404 ? 1 : 2;
}

}  // namespace xdcr::replicator
