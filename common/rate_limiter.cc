#include "common/rate_limiter.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace xdcr {
namespace {

using Clock = RateLimiter::Clock;

Clock::duration secondsToDuration(double s) {
  // Rounded up: a caller that waits this long finds the bucket out of debt.
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double, std::nano>(std::ceil(s * 1e9)));
}

int64_t wholeSecond(Clock::time_point t) {
  return std::chrono::floor<std::chrono::seconds>(t.time_since_epoch()).count();
}

}  // namespace

RateLimiter::RateLimiter(uint64_t bytes_per_second)
    : rate_(std::max<uint64_t>(bytes_per_second, 1)),
      burst_(std::max<uint64_t>(rate_ / 20, kMinBurst)),
      tokens_(static_cast<double>(burst_)) {}

RateLimiter::RateLimiter(std::shared_ptr<RateLimiter> shared)
    : shared_(std::move(shared)), rate_(shared_->rate()), burst_(shared_->burst()) {}

void RateLimiter::refill(Clock::time_point now) {
  if (!started_) {
    started_ = true;
    last_ = now;
    return;
  }
  if (now <= last_) return;
  const double elapsed = std::chrono::duration<double>(now - last_).count();
  tokens_ = std::min(static_cast<double>(burst_), tokens_ + elapsed * static_cast<double>(rate_));
  last_ = now;
}

Clock::duration RateLimiter::takeFromBucket(uint64_t bytes, Clock::time_point now) {
  std::lock_guard lock(mu_);
  refill(now);
  tokens_ -= static_cast<double>(bytes);
  if (tokens_ >= 0) return Clock::duration::zero();
  return secondsToDuration(-tokens_ / static_cast<double>(rate_));
}

Clock::duration RateLimiter::take(uint64_t bytes, Clock::time_point now) {
  const Clock::duration wait = shared_ ? shared_->take(bytes, now) : takeFromBucket(bytes, now);
  count(bytes, wait, now);
  return wait;
}

Clock::duration RateLimiter::debt(Clock::time_point now) {
  if (shared_) return shared_->debt(now);
  std::lock_guard lock(mu_);
  refill(now);
  if (tokens_ >= 0) return Clock::duration::zero();
  return secondsToDuration(-tokens_ / static_cast<double>(rate_));
}

void RateLimiter::count(uint64_t bytes, Clock::duration wait, Clock::time_point now) {
  bytes_.fetch_add(bytes, std::memory_order_relaxed);
  if (wait > Clock::duration::zero()) {
    throttled_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count(),
                            std::memory_order_relaxed);
  }
  const int64_t s = wholeSecond(now);
  std::lock_guard lock(mu_);
  Second& slot = seconds_[static_cast<size_t>(s) % seconds_.size()];
  if (slot.second != s) slot = Second{s, 0};
  slot.bytes += bytes;
}

double RateLimiter::throttledSeconds() const {
  return static_cast<double>(throttled_ns_.load(std::memory_order_relaxed)) / 1e9;
}

double RateLimiter::recentRate(Clock::time_point now) const {
  const int64_t s = wholeSecond(now);
  uint64_t sum = 0;
  std::lock_guard lock(mu_);
  for (const Second& slot : seconds_) {
    if (slot.second >= s - kRateWindowSeconds && slot.second < s) sum += slot.bytes;
  }
  return static_cast<double>(sum) / kRateWindowSeconds;
}

std::shared_ptr<RateLimiter> RateLimiter::shared(const std::string& key,
                                                 uint64_t bytes_per_second) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<RateLimiter>> buckets;
  std::lock_guard lock(mu);
  std::erase_if(buckets, [](const auto& kv) { return kv.second.expired(); });
  if (auto it = buckets.find(key); it != buckets.end()) {
    if (auto bucket = it->second.lock(); bucket && bucket->rate() == bytes_per_second) {
      return bucket;
    }
  }
  auto bucket = std::make_shared<RateLimiter>(bytes_per_second);
  buckets[key] = bucket;
  return bucket;
}

}  // namespace xdcr
