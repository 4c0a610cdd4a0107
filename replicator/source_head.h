#pragma once
// The source's own replication offset, read apart from the replication link (issue 18: lag and
// backlog showed 0 while the target was down and 59 B while a pipeline was paused with the
// source 3.2 MB ahead, because they counted only what the agent had received).
//
// SourceLink asks the node it reads for `INFO replication` every second on a connection of its
// own — with the link up, down, or paused — and records the readings here. From them:
//
//   backlog   the source's master_repl_offset minus the offset a pipeline has applied, when both
//             belong to one replication history (the same replid, or the applied offset within
//             the source's replid2 history after a failover); unknown otherwise
//   lag       the age of the oldest stream byte not yet applied: the time the agent first saw
//             the source's offset pass the applied offset (a lower bound, within a second; the
//             stream includes the source's PINGs, every repl-ping-replica-period)
//
// ApplyRate follows one pipeline's applied offset: bytes applied (a counter) and the rate of the
// last 30 s, for the catch-up ETA.

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

namespace xdcr::replicator {

class SourceHead {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  struct Reading {
    std::string replid, replid2;
    int64_t second_offset = -1;  // where replid2's history ended (-1: none)
    uint64_t offset = 0;         // master_repl_offset
  };
  /** Parses INFO replication; nullopt when it lacks master_replid or master_repl_offset. */
  static std::optional<Reading> parse(std::string_view info);

  void record(Reading r, TimePoint now);
  const std::optional<Reading>& last() const { return last_; }
  /** Whether `applied` of history `replid` is a point of the source's history now. */
  bool sameHistory(std::string_view replid, uint64_t applied) const;
  std::optional<uint64_t> backlog(std::string_view replid, uint64_t applied) const;
  /** Seconds since the source first showed an offset beyond `applied` (0: none seen). */
  double lagSeconds(std::string_view replid, uint64_t applied, TimePoint now) const;

 private:
  std::optional<Reading> last_;
  struct Sample {
    uint64_t offset;
    TimePoint at;  // when this offset was first seen
  };
  std::deque<Sample> samples_;                 // offsets increasing; at most kMaxSamples
  static constexpr size_t kMaxSamples = 4096;  // over an hour at one reading a second
};

class ApplyRate {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  /** The applied position now; returns the bytes applied since the last call (0 when the
   *  history changed or the offset went back: a full sync, another source). */
  uint64_t record(std::string_view replid, uint64_t applied, TimePoint now);
  /** Bytes per second over the last 30 s (0 with fewer than two readings). */
  double bytesPerSecond() const;

 private:
  std::string replid_;
  struct Sample {
    uint64_t applied;
    TimePoint at;
  };
  std::deque<Sample> samples_;
  static constexpr std::chrono::seconds kWindow{30};
};

/** Seconds until `backlog` is applied at `rate`: 0 when none, +inf when nothing is applied. */
double catchUpSeconds(uint64_t backlog, double rate);

}  // namespace xdcr::replicator
