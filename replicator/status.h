#pragma once
// What GET /status shows (interface.md §3): the agent, every pipeline, the clock section; and
// what a pipeline shows to /metrics. The per-pipeline counters and gauges of both come from the
// one list XDCR_PIPELINE_METRICS (common/stats.h).

#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "clock/skew.h"
#include "config/config.h"
#include "replicator/metrics.h"
#include "replicator/pipeline.h"

namespace xdcr::replicator {

/** The /status document; `clock_report` null = no clock check has completed yet. */
nlohmann::json statusJson(const std::vector<std::unique_ptr<Pipeline>>& pipelines, bool draining,
                          const clock::ClockReport* clock_report, const config::Config& cfg);

/** What `p` shows to /metrics and to the figures of its /status object; reads `p` by reference. */
PipelineMetrics metricsOf(const Pipeline& p);

/**
 * The rows of XDCR_PIPELINE_METRICS that name a /status field, as an object: counts as integers,
 * seconds as numbers; a labelled row as an object {label value: value}.
 */
nlohmann::json statusFigures(const PipelineMetrics& m);

}  // namespace xdcr::replicator
