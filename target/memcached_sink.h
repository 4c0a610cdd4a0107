#pragma once
// The Sink of a memcached target (docs/interface.md §6.1, docs/expiry-semantics.md §10): the
// pipeline's EventFilter, the maxTTL clamp on memcached's own clock, the meta-protocol encoding
// (target/memcached_encoder.h) and the pipelined MemcachedWriter.
//
// Every write is idempotent (a whole value with its absolute deadline, a touch, a delete), so a
// replay after a crash is safe and there are no replay stamps. What memcached cannot express
// idempotently (APPEND, INCR, SETRANGE, RENAME, writes to non-string types, ...) deletes the key
// there instead (memcached is a cache: it never serves a value the source no longer has), and is
// counted in xdcr_target_invalidations_total. A MULTI/EXEC unit is written as its commands in
// order: memcached has no transactions.

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "clock/clock.h"
#include "common/logging.h"
#include "common/stats.h"
#include "config/config.h"
#include "filters/event_filter.h"
#include "filters/key_space.h"
#include "source/rdb_value.h"
#include "target/copy_repair_book.h"
#include "target/max_ttl.h"
#include "target/memcached_encoder.h"
#include "target/memcached_writer.h"
#include "target/sink.h"

namespace xdcr::target {

/** A decoded non-string value as the JSON a memcached target stores (non_strings: json; verify
 *  renders the source's value with it too). Bytes that are not UTF-8 become U+FFFD. */
std::string memcachedJson(const source::rdb::Value& v);

class MemcachedSink final : public Sink {
 public:
  MemcachedSink(net::any_io_executor ex, const config::PipelineConfig& pipeline,
                const std::string& instance, const config::ClusterConfig& target_cluster,
                filters::KeySpaceConstSharedPtr keys, const MaxTtlPolicy& policy,
                const clock::ClusterClock& target_clock, const clock::Clock& clock,
                const Limits& limits, PipelineStats& stats);

  void setWriteLimiter(std::shared_ptr<RateLimiter> limiter) {
    writer_.setWriteLimiter(std::move(limiter));
  }

  // Sink
  net::awaitable<Status> connect() override;
  net::awaitable<Status> run() override;
  void close() override { writer_.close(); }
  net::awaitable<Result<MarkerState>> readMarkers(
      const std::vector<std::string>& accepted) override;
  void apply(const source::ResolvedUnit& unit, bool write) override;
  void closeGroup(std::string_view /*replid*/) override {}
  size_t groupUnits() const override { return 0; }
  void appendMarker(std::string_view token, uint64_t offset) override;
  void resetOffset(uint64_t offset) override { writer_.resetOffset(offset); }
  Status beginSnapshot(bool record_keys) override;
  const SnapshotCounts& snapshotCounts() const override { return counts_; }
  net::awaitable<Result<uint64_t>> deleteStaleKeys(uint64_t /*offset*/) override {
    co_return uint64_t{0};  // not supported (validation refuses full_sync.delete_stale_keys)
  }
  Status endFullSync() override {
    if (first_seen_ != nullptr) first_seen_->endSweep();
    return Status{};
  }
  void setCompensationMs(int64_t ms) override { compensation_ms_ = ms; }
  uint64_t ackedOffset() const override { return writer_.ackedOffset(); }
  bool drained() const override { return writer_.drained(); }
  bool overLimits(bool snapshot) const override;
  uint64_t committedCommands() const override { return writer_.committedCommands(); }
  uint64_t answeredCommands() const override { return writer_.answeredCommands(); }
  double stalledSeconds() const override { return writer_.stalledSeconds(); }
  net::awaitable<void> waitProgress(std::chrono::steady_clock::duration d) override {
    return writer_.waitProgress(d);
  }

  /**
   * THE deadline decision of this target: source deadline `e_ms` (source clock, 0 = none) of
   * target key `key` (after key_rewrite) in target db `db`, at the target's `now_ms`: skew
   * compensation, then the collection's expiry policies and the maxTTL clamp (target::decide,
   * expiry-semantics.md §8; the clamp alone where the collection has no policy), then what
   * memcached can store (mc::finalDeadline). `kind`: a whole value (`value`: the string, for
   * the JSON fields of §8.2/§8.3; nullopt for another type) or a deadline change (a touch).
   * Records the key's first-seen second for max_lifetime.
   */
  mc::FinalDeadline finalDeadline(int64_t e_ms, int db, std::string_view key, int64_t now_ms,
                                  WriteKind kind = WriteKind::DeadlineOnly,
                                  std::optional<std::string_view> value = std::nullopt);
  void setFirstSeenStore(FirstSeenStore* store) override { first_seen_ = store; }

  // Copies that ended before a later write (expiry-semantics.md §12): a touch memcached answers
  // EN found its copy gone (expired, evicted, or deleted by an invalidation); the document is
  // read back from the source and written whole. Writes are idempotent here, so no record is
  // kept for a replay after a crash (a replayed touch misses again and reads it back again).
  std::vector<source::DocumentKey> takeRepairs() override;
  void setRepairWanted(std::function<void()> wanted) override {
    book_.setWanted(std::move(wanted));
  }
  void restoreCopies(const source::DocumentRead& read) override;
  bool repairsSettled(uint64_t offset) const override { return book_.settled(offset); }
  uint64_t ackableOffset() const override {
    return std::min(ackedOffset(), book_.firstUnsettled() - 1);
  }

 private:
  /** Why a key was not written (xdcr_target_write_failures_total{reason}). */
  enum class Outcome { Written, Expired, Failed };
  /** The target key of an event: `key_` holds it (after key_rewrite); false: its db is not 0. */
  bool targetKey(int source_db, std::string_view key);
  /** A whole value: ms with its final deadline, md when expired, or refused. */
  Outcome writeValue(const source::Event& ev, std::string_view value, int64_t e_ms, uint32_t flags,
                     int64_t now);
  void touch(const source::Event& ev, int64_t e_ms, int64_t now);
  void remove(int db, std::string_view key);
  /** A write memcached cannot express: the key is deleted there and counted. */
  void invalidate(int db, std::string_view key, const source::Change& c);
  /** Counts and logs a write that is not applied. */
  void refuse(std::string_view reason, std::string_view key, const std::string& why);
  void applyChange(const source::Change& c, int64_t now);
  /** A snapshot key, or a RESTORE: the value as memcached stores it (non_strings); false with
   *  `why` set when it is not written. */
  bool encodeValue(uint8_t type, std::string_view raw, std::string& out, uint32_t& flags,
                   std::string& why);
  void applySnapshotKey(const source::Change& c, int64_t now);
  /** A whole document (a snapshot key, a copy read back): the value as memcached stores it;
   *  `why` set when refused (not_a_string; the key is then deleted there). */
  Outcome writeDocument(const source::Event& ev, const source::RdbPayload& rdb, int64_t now,
                        std::string& why);
  /** A touch's reply: EN means the copy was gone; its document is read back. */
  void watchTouch(int db, std::string_view key);

  std::string label_;
  const config::PipelineConfig& pipeline_;
  const config::ClusterConfig& target_cluster_;
  const Limits& limits_;
  PipelineStats& stats_;
  filters::EventFilter filter_;
  const MaxTtlPolicy& policy_;
  FirstSeenStore* first_seen_ = nullptr;  // max_lifetime (expiry-semantics.md §8.4)
  const clock::ClusterClock& target_clock_;
  MemcachedWriter writer_;
  std::string marker_key_;
  std::optional<std::string> last_marker_;
  source::Change judged_;
  SnapshotCounts counts_;
  int64_t compensation_ms_ = 0;
  std::string key_;    // the target key being written (reused)
  std::string value_;  // an encoded value (reused)
  source::rdb::Value decoded_;
  LogRateLimiter fail_log_;
  LogRateLimiter invalidate_log_;
  // Copy repairs (§12).
  uint64_t unit_offset_ = 0;  // the unit being applied (its end): where a touch's reply points
  uint64_t last_offset_ = 0;  // the last unit applied
  CopyRepairBook book_;
  source::RdbPayload restored_payload_;
};

}  // namespace xdcr::target
