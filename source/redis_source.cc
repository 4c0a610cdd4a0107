#include "source/redis_source.h"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/limits.h"
#include "source/command_table.h"

namespace xdcr::source {
namespace {

constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
// +FULLRESYNC arrives only when the source's fork starts (repl-diskless-sync-delay, 5 s by
// default, plus the time to fork a large process), and snapshot bytes may pause while the child
// writes: be patient, like Redis's own repl-timeout (60 s).
constexpr auto kSyncTimeout = std::chrono::seconds(60);
constexpr size_t kEofMarkLength = 40;
// The replica version announced to a Valkey source (REPLCONF version): 9.0.0 reads RDB 80.
constexpr const char* kAnnouncedVersion = "9.0.0";

bool parseU64(std::string_view s, uint64_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

/** A size in Redis's config units (256mb, 512kb, or bytes). */
std::string redisSize(uint64_t bytes) {
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) return fmt::format("{}mb", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{}kb", bytes >> 10);
  return std::to_string(bytes);
}

/** Rounds up to a multiple of 64 MiB (what a suggested limit is written in). */
uint64_t roundUp64Mb(double bytes) {
  constexpr uint64_t k = 64ULL << 20;
  const auto b = static_cast<uint64_t>(std::max(bytes, 1.0));
  return (b + k - 1) / k * k;
}

}  // namespace

/** A full sync's spool and its pump's state (redis_source.h). */
struct RedisSource::Spool {
  Spool(const net::any_io_executor& ex, std::unique_ptr<SpoolStore> store)
      : fifo(kSpoolMemoryBytes, std::move(store)), data(ex), space(ex), acks(ex) {}

  SpoolFifo fifo;
  ReadBuffer out;  // what the parser and the framing read (the pump reads into conn_'s)
  Notify data;     // the consumer's wait: bytes arrived, the pump ended, cancel()
  Notify space;    // the pump's wait at the limit
  Notify acks;     // the snapshot ACKer's period
  SpoolLimit limit;
  bool derived = true;  // no spool_limit: the limit follows the snapshot's size
  std::chrono::steady_clock::time_point started{};
  // The snapshot's framing as the pump sees it (bytes after the header line).
  bool eof = false;
  std::string mark;      // $EOF:<mark>
  uint64_t rdb_len = 0;  // $<len>; for $EOF: once the mark is seen, the bytes up to its end
  uint64_t rdb_seen = 0;
  std::string tail;  // $EOF: the last (up to 40) bytes seen
  bool rdb_complete = false;
  std::chrono::steady_clock::time_point rdb_done_at{};
  uint64_t stream_bytes = 0;  // received after the snapshot
  // The pump.
  bool stop = false;             // hand the connection back after the current read
  bool pump_done = false;        // the pump's loop ended (stopped, or `error`)
  bool background_done = false;  // the pump and the ACKer have both returned
  std::optional<Error> error;
  std::chrono::steady_clock::time_point error_at{};  // when the pump's read or write failed
  bool at_limit = false;
  bool limit_hit = false;
  std::chrono::steady_clock::time_point at_limit_since{};
  double seconds_at_limit = 0;  // before at_limit_since
  // The consumer.
  bool cancelled = false;   // cancel(): the next (or pending) fill() returns Cancelled
  bool in_snapshot = true;  // receiveSnapshot reads (no hand-back before its end)
  bool link_acks = false;   // the link's ACKs have begun: the snapshot ACKer stops
};

RedisSource::RedisSource(net::any_io_executor ex, const config::ClusterConfig& cluster,
                         std::string label, std::optional<RedisEndpoint> node)
    : cluster_(cluster),
      node_(std::move(node)),
      conn_(ex, std::move(label)),
      ex_(ex),
      background_wake_(ex) {}

// (background() has returned by now: the spool's file goes with spool_)
RedisSource::~RedisSource() = default;

net::awaitable<Result<SyncKind>> RedisSource::start(const Position* resume, SnapshotSink& sink) {
  const std::string& label = conn_.label();
  // TCP, TLS (certificate checked before anything is sent), AUTH.
  // (a named local: GCC 12 mishandles temporaries inside co_await expressions)
  const RedisEndpoint endpoint = node_ ? *node_ : cluster_.endpoint();
  if (auto r = co_await conn_.connect(endpoint, kHandshakeTimeout); !r) {
    co_return fail(r.error());
  }
  if (!role_.empty()) {
    // Discovery named this node; it must still be what discovery said before we PSYNC (a
    // failover may have happened since): never attach to a demoted master.
    std::vector<std::string_view> role{"ROLE"};
    auto r = co_await conn_.call(role, kHandshakeTimeout, true);
    if (!r) co_return fail(r.error());
    if (r->has_error || r->elements.empty() || r->elements[0] != role_) {
      co_return fail(Error::io(fmt::format(
          "{}: the node is {} now, not {} (a failover?); finding the shard's {} again", label,
          r->has_error ? r->text : (r->elements.empty() ? "?" : r->elements[0]), role_, role_)));
    }
  }
  if (auto s = co_await learnSourceCommands(); !s) co_return fail(s.error());
  co_await readBufferLimit();
  std::vector<std::vector<std::string_view>> handshake;
  handshake.push_back({"PING"});
  handshake.push_back({"REPLCONF", "listening-port", "0"});
  handshake.push_back({"REPLCONF", "capa", "eof", "capa", "psync2"});
  // What this agent reads, said as a replica of that version would (Valkey src/replication.c
  // replicaRdbVersion): Valkey 9 then sends RDB 80 (VALKEY080), the only format in which it can
  // write a hash with field TTLs; to a replica that says nothing it sends RDB 11 and aborts the
  // whole snapshot at the first such hash (server-versions-notes.md §3.2). Redis has no such
  // option and answers with an error, which changes nothing: ignored.
  handshake.push_back({"REPLCONF", "version", kAnnouncedVersion});
  for (auto& args : handshake) {
    std::string name(args.front());
    auto r = co_await conn_.call(args, kHandshakeTimeout);
    if (!r) co_return fail(r.error());
    if (r->has_error && args[1] == "version" && r->text.find("NOPERM") == std::string::npos &&
        r->text.find("NOAUTH") == std::string::npos) {
      continue;
    }
    if (r->has_error) {
      auto kind = (r->text.rfind("NOAUTH", 0) == 0 || r->text.rfind("NOPERM", 0) == 0)
                      ? Error::Kind::Auth
                      : Error::Kind::Refused;
      co_return fail(Error{kind, fmt::format("{}: {} refused: {}{}", label, name, r->text,
                                             kind == Error::Kind::Auth
                                                 ? "; set username/password, and grant the user "
                                                   "+psync +replconf +ping"
                                                 : "")});
    }
  }

  std::string psync_offset = resume ? std::to_string(resume->offset + 1) : "-1";
  std::string out;
  std::vector<std::string_view> psync{"PSYNC", resume ? std::string_view(resume->replid) : "?",
                                      psync_offset};
  resp::appendCommand(out, psync);
  if (auto w = co_await conn_.writeAll(out); !w) co_return fail(w.error());
  auto line = co_await conn_.readLine(kSyncTimeout);
  if (!line) co_return fail(line.error());

  std::string_view reply = *line;
  if (reply.rfind("+CONTINUE", 0) == 0) {
    pos_ = *resume;
    std::string_view rest = reply.substr(9);
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    if (!rest.empty() && rest != pos_.replid) {
      // psync2 after a failover: the history continues under the new id.
      spdlog::info("{}: replication id changed {} -> {} (history continues)", label, pos_.replid,
                   rest);
      pos_.replid = std::string(rest);
    }
    spdlog::info("{}: partial resync accepted at offset {}", label, pos_.offset);
    co_return SyncKind::Partial;
  }
  if (reply.rfind("+FULLRESYNC ", 0) == 0) {
    std::string_view rest = reply.substr(12);
    auto sp = rest.find(' ');
    uint64_t off = 0;
    if (sp != 40 || !parseU64(rest.substr(sp + 1), off)) {
      co_return fail(
          Error::protocol(fmt::format("{}: malformed FULLRESYNC reply \"{}\"", label, reply)));
    }
    pos_.replid = std::string(rest.substr(0, sp));
    pos_.offset = off;
    if (resume) {
      spdlog::warn("{}: source refused partial resync from {}:{}; full resync at {}:{}", label,
                   resume->replid, resume->offset, pos_.replid, pos_.offset);
    } else {
      spdlog::info("{}: full resync at {}:{}", label, pos_.replid, pos_.offset);
    }
    sync_ = FullSync{};
    sync_.active = true;
    sync_.started = std::chrono::steady_clock::now();
    sync_.offset = off;
    if (auto r = co_await receiveSnapshot(sink); !r) co_return fail(r.error());
    sync_.applied = true;
    if (spool_) {
      spool_->in_snapshot = false;
    } else {
      sync_.active = false;
    }
    // A diskless source sends no stream until it sees an ACK after the snapshot.
    if (auto r = co_await writeAck(pos_.offset); !r) co_return fail(co_await dropped(r.error()));
    co_return SyncKind::Full;
  }
  if (reply.rfind("-NOPERM", 0) == 0 || reply.rfind("-NOAUTH", 0) == 0) {
    co_return fail(Error::auth(
        fmt::format("{}: PSYNC refused: {}; grant the replication user +psync +replconf +ping",
                    label, reply.substr(1))));
  }
  co_return fail(Error::refused(fmt::format("{}: PSYNC refused: \"{}\"", label, reply)));
}

net::awaitable<Status> RedisSource::learnSourceCommands() {
  // The source's own command table: the write commands ours lacks (a newer server's) become
  // in-place writes with their key positions, so filters and key_rewrite never miss their keys
  // (command_table.h learnCommands). Without +command (or before AUTH is configured right) the
  // static table is all there is: said once.
  const std::vector<std::vector<std::string>> ask = {{"COMMAND"}};
  auto r = co_await conn_.callMany(ask, kHandshakeTimeout);
  if (!r) co_return fail(r.error());
  const resp::Value& reply = (*r)[0];
  if (reply.isError()) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      spdlog::warn(
          "{}: COMMAND refused ({}): commands newer than this agent's table pass without their "
          "keys being seen by filters and key_rewrite; grant the replication user +command",
          conn_.label(), reply.str);
    }
    co_return Status{};
  }
  const size_t added = learnCommands(parseCommandReply(reply));
  if (added > 0) {
    spdlog::info("{}: {} write command(s) learned from the source's COMMAND table", conn_.label(),
                 added);
  }
  co_return Status{};
}

net::awaitable<void> RedisSource::readBufferLimit() {
  // What a diagnosis of a link dropped during a full sync names (dropped()). A replication user
  // without +config|get is refused: then the message says what the default is.
  buffer_limit_ = BufferLimit{};
  std::vector<std::string_view> args{"CONFIG", "GET", "client-output-buffer-limit"};
  auto r = co_await conn_.call(args, kHandshakeTimeout, true);
  if (!r || r->has_error || r->elements.size() < 2) co_return;
  // "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60" (Valkey: replica)
  std::istringstream in(r->elements[1]);
  std::string word;
  while (in >> word) {
    if (word != "slave" && word != "replica") continue;
    BufferLimit l;
    if (in >> l.hard >> l.soft >> l.seconds) {
      l.known = true;
      buffer_limit_ = l;
    }
    break;
  }
}

ReadBuffer& RedisSource::in() {
  return spool_ ? spool_->out : conn_.buffer();
}

const ReadBuffer& RedisSource::in() const {
  return spool_ ? spool_->out : conn_.buffer();
}

uint64_t RedisSource::bytesBuffered() const {
  uint64_t n = in().size();
  if (spool_) n += spool_->fifo.size() + conn_.buffer().size();
  return n;
}

void RedisSource::close() {
  closed_ = true;
  conn_.close();  // a pump's read ends with an error: it stops, and wakes the consumer
}

void RedisSource::cancel() {
  if (spool_) {
    // The pump goes on reading (a checkpoint's wake-up must not stop the spool).
    spool_->cancelled = true;
    spool_->data.notify();
    return;
  }
  conn_.cancel();
}

SpoolStats RedisSource::figures(const Spool& s) const {
  SpoolStats f;
  f.active = true;
  f.bytes = s.fifo.size();
  f.on_disk = s.fifo.onDisk();
  f.peak = s.fifo.peak();
  f.peak_on_disk = s.fifo.peakOnDisk();
  f.limit = s.limit.bytes;
  f.at_limit = s.at_limit;
  return f;
}

SpoolStats RedisSource::spoolStats() const {
  return spool_ ? figures(*spool_) : last_spool_;
}

void RedisSource::snapshotSizeHint(uint64_t used_mem) {
  sync_.used_mem = used_mem;
  if (!spool_ || !spool_->derived || !spool_->eof) return;
  // A diskless snapshot announces no length: its limit follows the source's used memory.
  spool_->limit = spoolLimitFor(std::nullopt, used_mem, diskSpaceOf(spool_options_->dir));
  spdlog::info("{}: the snapshot's source uses {}: spool limit {} ({})", conn_.label(),
               formatBytes(used_mem), formatBytes(spool_->limit.bytes), spool_->limit.why);
  spool_->space.notify();
}

void RedisSource::startSpool(bool eof, std::string mark, uint64_t len) {
  spool_.reset();
  last_spool_ = SpoolStats{};
  if (!spool_options_ || !background_) return;
  const SpoolOptions& o = *spool_options_;
  if (o.limit && *o.limit == 0) {
    sync_.spool_off = true;
    spdlog::info(
        "{}: no spool (spool_limit 0 on cluster {}): the snapshot is read as fast as the targets "
        "apply it, and the source buffers its writes meanwhile",
        conn_.label(), o.cluster);
    return;
  }
  std::error_code ec;
  std::filesystem::create_directories(o.dir, ec);  // (a failure is the file's error, later)
  spool_ = std::make_unique<Spool>(ex_, std::make_unique<FileSpoolStore>(o.dir, o.name));
  Spool& s = *spool_;
  s.derived = !o.limit.has_value();
  s.limit = spoolLimitFor(o.limit, eof ? sync_.used_mem : len, diskSpaceOf(o.dir));
  s.started = std::chrono::steady_clock::now();
  s.eof = eof;
  s.mark = std::move(mark);
  s.rdb_len = eof ? 0 : len;
  // What was read with the header is the snapshot's first bytes: the parser's buffer starts
  // with them, the pump reads what follows.
  std::swap(s.out, conn_.buffer());
  observe(s.out.data());
  spdlog::info(
      "{}: spooling the full sync: the source is read as fast as the link delivers, at most {} "
      "({}) held in memory and in {}",
      conn_.label(), formatBytes(s.limit.bytes), s.limit.why, o.dir);
  background_wake_.notify();
}

net::awaitable<Status> RedisSource::background() {
  background_ = true;
  struct Off {
    bool& running;
    ~Off() { running = false; }
  } off{background_};
  for (;;) {
    if (spool_ && !spool_->background_done) {
      Spool& s = *spool_;
      using namespace net::experimental::awaitable_operators;
      co_await (pump() && snapshotAcks());
      s.background_done = true;
      s.data.notify();
      continue;
    }
    co_await background_wake_.wait();
    net::cancellation_state cs = co_await net::this_coro::cancellation_state;
    if (cs.cancelled() != net::cancellation_type::none) co_return Status{};
  }
}

net::awaitable<Status> RedisSource::receiveSnapshot(SnapshotSink& sink) {
  const std::string& label = conn_.label();
  auto header = co_await conn_.readLine(kSyncTimeout);
  if (!header) co_return fail(co_await dropped(header.error()));
  std::string_view h = *header;
  std::string mark;
  uint64_t len = 0;
  const bool eof = h.rfind("$EOF:", 0) == 0;
  if (eof) {
    mark = std::string(h.substr(5));
    if (mark.size() != kEofMarkLength) {
      co_return fail(Error::protocol(fmt::format("{}: bad snapshot EOF marker", label)));
    }
  } else if (h.size() > 1 && h[0] == '$') {
    if (!parseU64(h.substr(1), len)) {
      co_return fail(Error::protocol(fmt::format("{}: bad snapshot length \"{}\"", label, h)));
    }
  } else {
    co_return fail(Error::protocol(fmt::format("{}: unexpected snapshot header \"{}\"", label, h)));
  }
  sync_.total = len;
  sync_.bytes_before = conn_.bytesRead() - conn_.buffer().size();
  startSpool(eof, mark, len);

  uint64_t consumed = 0;  // snapshot bytes the sink took
  auto offer = [&](std::string_view avail, bool last) -> net::awaitable<Result<size_t>> {
    auto n = co_await sink.data(avail, last);
    if (!n) co_return n;
    if (last && *n != avail.size()) {
      co_return fail(Error::protocol(
          fmt::format("{}: snapshot ended with {} bytes that are not a complete item", label,
                      avail.size() - *n)));
    }
    in().consume(*n);
    consumed += *n;
    co_return n;
  };
  // `left` more snapshot bytes, the last of them offered as such; what follows stays in in().
  auto counted = [&](uint64_t left) -> net::awaitable<Status> {
    while (left > 0) {
      auto d = in().data();
      size_t n = static_cast<size_t>(std::min<uint64_t>(left, d.size()));
      if (n > 0) {
        auto used = co_await offer(d.substr(0, n), n == left);
        if (!used) co_return fail(used.error());
        left -= *used;
        if (left == 0) break;
      }
      if (auto r = co_await fill(); !r) co_return r;
    }
    co_return Status{};
  };
  if (eof) {
    if (auto b = co_await sink.begin(pos_, 0); !b) co_return b;
    // The snapshot ends with the marker; the source sends nothing after it until our ACK, so
    // the marker is found at the end of what has been read. A tail that could be the start of
    // the marker is never offered. With a spool, the pump finds the marker (and ACKs, so stream
    // bytes may follow it in the spool): from then on the snapshot's length is known.
    for (;;) {
      if (spool_ && spool_->rdb_complete) {
        const uint64_t rdb = spool_->rdb_len - kEofMarkLength;
        if (auto r = co_await counted(rdb - consumed); !r) co_return r;
        while (in().size() < kEofMarkLength) {
          if (auto r = co_await fill(); !r) co_return r;
        }
        if (in().data().substr(0, kEofMarkLength) != mark) {
          co_return fail(
              Error::protocol(fmt::format("{}: the snapshot's EOF marker is wrong", label)));
        }
        in().consume(kEofMarkLength);
        break;
      }
      auto d = in().data();
      bool complete =
          !spool_ && d.size() >= kEofMarkLength && d.substr(d.size() - kEofMarkLength) == mark;
      if (d.size() > kEofMarkLength || complete) {
        auto avail = d.substr(0, d.size() - kEofMarkLength);
        auto n = co_await offer(avail, complete);
        if (!n) co_return fail(n.error());
        if (complete) {
          in().consume(kEofMarkLength);
          break;
        }
      }
      if (auto r = co_await fill(); !r) co_return r;
    }
  } else {
    if (auto b = co_await sink.begin(pos_, len); !b) co_return b;
    if (auto r = co_await counted(len); !r) co_return r;
  }
  in().shrinkIfIdle(1 << 20);
  co_return co_await sink.end();
}

void RedisSource::observe(std::string_view d) {
  Spool& s = *spool_;
  if (s.rdb_complete) {
    s.stream_bytes += d.size();
    return;
  }
  if (!s.eof) {
    const uint64_t rdb = std::min<uint64_t>(s.rdb_len - s.rdb_seen, d.size());
    s.rdb_seen += rdb;
    s.stream_bytes += d.size() - rdb;
    if (s.rdb_seen < s.rdb_len) return;
  } else {
    s.rdb_seen += d.size();
    if (d.size() >= kEofMarkLength) {
      s.tail.assign(d.substr(d.size() - kEofMarkLength));
    } else {
      s.tail.append(d);
      if (s.tail.size() > kEofMarkLength) s.tail.erase(0, s.tail.size() - kEofMarkLength);
    }
    if (s.tail != s.mark) return;
    s.rdb_len = s.rdb_seen;
  }
  s.rdb_complete = true;
  s.rdb_done_at = std::chrono::steady_clock::now();
  s.acks.notify();
  const double secs = std::chrono::duration<double>(s.rdb_done_at - s.started).count();
  spdlog::info(
      "{}: snapshot received: {} in {:.1f} s ({}/s); {} of it wait in the spool for the targets "
      "({} on disk); ACKing the source so that its writes come into the spool meanwhile",
      conn_.label(), formatBytes(s.rdb_len), secs,
      formatBytes(static_cast<uint64_t>(s.rdb_len / std::max(secs, 0.001))),
      formatBytes(s.fifo.size() + s.out.size()), formatBytes(s.fifo.onDisk()));
}

net::awaitable<void> RedisSource::pump() {
  Spool& s = *spool_;  // (spool_ stays until background_done)
  ReadBuffer& buf = conn_.buffer();
  while (!s.stop) {
    if (s.fifo.size() >= s.limit.bytes) {
      if (!s.at_limit) {
        s.at_limit = true;
        s.at_limit_since = std::chrono::steady_clock::now();
        if (!s.limit_hit) {
          s.limit_hit = true;
          spdlog::warn(
              "{}: the spool holds its limit of {} ({}; {} on disk): reading the source waits for "
              "the targets now, and the source buffers what it still has to send (up to its "
              "client-output-buffer-limit replica); raise spool_limit of cluster {} if the disk "
              "allows",
              conn_.label(), formatBytes(s.limit.bytes), s.limit.why, formatBytes(s.fifo.onDisk()),
              spool_options_->cluster);
        }
      }
      co_await s.space.waitFor(std::chrono::seconds(1));
      continue;
    }
    if (s.at_limit) {
      s.at_limit = false;
      s.seconds_at_limit += secondsSince(s.at_limit_since);
    }
    auto r = co_await conn_.readSome();
    if (!r) {
      if (r.error().kind == Error::Kind::Cancelled && !closed_) continue;
      s.error = r.error();
      s.error_at = std::chrono::steady_clock::now();
      break;
    }
    observe(buf.data());
    auto a = s.fifo.append(buf.data());
    buf.consume(buf.size());
    if (!a) {
      s.error = a.error();
      s.error_at = std::chrono::steady_clock::now();
      break;
    }
    s.data.notify();
  }
  s.pump_done = true;
  s.data.notify();
  s.acks.notify();
}

net::awaitable<void> RedisSource::snapshotAcks() {
  Spool& s = *spool_;
  while (!s.pump_done && !s.link_acks) {
    Limits::Duration period = spool_limits::kAckPeriod;
    if (s.rdb_complete) {
      // The whole snapshot is in: a diskless source streams only after an ACK, and a replica
      // online must ACK within repl-timeout. Until the link's own ACKs begin, the full sync's
      // offset (a source only ever raises what it holds as acknowledged).
      if (auto w = co_await writeAck(sync_.offset); !w) break;  // (the pump sees the link end)
      // An ACK that arrives before the source has reaped its snapshot child is ignored (its
      // writes keep piling up for us): often at first, like the link's ACKs in a session's first
      // seconds.
      if (std::chrono::steady_clock::now() - s.rdb_done_at < spool_limits::kAckEarlyPhase) {
        period = spool_limits::kAckPeriodEarly;
      }
    }
    co_await s.acks.waitFor(period);
  }
}

net::awaitable<Status> RedisSource::fill() {
  if (!spool_) {
    auto r = co_await conn_.readSome();
    if (!r) co_return fail(co_await dropped(r.error()));
    if (sync_.drained_at &&
        (*r < (16u << 10) ||
         std::chrono::steady_clock::now() - *sync_.drained_at > spool_limits::kCaughtUpAfter)) {
      sync_.active = false;  // caught up with the source: the full sync is over
      sync_.drained_at.reset();
    }
    co_return Status{};
  }
  Spool& s = *spool_;
  for (;;) {
    if (s.error && s.error->kind == Error::Kind::Storage) {
      co_return fail(Error::storage(fmt::format(
          "{}: {}; the session ends (nothing read past it is used): free space there, or set "
          "spool_limit of cluster {} lower (0: no spool, the source read at the targets' pace)",
          conn_.label(), s.error->message, spool_options_->cluster)));
    }
    if (s.pump_done && s.error && !s.rdb_complete) {
      // The snapshot cannot be completed: applying what was spooled of it is wasted work.
      co_return fail(co_await dropped(*s.error));
    }
    if (s.fifo.size() > 0) {
      auto n = s.fifo.take(s.out, spool_limits::kTakeBytes);
      if (!n) {
        s.error = n.error();
        continue;
      }
      s.space.notify();
      // Let the pump's completions run between chunks: a consumer that never has to wait for
      // its targets would otherwise keep the thread.
      co_await net::post(ex_, net::use_awaitable);
      co_return Status{};
    }
    if (s.pump_done && s.background_done) {
      if (s.error) co_return fail(co_await dropped(*s.error));
      if (s.in_snapshot) {
        co_return fail(Error::protocol(
            fmt::format("{}: the snapshot ended before its last byte", conn_.label())));
      }
      handoff();
      co_return co_await fill();
    }
    if (s.rdb_complete && !s.in_snapshot) s.stop = true;  // drained: hand back after this read
    if (s.cancelled) {
      s.cancelled = false;
      co_return fail(Error::cancelled());
    }
    co_await s.data.wait();
  }
}

void RedisSource::handoff() {
  Spool& s = *spool_;
  // The pump moved every byte it read into the spool; anything left would come after the
  // parser's bytes.
  if (conn_.buffer().size() > 0) {
    size_t free = 0;
    const auto rest = conn_.buffer().data();
    std::memcpy(s.out.prepare(rest.size(), free), rest.data(), rest.size());
    s.out.commit(rest.size());
    conn_.buffer().consume(rest.size());
  }
  std::swap(conn_.buffer(), s.out);
  last_spool_ = figures(s);
  last_spool_.active = false;
  last_spool_.at_limit = false;
  const double secs = secondsSince(sync_.started);
  if (s.at_limit) s.seconds_at_limit += secondsSince(s.at_limit_since);
  spdlog::info(
      "{}: spool drained {:.1f} s after the full sync began: reading the source directly again "
      "(spool peak {}, {} of it on disk at most; {} spooled in all{})",
      conn_.label(), secs, formatBytes(s.fifo.peak()), formatBytes(s.fifo.peakOnDisk()),
      formatBytes(s.fifo.total()),
      s.limit_hit ? fmt::format("; held at its limit of {} for {:.0f} s",
                                formatBytes(s.limit.bytes), s.seconds_at_limit)
                  : std::string());
  sync_.spool_held = s.limit_hit;
  sync_.spooled_stream = s.stream_bytes;
  spool_.reset();
  sync_.drained_at = std::chrono::steady_clock::now();  // (sync_.active until caught up)
}

net::awaitable<Status> RedisSource::writeAck(uint64_t offset) {
  std::string out;
  char digits[24];
  auto [p, ec] = std::to_chars(digits, digits + sizeof digits, offset);
  std::vector<std::string_view> ack{"REPLCONF", "ACK", std::string_view(digits, p - digits)};
  resp::appendCommand(out, ack);
  // One write at a time: the spool's ACKer and the link's ACKs share the connection.
  while (writing_) {
    net::steady_timer t(ex_, std::chrono::milliseconds(1));
    co_await t.async_wait(net::as_tuple(net::use_awaitable));
  }
  writing_ = true;
  struct Done {
    bool& writing;
    ~Done() { writing = false; }
  } done{writing_};
  co_return co_await conn_.writeAll(out);
}

net::awaitable<Error> RedisSource::dropped(const Error& e) {
  if (e.kind != Error::Kind::Io || !sync_.active || closed_) co_return e;
  const Spool* s = spool_.get();
  // (a pump's error may surface later, once what it had read was applied)
  const double secs = s != nullptr && s->error
                          ? std::chrono::duration<double>(s->error_at - sync_.started).count()
                          : secondsSince(sync_.started);
  const bool rdb_in = s ? s->rdb_complete : sync_.applied;
  uint64_t received = s ? s->rdb_seen : conn_.bytesRead() - sync_.bytes_before;
  if (sync_.total > 0) received = std::min(received, sync_.total);
  const uint64_t stream_received = s ? s->stream_bytes : sync_.spooled_stream;
  const bool drained = s == nullptr && sync_.drained_at.has_value();

  // What the source took in writes since the full sync began: what it had to buffer for us.
  std::optional<uint64_t> produced;
  {
    RedisConnection probe(ex_, conn_.label() + " (after the drop)");
    const RedisEndpoint endpoint = node_ ? *node_ : cluster_.endpoint();
    if (auto c = co_await probe.connect(endpoint, std::chrono::seconds(3)); c) {
      const std::vector<std::vector<std::string>> info = {{"INFO", "replication"}};
      auto r = co_await probe.callMany(info, std::chrono::seconds(3));
      if (r && !(*r)[0].isError()) {
        const std::string& text = (*r)[0].str;
        const auto at = text.find("master_repl_offset:");
        uint64_t off = 0;
        if (at != std::string::npos) {
          std::string_view v(text.data() + at + 19, text.size() - at - 19);
          v = v.substr(0, v.find_first_of("\r\n"));
          if (parseU64(v, off) && off >= sync_.offset) produced = off - sync_.offset;
        }
      }
      probe.close();
    }
  }

  const BufferLimit& l = buffer_limit_;
  const std::string current =
      fmt::format("replica {} {} {}", redisSize(l.hard), redisSize(l.soft), l.seconds);
  std::string where;
  if (!rdb_in) {
    where = fmt::format("after {} of the snapshot{} and {:.0f} s", formatBytes(received),
                        sync_.total ? fmt::format(" (of {})", formatBytes(sync_.total))
                        : sync_.used_mem
                            ? fmt::format(" (the source uses {})", formatBytes(sync_.used_mem))
                            : std::string(),
                        secs);
  } else if (s != nullptr && !sync_.applied) {
    where = fmt::format(
        "after the whole snapshot ({}, received in {:.0f} s) and {:.0f} s, while the agent "
        "applied it from the spool",
        formatBytes(received),
        std::chrono::duration<double>(s->rdb_done_at - sync_.started).count(), secs);
  } else {
    where = fmt::format(
        "after the whole snapshot ({}) and {:.0f} s, while the agent applied what it had spooled",
        formatBytes(received), secs);
  }
  std::string spool_said;
  const std::string cluster = spool_options_ ? spool_options_->cluster : cluster_.name;
  if (drained) {
    spool_said = fmt::format(
        "The agent had spooled the full sync (peak {}{}) and its spool had drained {:.0f} s "
        "before: it was reading directly what the link had delivered meanwhile",
        formatBytes(last_spool_.peak),
        sync_.spool_held
            ? fmt::format(", held at its limit of {} for a while", formatBytes(last_spool_.limit))
            : std::string(),
        secondsSince(*sync_.drained_at));
  } else if (s == nullptr) {
    spool_said = sync_.spool_off
                     ? fmt::format(
                           "The agent had no spool (spool_limit 0 on cluster {}): it read the "
                           "snapshot only as fast as the targets applied it, so the transfer took "
                           "as long as the apply",
                           cluster)
                     : "The agent read the snapshot only as fast as the targets applied it";
  } else if (s->limit_hit) {
    const auto until = s->error ? s->error_at : std::chrono::steady_clock::now();
    const double held =
        s->seconds_at_limit +
        (s->at_limit ? std::chrono::duration<double>(until - s->at_limit_since).count() : 0);
    spool_said = fmt::format(
        "The agent was spooling but held back by its spool limit ({}: {}) for {:.0f} of those "
        "{:.0f} s, reading no faster than the targets applied",
        formatBytes(s->limit.bytes), s->limit.why, held, secs);
  } else {
    spool_said = fmt::format(
        "The agent was spooling ({} held, limit {}) and read everything the link delivered",
        formatBytes(s->fifo.size() + s->out.size()), formatBytes(s->limit.bytes));
  }
  std::string how_much;
  double need = 0;
  if (produced) {
    const double rate = secs > 0 ? *produced / secs : 0;
    how_much = fmt::format("{} of writes reached the source in these {:.0f} s ({}/s)",
                           formatBytes(*produced), secs, formatBytes(static_cast<uint64_t>(rate)));
    need = double(*produced - std::min(*produced, stream_received));
    // (a diskless snapshot's size is about the source's used memory)
    const uint64_t total = sync_.total > 0 ? sync_.total : sync_.used_mem;
    if (!rdb_in && total > received && received > 0) {
      // At the pace so far, the transfer needs this long in all; the source holds the writes of
      // all of it.
      const double whole = secs * double(total) / double(received);
      need = std::max(need, rate * whole);
      how_much += fmt::format(
          "; at that pace the snapshot's transfer takes about {:.0f} s, so "
          "the source must hold about {} for the agent",
          whole, formatBytes(static_cast<uint64_t>(need)));
    } else {
      how_much += fmt::format(", {} of them not read by the agent yet",
                              formatBytes(static_cast<uint64_t>(need)));
    }
  } else {
    how_much =
        "(the agent could not read the source's INFO replication to measure what it buffered: "
        "grant the replication user +info)";
  }
  std::string advice;
  if (need > 0) {
    const uint64_t soft = std::max<uint64_t>(l.soft, roundUp64Mb(need * 1.5));
    const uint64_t hard = std::max<uint64_t>(l.hard, 2 * soft);
    advice = fmt::format(
        "; raise it on the source: CONFIG SET client-output-buffer-limit \"replica {} {} {}\" "
        "(and in its configuration file)",
        redisSize(hard), redisSize(soft), l.seconds);
  } else {
    advice =
        "; raise the replica limits on the source above what it takes in writes during a whole "
        "full sync (its write rate x the sync's duration)";
  }
  std::string remedy;
  if (s == nullptr && sync_.spool_off) {
    remedy =
        fmt::format(", or let the agent spool (remove spool_limit: 0 from cluster {})", cluster);
  } else if ((s != nullptr && s->limit_hit) || (drained && sync_.spool_held)) {
    remedy = fmt::format(", or raise spool_limit of cluster {}", cluster);
  } else if (s != nullptr && rdb_in) {
    const double after_rdb =
        std::chrono::duration<double>((s->error ? s->error_at : std::chrono::steady_clock::now()) -
                                      s->rdb_done_at)
            .count();
    if (after_rdb < 5) {
      // The writes made during the transfer wait in the source until its first ACK is taken.
      remedy = fmt::format(
          ". It dropped the agent {:.1f} s after the snapshot's transfer ended, with the writes "
          "made during that transfer ({:.0f} s) still in its buffer: the transfer itself must end "
          "within the limit, as for a native replica",
          after_rdb, std::chrono::duration<double>(s->rdb_done_at - sync_.started).count());
    } else {
      remedy =
          ". The agent had read everything the source sent, so the output buffer was nearly "
          "empty: the cause may be elsewhere (the network, CLIENT KILL, a restart of the source)";
    }
  }
  co_return Error::io(fmt::format(
      "{}: the source closed the link during a full sync, {} ({}). The usual cause is the "
      "source's client-output-buffer-limit replica ({}{}: it drops a replica whose pending "
      "output passes the hard limit, or the soft limit for that many seconds, and during a full "
      "sync that output is every write made since it began, until the agent has read the whole "
      "snapshot). {}. {}{}{}; the full sync starts again",
      conn_.label(), where, e.message, current,
      l.known ? ", as the source says"
              : ": CONFIG GET was refused, the default is replica 256mb 64mb 60",
      spool_said, how_much, advice, remedy));
}

UnitFramer::Status UnitFramer::next(std::string_view data, uint64_t base_offset, Unit& u,
                                    std::string& error) {
  if (data.size() < scan_hint_ || data.empty()) return Status::NeedMore;
  // Resume after the entries of this unit parsed by earlier calls (data[0, parsed_) is unchanged),
  // so that a long MULTI ... EXEC block arriving in many reads is parsed once.
  size_t pos = parsed_;
  for (;;) {
    auto r = resp::parseCommand(data.substr(pos), args_);
    if (r.status == resp::ParseStatus::NeedMore) {
      parsed_ = pos;
      scan_hint_ = r.need ? pos + r.need : data.size() + 1;
      return Status::NeedMore;
    }
    if (r.status == resp::ParseStatus::Error) {
      error = fmt::format("near offset {}: {}", base_offset + pos, r.error);
      return Status::Error;
    }
    size_t first = spans_.size();
    for (auto s : args_) spans_.push_back({pos + s.pos, s.len});
    std::string_view name = data.substr(pos + args_[0].pos, args_[0].len);
    pos += r.consumed;
    bounds_.push_back({first, args_.size(), pos});
    if (bounds_.size() == 1) {
      if (!resp::iequals(name, "multi")) break;
      transaction_ = true;
    } else if (resp::iequals(name, "exec")) {
      break;
    }
  }
  u.entries.clear();
  u.argv.clear();
  u.spans.swap(spans_);  // the unit's storage; the old one is reused for the next unit
  u.transaction = transaction_;
  u.argv.reserve(u.spans.size());
  for (auto s : u.spans) u.argv.emplace_back(data.data() + s.pos, s.len);
  for (const auto& b : bounds_) {
    u.entries.push_back(Entry{std::span<const std::string_view>(u.argv.data() + b.first, b.count),
                              base_offset + b.end});
  }
  u.bytes = pos;
  u.offset_end = base_offset + pos;
  spans_.clear();
  bounds_.clear();
  transaction_ = false;
  parsed_ = 0;
  scan_hint_ = 0;
  return Status::Unit;
}

Result<bool> RedisSource::nextUnit(Unit& u) {
  std::string error;
  switch (framer_.next(in().data(), pos_.offset, u, error)) {
    case UnitFramer::Status::Unit:
      return true;
    case UnitFramer::Status::NeedMore:
      return false;
    case UnitFramer::Status::Error:
      break;
  }
  return fail(Error::protocol(
      fmt::format("{}: malformed replication stream {}; the connection will be re-established",
                  conn_.label(), error)));
}

void RedisSource::consume(const Unit& unit) {
  in().consume(unit.bytes);
  pos_.offset = unit.offset_end;
}

net::awaitable<Status> RedisSource::readMore() {
  co_return co_await fill();
}

net::awaitable<Status> RedisSource::sendAck(uint64_t offset) {
  if (spool_ && !spool_->link_acks) {
    spool_->link_acks = true;  // the snapshot's ACKer stops
    spool_->acks.notify();
  }
  auto w = co_await writeAck(offset);
  if (!w) co_return fail(co_await dropped(w.error()));
  co_return w;
}

bool RedisSource::snapshotLost() const {
  return spool_ && spool_->pump_done && spool_->error && !spool_->rdb_complete;
}

net::awaitable<Status> RedisSource::checkSnapshot() {
  if (!snapshotLost()) co_return Status{};
  co_return fail(co_await dropped(*spool_->error));
}

}  // namespace xdcr::source
