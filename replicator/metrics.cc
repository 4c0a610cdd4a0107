#include "replicator/metrics.h"

#include <fmt/format.h>

#include "common/version.h"

namespace xdcr::replicator {
namespace {

/** Writes one metric family: HELP, TYPE, then its samples. */
class Family {
 public:
  Family(std::string& out, std::string_view name, std::string_view type, std::string_view help)
      : out_(out), name_(name) {
    fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name,
                   type);
  }
  /** `labels` is the inside of {...}, already escaped. */
  void sample(std::string_view labels, double value) {
    if (labels.empty()) {
      fmt::format_to(std::back_inserter(out_), "{} {}\n", name_, value);
    } else {
      fmt::format_to(std::back_inserter(out_), "{}{{{}}} {}\n", name_, labels, value);
    }
  }

 private:
  std::string& out_;
  std::string_view name_;
};

std::string pl(const PipelineMetrics& p) { return "pipeline=\"" + escapeLabel(p.name) + "\""; }

std::string quoted(std::string_view label, std::string_view value) {
  return fmt::format("{}=\"{}\"", label, escapeLabel(value));
}

/** The agent-wide clock metrics (interface.md §4), from the latest completed check. */
void renderClockMetrics(std::string& out, const clock::ClockReport& r) {
  {
    Family f(out, "xdcr_clock_offset_seconds", "gauge",
             "Clock minus NTP consensus time: clock=local is this host, otherwise a cluster. "
             "Absent without an NTP majority.");
    if (auto local = r.ntp.localErrorNs()) {
      f.sample(quoted("clock", "local"), double(*local) / 1e9);
      for (const auto& [name, c] : r.clusters) {
        if (auto e = r.clusterErrorNs(name)) f.sample(quoted("clock", name), double(*e) / 1e9);
      }
    }
  }
  {
    Family f(out, "xdcr_clock_cluster_offset_seconds", "gauge",
             "A cluster's clock minus this host's (Redis TIME, minimum-RTT sample).");
    for (const auto& [name, c] : r.clusters) {
      if (c.measured) f.sample(quoted("cluster", name), double(c.offset_ns) / 1e9);
    }
  }
  {
    Family f(out, "xdcr_clock_cluster_probe_ok", "gauge",
             "1 if the latest TIME probe of the cluster succeeded.");
    for (const auto& [name, c] : r.clusters) f.sample(quoted("cluster", name), c.error.empty());
  }
  if (r.ntp.configured) {
    {
      Family f(out, "xdcr_clock_ntp_majority", "gauge",
               "1 if a majority of the NTP servers agreed at the latest check, 0 if not.");
      f.sample("", r.ntp.ok ? 1 : 0);
    }
    {
      Family f(out, "xdcr_clock_ntp_server_offset_seconds", "gauge",
               "An NTP server's time minus this host's (minimum-delay sample).");
      for (const auto& s : r.ntp.servers) {
        if (s.ok) f.sample(quoted("server", s.server), double(s.offset_ns) / 1e9);
      }
    }
    {
      Family f(out, "xdcr_clock_ntp_server_truechimer", "gauge",
               "1 if the server is in the majority, 0 if a falseticker or silent.");
      for (const auto& s : r.ntp.servers) f.sample(quoted("server", s.server), s.truechimer);
    }
  }
  {
    Family f(out, "xdcr_clock_checks_total", "counter", "Completed clock checks.");
    f.sample("", double(r.check));
  }
}

}  // namespace

std::string escapeLabel(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string renderMetrics(const std::vector<PipelineMetrics>& ps, const clock::ClockReport* clock) {
  std::string out;
  auto labelled = [&](std::string_view name, std::string_view help, std::string_view label,
                      const auto& names, const auto& (*values)(const PipelineStats&)) {
    Family f(out, name, "counter", help);
    for (const auto& p : ps) {
      const auto& vals = values(*p.stats);
      for (size_t i = 0; i < names.size(); ++i) {
        f.sample(fmt::format("{},{}=\"{}\"", pl(p), label, names[i]), double(vals[i]));
      }
    }
  };
  labelled("xdcr_source_events_total", "Events read from the source, by kind.", "kind",
           kEventKindNames,
           +[](const PipelineStats& s) -> const auto& { return s.source_events; });
  labelled("xdcr_target_writes_total", "Commands written to the target, by operation.", "op",
           kWriteOpNames, +[](const PipelineStats& s) -> const auto& { return s.target_writes; });
  labelled("xdcr_filtered_total", "Events not replicated, by reason.", "reason",
           kFilterReasonNames, +[](const PipelineStats& s) -> const auto& { return s.filtered; });

  auto counter = [&](std::string_view name, std::string_view help, uint64_t PipelineStats::*m) {
    Family f(out, name, "counter", help);
    for (const auto& p : ps) f.sample(pl(p), double(p.stats->*m));
  };
  counter("xdcr_expiry_stripped_total", "Deadlines removed by strip_ttl.",
          &PipelineStats::expiry_stripped);
  counter("xdcr_expiry_clamped_total", "Deadlines shortened or added by the target's maxTTL.",
          &PipelineStats::expiry_clamped);
  counter("xdcr_expired_on_arrival_total",
          "Documents whose deadline had passed when they reached the target (never written).",
          &PipelineStats::expired_on_arrival);
  counter("xdcr_full_syncs_total", "Full resyncs (snapshot transfers).",
          &PipelineStats::full_syncs);
  counter("xdcr_partial_syncs_total", "Partial resyncs (resumes from a checkpoint).",
          &PipelineStats::partial_syncs);
  counter("xdcr_target_loss_resyncs_total",
          "Full resyncs started because the target had lost data a checkpoint counted as written.",
          &PipelineStats::target_loss_resyncs);
  counter("xdcr_stale_keys_deleted_total",
          "Target keys deleted after a full sync because the snapshot lacked them "
          "(full_sync.delete_stale_keys).",
          &PipelineStats::stale_keys_deleted);
  counter("xdcr_checkpoints_total", "Checkpoints written.", &PipelineStats::checkpoints);
  counter("xdcr_checkpoint_failures_total", "Checkpoints that could not be written.",
          &PipelineStats::checkpoint_failures);
  counter("xdcr_unknown_commands_total", "Commands forwarded without being understood.",
          &PipelineStats::unknown_commands);
  counter("xdcr_filter_splits_total",
          "Commands not replicated because their keys fall on both sides of the filters.",
          &PipelineStats::filter_splits);
  counter("xdcr_reconnects_total", "Sessions that ended in an error and were restarted.",
          &PipelineStats::reconnects);
  {
    Family f(out, "xdcr_snapshot_keys_total", "counter", "Full-sync keys, by result.");
    for (const auto& p : ps) {
      f.sample(pl(p) + ",result=\"restored\"", double(p.stats->snapshot_keys_restored));
      f.sample(pl(p) + ",result=\"expired\"", double(p.stats->snapshot_keys_expired));
      f.sample(pl(p) + ",result=\"failed\"", double(p.stats->snapshot_keys_failed));
    }
  }
  {
    Family f(out, "xdcr_target_errors_total", "counter", "Error replies from the target, by kind.");
    for (const auto& p : ps) {
      for (const auto& [kind, n] : p.stats->target_errors_by_kind) {
        f.sample(pl(p) + ",kind=\"" + escapeLabel(kind) + "\"", double(n));
      }
    }
  }
  auto gauge = [&](std::string_view name, std::string_view help, double PipelineMetrics::*m) {
    Family f(out, name, "gauge", help);
    for (const auto& p : ps) f.sample(pl(p), p.*m);
  };
  gauge("xdcr_replication_lag_seconds", "Replication lag.", &PipelineMetrics::lag_seconds);
  gauge("xdcr_backlog_bytes", "Source offset minus applied offset.",
        &PipelineMetrics::backlog_bytes);
  gauge("xdcr_expiry_index_entries", "Source deadlines and tombstones the expiry index holds.",
        &PipelineMetrics::expiry_index_entries);
  gauge("xdcr_expiry_index_bytes", "Memory of the expiry index's tables.",
        &PipelineMetrics::expiry_index_bytes);
  gauge("xdcr_checkpoint_journal_bytes",
        "Checkpoint journal length since the last whole image (compacted past 64 MiB).",
        &PipelineMetrics::checkpoint_journal_bytes);
  {
    // Only measured pipelines: a 0 would claim the clocks agree.
    Family f(out, "xdcr_clock_skew_seconds", "gauge",
             "Target cluster's clock minus source cluster's clock (Redis TIME).");
    for (const auto& p : ps) {
      if (p.skew != nullptr && p.skew->measured) f.sample(pl(p), double(p.skew->delta_ns) / 1e9);
    }
  }
  {
    Family f(out, "xdcr_clock_skew_exceeded", "gauge",
             "1 while the pipeline's skew or a cluster's error against NTP is over max_skew.");
    for (const auto& p : ps) {
      if (p.skew != nullptr && p.skew->measured) f.sample(pl(p), p.skew->exceeded ? 1 : 0);
    }
  }
  gauge("xdcr_clock_compensation_seconds",
        "Added to every replicated deadline (clock.on_skew: compensate), 0 when not compensating.",
        &PipelineMetrics::compensation_seconds);
  {
    Family f(out, "xdcr_pipeline_paused", "gauge", "1 while the pipeline is paused.");
    for (const auto& p : ps) {
      f.sample(pl(p) + ",reason=\"" + escapeLabel(p.paused_reason) + "\"", p.paused ? 1 : 0);
    }
  }
  if (clock != nullptr) renderClockMetrics(out, *clock);
  {
    Family f(out, "xdcr_build_info", "gauge", "Version and git revision of this build.");
    f.sample(fmt::format("version=\"{}\",revision=\"{}\"", escapeLabel(version()),
                         escapeLabel(gitRevision())),
             1);
  }
  return out;
}

}  // namespace xdcr::replicator
