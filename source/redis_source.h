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
//
// The spool (source/spool.h; setSpool(), with background() running beside the session): from a
// full sync's snapshot header on, a pump reads the connection as fast as the link delivers into
// a SpoolFifo, and the RDB walker, then the stream's framing (readMore/nextUnit), read from the
// FIFO. Once the whole snapshot is in, the pump ACKs the full sync's offset every second (a
// diskless source streams only after an ACK; an online replica must ACK within repl-timeout)
// until the link's own ACKs take over, so the writes made meanwhile also come into the spool.
// When the FIFO is empty after the snapshot, the pump stops after its current read and the
// connection is read directly again (the buffer handed back as it is: no copy, no per-byte
// cost). ACKs are written on the same connection meanwhile (one write at a time).

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/notify.h"
#include "common/redis_conn.h"
#include "config/config.h"
#include "source/spool.h"

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
  ~RedisSource();

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
  /** Reads more stream bytes: from the socket, or while a full sync spools from the spool. */
  net::awaitable<Status> readMore();

  /** REPLCONF ACK <offset> (waits for an ACK the spool's pump is writing). */
  net::awaitable<Status> sendAck(uint64_t offset);

  /**
   * Full syncs spool (the header's comment) with these options; without them, or without
   * background() running, the snapshot is read at the consumer's pace. Before start().
   */
  void setSpool(SpoolOptions options) { spool_options_ = std::move(options); }
  /**
   * The spool's pump and the snapshot's ACKs. Run it beside the session (in parallel with what
   * calls start() and readMore()) for the whole life of the connection: it returns only when
   * cancelled, and must have returned before this object is destroyed.
   */
  net::awaitable<Status> background();
  /** The snapshot's used-mem (its RDB aux field): a diskless snapshot's size, for the limit. */
  void snapshotSizeHint(uint64_t used_mem);
  SpoolStats spoolStats() const;
  /**
   * During a full sync that spools: fails (with the diagnosis of dropped()) once the pump has
   * lost the link before the whole snapshot was in, so that the snapshot's consumer stops
   * applying a snapshot that cannot complete. Otherwise succeeds at once.
   */
  net::awaitable<Status> checkSnapshot();
  /** Whether checkSnapshot() would fail (cheap: for every key). */
  bool snapshotLost() const;

  const Position& position() const { return pos_; }
  /** The node this source attaches to ("host:port"). */
  std::string nodeAddress() const {
    return node_ ? node_->address() : cluster_.endpoint().address();
  }
  /** Bytes received and not consumed yet (the spool's included). */
  uint64_t bytesBuffered() const;
  uint64_t bytesRead() const { return conn_.bytesRead(); }
  /** Closes the connection (a pump's read ends with it). */
  void close();
  /** Makes a pending readMore() return Cancelled, losing nothing (the pump goes on). */
  void cancel();
  /** The bandwidth limit of what is read from the source (nullptr: none); at any time. */
  void setReadLimiter(std::shared_ptr<RateLimiter> limiter) {
    conn_.setRateLimits(std::move(limiter), nullptr);
  }

 private:
  struct Spool;  // redis_source.cc
  /** The source's client-output-buffer-limit for replicas (CONFIG GET at connect). */
  struct BufferLimit {
    uint64_t hard = 256ULL << 20;
    uint64_t soft = 64ULL << 20;
    uint64_t seconds = 60;
    bool known = false;  // read from the source; otherwise Redis's default
  };
  /** The full sync under way: what a diagnosis of a dropped link says. */
  struct FullSync {
    bool active = false;   // from +FULLRESYNC until start() returns, or the spool drains
    bool applied = false;  // the snapshot was consumed (start() returned)
    std::chrono::steady_clock::time_point started{};
    uint64_t offset = 0;        // the +FULLRESYNC offset
    uint64_t total = 0;         // $<len>; 0 for $EOF:
    uint64_t used_mem = 0;      // the RDB's used-mem aux field; 0 = not seen
    uint64_t bytes_before = 0;  // conn_.bytesRead() where the snapshot began
    bool spool_off = false;     // spool_limit: 0
    // After the spool drained, what the kernel buffered during the sync is read directly: a
    // drop found there is still the full sync's, until a read finds the link caught up.
    std::optional<std::chrono::steady_clock::time_point> drained_at;
    bool spool_held = false;      // the drained spool had reached its limit
    uint64_t spooled_stream = 0;  // stream bytes the drained spool received
  };

  /** COMMAND on the source: learnCommands() (command_table.h). */
  net::awaitable<Status> learnSourceCommands();
  /** CONFIG GET client-output-buffer-limit (a refusal leaves the default). */
  net::awaitable<void> readBufferLimit();
  net::awaitable<Status> receiveSnapshot(SnapshotSink& sink);
  /** The buffer the snapshot's parser and the stream's framing read: the spool's, or conn_'s. */
  ReadBuffer& in();
  const ReadBuffer& in() const;
  /** More bytes into in(): a read of the socket, or bytes from the spool (waiting for them). */
  net::awaitable<Status> fill();
  /** Puts a spool in place after the snapshot's header (when the options say so). */
  void startSpool(bool eof, std::string mark, uint64_t len);
  /** The pump saw `d` (after the snapshot's header): the snapshot's framing. */
  void observe(std::string_view d);
  /** Reads the connection into the spool until stopped or failed. */
  net::awaitable<void> pump();
  /** REPLCONF ACK <full sync offset> every second from the snapshot's end until the link ACKs. */
  net::awaitable<void> snapshotAcks();
  /** The spool is drained and its pump done: the connection is read directly again. */
  void handoff();
  net::awaitable<Status> writeAck(uint64_t offset);
  /**
   * `e` as the session's error. A link lost during a full sync (or while its spool drains) says
   * after how much of the snapshot and how long, that the usual cause is the source's
   * client-output-buffer-limit replica, what to raise and by how much, and what the spool did.
   */
  net::awaitable<Error> dropped(const Error& e);
  SpoolStats figures(const Spool& s) const;

  const config::ClusterConfig& cluster_;
  std::optional<RedisEndpoint> node_;  // nullopt: the cluster's own address
  std::string role_;
  RedisConnection conn_;
  Position pos_;
  UnitFramer framer_;
  net::any_io_executor ex_;
  std::optional<SpoolOptions> spool_options_;
  std::unique_ptr<Spool> spool_;  // while a full sync spools, until it drains
  SpoolStats last_spool_;         // the figures of the last spool, once it is gone
  Notify background_wake_;        // a spool starts
  bool background_ = false;       // background() runs
  bool writing_ = false;          // an ACK is being written
  bool closed_ = false;           // close() was called
  BufferLimit buffer_limit_;
  FullSync sync_;
};

}  // namespace xdcr::source
