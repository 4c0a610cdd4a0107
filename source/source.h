#pragma once
// The Source interface: one source shard's change stream, resolved.
//
// A Source owns everything that depends only on the source: the handshake and the choice of
// partial or full sync, the snapshot and the stream, their framing and decoding, the expiry
// index and the classification of deletions (source/resolver.h). What it emits is target-neutral:
// ResolvedUnits whose events carry kind, db (namespace), key, absolute source deadline and a
// payload (the source command, or an RDB value). What a target makes of them is a Sink's
// (target/sink.h); replicator/source_link.h composes one Source with the Sinks of every pipeline
// that reads it.
//
// A new source kind (a Redis Cluster shard, a Sentinel-managed master, another store's change
// feed) implements this interface; nothing downstream changes.

#include <boost/asio/awaitable.hpp>

#include <cstdint>

#include "common/error.h"
#include "source/event.h"
#include "source/expiry_index.h"
#include "source/redis_source.h"

namespace xdcr::source {

/**
 * Where a Source delivers a full sync's snapshot, key by key, as resolved units. The consumer may
 * take its time in snapshotUnit() (backpressure): the source reads no further meanwhile.
 */
class SnapshotConsumer {
 public:
  virtual ~SnapshotConsumer() = default;
  /** A snapshot starts at `at`; `total_bytes` is 0 when unknown (diskless). */
  virtual net::awaitable<Status> beginSnapshot(const Position& at, uint64_t total_bytes) = 0;
  /** One key (unit.snapshot; one change). The views are valid only during the call. */
  virtual net::awaitable<Status> snapshotUnit(const ResolvedUnit& unit) = 0;
  /** Bookkeeping: `keys` more keys announced (RESIZEDB), `bytes` more snapshot bytes read. */
  virtual void snapshotProgress(uint64_t keys_announced, uint64_t bytes) = 0;
  /** Every key was delivered. */
  virtual net::awaitable<Status> endSnapshot() = 0;
};

class Source {
 public:
  virtual ~Source() = default;

  /**
   * Connects and negotiates the stream: with `resume` a partial resync from it (its db in
   * effect: `resume_db`), otherwise, or when the source refuses, a full sync whose snapshot goes
   * to `consumer` (and into the expiry index). On return the stream stands at position().
   */
  virtual net::awaitable<Result<SyncKind>> start(const Position* resume, int resume_db,
                                                 SnapshotConsumer& consumer) = 0;
  /**
   * The next complete unit from what was read, resolved (the expiry index follows it), or false
   * when more bytes are needed (readMore()). Call consume() before the next one.
   */
  virtual Result<bool> nextUnit(ResolvedUnit& unit) = 0;
  /** The unit is taken: the position advances past it. */
  virtual void consume(const ResolvedUnit& unit) = 0;
  /** Reads more stream bytes (cancel() makes it return Cancelled, losing nothing). */
  virtual net::awaitable<Status> readMore() = 0;
  /** Tells the source how far the targets have applied (REPLCONF ACK for Redis). */
  virtual net::awaitable<Status> sendAck(uint64_t offset) = 0;

  /** The position just past the last consumed unit. */
  virtual const Position& position() const = 0;
  /** The source db in effect at position(). */
  virtual int currentDb() const = 0;
  /** The stream offset just past every byte received so far (consumed or not). */
  virtual uint64_t receivedOffset() const = 0;
  /** Bytes received from the source on this connection (a liveness signal). */
  virtual uint64_t bytesRead() const = 0;
  /** The deadlines of the source's keys, kept by the resolver (checkpointed with a position). */
  virtual ExpiryIndex& expiryIndex() = 0;

  /**
   * What the source does beside the session's reads (RedisShardSource: the spool's pump during
   * a full sync, source/spool.h). Run it in parallel with start() and the read loop for the
   * session's whole life; it returns only when cancelled, and must have returned before the
   * source is destroyed.
   */
  virtual net::awaitable<Status> background() = 0;
  /** The spool of the current (or last) full sync. */
  virtual SpoolStats spool() const = 0;

  /** Makes a pending readMore() return Cancelled, losing nothing. */
  virtual void cancel() = 0;
  virtual void close() = 0;
};

}  // namespace xdcr::source
