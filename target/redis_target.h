#pragma once
// The target writer: one pipelined connection per target. The applier appends RESP commands to
// pending(); the writer coroutine sends them in batches while the reader coroutine counts the
// replies. Each source offset is marked after the commands it produced, so that
// ackedOffset() — the offset up to which every command has been answered by the target — is
// exactly what a checkpoint may cover (never anything the target has not acknowledged).
//
// Reply errors:
//  - data errors (WRONGTYPE, no such key, BUSYKEY, ...) mean the target's copy diverged from the
//    source; re-sending would not help. They are counted by kind, logged (rate-limited), and the
//    stream goes on.
//  - availability errors (OOM, READONLY, LOADING, NOAUTH, NOPERM, MISCONF, ...) mean the write did
//    not happen: the session fails WITHOUT acknowledging it, and resumes from the last
//    acknowledged offset after a reconnect.
//
// Not thread-safe; one strand.

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "clock/clock.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/notify.h"
#include "common/redis_conn.h"
#include "common/server_info.h"
#include "common/stats.h"
#include "config/config.h"
#include "target/ack_ledger.h"

namespace xdcr::target {

/** Error kinds (the reply's first word) that mean "this write did not happen, and may succeed
 *  later": the session ends without acknowledging it. */
bool isAvailabilityError(std::string_view kind);

class RedisTarget {
 public:
  RedisTarget(net::any_io_executor ex, const config::ClusterConfig& cluster, std::string label,
              PipelineStats& stats, const clock::Clock& clock);

  /**
   * Connects (for a Sentinel-managed target: to the master the Sentinels name now), authenticates,
   * checks the target answers PING, reads its proto-max-bulk-len.
   */
  net::awaitable<Status> connect();
  /** The node connect() reached: the session's other connections (the marker check, the
   *  stale-key scan) go to the same one. */
  const RedisEndpoint& node() const { return node_; }
  /** The largest bulk string the target accepts (its proto-max-bulk-len; 512 MiB if unknown). */
  uint64_t maxBulkLength() const { return max_bulk_; }
  /** The server connected to (INFO server at connect; unknown without +info). */
  const ServerInfo& server() const { return server_; }

  /** The pipeline's bandwidth limit of what is written to the target (nullptr: none). */
  void setWriteLimiter(std::shared_ptr<RateLimiter> limiter) {
    conn_.setRateLimits(nullptr, std::move(limiter));
  }

  /** Called before each send (an error ends the session unsent): a full sync's key record is
   *  written before the keys are (FullSyncJournal). */
  void setBeforeSend(std::function<Status()> fn) { before_send_ = std::move(fn); }

  /** Where the applier appends commands. Call commit() after appending. */
  std::string& pending() { return pending_; }
  /**
   * Records that `commands` more commands were appended, and that once they (and all before them)
   * are answered, the source is applied up to `source_offset`.
   */
  void commit(size_t commands, uint64_t source_offset);
  /** Sets the acknowledged offset with nothing in flight (after a handshake or a snapshot). */
  void resetOffset(uint64_t source_offset);

  /** Writer loop: sends pending commands until close() or an error. */
  net::awaitable<Status> runWriter();
  /** Reader loop: reads replies and advances ackedOffset(). */
  net::awaitable<Status> runReader();

  uint64_t ackedOffset() const { return ledger_.acked(); }
  /** Commands committed so far this session, and how many of them the target has answered. */
  uint64_t committedCommands() const { return ledger_.sent(); }
  uint64_t answeredCommands() const { return ledger_.replied(); }
  uint64_t inflightCommands() const { return ledger_.inflight(); }
  size_t pendingBytes() const { return pending_.size() + writing_.size(); }
  bool drained() const { return ledger_.drained() && pending_.empty(); }
  /** Waits until ackedOffset() advances (or `d` passes). */
  net::awaitable<void> waitProgress(std::chrono::steady_clock::duration d) {
    co_await progress_.waitFor(d);
  }
  /** Seconds since the last reply while commands were in flight (0 when idle). */
  double stalledSeconds() const;
  /**
   * The reply to command number `seq` (committedCommands() just after it was committed) should
   * be the bulk string `value` (nullopt: a null reply). When it is not, `on_mismatch` is called
   * with what came (nullopt: null); an error it returns ends the session. For `SET marker token
   * GET`.
   */
  using MismatchFn = std::function<Status(const std::optional<std::string>& found)>;
  void expectReply(uint64_t seq, std::optional<std::string> value, MismatchFn on_mismatch);
  /** The reply to command number `seq` goes to `check` (an error it returns ends the session);
   *  error replies are handled as any other first. */
  using ReplyFn = std::function<Status(const resp::ReplyInfo& reply)>;
  void onReply(uint64_t seq, ReplyFn check);

  /**
   * The reply to command number `seq` (in increasing order; a repeat of the last is ignored) is
   * handed to the observer with the elements of its array collected (ReplyInfo::items): which
   * writes found their copies gone (copy_repair.h). Error replies are handled as any other first.
   */
  void observe(uint64_t seq) {
    if (observed_.empty() || observed_.back() != seq) observed_.push_back(seq);
  }
  using ObserverFn = std::function<void(uint64_t seq, const resp::ReplyInfo& reply)>;
  void setObserver(ObserverFn fn) { observer_ = std::move(fn); }

  /**
   * Redis Sentinel: how many replicas a checkpoint's marker waits for (WAIT), 0 = none. Set by
   * connect(): 1 when the master has an online replica and the user may WAIT. A failover
   * promotes the replica with the most data, so a marker it acknowledged survives the failover,
   * and the next session finds it there (instead of a full sync for a target that lost data).
   */
  int waitReplicas() const { return wait_replicas_; }

  void close() {
    closing_ = true;
    writer_wake_.notify();
    conn_.close();
  }

 private:
  Status onReplyError(const std::string& text);

  const config::ClusterConfig& cluster_;
  const clock::Clock& clock_;
  RedisEndpoint node_;
  RedisConnection conn_;
  PipelineStats& stats_;
  std::string pending_;
  std::string writing_;
  std::function<Status()> before_send_;
  AckLedger ledger_;  // commands committed and answered; the acknowledged offset
  struct Expect {
    uint64_t seq;
    std::optional<std::string> value;
    MismatchFn on_mismatch;
    ReplyFn check;  // set: called instead of comparing with `value`
  };
  std::deque<Expect> expects_;
  std::deque<uint64_t> observed_;
  ObserverFn observer_;
  uint64_t max_bulk_ = 512ULL << 20;
  ServerInfo server_;
  int wait_replicas_ = 0;
  Notify writer_wake_;
  Notify progress_;
  bool closing_ = false;
  LogRateLimiter error_log_;
};

}  // namespace xdcr::target
