#include "replicator/agent.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include <cstdlib>
#include <memory>
#include <vector>

#include <spdlog/spdlog.h>

#include "clock/clock.h"
#include "common/version.h"
#include "replicator/pipeline.h"

namespace xdcr::replicator {

int runAgent(config::ConfigConstSharedPtr config) {
  net::io_context ioc(1);
  clock::SystemClock clock;
  std::vector<std::unique_ptr<Pipeline>> pipelines;
  // Test hook until the clock module measures skew (see Pipeline::setSimulatedSkewMs).
  int64_t simulated_skew = 0;
  if (const char* s = std::getenv("XDCR_TEST_CLOCK_SKEW_MS"); s != nullptr && *s != 0) {
    simulated_skew = std::strtoll(s, nullptr, 10);
    spdlog::warn("XDCR_TEST_CLOCK_SKEW_MS={}: simulating a target clock {:+} ms from the source's",
                 s, simulated_skew);
  }
  for (const auto& p : config->pipelines) {
    pipelines.push_back(std::make_unique<Pipeline>(ioc.get_executor(), config, p, clock));
    pipelines.back()->setSimulatedSkewMs(simulated_skew);
  }
  spdlog::info("xdcr-agent {} ({}) starting {} pipeline(s) from {}", version(), gitRevision(),
               pipelines.size(), config->path);

  int exit_code = 0;
  size_t running = pipelines.size();
  for (auto& p : pipelines) {
    net::co_spawn(ioc, p->run(), [&, name = p->name()](std::exception_ptr e, bool ok) {
      if (e || !ok) exit_code = 1;
      if (--running == 0) ioc.stop();
    });
  }

  net::signal_set signals(ioc, SIGINT, SIGTERM, SIGHUP);
  bool stopping = false;
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int sig) {
        if (ec) return;
        if (sig == SIGHUP) {
          spdlog::warn("SIGHUP: configuration reload is not implemented yet; keeping the running "
                       "configuration");
        } else if (!stopping) {
          stopping = true;
          spdlog::info("{}: draining and checkpointing; send it again to exit at once",
                       sig == SIGTERM ? "SIGTERM" : "SIGINT");
          for (auto& p : pipelines) p->stop();
        } else {
          spdlog::warn("second signal: exiting without a final checkpoint");
          std::_Exit(1);
        }
        signals.async_wait(on_signal);
      };
  signals.async_wait(on_signal);

  ioc.run();
  spdlog::info("xdcr-agent stopped");
  return exit_code;
}

}  // namespace xdcr::replicator
