#pragma once
// The agent process: one io_context thread running every pipeline of the config, plus signal
// handling. SIGTERM/SIGINT: graceful stop (each pipeline drains and checkpoints), exit 0. A second
// SIGTERM/SIGINT exits at once without checkpointing (what was acknowledged is already safe;
// the rest is re-sent on the next start: at-least-once).

#include "config/config.h"

namespace xdcr::replicator {

/**
 * Runs the agent until it is stopped. Returns the process exit status; before any pipeline
 * starts, 75 when another agent holds the state directory and 78 when two cluster names are one
 * server.
 */
int runAgent(config::ConfigConstSharedPtr config);

}  // namespace xdcr::replicator
