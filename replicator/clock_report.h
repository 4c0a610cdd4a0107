#pragma once
// Presenting the skew monitor's ClockReport: the clock section of /status and the one-shot
// `xdcr-agent clock -c FILE` command (interface.md §1).

#include <nlohmann/json.hpp>

#include "clock/skew.h"
#include "config/config.h"

namespace xdcr::replicator {

/** The clock section of /status; `report` null = no check has completed yet. */
nlohmann::json clockReportJson(const clock::ClockReport* report, const config::ClockConfig& cc);

/** One pipeline's skew as JSON (status, `clock -o json`). */
nlohmann::json pipelineSkewJson(const clock::PipelineSkew& skew, int64_t compensation_ms);

/**
 * `xdcr-agent clock`: one check of NTP and every cluster, printed as a table or JSON. Exit
 * status: 0 everything within max_skew; 1 some pipeline's skew or some cluster's error against
 * NTP beyond it, or a cluster whose clock could not be read; 2 NTP servers configured but no
 * usable majority.
 */
int runClockCommand(const config::ConfigConstSharedPtr& config, bool as_json);

}  // namespace xdcr::replicator
