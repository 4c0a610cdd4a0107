#pragma once
// Time, injected. Every place that reads time takes a `const Clock&` so tests can simulate time
// and skew (expiry-semantics.md §1, §7). Wall time is Unix epoch milliseconds; intervals use the
// monotonic clock.

#include <atomic>
#include <chrono>
#include <cstdint>

namespace xdcr::clock {

/** A source of time. Implementations are thread-safe. */
class Clock {
 public:
  virtual ~Clock() = default;
  /** Wall-clock time of this host, Unix epoch milliseconds. */
  virtual int64_t nowMs() const = 0;
  /** Monotonic time, for intervals and timeouts only. */
  virtual std::chrono::steady_clock::time_point monotonicNow() const = 0;
};

/** The host's clocks. */
class SystemClock final : public Clock {
 public:
  int64_t nowMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  std::chrono::steady_clock::time_point monotonicNow() const override {
    return std::chrono::steady_clock::now();
  }
};

/** A clock that only moves when told to (unit tests). */
class SimulatedClock final : public Clock {
 public:
  explicit SimulatedClock(int64_t now_ms = 1'000'000'000'000) : now_ms_(now_ms) {}
  int64_t nowMs() const override { return now_ms_.load(); }
  std::chrono::steady_clock::time_point monotonicNow() const override {
    return std::chrono::steady_clock::time_point(std::chrono::milliseconds(mono_ms_.load()));
  }
  void advance(int64_t ms) {
    now_ms_ += ms;
    mono_ms_ += ms;
  }

 private:
  std::atomic<int64_t> now_ms_;
  std::atomic<int64_t> mono_ms_{0};
};

/**
 * A cluster's clock as seen from this host: `local now + offset`. The offset is this host's
 * measurement of the cluster's clock (Redis TIME, min-RTT sample; the clock issue fills it in);
 * 0 until measured. Shared between the skew monitor (writer) and a pipeline (reader).
 */
class ClusterClock {
 public:
  explicit ClusterClock(const Clock& local) : local_(local) {}
  /** The cluster's wall clock now, epoch ms (cluster domain). */
  int64_t nowMs() const { return local_.nowMs() + offset_ms_.load(std::memory_order_relaxed); }
  int64_t offsetMs() const { return offset_ms_.load(std::memory_order_relaxed); }
  void setOffsetMs(int64_t offset) { offset_ms_.store(offset, std::memory_order_relaxed); }

 private:
  const Clock& local_;
  std::atomic<int64_t> offset_ms_{0};
};

}  // namespace xdcr::clock
