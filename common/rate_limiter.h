#pragma once
// A token bucket for the pipeline option `bandwidth_limit` (bytes per second; Couchbase XDCR's
// networkUsageLimit): RedisConnection takes from it for every read or write (setRateLimits(),
// common/redis_conn.h) and waits what it says. Time is passed in (a monotonic time point), so the
// bucket runs on simulated time in unit tests.
//
// The bucket holds at most `burst` bytes — 1/20 s of the rate, at least 64 KiB — and starts
// full. take() may drive it into debt: a transfer larger than what is left is not refused or
// split, the caller waits in proportion (debt / rate), and the next caller waits for that debt
// too. So over any interval T, what passes is at most burst + rate × T (plus the one transfer
// being paid for).
//
// Thread-safe: one bucket may be shared by connections on several threads (the instances of one
// pipeline over the shards of a Redis Cluster source). A limiter made over a shared bucket
// (RateLimiter(shared)) waits as the bucket says and keeps counters of its own: bytes, seconds
// waited, and the rate of the last seconds, for /status and /metrics.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace xdcr {

class RateLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr uint64_t kMinBurst = 64 * 1024;
  /** recentRate() averages over this many whole seconds. */
  static constexpr int kRateWindowSeconds = 5;

  /** A bucket of `bytes_per_second` (> 0), full. */
  explicit RateLimiter(uint64_t bytes_per_second);
  /** Counters of its own over the bucket of `shared` (which counts everything taken from it). */
  explicit RateLimiter(std::shared_ptr<RateLimiter> shared);
  RateLimiter(const RateLimiter&) = delete;
  RateLimiter& operator=(const RateLimiter&) = delete;

  /**
   * Takes `bytes` at `now`: returns how long the caller waits for them (zero while the bucket
   * holds them). Counts the bytes and the wait.
   */
  Clock::duration take(uint64_t bytes, Clock::time_point now);
  /** How long until the bucket is out of debt (zero: it is not), taking nothing. */
  Clock::duration debt(Clock::time_point now);

  uint64_t rate() const { return rate_; }
  uint64_t burst() const { return burst_; }
  /** Bytes taken so far. */
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  /** The waits take() returned so far, in seconds. */
  double throttledSeconds() const;
  /** Bytes per second taken over the last kRateWindowSeconds whole seconds before `now`. */
  double recentRate(Clock::time_point now) const;

  /**
   * The bucket registered under `key` at `bytes_per_second` while something still holds it, or
   * a new one registered so: how the instances of one pipeline find one bucket (the key names
   * what shares it, see replicator/pipeline.cc). A bucket of another rate is replaced.
   */
  static std::shared_ptr<RateLimiter> shared(const std::string& key, uint64_t bytes_per_second);

 private:
  /** The bucket's part of take(), under mu_. */
  Clock::duration takeFromBucket(uint64_t bytes, Clock::time_point now);
  void refill(Clock::time_point now);
  void count(uint64_t bytes, Clock::duration wait, Clock::time_point now);

  const std::shared_ptr<RateLimiter> shared_;  // set: the bucket is that one's
  const uint64_t rate_;
  const uint64_t burst_;

  mutable std::mutex mu_;
  // the bucket (unused when shared_ is set)
  double tokens_ = 0;  // bytes; negative: debt
  Clock::time_point last_{};
  bool started_ = false;
  // the bytes of each of the last seconds (a ring indexed by second)
  struct Second {
    int64_t second = -1;
    uint64_t bytes = 0;
  };
  std::array<Second, kRateWindowSeconds + 2> seconds_{};

  std::atomic<uint64_t> bytes_{0};
  std::atomic<int64_t> throttled_ns_{0};
};

}  // namespace xdcr
