#pragma once
// `xdcr-agent pause|resume|resync -c FILE -p NAME [--admin ADDR]` (interface.md §6.4): asks the
// running agent through its admin server (POST /pipelines/NAME/ACTION, with agent.admin_token);
// when no agent runs on the config's state directory, records the request there itself
// (replicator/operator_state.h) for the next start: a pipeline can be paused before it ever runs.

#include <string>

#include "config/config.h"

namespace xdcr::replicator {

/** `action`: "pause", "resume" or "resync". Exit status: 0 done (or recorded for the next
 *  start), 1 no such pipeline, 2 an agent runs but cannot be reached or refused. */
int runOperatorCommand(const config::Config& config, const std::string& action,
                       const std::string& pipeline, const std::string& admin_override);

}  // namespace xdcr::replicator
