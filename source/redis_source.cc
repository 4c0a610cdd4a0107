#include "source/redis_source.h"

#include <atomic>
#include <charconv>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

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

}  // namespace

RedisSource::RedisSource(net::any_io_executor ex, const config::ClusterConfig& cluster,
                         std::string label, std::optional<RedisEndpoint> node)
    : cluster_(cluster), node_(std::move(node)), conn_(std::move(ex), std::move(label)) {}

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
    if (auto r = co_await receiveSnapshot(sink); !r) co_return fail(r.error());
    // A diskless source sends no stream until it sees an ACK after the snapshot.
    if (auto r = co_await sendAck(pos_.offset); !r) co_return fail(r.error());
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

net::awaitable<Status> RedisSource::receiveSnapshot(SnapshotSink& sink) {
  const std::string& label = conn_.label();
  auto header = co_await conn_.readLine(kSyncTimeout);
  if (!header) co_return fail(header.error());
  std::string_view h = *header;
  auto& buf = conn_.buffer();
  auto offer = [&](std::string_view avail, bool last) -> net::awaitable<Result<size_t>> {
    auto n = co_await sink.data(avail, last);
    if (!n) co_return n;
    if (last && *n != avail.size()) {
      co_return fail(Error::protocol(
          fmt::format("{}: snapshot ended with {} bytes that are not a complete item", label,
                      avail.size() - *n)));
    }
    buf.consume(*n);
    co_return n;
  };
  if (h.rfind("$EOF:", 0) == 0) {
    std::string mark(h.substr(5));
    if (mark.size() != kEofMarkLength) {
      co_return fail(Error::protocol(fmt::format("{}: bad snapshot EOF marker", label)));
    }
    if (auto b = co_await sink.begin(pos_, 0); !b) co_return b;
    // The snapshot ends with the marker; the source sends nothing after it until our ACK, so
    // the marker is found at the end of what has been read. A tail that could be the start of
    // the marker is never offered.
    for (;;) {
      auto d = buf.data();
      bool complete = d.size() >= kEofMarkLength && d.substr(d.size() - kEofMarkLength) == mark;
      if (d.size() > kEofMarkLength || complete) {
        auto avail = d.substr(0, d.size() - kEofMarkLength);
        auto n = co_await offer(avail, complete);
        if (!n) co_return fail(n.error());
        if (complete) {
          buf.consume(kEofMarkLength);
          break;
        }
      }
      if (auto r = co_await conn_.readSome(); !r) co_return fail(r.error());
    }
  } else if (h.size() > 1 && h[0] == '$') {
    uint64_t len = 0;
    if (!parseU64(h.substr(1), len)) {
      co_return fail(Error::protocol(fmt::format("{}: bad snapshot length \"{}\"", label, h)));
    }
    if (auto b = co_await sink.begin(pos_, len); !b) co_return b;
    uint64_t left = len;
    while (left > 0) {
      auto d = buf.data();
      size_t n = static_cast<size_t>(std::min<uint64_t>(left, d.size()));
      if (n > 0) {
        auto used = co_await offer(d.substr(0, n), n == left);
        if (!used) co_return fail(used.error());
        left -= *used;
        if (left == 0) break;
      }
      if (auto r = co_await conn_.readSome(); !r) co_return fail(r.error());
    }
  } else {
    co_return fail(Error::protocol(fmt::format("{}: unexpected snapshot header \"{}\"", label, h)));
  }
  buf.shrinkIfIdle(1 << 20);
  co_return co_await sink.end();
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
  switch (framer_.next(conn_.buffer().data(), pos_.offset, u, error)) {
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
  conn_.buffer().consume(unit.bytes);
  pos_.offset = unit.offset_end;
}

net::awaitable<Status> RedisSource::readMore() {
  auto r = co_await conn_.readSome();
  if (!r) co_return fail(r.error());
  co_return Status{};
}

net::awaitable<Status> RedisSource::sendAck(uint64_t offset) {
  std::string out;
  char digits[24];
  auto [p, ec] = std::to_chars(digits, digits + sizeof digits, offset);
  std::vector<std::string_view> ack{"REPLCONF", "ACK", std::string_view(digits, p - digits)};
  resp::appendCommand(out, ack);
  co_return co_await conn_.writeAll(out);
}

}  // namespace xdcr::source
