#pragma once
// The Source of one Redis master (standalone today; a cluster shard next): RedisSource's PSYNC
// stream and snapshot, the RDB walker, and the Resolver over the expiry index.

#include <optional>
#include <string>

#include "clock/clock.h"
#include "common/logging.h"
#include "source/rdb.h"
#include "source/redis_source.h"
#include "source/resolver.h"
#include "source/source.h"

namespace xdcr::source {

class RedisShardSource final : public Source, private SnapshotSink {
 public:
  /** `index` and `source_clock` outlive the source (they belong to the link). */
  /** `node`: the server to attach to (RedisSource); by default the cluster's address. */
  RedisShardSource(net::any_io_executor ex, const config::ClusterConfig& cluster, std::string label,
                   ExpiryIndex& index, const clock::ClusterClock& source_clock,
                   std::optional<RedisEndpoint> node = std::nullopt);

  /** The node to attach to (RedisSource::setNode); call before start(). */
  void setNode(RedisEndpoint endpoint, std::string role) {
    redis_.setNode(std::move(endpoint), std::move(role));
  }
  /** The link's bandwidth limit of what it reads from the source (common/rate_limiter.h;
   *  nullptr: none). At any time, also while a session streams. */
  void setReadLimiter(std::shared_ptr<RateLimiter> limiter) {
    redis_.setReadLimiter(std::move(limiter));
  }
  /** Full syncs spool with these options (RedisSource::setSpool); call before start(). */
  void setSpool(SpoolOptions options) { redis_.setSpool(std::move(options)); }

  // Source
  net::awaitable<Result<SyncKind>> start(const Position* resume, int resume_db,
                                         SnapshotConsumer& consumer) override;
  Result<bool> nextUnit(ResolvedUnit& unit) override;
  void consume(const ResolvedUnit& unit) override;
  net::awaitable<Status> readMore() override { return redis_.readMore(); }
  net::awaitable<Status> sendAck(uint64_t offset) override { return redis_.sendAck(offset); }
  const Position& position() const override { return redis_.position(); }
  int currentDb() const override { return resolver_.currentDb(); }
  uint64_t receivedOffset() const override {
    return redis_.position().offset + redis_.bytesBuffered();
  }
  uint64_t bytesRead() const override { return redis_.bytesRead(); }
  ExpiryIndex& expiryIndex() override { return resolver_.index(); }
  net::awaitable<Status> background() override { return redis_.background(); }
  SpoolStats spool() const override { return redis_.spoolStats(); }
  void cancel() override { redis_.cancel(); }
  void close() override { redis_.close(); }

 private:
  // SnapshotSink (RedisSource hands the raw RDB bytes here; the walker makes them units)
  net::awaitable<Status> begin(const Position& at, uint64_t total_bytes) override;
  net::awaitable<Result<size_t>> data(std::string_view available, bool last) override;
  net::awaitable<Status> end() override;

  std::string label_;
  RedisSource redis_;
  Resolver resolver_;
  clock::UnitClock unit_clock_;  // the stream units' time (ResolvedUnit::local_ms)
  Unit unit_;                    // the stream unit behind the last ResolvedUnit
  SnapshotConsumer* consumer_ = nullptr;
  rdb::Walker walker_;
  size_t retry_at_ = 0;  // do not parse the snapshot again before this many bytes are offered
  RdbPayload payload_;
  ResolvedUnit snapshot_unit_;
};

}  // namespace xdcr::source
