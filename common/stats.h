#pragma once
// Per-pipeline counters and gauges (interface.md §4), declared once: XDCR_PIPELINE_METRICS below
// is the only list of them. Plain integers: a pipeline and its counters live on one thread (the
// agent's io_context); the admin server reads them on the same thread. Labels are fixed enums so
// that incrementing is an array index, not a map lookup.

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "common/restore_journal.h"

namespace xdcr {

/** xdcr_source_events_total{kind} */
enum class EventKind : uint8_t {
  Mutation,
  Deletion,
  Expiration,
  ExpiryChange,
  Flush,
  Other,
  kCount
};
/** xdcr_target_writes_total{op} */
enum class WriteOp : uint8_t { Set, Restore, Delete, Expire, Persist, Other, kCount };
/** xdcr_filtered_total{reason} */
enum class FilterReason : uint8_t { Expiration, Deletion, Key, Flush, kCount };

inline constexpr std::array<std::string_view, 6> kEventKindNames = {
    "mutation", "deletion", "expiration", "expiry_change", "flush", "other"};
inline constexpr std::array<std::string_view, 6> kWriteOpNames = {"set",    "restore", "delete",
                                                                  "expire", "persist", "other"};
inline constexpr std::array<std::string_view, 4> kFilterReasonNames = {"expiration", "deletion",
                                                                       "key", "flush"};

template <class E>
constexpr size_t idx(E e) {
  return static_cast<size_t>(e);
}

/**
 * Every figure exported per pipeline, in the order of /metrics. From this list come the
 * PipelineStats fields (below), the Prometheus families with their HELP and TYPE
 * (replicator/metrics.cc) and the per-pipeline /status fields that are counters or gauges
 * (replicator/status.cc). A new counter is one COUNTER line here plus the code that increments
 * it. The names are an interface (interface.md §4, §6.2): never rename a metric, label or status
 * field. Every row has a `pipeline` label; counters end in `_total`. A row's `status` is its
 * field in the pipeline's /status object ("" = not shown there); a labelled row shows as an
 * object {label value: value}.
 *
 *   COUNTER(field, metric, status, help)
 *       uint64_t PipelineStats::field; the sample {pipeline}.
 *   COUNTER_BY(field, Enum, label, names, metric, status, help)
 *       std::array<uint64_t, Enum::kCount> PipelineStats::field, incremented by count(Enum);
 *       a sample {pipeline, label="names[i]"} for every value of Enum.
 *   COUNTER_BY_KEY(field, label, metric, status, help)
 *       std::map<std::string, uint64_t> PipelineStats::field; a sample {pipeline, label="key"}
 *       for every key counted so far.
 *   COUNTER_PART(field, label, value, metric, status, help)
 *       uint64_t PipelineStats::field, the sample {pipeline, label="value"} of a family spread
 *       over several fields: its rows are consecutive and repeat metric, status and help.
 *   GAUGE(member, metric, status, help)
 *       Not a PipelineStats field: replicator::PipelineMetrics::member (a field, or a const
 *       member function for a derived value), what the pipeline shows when it is rendered. A
 *       member of type std::optional has no sample while it is empty.
 *   GAUGE_BY(member, label, label_member, metric, status, help)
 *       The same with the label `label` whose value is PipelineMetrics::label_member.
 *   COUNTER_OF(member, label, value, metric, status, help)
 *       Not a PipelineStats field: replicator::PipelineMetrics::member, a running total kept
 *       elsewhere (seconds, a double); the sample {pipeline, label="value"} of a family spread
 *       over consecutive rows, as with COUNTER_PART.
 */
#define XDCR_PIPELINE_METRICS(COUNTER, COUNTER_BY, COUNTER_BY_KEY, COUNTER_PART, GAUGE, GAUGE_BY,  \
                              COUNTER_OF)                                                          \
  COUNTER_BY(source_events, EventKind, "kind", kEventKindNames, "xdcr_source_events_total", "",    \
             "Events read from the source, by kind.")                                              \
  COUNTER_BY(target_writes, WriteOp, "op", kWriteOpNames, "xdcr_target_writes_total", "",          \
             "Commands written to the target, by operation.")                                      \
  COUNTER_BY(filtered, FilterReason, "reason", kFilterReasonNames, "xdcr_filtered_total", "",      \
             "Events not replicated, by reason.")                                                  \
  COUNTER(expiry_stripped, "xdcr_expiry_stripped_total", "", "Deadlines removed by strip_ttl.")    \
  COUNTER(expiry_clamped, "xdcr_expiry_clamped_total", "",                                         \
          "Deadlines shortened or added by the target's maxTTL.")                                  \
  COUNTER(expired_on_arrival, "xdcr_expired_on_arrival_total", "",                                 \
          "Documents whose deadline had passed when they reached the target (never written).")     \
  COUNTER(target_invalidations, "xdcr_target_invalidations_total", "",                             \
          "Keys deleted on a memcached target because it cannot express the write (APPEND, INCR, " \
          "RENAME, a non-string type, ...).")                                                      \
  COUNTER(full_syncs, "xdcr_full_syncs_total", "", "Full resyncs (snapshot transfers).")           \
  COUNTER(partial_syncs, "xdcr_partial_syncs_total", "",                                           \
          "Partial resyncs (resumes from a checkpoint).")                                          \
  /* reason: output_buffer_limit (the source dropped the link, its client-output-buffer-limit      \
     replica the likely cause), source_closed, target_error, stopped, other */                     \
  COUNTER_BY_KEY(full_syncs_aborted, "reason", "xdcr_full_syncs_aborted_total", "",                \
                 "Full syncs that ended before their snapshot was applied, by reason.")            \
  COUNTER(applied_bytes, "xdcr_applied_bytes_total", "",                                           \
          "Replication-stream bytes applied to the target (rate(): the apply rate).")              \
  /* shard: the source node the failover led to ("host:port") */                                   \
  COUNTER_BY_KEY(source_failovers, "shard", "xdcr_source_failovers_total", "",                     \
                 "Failovers of the source followed without a full sync (a partial resync under "   \
                 "the new master's replication id).")                                              \
  COUNTER(target_loss_resyncs, "xdcr_target_loss_resyncs_total", "",                               \
          "Full resyncs started because the target had lost data a checkpoint counted as "         \
          "written.")                                                                              \
  COUNTER(stale_keys_deleted, "xdcr_stale_keys_deleted_total", "",                                 \
          "Target keys deleted after a full sync because the snapshot lacked them "                \
          "(full_sync.delete_stale_keys).")                                                        \
  COUNTER(checkpoints, "xdcr_checkpoints_total", "", "Checkpoints written.")                       \
  COUNTER(checkpoint_failures, "xdcr_checkpoint_failures_total", "",                               \
          "Checkpoints that could not be written.")                                                \
  COUNTER(unknown_commands, "xdcr_unknown_commands_total", "",                                     \
          "Commands forwarded without being understood.")                                          \
  COUNTER(filter_splits, "xdcr_filter_splits_total", "",                                           \
          "Commands not replicated because their keys fall on both sides of the filters.")         \
  COUNTER(reconnects, "xdcr_reconnects_total", "",                                                 \
          "Sessions that ended in an error and were restarted.")                                   \
  COUNTER(link_detachments, "xdcr_link_detachments_total", "link_detachments",                     \
          "Times the pipeline was detached from a shared replication link onto one of its own.")   \
  COUNTER_PART(snapshot_keys_restored, "result", "restored", "xdcr_snapshot_keys_total", "",       \
               "Full-sync keys, by result.")                                                       \
  COUNTER_PART(snapshot_keys_expired, "result", "expired", "xdcr_snapshot_keys_total", "",         \
               "Full-sync keys, by result.")                                                       \
  COUNTER_PART(snapshot_keys_failed, "result", "failed", "xdcr_snapshot_keys_total", "",           \
               "Full-sync keys, by result.")                                                       \
  /* rebuilt: written as commands, the target being unable to take the source's payload */         \
  COUNTER_PART(snapshot_keys_rebuilt, "result", "rebuilt", "xdcr_snapshot_keys_total", "",         \
               "Full-sync keys, by result.")                                                       \
  /* reason: expired_before_write (the copy reached its deadline first), clamped_before_write      \
     (the target's max_ttl or collection policy ended it first), field_expired_before_write (a     \
     hash field's copy expired before its renewal), unconfirmed_before_restart (a write the        \
     target applied before the agent stopped, whose reply it never acted on); §12 */              \
  COUNTER_PART(copies_restored_expired, "reason", "expired_before_write",                          \
               "xdcr_target_copies_restored_total", "copies_restored",                             \
               "Target copies that ended before a later source write reached them, read back "     \
               "from the source and restored whole, by reason.")                                   \
  COUNTER_PART(copies_restored_clamped, "reason", "clamped_before_write",                          \
               "xdcr_target_copies_restored_total", "copies_restored",                             \
               "Target copies that ended before a later source write reached them, read back "     \
               "from the source and restored whole, by reason.")                                   \
  COUNTER_PART(copies_restored_field, "reason", "field_expired_before_write",                      \
               "xdcr_target_copies_restored_total", "copies_restored",                             \
               "Target copies that ended before a later source write reached them, read back "     \
               "from the source and restored whole, by reason.")                                   \
  COUNTER_PART(copies_restored_unconfirmed, "reason", "unconfirmed_before_restart",                \
               "xdcr_target_copies_restored_total", "copies_restored",                             \
               "Target copies that ended before a later source write reached them, read back "     \
               "from the source and restored whole, by reason.")                                   \
  COUNTER(copies_unrecoverable, "xdcr_target_copies_unrecoverable_total", "copies_unrecoverable",  \
          "Target copies found gone before a later write that could not be read back from the "    \
          "source or written (each named in the log).")                                            \
  COUNTER(field_ttls_dropped, "xdcr_field_ttls_dropped_total", "",                                 \
          "Hash-field deadlines not written because the target cannot store field TTLs (Redis "    \
          "before 7.4, Valkey before 9).")                                                         \
  /* kind: the first word of the error reply */                                                    \
  COUNTER_BY_KEY(target_errors_by_kind, "kind", "xdcr_target_errors_total", "",                    \
                 "Error replies from the target, by kind.")                                        \
  /* kind: moved, ask (a Redis Cluster target sent the command elsewhere) */                       \
  COUNTER_BY_KEY(target_redirects_by_kind, "kind", "xdcr_target_redirects_total", "",              \
                 "Redirections from a Redis Cluster target (the command was sent again), by "      \
                 "kind.")                                                                          \
  COUNTER(migration_restores, "xdcr_migration_restores_total", "",                                 \
          "Slot migrations on a Redis Cluster source (RESTORE-ASKING units) written only after "   \
          "the other shards were checkpointed past them.")                                         \
  COUNTER(migration_deletes_held, "xdcr_migration_deletes_held_total", "",                         \
          "Deletions on one shard of a key whose migration RESTORE waited on another (not "        \
          "replicated: the RESTORE follows).")                                                     \
  COUNTER(cross_slot_splits, "xdcr_cross_slot_splits_total", "",                                   \
          "Source transactions split per target slot (atomic per slot, not across slots).")        \
  /* reason: cross_slot (a command whose keys a Redis Cluster target cannot take together) */      \
  COUNTER_BY_KEY(target_write_failures, "reason", "xdcr_target_write_failures_total", "",          \
                 "Writes the target could not apply (never counted as applied), by reason.")       \
  /* direction: read (from the source, the link's limit), write (to the target) */                 \
  COUNTER_OF(read_throttled_seconds, "direction", "read",                                          \
             "xdcr_bandwidth_throttled_seconds_total", "bandwidth_throttled_seconds",              \
             "Time spent waiting to stay under bandwidth_limit, by direction.")                    \
  COUNTER_OF(write_throttled_seconds, "direction", "write",                                        \
             "xdcr_bandwidth_throttled_seconds_total", "bandwidth_throttled_seconds",              \
             "Time spent waiting to stay under bandwidth_limit, by direction.")                    \
  GAUGE(lag_seconds, "xdcr_replication_lag_seconds", "lag_seconds",                                \
        "Age of the oldest source write not yet applied to the target (0 when caught up), also "   \
        "while the target is down or the pipeline paused.")                                        \
  GAUGE(backlog_bytes, "xdcr_backlog_bytes", "backlog_bytes",                                      \
        "The source's replication offset (INFO replication, read every second) minus the offset "  \
        "applied to the target.")                                                                  \
  GAUGE(apply_rate, "xdcr_apply_rate_bytes_per_second", "apply_rate_bytes_per_second",             \
        "Replication-stream bytes applied per second over the last 30 s.")                         \
  GAUGE(catchup_eta_seconds, "xdcr_catchup_eta_seconds", "catchup_eta_seconds",                    \
        "backlog_bytes at the apply rate of the last 30 s: 0 when caught up, +Inf when nothing "   \
        "is applied.")                                                                             \
  GAUGE(full_sync_progress_ratio, "xdcr_full_sync_progress_ratio", "",                             \
        "Share of the running full sync's snapshot read (bytes, or keys when the size is "         \
        "unknown); 0 when none runs.")                                                             \
  GAUGE(full_sync_eta_seconds, "xdcr_full_sync_eta_seconds", "",                                   \
        "Time the running full sync needs at its rate so far (0 when none runs, +Inf when "        \
        "stalled or unknown).")                                                                    \
  GAUGE(up, "xdcr_pipeline_up", "", "1 while the pipeline streams, 0 otherwise.")                  \
  GAUGE_BY(state_one, "state", state, "xdcr_pipeline_state", "",                                   \
           "1, labelled with the pipeline's state: starting, full_sync, streaming, paused, "       \
           "reconnecting, stopped.")                                                               \
  GAUGE(spool_bytes, "xdcr_spool_bytes", "",                                                       \
        "Bytes a full sync holds in the agent's spool (memory and <state_dir>/spool) until its "   \
        "targets take them; 0 without a full sync spooling.")                                      \
  GAUGE(expiry_index_entries, "xdcr_expiry_index_entries", "",                                     \
        "Source deadlines and tombstones the expiry index holds.")                                 \
  GAUGE(expiry_index_bytes, "xdcr_expiry_index_bytes", "", "Memory of the expiry index's tables.") \
  GAUGE(checkpoint_journal_bytes, "xdcr_checkpoint_journal_bytes", "",                             \
        "Checkpoint journal length since the last whole image (compacted past 64 MiB).")           \
  GAUGE(clockSkewSeconds, "xdcr_clock_skew_seconds", "",                                           \
        "Target cluster's clock minus source cluster's clock (Redis TIME).")                       \
  GAUGE(clockSkewExceeded, "xdcr_clock_skew_exceeded", "",                                         \
        "1 while the pipeline's skew or a cluster's error against NTP is over max_skew.")          \
  GAUGE(compensation_seconds, "xdcr_clock_compensation_seconds", "",                               \
        "Added to every replicated deadline (clock.on_skew: compensate), 0 when not "              \
        "compensating.")                                                                           \
  GAUGE(bandwidth_limit, "xdcr_bandwidth_limit_bytes_per_second", "bandwidth_limit",               \
        "The pipeline's bandwidth_limit: bytes per second it may read from its source and, "       \
        "apart, write to its target (0: none).")                                                   \
  GAUGE_BY(paused, "reason", paused_reason, "xdcr_pipeline_paused", "",                            \
           "1 while the pipeline is paused.")

/**
 * xdcr_apply_latency_seconds: from a change ready to be written to the target (its unit
 * committed to the target connection, right after it was read) to the target's answer to the
 * last command of it. A Prometheus histogram: cumulative buckets at render time.
 */
struct LatencyHistogram {
  static constexpr std::array<double, 10> kBounds{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60};
  std::array<uint64_t, kBounds.size()> buckets{};  // not cumulative: [i] counts (b[i-1], b[i]]
  uint64_t count = 0;
  double sum = 0;
  void observe(double seconds) {
    for (size_t i = 0; i < kBounds.size(); ++i) {
      if (seconds <= kBounds[i]) {
        ++buckets[i];
        break;
      }
    }
    ++count;
    sum += seconds;
  }
};

struct PipelineStats {
#define XDCR_STATS_COUNTER(field, ...) uint64_t field = 0;
#define XDCR_STATS_COUNTER_BY(field, Enum, label, names, ...)                  \
  static_assert(names.size() == idx(Enum::kCount), "a name for every " #Enum); \
  std::array<uint64_t, idx(Enum::kCount)> field{};
#define XDCR_STATS_COUNTER_BY_KEY(field, ...) std::map<std::string, uint64_t> field;
#define XDCR_STATS_COUNTER_PART(field, ...) uint64_t field = 0;
#define XDCR_STATS_GAUGE(...)
  XDCR_PIPELINE_METRICS(XDCR_STATS_COUNTER, XDCR_STATS_COUNTER_BY, XDCR_STATS_COUNTER_BY_KEY,
                        XDCR_STATS_COUNTER_PART, XDCR_STATS_GAUGE, XDCR_STATS_GAUGE,
                        XDCR_STATS_GAUGE)
#undef XDCR_STATS_COUNTER
#undef XDCR_STATS_COUNTER_BY
#undef XDCR_STATS_COUNTER_BY_KEY
#undef XDCR_STATS_COUNTER_PART
#undef XDCR_STATS_GAUGE

  /** Not exported (the sum of target_errors_by_kind); counted beside it. */
  uint64_t target_errors = 0;
  /** Exported as xdcr_apply_latency_seconds (replicator/metrics.cc). */
  LatencyHistogram apply_latency;
  /** The last restored target copies, for explain (GET /pipelines/NAME/restores). */
  RestoreJournal restores;

  void count(EventKind k) {
    ++source_events[idx(k)];
  }
  void count(WriteOp op) {
    ++target_writes[idx(op)];
  }
  void count(FilterReason r) {
    ++filtered[idx(r)];
  }
};

}  // namespace xdcr
