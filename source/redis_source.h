#pragma once
// The Redis change-stream reader: attaches to a source as a replica (PSYNC), consumes the
// snapshot when the source answers +FULLRESYNC, then yields the replication stream as units,
// each one entry or one whole MULTI ... EXEC block, with exact replication offsets.
//
// State machine (one connection's life):
//   connect -> [AUTH] -> REPLCONF listening-port, capa eof psync2 -> PSYNC
//     +CONTINUE            -> streaming from the resume offset
//     +FULLRESYNC id off   -> snapshot ($EOF:<mark> or $<len> framing) -> ACK -> streaming
//
// Not thread-safe; one strand. Units returned by nextUnit() view the read buffer and stay valid
// until the next call to nextUnit()/readMore()/consume().

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/redis_conn.h"
#include "config/config.h"

namespace xdcr::source {

/** Where a replica stands in a source's history: replication id and offset (bytes). */
struct Position {
  std::string replid;   // 40 hex chars; empty = none (first start)
  uint64_t offset = 0;  // offset of the last byte consumed (Redis master_repl_offset semantics)
};

/** One stream entry: a command and the replication offset just past it. */
struct Entry {
  std::span<const std::string_view> args;  // args[0] is the command name
  uint64_t offset_end = 0;
};

/** One entry, or a whole MULTI ... EXEC block (entries[0] is MULTI, the last is EXEC). */
struct Unit {
  std::vector<Entry> entries;
  bool transaction = false;
  uint64_t offset_end = 0;
  size_t bytes = 0;

  // storage behind `entries` (reused between units)
  std::vector<std::string_view> argv;
  std::vector<resp::ArgSpan> spans;
};

/**
 * Receives the snapshot (an RDB) of a full resync. Pull-based, so that memory stays bounded and
 * the target can push back: data() is offered the bytes buffered so far and consumes what it
 * can; what it leaves is offered again, with more, on the next call.
 */
class SnapshotSink {
 public:
  virtual ~SnapshotSink() = default;
  /** `total_bytes` is known for the `$len` framing, 0 for the diskless `$EOF:` framing. */
  virtual net::awaitable<Status> begin(const Position& at, uint64_t total_bytes) = 0;
  /**
   * `available`: snapshot bytes from where the last call stopped. `last`: they are all that is
   * left, so everything must be consumed. Returns how many bytes were consumed. The view is
   * valid only during the call.
   */
  virtual net::awaitable<Result<size_t>> data(std::string_view available, bool last) = 0;
  /** The whole snapshot was consumed. */
  virtual net::awaitable<Status> end() = 0;
};

enum class SyncKind { Partial, Full };

/**
 * Splits the replication stream's bytes into units (one entry, or a whole MULTI ... EXEC block)
 * with exact offsets. No I/O: RedisSource::nextUnit() runs it on its read buffer, the fuzz target
 * fuzz/fuzz_resp.cc on arbitrary bytes.
 */
class UnitFramer {
 public:
  enum class Status { Unit, NeedMore, Error };
  /**
   * The next complete unit at the start of `data` (the unconsumed stream; `base_offset` is the
   * offset of the byte before data[0]). On Unit, `unit` views `data`; on Error, `error` says what
   * is wrong and at which offset. Between calls `data` may only grow at its end, except that the
   * caller drops a returned unit's `bytes` from its front. A unit's entries are parsed once,
   * however many calls its bytes take to arrive.
   */
  Status next(std::string_view data, uint64_t base_offset, Unit& unit, std::string& error);

 private:
  size_t scan_hint_ = 0;  // bytes needed before parsing again is worthwhile
  struct Bound {
    size_t first, count, end;  // entry's spans and end position within the unit
  };
  // The unit being received: its complete entries so far (positions from data[0]).
  size_t parsed_ = 0;  // bytes of those entries
  bool transaction_ = false;
  std::vector<Bound> bounds_;         // reused
  std::vector<resp::ArgSpan> spans_;  // reused
  std::vector<resp::ArgSpan> args_;   // reused
};

class RedisSource {
 public:
  /**
   * `node`: the server to attach to, with the cluster's credentials (a Sentinel-managed
   * master as discovered, a shard's node); by default the cluster's own address.
   */
  RedisSource(net::any_io_executor ex, const config::ClusterConfig& cluster, std::string label,
              std::optional<RedisEndpoint> node = std::nullopt);

  /**
   * The node to attach to (a cluster shard's current master or replica, a Sentinel's master):
   * `endpoint`, which must answer ROLE with `role` ("" = no check). Default: the cluster's address.
   */
  void setNode(RedisEndpoint endpoint, std::string role) {
    node_ = std::move(endpoint);
    role_ = std::move(role);
  }

  /**
   * Connects and negotiates the stream. With a `resume` position, asks for a partial resync
   * (PSYNC replid offset+1); otherwise, or when the source refuses, a full resync whose snapshot
   * is handed to `sink`. On return the stream is positioned at `position()`.
   */
  net::awaitable<Result<SyncKind>> start(const Position* resume, SnapshotSink& sink);

  /**
   * The next complete unit from the buffer, or false when more bytes are needed (call
   * readMore()). A protocol error fails the connection.
   */
  Result<bool> nextUnit(Unit& unit);
  /** Marks `unit` consumed: the position advances to unit.offset_end. */
  void consume(const Unit& unit);
  /** Reads more stream bytes from the socket. */
  net::awaitable<Status> readMore();

  /** REPLCONF ACK <offset>. Only one write at a time: the caller serialises. */
  net::awaitable<Status> sendAck(uint64_t offset);

  const Position& position() const { return pos_; }
  /** The node this source attaches to ("host:port"). */
  std::string nodeAddress() const {
    return node_ ? node_->address() : cluster_.endpoint().address();
  }
  uint64_t bytesBuffered() const { return conn_.buffer().size(); }
  uint64_t bytesRead() const { return conn_.bytesRead(); }
  void close() { conn_.close(); }
  void cancel() { conn_.cancel(); }
  /** The bandwidth limit of what is read from the source (nullptr: none); at any time. */
  void setReadLimiter(std::shared_ptr<RateLimiter> limiter) {
    conn_.setRateLimits(std::move(limiter), nullptr);
  }

 private:
  /** COMMAND on the source: learnCommands() (command_table.h). */
  net::awaitable<Status> learnSourceCommands();
  net::awaitable<Status> receiveSnapshot(SnapshotSink& sink);

  const config::ClusterConfig& cluster_;
  std::optional<RedisEndpoint> node_;  // nullopt: the cluster's own address
  std::string role_;
  RedisConnection conn_;
  Position pos_;
  UnitFramer framer_;
};

}  // namespace xdcr::source
