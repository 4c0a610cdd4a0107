#pragma once
// Prometheus text exposition (format 0.0.4) of the agent's metrics, interface.md §4: prefix
// `xdcr_`, counters end in `_total`, every pipeline metric has a `pipeline` label. Written by
// hand (no Prometheus client library is packaged for Debian 12), like Dragonfly's metrics.cc.

#include <string>
#include <vector>

#include "clock/skew.h"
#include "common/stats.h"

namespace xdcr::replicator {

/** What one pipeline contributes to /metrics. */
struct PipelineMetrics {
  std::string name;
  const PipelineStats* stats = nullptr;
  double lag_seconds = 0;
  double backlog_bytes = 0;
  bool paused = false;
  std::string paused_reason;
  const clock::PipelineSkew* skew = nullptr;  // null or !measured: no skew samples
  double compensation_seconds = 0;
  double expiry_index_entries = 0;  // deadlines and tombstones held
  double expiry_index_bytes = 0;    // memory of its tables
  double checkpoint_journal_bytes = 0;
};

/**
 * The whole exposition: every pipeline's metrics, the clock's (when a check has completed) and
 * xdcr_build_info.
 */
std::string renderMetrics(const std::vector<PipelineMetrics>& pipelines,
                          const clock::ClockReport* clock = nullptr);

/** Escapes a label value (backslash, double quote, newline). */
std::string escapeLabel(std::string_view v);

}  // namespace xdcr::replicator
