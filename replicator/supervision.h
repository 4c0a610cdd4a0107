#pragma once
// The time-driven decisions of a replication link, apart from any I/O so that they run on
// simulated time in unit tests (tests/replicator/supervision_test.cc): the reconnect backoff,
// the silence watchdog, the ACK period. Every time they see comes from the injected clock.

#include <algorithm>
#include <chrono>
#include <optional>
#include <random>
#include <string>

#include "common/limits.h"

namespace xdcr::replicator {

/**
 * Exponential reconnect backoff with jitter: the n-th consecutive failure waits a uniformly
 * drawn time in [d/2, d], d = initial * 2^(n-1) capped at backoff_max. A session that lasted
 * backoff_reset_after or longer counts as a success: the next failure starts from `initial`.
 */
class Backoff {
 public:
  using Duration = std::chrono::steady_clock::duration;
  explicit Backoff(const Limits& limits) : limits_(limits), next_(limits.backoff_initial) {}

  /** The wait after a session that lasted `session`. */
  template <class Rng>
  Duration next(Duration session, Rng& rng) {
    if (session >= limits_.backoff_reset_after) next_ = limits_.backoff_initial;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next_).count();
    const auto drawn =
        std::chrono::milliseconds(std::uniform_int_distribution<int64_t>(ms / 2, ms)(rng));
    next_ = std::min<Duration>(next_ * 2, limits_.backoff_max);
    return drawn;
  }

 private:
  const Limits& limits_;
  Duration next_;
};

/** Fires when nothing was fed for longer than its period. */
class Watchdog {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  Watchdog(std::chrono::steady_clock::duration period, TimePoint now)
      : period_(period), last_(now) {}
  void feed(TimePoint now) { last_ = now; }
  bool expired(TimePoint now) const { return now - last_ > period_; }

 private:
  std::chrono::steady_clock::duration period_;
  TimePoint last_;
};

/**
 * How long the ACK loop waits before its next round, `since_start` into a session: every
 * ack_period_early for the first ack_early_phase (a diskless source ignores an ACK that arrives
 * before it has reaped its snapshot child and streams only after the next one), then
 * ack_period, like Redis's replicas.
 */
inline std::chrono::steady_clock::duration ackPeriod(
    const Limits& limits, std::chrono::steady_clock::duration since_start) {
  return since_start < limits.ack_early_phase ? limits.ack_period_early : limits.ack_period;
}

/** One pipeline of a shared link, as the link's supervision sees it at one moment. */
struct MemberHold {
  bool failed = false;       // its sink's session ended with an error
  bool paused = false;       // operator or clock-skew pause
  bool over_limits = false;  // over its unanswered commands/bytes: the link waits for it
  double silent_s = 0;       // seconds without a reply while commands are in flight
  /** Since when it has been holding the link back (kept between calls). */
  std::optional<std::chrono::steady_clock::time_point> held_since;
};

/**
 * Whether a pipeline leaves its shared link now, and why ("" = it stays). `others_free`: some
 * other pipeline of the link is not holding it back — when every one is, nobody gains from a
 * detachment (the source is simply faster than every target). Rules, in order: a failed sink;
 * a pause while others run; a target silent with commands in flight for detach_after; a target
 * over its limits (the link waiting for it) for detach_after. So no pipeline is held back by
 * another for longer than detach_after (plus the caller's polling period).
 */
std::string detachReason(MemberHold& m, bool others_free, std::chrono::steady_clock::time_point now,
                         const Limits& limits);

}  // namespace xdcr::replicator
