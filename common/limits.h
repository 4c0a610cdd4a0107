#pragma once
// Every limit of the replication engine in one place: unanswered commands and bytes, watchdog
// periods, group sizes, checkpoint cadence, backoff. The agent runs with the defaults; tests
// shrink them (a pipeline takes its Limits by value) to reach a limit in milliseconds, and the
// supervision logic that reads them (replicator/supervision.h) runs on simulated time.

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace xdcr {

struct Limits {
  using Duration = std::chrono::steady_clock::duration;

  // ---- backpressure: stop taking units from the source while a target has this much
  // unanswered (the source's backlog and output buffer hold the stream meanwhile).
  uint64_t max_unanswered_commands = 100'000;
  size_t max_unanswered_bytes = 16u << 20;
  // The same during a snapshot (RESTOREs are large; fewer in flight keep the reply queue short).
  uint64_t snapshot_max_unanswered_commands = 20'000;

  // ---- watchdogs. Redis pings its replicas every 10 s (repl-ping-replica-period) and drops
  // silent ones after repl-timeout (60 s): the same bound in the other direction. The agent
  // sets both from the clusters' `link_timeout` (limitsFor(), replicator/pipeline.h).
  Duration source_silence = std::chrono::seconds(60);
  Duration target_stall = std::chrono::seconds(60);
  // A graceful stop or a checkpoint waits this long for the target to answer everything.
  Duration drain_timeout = std::chrono::seconds(30);

  // ---- fan-out: a target that holds the shared link back (over its unanswered limits, paused)
  // or has not answered anything it was sent for this long is detached onto a link of its own,
  // so the other targets are never held back longer than this.
  Duration detach_after = std::chrono::seconds(5);
  /**
   * A Redis Cluster source's slot migration: how long a shard's RESTORE-ASKING waits for the
   * other shards to be checkpointed past it (replicator/migration_guard.h) before the session
   * gives up and tries again.
   */
  Duration migration_wait = std::chrono::seconds(60);

  // ---- the ACK to the source: every 100 ms in the first seconds of a session (a diskless
  // source streams only after an ACK that follows its snapshot child's exit), then every second
  // like Redis.
  Duration ack_period = std::chrono::seconds(1);
  Duration ack_period_early = std::chrono::milliseconds(100);
  Duration ack_early_phase = std::chrono::seconds(3);

  // ---- checkpoints. A checkpoint is taken early once this many index changes wait for one (a
  // backlog drain makes ~250,000 a second), keeping the in-memory journal ~1.5 MB.
  size_t checkpoint_every_changes = 64 * 1024;
  // The journal is folded into a new whole image once it outgrows the image, and at least this.
  uint64_t compact_journal_bytes = 64ULL << 20;
  // Tombstones older than this are purged; a periodic checkpoint examines this many slots of
  // the index for them (~1 ms), going round a big index over many checkpoints.
  int64_t tombstone_purge_ms = 5 * 60 * 1000;
  size_t purge_slots_per_checkpoint = 256 * 1024;

  // ---- the replay stamp: units under one stamped MULTI/EXEC at most.
  size_t max_group_units = 512;

  // ---- reconnect backoff: exponential with jitter between these; a session that lasted
  // backoff_reset_after starts again from the initial delay.
  Duration backoff_initial = std::chrono::milliseconds(500);
  Duration backoff_max = std::chrono::seconds(30);
  Duration backoff_reset_after = std::chrono::seconds(60);
  // While backing off, the link's servers are probed this often (each probe bounded by the
  // timeout): one that did not answer and then does ends the wait (replicator/link_probe.h).
  Duration link_probe_period = std::chrono::milliseconds(250);
  std::chrono::milliseconds link_probe_timeout = std::chrono::milliseconds(1000);

  // ---- full-sync progress: a log line this often.
  Duration progress_report = std::chrono::seconds(5);
  // ---- the source's own offset (replicator/source_head.h): INFO replication read, and lag,
  // backlog and apply rate set from it, this often, session or not.
  Duration head_period = std::chrono::seconds(1);

  // Target copies that end before a later write (expiry-semantics.md §12). An in-place write,
  // SET KEEPTTL or PERSIST to a copy whose deadline lies within copy_guard_margin of the write's
  // now gets a guard (EXISTS in its MULTI); one within copy_late_horizon is watched instead: a
  // reply at or past the deadline reads the document back (the target may have run it late).
  int64_t copy_guard_margin_ms = 5000;
  int64_t copy_late_horizon_ms = 60000;
  /** Keys read back from the source in one transaction (a restore's read). */
  size_t copy_read_batch = 500;
  std::chrono::milliseconds copy_read_timeout = std::chrono::seconds(10);
};

/** The fixed bounds of a full sync's spool (issue 17; source/spool.h, source/redis_source.cc). */
namespace spool_limits {
using namespace std::chrono_literals;

/** What the spool holds in memory before it writes to its file. */
inline constexpr size_t kMemoryBytes = 32u << 20;
/** The most one read of the stream takes from the spool into the parser's buffer. */
inline constexpr size_t kTakeBytes = 1u << 20;
/** The snapshot's ACKs to the source until the link's own begin: as Limits' ACK period (every
 *  100 ms in the first 3 s after the snapshot's end, then every second). */
inline constexpr auto kAckPeriod = 1s;
inline constexpr auto kAckPeriodEarly = 100ms;
inline constexpr auto kAckEarlyPhase = 3s;
/** After the spool has drained, the full sync counts as over at the first small read, or after
 *  this long at the latest. */
inline constexpr auto kCaughtUpAfter = 60s;

}  // namespace spool_limits

/** The fixed bounds of the Redis Cluster source and target (issue 15), in one place. */
namespace cluster_limits {
using namespace std::chrono_literals;

// ---- a source cluster's discovery (replicator/cluster_source.cc)
inline constexpr auto kDiscoveryPeriod = 1s;
/** Per node tried by a discovery: a frozen node (its kernel still accepts connections) must not
 *  hold a failover's discovery for long. */
inline constexpr auto kDiscoveryTimeout = 1500ms;
/** Discoveries in a row without a shard before its links are stopped. */
inline constexpr int kGoneAfter = 5;

// ---- the migration guard (replicator/migration_guard.cc)
/** EXISTS and INFO replication on a source master. */
inline constexpr auto kGuardCallTimeout = 2s;
/** How often a waiting RESTORE-ASKING or snapshot looks at the other shards' checkpoints. */
inline constexpr auto kGuardPoll = 2ms;

// ---- a target cluster (target/cluster_target.cc, target/cluster_sink.cc)
/** Per node asked for the slot map: a frozen node must not hold a failover's rediscovery for
 *  long; the next node is asked. */
inline constexpr auto kMapTimeout = 2s;
/** Reroutes in a row with no unit acknowledged in between before the session gives up. */
inline constexpr int kMaxRerouteRounds = 100;
/** Slots of its master a redirected marker is tried in before it is sent where redirected. */
inline constexpr int kMaxMarkerRebinds = 16;
/** A checkpoint marker is followed by WAIT 1 <this> (best effort: a replica of its master has
 *  it before a failover can lose it). */
inline constexpr auto kMarkerReplicaWait = 500ms;
/** A WAIT that found no replica caught up is sent again, the checkpoint held, for this long
 *  after the marker; then the checkpoint counts without the replica (with a warning), and that
 *  master's markers are not waited for again until a WAIT finds its replica caught up. Each
 *  WAIT holds the agent's writes to that master (they queue behind it on its connection). */
inline constexpr auto kMarkerReplicaPatience = 5s;
}  // namespace cluster_limits

}  // namespace xdcr
