#pragma once
// The writer of a Redis Cluster target: one pipelined connection per master, every command
// routed by the slot of its keys (target/slot_map.h), nothing acknowledged that the target did
// not apply (cluster-notes.md §4).
//
// What it is given: units (one source unit, or a marker), each made of parts. A part is the
// commands of one unit for one slot (or for one node, when keyless): one command, or a
// MULTI ... EXEC that must stay on one slot. A unit is acknowledged — its source offset counts
// as applied — only when every part of it, and every unit before it, has been answered without
// a redirection. So ackedOffset() is exact across nodes, as RedisTarget's is on one connection.
//
// Redirections:
//  - MOVED (the slot has a new owner) and ASK (the key moved to an importing node): the writer
//    stops sending, waits until every node has answered what it was sent, reloads the slot map
//    (MOVED), then sends every redirected part and every part not yet sent again, in the order
//    the units came (ASK: `ASKING` first, on the node ASK named). MOVED is slot-wide and ASK
//    key-wide (an absent key stays absent on the exporting node), so every later command on the
//    same key was redirected too and is sent after: the order per key holds. Counted in
//    xdcr_target_redirects_total{kind}.
//  - TRYAGAIN: a multi-key part (a MULTI over several keys of a slot, a replay-stamped MULTI,
//    MSET/DEL of several keys) whose keys are split between the two nodes of a migrating slot.
//    It is sent again after a short back-off, like a redirected part, until the keys are on one
//    side. That keeps the order per key only because nothing later of the same slot was sent
//    meanwhile: a multi-key part FENCES its slot — later parts of that slot wait, unsent, until
//    it is answered (other slots go on; a keyless part such as FLUSHALL waits for everything
//    held before it, and holds everything after it). A single-key part needs no fence: a
//    redirection of a single key is key-wide, as above.
//  - The target-loss marker of a master (a part with `rebind`): when it is redirected (its slot
//    left the master, or is leaving it), it is written again into another slot the master owns,
//    so each master keeps its own marker through a reshard.
//  - CLUSTERDOWN and the availability errors of RedisTarget (READONLY after a failover, OOM, ...)
//    end the session without acknowledging: the pipeline resumes from its acknowledged offset on
//    a fresh slot map, after the markers are checked (a failover can lose writes).
//  - Data errors (WRONGTYPE, ...) are counted and the stream goes on, as on a standalone target.
//
// Not thread-safe; one strand.

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "clock/clock.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/notify.h"
#include "common/redis_conn.h"
#include "common/resp.h"
#include "common/server_info.h"
#include "common/stats.h"
#include "config/config.h"
#include "target/slot_map.h"

namespace xdcr::target {

class ClusterTarget {
 public:
  ClusterTarget(net::any_io_executor ex, const config::ClusterConfig& cluster, std::string label,
                PipelineStats& stats, const clock::Clock& clock);
  ~ClusterTarget();

  /** Reads the slot map, connects to every master (PING), learns the smallest
   *  proto-max-bulk-len. */
  net::awaitable<Status> connect();
  uint64_t maxBulkLength() const { return max_bulk_; }
  /** The oldest of the masters (INFO server at connect): what every key's write must suit. */
  const ServerInfo& server() const { return server_; }
  /** The slot map in force (the masters' indexes are those of appendToNode()). */
  const SlotMap& slotMap() const { return map_; }

  /** The reply expected from a part's last command (a marker's `SET key token GET`). */
  using MismatchFn = std::function<Status(const std::optional<std::string>& found)>;
  struct Expect {
    std::optional<std::string> value;  // nullopt: a null reply
    MismatchFn on_mismatch;            // an error it returns ends the session
  };

  /**
   * Replies of a part that someone reads (the copy watches of expiry-semantics.md §12): those
   * of its commands numbered in `replies` (0-based, ascending; an array's elements collected,
   * ReplyInfo::items), handed to `done` in that order once the part's last reply came and it
   * was not redirected (a redirected part is sent again, and read again).
   */
  struct PartWatch {
    std::vector<uint32_t> replies;
    std::function<void(const std::vector<resp::ReplyInfo>&)> done;
    std::vector<resp::ReplyInfo> got;  // this attempt's
  };
  /** Appends a part for `slot`: `commands` commands in `bytes` (complete RESP). `multi_key`:
   *  it writes more than one key (it fences its slot, see the header comment). */
  void appendToSlot(int slot, std::string_view bytes, size_t commands, bool multi_key = false,
                    std::optional<Expect> expect = std::nullopt,
                    std::shared_ptr<PartWatch> watch = nullptr);
  /** The bytes of a master's marker written into `slot` instead (one command). */
  using RebindFn = std::function<std::string(int slot)>;
  /** Appends master `m`'s target-loss marker, one command in `bytes` for the slot `slot` it
   *  owns; `rebind` rewrites it for another slot of that master when it is redirected. */
  void appendMarkerPart(size_t m, int slot, std::string_view bytes, Expect expect, RebindFn rebind);
  /** Appends a keyless part for master `m` of slotMap() (FLUSHALL to every master, ...). */
  void appendToNode(size_t m, std::string_view bytes, size_t commands);
  /** Ends the unit whose parts were appended since the last commit: once they (and every unit
   *  before) are answered, the source is applied up to `source_offset`. */
  void commitUnit(uint64_t source_offset);
  /** Sets the acknowledged offset with nothing in flight (after a handshake). */
  void resetOffset(uint64_t source_offset);

  /** The pipeline's bandwidth limit of what is written (nullptr: none): every master's
   *  connection takes from it, those made later too. */
  void setWriteLimiter(std::shared_ptr<RateLimiter> limiter);

  /** Writers, readers and redirections, until close() or an error. */
  net::awaitable<Status> run();
  void close();

  uint64_t ackedOffset() const { return acked_offset_; }
  /** Units committed this session, and how many of them (in order) are answered. */
  uint64_t committedUnits() const { return next_unit_; }
  uint64_t answeredUnits() const { return answered_units_; }
  uint64_t inflightCommands() const { return inflight_commands_; }
  size_t pendingBytes() const { return pending_bytes_; }
  bool drained() const { return units_.empty() && open_parts_ == 0; }
  /** Seconds since the last reply while commands were in flight (0 when idle). */
  double stalledSeconds() const;
  net::awaitable<void> waitProgress(std::chrono::steady_clock::duration d) {
    co_await progress_.waitFor(d);
  }

 private:
  struct Part {
    uint64_t unit = 0;
    int slot = -1;  // -1: keyless, bound to its node
    uint32_t commands = 0;
    uint32_t replies = 0;
    uint64_t batch = 0;  // the node's batch holding its bytes
    size_t begin = 0, end = 0;
    std::optional<Expect> expect;
    std::shared_ptr<PartWatch> watch;  // nullptr: nobody reads its replies
    bool fence = false;     // multi-key: later parts of its slot wait until it is answered
    std::string master_id;  // a marker: the master it is for (rebound when redirected)
    RebindFn rebind;        // a marker: its bytes for another slot of that master
    int rebinds = 0;        // slots tried so far
    // set by the reader
    enum class Redirect : uint8_t { None, Moved, Ask, TryAgain } redirect = Redirect::None;
    std::string ask_host;
    uint16_t ask_port = 0;
    bool asking = false;  // the part starts with ASKING (its first reply is ASKING's)
  };
  /** A part waiting to be sent again, with its own copy of its bytes. */
  struct Resend {
    Part part;
    std::string bytes;
  };
  /** `a` is older than `b` (an unknown server counts as the oldest: nothing is assumed). */
  static bool oldest(const ServerInfo& a, const ServerInfo& b);
  struct Node {
    ClusterNode addr;
    std::unique_ptr<RedisConnection> conn;
    ServerInfo server;
    size_t connected_replicas = 0;    // INFO replication connected_slaves at connect
    std::string pending;              // bytes not yet handed to the writer
    std::deque<std::string> batches;  // written (or being written), kept until answered
    uint64_t first_batch = 0;         // id of batches.front()
    uint64_t pending_batch = 0;       // id pending gets when written
    std::deque<Part> parts;           // in order: sent ones first, then queued ones
    size_t sent_parts = 0;            // parts[0 .. sent_parts) were written
    bool running = false;             // its writer/reader run
    std::chrono::steady_clock::time_point last_reply{};
    std::unique_ptr<Notify> wake;
  };
  /** A part waiting behind its slot's fence, with its destination and a copy of its bytes. */
  struct Held {
    Node* dest;
    Part part;
    std::string bytes;
  };
  struct Unit {
    uint64_t seq;
    uint64_t offset;
    uint32_t open_parts;                       // parts not yet answered without a redirection
    std::chrono::steady_clock::time_point at;  // committed (xdcr_apply_latency_seconds)
  };

  Node& nodeFor(const std::string& host, uint16_t port);
  /** A part appended now would be held: a barrier, its slot's fence, or (keyless) anything
   *  held. */
  bool holds(const Part& part) const {
    return barrier_ ||
           (part.slot >= 0 ? fenced_[static_cast<size_t>(part.slot)] != 0 : !held_.empty());
  }
  /** Puts `h` at the end of held_, counted. */
  void hold(Held h);
  /** Queues a part on `n`, or behind its slot's fence (held_). */
  void append(Node& n, Part part, std::string_view bytes);
  /** The fence of `slot` is answered: its held parts are queued, in order, by the releaseHeld()
   *  that follows the reader's batch of replies. */
  void releaseFence(int slot);
  /** Queues the held parts that released fences freed, in order (once per batch of replies). */
  void releaseHeld();
  /** The slot map in force gives `slot` to the master of node id `master_id`. */
  bool ownedBy(int slot, const std::string& master_id) const;
  /** A redirected marker: the slot of its master to write it into now (-1: none left). */
  int rebindSlot(Part& p) const;
  void startNode(Node& n);
  net::awaitable<Status> connectNode(Node& n);
  net::awaitable<Status> runWriter(Node& n);
  net::awaitable<Status> runReader(Node& n);
  /** One reply for the front sent part of `n`. */
  Status onReply(Node& n, const resp::ReplyInfo& info);
  /** The part's next reply is one its watch reads. */
  static bool watchesNext(const Part& p);
  void partDone(Node& n);
  void unitPartAnswered(uint64_t unit);
  void releaseBatches(Node& n);
  bool anySent() const;
  /** Sends the redirected parts again (see the header comment). */
  net::awaitable<Status> reroute();
  void failSession(Error e);

  net::any_io_executor ex_;
  const config::ClusterConfig& cluster_;
  std::string label_;
  PipelineStats& stats_;
  const clock::Clock& clock_;
  SlotMap map_;
  std::vector<int> master_node_;   // slot map master index -> nodes_ index
  std::list<Node> nodes_;          // stable addresses (coroutines hold references)
  std::vector<Node*> node_index_;  // nodes_ by index
  std::deque<Unit> units_;         // committed, not yet acknowledged, in order
  uint64_t next_unit_ = 0;         // seq of the unit being built
  uint32_t open_parts_ = 0;        // parts appended to the unit being built
  uint64_t answered_units_ = 0;
  uint64_t acked_offset_ = 0;
  uint64_t inflight_commands_ = 0;
  size_t pending_bytes_ = 0;
  uint64_t max_bulk_ = 512ULL << 20;
  ServerInfo server_;
  std::vector<Resend> resends_;  // redirected parts, in the order they were answered
  std::vector<uint8_t> fenced_;  // per slot: a multi-key part of it is sent, not yet answered
  // What held_ holds: per slot, and keyless parts. A fence's release with nothing of its slot
  // and nothing keyless held frees nothing: it need not walk held_ (releaseFence).
  std::vector<uint32_t> held_in_slot_ = std::vector<uint32_t>(cluster::kSlots, 0);
  size_t held_keyless_ = 0;
  bool release_due_ = false;  // a fence was released with parts held: releaseHeld() walks them
  std::deque<Held> held_;     // parts behind a fence, in the order they came
  bool barrier_ = false;      // a keyless part is held: every later part waits behind it
  bool reroute_needed_ = false;
  bool holding_ = false;    // writers send nothing new (a reroute is under way)
  int reroute_rounds_ = 0;  // consecutive reroutes without a unit acknowledged in between
  bool closing_ = false;
  std::optional<Error> failed_;
  Notify control_;
  Notify progress_;
  LogRateLimiter error_log_;
  // The pipeline's bandwidth limit, for every node's connection (nullptr: none).
  std::shared_ptr<RateLimiter> write_limiter_;
};

/** A cluster redirection reply: "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381". */
struct Redirection {
  bool ask = false;
  int slot = -1;
  std::string host;
  uint16_t port = 0;
};
std::optional<Redirection> parseRedirection(std::string_view error_text);

}  // namespace xdcr::target
