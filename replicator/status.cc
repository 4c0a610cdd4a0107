#include "replicator/status.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <variant>

#include "common/version.h"
#include "replicator/clock_report.h"

namespace xdcr::replicator {

PipelineMetrics metricsOf(const Pipeline& p) {
  PipelineMetrics m;
  m.name = p.name();
  m.shard = p.shardLabel();
  m.stats = &p.stats();
  m.lag_seconds = p.lagSeconds();
  m.backlog_bytes = p.backlogBytes();
  m.apply_rate = p.applyRate();
  m.catchup_eta_seconds = catchUpSeconds(m.backlog_bytes, m.apply_rate);
  const Pipeline::FullSyncEstimate fs = p.fullSyncEstimate();
  m.full_sync_progress_ratio = fs.ratio;
  m.full_sync_eta_seconds = fs.eta;
  m.state = stateName(p.state());
  m.up = p.state() == PipelineState::Streaming ? 1 : 0;
  m.spool_bytes = p.snapshotProgress().spooled_bytes;
  m.expiry_index_entries = p.expiryIndex().size();
  m.expiry_index_bytes = p.expiryIndex().memoryBytes();
  m.checkpoint_journal_bytes = p.checkpointJournalBytes();
  m.paused = p.paused();
  m.paused_reason = p.pausedReason();
  m.skew = &p.skew();
  m.compensation_seconds = double(p.compensationMs()) / 1e3;
  m.bandwidth_limit = p.bandwidthLimit();
  const Pipeline::Bandwidth b = p.bandwidth(std::chrono::steady_clock::now());
  m.read_throttled_seconds = b.read_throttled_seconds;
  m.write_throttled_seconds = b.write_throttled_seconds;
  return m;
}

nlohmann::json statusFigures(const PipelineMetrics& m) {
  nlohmann::json j = nlohmann::json::object();
  std::vector<MetricSample> samples;
  for (const MetricRow& row : pipelineMetricRows()) {
    if (row.status.empty()) continue;
    samples.clear();
    row.samples(m, samples);
    for (const MetricSample& s : samples) {
      auto& field = j[std::string(row.status)];
      std::visit(
          [&](auto v) {
            if (s.label.empty()) {
              field = v;
            } else {
              field[std::string(s.label_value)] = v;
            }
          },
          s.value);
    }
  }
  return j;
}

nlohmann::json statusJson(const std::vector<std::unique_ptr<Pipeline>>& pipelines, bool draining,
                          const clock::ClockReport* clock_report, const config::Config& cfg) {
  nlohmann::json j;
  j["version"] = version();
  j["revision"] = gitRevision();
  j["draining"] = draining;
  j["threads"] = cfg.agent.threads;
  auto& arr = j["pipelines"] = nlohmann::json::array();
  auto one = [&](const Pipeline* p) {
    nlohmann::json pj;
    pj["name"] = p->name();
    if (!p->shardLabel().empty()) {
      pj["shard"] = p->shardLabel();
      pj["instance"] = p->instance();
      pj["node"] = p->sourceNode();
    }
    pj["state"] = stateName(p->state());
    pj["paused_reason"] = p->pausedReason();
    pj["paused_detail"] = p->pausedDetail();
    pj["paused"] = p->paused();
    pj["source_offset"] = p->sourceOffset();
    pj["applied_offset"] = p->appliedOffset();
    // lag_seconds, backlog_bytes, link_detachments, bandwidth_limit, bandwidth_throttled_seconds
    pj.update(statusFigures(metricsOf(*p)));
    // What went through the bandwidth limiters over the last seconds (0 without a limit there).
    const Pipeline::Bandwidth b = p->bandwidth(std::chrono::steady_clock::now());
    pj["bandwidth_bytes_per_second"] = {{"read", b.read_bytes_per_second},
                                        {"write", b.write_bytes_per_second}};
    const std::vector<std::string> members = p->linkMembers();
    pj["link"] = {{"source", p->sourceCluster().name},
                  {"shared", members.size() > 1},
                  {"pipelines", members},
                  {"thread", p->thread()}};
    pj["last_checkpoint"] = {{"offset", p->checkpointedOffset()},
                             {"written_at_ms", p->lastCheckpointMs()}};
    const auto& fs = p->snapshotProgress();
    pj["full_sync"] = {{"active", fs.active},           {"keys_done", fs.keys_done},
                       {"keys_total", fs.keys_total},   {"bytes_done", fs.bytes_done},
                       {"bytes_total", fs.bytes_total}, {"restored", fs.restored},
                       {"rebuilt", fs.rebuilt},         {"expired", fs.expired},
                       {"failed", fs.failed},           {"seconds", fs.seconds}};
    if (fs.active) {
      // Running: the time so far, the rate and what remains (seconds is the last one's
      // duration once it ends). An unknown ETA is null.
      const Pipeline::FullSyncEstimate e = p->fullSyncEstimate();
      pj["full_sync"].update({{"seconds", e.seconds},
                              {"progress", e.ratio},
                              {"bytes_per_second", e.seconds > 0 ? fs.bytes_done / e.seconds : 0.0},
                              {"eta_seconds", e.eta}});
    }
    // The spool of this full sync (or of the last one once drained; source/spool.h).
    pj["full_sync"].update({{"spooling", fs.spooling},
                            {"spooled_bytes", fs.spooled_bytes},
                            {"spool_on_disk_bytes", fs.spool_on_disk_bytes},
                            {"spool_peak_bytes", fs.spool_peak_bytes},
                            {"spool_limit", fs.spool_limit}});
    pj["clock"] = pipelineSkewJson(p->skew(), p->compensationMs());
    pj["last_error"] = p->lastError();
    return pj;
  };
  std::vector<std::string> grouped;
  for (const auto& p : pipelines) {
    if (p->shardLabel().empty()) {
      arr.push_back(one(p.get()));
      continue;
    }
    // A Redis Cluster source: one entry for the pipeline, its source shards under "shards".
    if (std::find(grouped.begin(), grouped.end(), p->name()) != grouped.end()) continue;
    grouped.push_back(p->name());
    nlohmann::json pj;
    pj["name"] = p->name();
    auto& shards = pj["shards"] = nlohmann::json::array();
    std::string state = "streaming";
    double lag = 0;
    uint64_t backlog = 0;
    bool paused = false;
    for (const auto& q : pipelines) {
      if (q->name() != p->name()) continue;
      shards.push_back(one(q.get()));
      if (q->state() != PipelineState::Streaming && state == "streaming") {
        state = stateName(q->state());
      }
      lag = std::max(lag, q->lagSeconds());
      backlog += q->backlogBytes();
      paused = paused || q->paused();
    }
    pj["state"] = state;
    pj["bandwidth_limit"] = p->bandwidthLimit();
    pj["lag_seconds"] = lag;
    pj["backlog_bytes"] = backlog;
    pj["paused"] = paused;
    arr.push_back(pj);
  }
  j["clock"] = clockReportJson(clock_report, cfg.clock);
  return j;
}

}  // namespace xdcr::replicator
