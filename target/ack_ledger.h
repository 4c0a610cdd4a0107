#pragma once
// What a pipelined target connection has been answered, as a source offset: the acknowledged
// offset of target::Sink. Commands are numbered as they are committed and replies as they
// arrive, in order; a unit's end offset is marked at the number of its last command and becomes
// acknowledged once that command is answered (never before: a checkpoint covers only what the
// target answered). A unit without commands is acknowledged with the one before it. Each mark
// reached feeds the apply-latency histogram (committed -> answered). Used by RedisTarget and
// MemcachedWriter, one per connection; not thread-safe.

#include <chrono>
#include <cstdint>
#include <deque>

#include "clock/clock.h"
#include "common/stats.h"

namespace xdcr::target {

class AckLedger {
 public:
  AckLedger(const clock::Clock& clock, LatencyHistogram& latency)
      : clock_(clock), latency_(latency) {}

  /** `commands` more were committed for a unit ending at source offset `offset`. */
  void commit(uint64_t commands, uint64_t offset) {
    if (commands > 0) {
      if (drained()) last_reply_ = clock_.monotonicNow();  // the stall clock starts here
      sent_ += commands;
    }
    if (drained()) {
      // Nothing in flight: a unit without target commands (a ping, a filtered key) is applied.
      acked_ = offset;
      return;
    }
    if (!marks_.empty() && marks_.back().seq == sent_) {
      marks_.back().offset = offset;
    } else {
      marks_.push_back(Mark{sent_, offset, clock_.monotonicNow()});
    }
  }
  /** The next command in order was answered. */
  void answered() {
    ++replied_;
    if (marks_.empty() || marks_.front().seq > replied_) return;
    const auto now = clock_.monotonicNow();
    while (!marks_.empty() && marks_.front().seq <= replied_) {
      acked_ = marks_.front().offset;
      latency_.observe(std::chrono::duration<double>(now - marks_.front().at).count());
      marks_.pop_front();
    }
  }
  /** Replies arrived (after one or more answered()): the stall clock restarts. */
  void progressed() { last_reply_ = clock_.monotonicNow(); }
  /** The acknowledged offset with nothing in flight (after a handshake). */
  void reset(uint64_t offset) {
    marks_.clear();
    acked_ = offset;
  }

  uint64_t acked() const { return acked_; }
  uint64_t sent() const { return sent_; }
  uint64_t replied() const { return replied_; }
  uint64_t inflight() const { return sent_ - replied_; }
  bool drained() const { return sent_ == replied_; }
  /** Seconds since the last reply while commands are in flight (0 when none are). */
  double stalledSeconds() const {
    if (drained()) return 0;
    return std::chrono::duration<double>(clock_.monotonicNow() - last_reply_).count();
  }

 private:
  struct Mark {
    uint64_t seq;  // reached when replied_ >= seq
    uint64_t offset;
    std::chrono::steady_clock::time_point at;  // committed
  };
  const clock::Clock& clock_;
  LatencyHistogram& latency_;
  uint64_t sent_ = 0;     // commands committed
  uint64_t replied_ = 0;  // replies received
  uint64_t acked_ = 0;
  std::deque<Mark> marks_;
  std::chrono::steady_clock::time_point last_reply_{};
};

}  // namespace xdcr::target
