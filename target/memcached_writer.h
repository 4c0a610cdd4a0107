#pragma once
// The pipelined writer of a memcached target: one connection, the meta protocol
// (target/memcached_encoder.h). The sink appends commands to pending() and records each with
// add(); the writer coroutine sends them in batches while the reader counts the replies (every
// meta command the sink sends has exactly one). As RedisTarget does, each source offset is
// marked after the commands it produced, so ackedOffset() — the offset up to which every command
// has been answered — is exactly what a checkpoint may cover.
//
// Replies:
//  - HD / EN / NF: done (a touch or a delete of a missing key is harmless); the write is counted
//    in xdcr_target_writes_total{op} only now, once memcached took it;
//  - CLIENT_ERROR / ERROR and `SERVER_ERROR object too large`: memcached refused this one write
//    and re-sending it would not help: counted (xdcr_target_errors_total{kind},
//    xdcr_target_write_failures_total{reason="rejected"}), logged, and the stream goes on;
//  - any other SERVER_ERROR (out of memory, ...): the write did not happen and may later: the
//    session ends WITHOUT acknowledging it, and resumes from the last acknowledged offset.
//
// Not thread-safe; one strand.

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "clock/clock.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/notify.h"
#include "common/redis_conn.h"
#include "common/stats.h"
#include "config/config.h"
#include "target/ack_ledger.h"
#include "target/memcached_encoder.h"

namespace xdcr::target {

class MemcachedWriter {
 public:
  /** What a command is, for the counters once it is answered. */
  enum class Op : uint8_t { Set, Expire, Persist, Delete, Marker, Get };

  MemcachedWriter(net::any_io_executor ex, const config::ClusterConfig& cluster, std::string label,
                  PipelineStats& stats, const clock::Clock& clock);

  /** Connects and reads `stats settings` (item_size_max) and the server's version. */
  net::awaitable<Status> connect();
  uint64_t itemSizeMax() const { return item_size_max_; }
  const std::string& version() const { return version_; }

  void setWriteLimiter(std::shared_ptr<RateLimiter> limiter) {
    conn_.setRateLimits(nullptr, std::move(limiter));
  }

  /** Where commands are appended; add() each one, then commit(). */
  std::string& pending() { return pending_; }
  void add(Op op) {
    ops_.push_back(op);
    ++uncommitted_;
  }
  /** The number the command add()ed last will have (for onReply before its commit). */
  uint64_t lastAddedSeq() const { return ledger_.sent() + uncommitted_; }
  /** The commands add()ed since the last commit: once they and all before them are answered,
   *  the source is applied up to `source_offset`. */
  void commit(uint64_t source_offset);
  void resetOffset(uint64_t source_offset);

  net::awaitable<Status> runWriter();
  net::awaitable<Status> runReader();

  uint64_t ackedOffset() const { return ledger_.acked(); }
  uint64_t committedCommands() const { return ledger_.sent(); }
  uint64_t answeredCommands() const { return ledger_.replied(); }
  uint64_t inflightCommands() const { return ledger_.inflight(); }
  size_t pendingBytes() const { return pending_.size() + writing_.size(); }
  bool drained() const { return ledger_.drained() && pending_.empty(); }
  net::awaitable<void> waitProgress(std::chrono::steady_clock::duration d) {
    co_await progress_.waitFor(d);
  }
  double stalledSeconds() const;

  /** The reply to command number `seq` (committedCommands() right after its commit) goes to
   *  `fn` too, after the usual handling (an error it returns ends the session). */
  using ReplyFn = std::function<Status(const mc::Reply& reply)>;
  void onReply(uint64_t seq, ReplyFn fn) { expects_.push_back({seq, std::move(fn)}); }

  void close() {
    closing_ = true;
    writer_wake_.notify();
    conn_.close();
  }

  /**
   * One request on a connection of its own (the marker check, the clock probe, verify): sends
   * `request` and reads replies until `replies` of them came, or, with `replies` 0, until END.
   */
  static net::awaitable<Result<std::vector<mc::Reply>>> call(RedisConnection& conn,
                                                             std::string_view request,
                                                             size_t replies,
                                                             std::chrono::milliseconds timeout);

 private:
  Status onReplyError(Op op, const mc::Reply& reply);

  const config::ClusterConfig& cluster_;
  const clock::Clock& clock_;
  RedisConnection conn_;
  PipelineStats& stats_;
  std::string pending_;
  std::string writing_;
  std::deque<Op> ops_;  // of every command not yet answered, in order
  uint64_t uncommitted_ = 0;
  AckLedger ledger_;  // commands committed and answered; the acknowledged offset
  struct Expect {
    uint64_t seq;
    ReplyFn fn;
  };
  std::deque<Expect> expects_;
  uint64_t item_size_max_ = 1 << 20;
  std::string version_;
  Notify writer_wake_;
  Notify progress_;
  bool closing_ = false;
  LogRateLimiter error_log_;
};

}  // namespace xdcr::target
