#pragma once
// The full sync: the source's snapshot (RDB) onto the target, key by key, as it arrives.
//
// Every key becomes `RESTORE key clamp(E) payload REPLACE [ABSTTL]` (expiry-semantics.md §4: a
// snapshot entry is a create) — the RDB's raw value bytes are the payload, nothing is decoded.
// Keys already expired (on the source, or clamped into the past) are deleted rather than
// written, and counted. Keys whose payload exceeds the target's proto-max-bulk-len are NOT
// written: each is logged and counted as failed (a choice: rewriting huge values as commands
// would need decoding every type; such values are rare and an operator can raise the limit).
// The expiry index is rebuilt from the snapshot's deadlines.
//
// Memory stays bounded: the loader consumes the source's read buffer in place, and waits for the
// target (backpressure) while too much is unanswered, which in turn stops reading the socket.
// Target keys the snapshot does not contain are left alone (as Couchbase XDCR does).

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "common/logging.h"
#include "common/stats.h"
#include "filters/expiry_index.h"
#include "filters/stream_filter.h"
#include "source/rdb.h"
#include "source/redis_source.h"
#include "target/applier.h"
#include "target/redis_target.h"

#include "replicator/stale_sweep.h"

namespace xdcr::replicator {

/** Progress of the current (or last) full sync; read by logs and status. */
struct SnapshotProgress {
  bool active = false;
  uint64_t keys_done = 0;   // keys walked (restored + expired + filtered + failed)
  uint64_t keys_total = 0;  // from RESIZEDB (0 = unknown yet)
  uint64_t bytes_done = 0;
  uint64_t bytes_total = 0;  // 0 = unknown (diskless framing)
  uint64_t restored = 0;
  uint64_t expired = 0;
  uint64_t filtered = 0;
  uint64_t failed = 0;
  std::chrono::steady_clock::time_point started{};
  double seconds = 0;  // duration of the last completed one
};

class SnapshotLoader final : public source::SnapshotSink {
 public:
  /**
   * `on_begin` runs when the snapshot starts (the pipeline drops its old checkpoint there).
   * While `hold` returns true (the pipeline is paused: operator or clock skew) no further key is
   * taken from the snapshot; the source keeps the rest in its output buffer.
   */
  SnapshotLoader(std::string pipeline, filters::StreamFilter& filter,
                 filters::ExpiryIndex& index, target::Applier& applier,
                 target::RedisTarget& target, PipelineStats& stats, SnapshotProgress& progress,
                 std::function<Status()> on_begin, std::function<bool()> hold);

  net::awaitable<Status> begin(const source::Position& at, uint64_t total_bytes) override;
  net::awaitable<Result<size_t>> data(std::string_view available, bool last) override;
  net::awaitable<Status> end() override;
  /** Records every replicated key of the snapshot in `keys` (full_sync.delete_stale_keys). */
  void recordKeys(SnapshotKeys* keys) { keys_ = keys; }

 private:
  void applyKey(const source::rdb::Item& item);
  void reportProgress(bool final);

  std::string pipeline_;
  filters::StreamFilter& filter_;
  filters::ExpiryIndex& index_;
  target::Applier& applier_;
  target::RedisTarget& target_;
  PipelineStats& stats_;
  SnapshotProgress& progress_;
  std::function<Status()> on_begin_;
  std::function<bool()> hold_;
  SnapshotKeys* keys_ = nullptr;
  source::rdb::Walker walker_;
  size_t retry_at_ = 0;  // do not parse again before this many bytes are offered
  std::chrono::steady_clock::time_point last_report_{};
  bool tty_ = false;
  LogRateLimiter fail_log_;
};

}  // namespace xdcr::replicator
