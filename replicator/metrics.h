#pragma once
// Prometheus text exposition (format 0.0.4) of the agent's metrics, interface.md §4: prefix
// `xdcr_`, counters end in `_total`, every pipeline metric has a `pipeline` label. Written by
// hand (no Prometheus client library is packaged for Debian 12), like Dragonfly's metrics.cc.
// The pipeline families are the rows of XDCR_PIPELINE_METRICS (common/stats.h).

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "clock/skew.h"
#include "common/stats.h"

namespace xdcr::replicator {

/** What one pipeline contributes to /metrics and to the figures of /status. */
struct PipelineMetrics {
  std::string name;
  std::string shard;  // the source shard's label ("" unless the source is a Redis Cluster)
  const PipelineStats* stats = nullptr;
  double lag_seconds = 0;
  uint64_t backlog_bytes = 0;
  double apply_rate = 0;           // bytes per second, last 30 s
  double catchup_eta_seconds = 0;  // +inf: a backlog and nothing applied
  double full_sync_progress_ratio = 0;
  double full_sync_eta_seconds = 0;
  uint64_t up = 0;  // 1 while streaming
  std::string state;
  uint64_t state_one = 1;
  uint64_t spool_bytes = 0;  // held in a full sync's spool (source/spool.h)
  bool paused = false;
  std::string paused_reason;
  const clock::PipelineSkew* skew = nullptr;  // null or !measured: no skew samples
  double compensation_seconds = 0;
  uint64_t expiry_index_entries = 0;  // deadlines and tombstones held
  uint64_t expiry_index_bytes = 0;    // memory of its tables
  uint64_t checkpoint_journal_bytes = 0;
  uint64_t bandwidth_limit = 0;  // bytes per second, 0 = none
  double read_throttled_seconds = 0;
  double write_throttled_seconds = 0;

  /** Target minus source clock; none until measured (a 0 would claim the clocks agree). */
  std::optional<double> clockSkewSeconds() const;
  /** Whether the skew is over max_skew; none until measured. */
  std::optional<bool> clockSkewExceeded() const;
};

/** Agent-wide figures beside the pipelines' (issue 18: a failed reload was visible only in the
 *  log). */
struct AgentFigures {
  bool last_reload_successful = true;
  double last_reload_success_unix = 0;  // the start counts as the first successful load
  uint64_t reloads_succeeded = 0;
  uint64_t reloads_failed = 0;
  std::string last_reload_error;  // "" after a successful one
  double process_start_unix = 0;
};

/** A sample's value: counts are integers, seconds are not (so /status keeps its JSON types). */
using MetricValue = std::variant<uint64_t, double>;

/** One sample of a pipeline family: the `pipeline` label, at most one more, a value. */
struct MetricSample {
  std::string_view label;  // "" = only the pipeline label
  std::string_view label_value;
  MetricValue value;
};

/** One row of XDCR_PIPELINE_METRICS: a family, or one part of it (COUNTER_PART). */
struct MetricRow {
  std::string_view metric;
  std::string_view type;    // "counter" or "gauge"
  std::string_view status;  // field of the pipeline's /status object; "" = none
  std::string_view help;
  /** Appends the row's samples for one pipeline (none, one, or one per label value). */
  void (*samples)(const PipelineMetrics& p, std::vector<MetricSample>& out);
};

/** Every row, in the order of the list (= the order of /metrics). */
std::span<const MetricRow> pipelineMetricRows();

/**
 * The whole exposition: every pipeline's metrics, the clock's (when a check has completed),
 * the agent's (reloads, process_*) when given, and xdcr_build_info.
 */
std::string renderMetrics(const std::vector<PipelineMetrics>& pipelines,
                          const clock::ClockReport* clock = nullptr,
                          const AgentFigures* agent = nullptr);

/**
 * The standard process_* families (cpu, memory, file descriptors, start time) from /proc/self,
 * as Prometheus client libraries export them; absent where /proc cannot be read.
 */
void renderProcessMetrics(std::string& out, double process_start_unix);

/** Escapes a label value (backslash, double quote, newline). */
std::string escapeLabel(std::string_view v);

}  // namespace xdcr::replicator
