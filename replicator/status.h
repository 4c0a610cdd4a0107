#pragma once
// What GET /status shows (interface.md §3): the agent, every pipeline, the clock section.

#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "clock/skew.h"
#include "config/config.h"
#include "replicator/pipeline.h"

namespace xdcr::replicator {

/** The /status document; `clock_report` null = no clock check has completed yet. */
nlohmann::json statusJson(const std::vector<std::unique_ptr<Pipeline>>& pipelines, bool draining,
                          const clock::ClockReport* clock_report, const config::Config& cfg);

}  // namespace xdcr::replicator
