#include "target/cluster_target.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <charconv>
#include <tuple>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/limits.h"
#include "target/redis_target.h"

namespace xdcr::target {

using namespace net::experimental::awaitable_operators;

namespace {

constexpr auto kConnectTimeout = std::chrono::seconds(10);
using cluster_limits::kMapTimeout;
using cluster_limits::kMaxMarkerRebinds;
using cluster_limits::kMaxRerouteRounds;

std::string_view firstWord(std::string_view s) {
  return s.substr(0, s.find(' '));
}

}  // namespace

std::optional<Redirection> parseRedirection(std::string_view text) {
  Redirection r;
  const std::string_view kind = firstWord(text);
  if (kind == "ASK") {
    r.ask = true;
  } else if (kind != "MOVED") {
    return std::nullopt;
  }
  std::string_view rest = text.substr(kind.size());
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  const size_t sp = rest.find(' ');
  if (sp == std::string_view::npos) return std::nullopt;
  const std::string_view slot = rest.substr(0, sp);
  std::string_view addr = rest.substr(sp + 1);
  auto [p, ec] = std::from_chars(slot.data(), slot.data() + slot.size(), r.slot);
  if (ec != std::errc() || r.slot < 0 || r.slot >= cluster::kSlots) return std::nullopt;
  const size_t colon = addr.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  r.host = std::string(addr.substr(0, colon));
  const std::string_view port = addr.substr(colon + 1);
  auto [q, ec2] = std::from_chars(port.data(), port.data() + port.size(), r.port);
  if (ec2 != std::errc() || r.port == 0) return std::nullopt;
  return r;
}

ClusterTarget::ClusterTarget(net::any_io_executor ex, const config::ClusterConfig& cluster,
                             std::string label, PipelineStats& stats, const clock::Clock& clock)
    : ex_(ex),
      cluster_(cluster),
      label_(std::move(label)),
      stats_(stats),
      clock_(clock),
      fenced_(cluster::kSlots, 0),
      control_(ex),
      progress_(ex) {}

ClusterTarget::~ClusterTarget() = default;

void ClusterTarget::setWriteLimiter(std::shared_ptr<RateLimiter> limiter) {
  write_limiter_ = std::move(limiter);
  for (Node* n : node_index_) n->conn->setRateLimits(nullptr, write_limiter_);
}

ClusterTarget::Node& ClusterTarget::nodeFor(const std::string& host, uint16_t port) {
  for (Node* n : node_index_) {
    if (n->addr.port == port && n->addr.host == host) return *n;
  }
  Node& n = nodes_.emplace_back();
  n.addr.host = host;
  n.addr.port = port;
  n.conn = std::make_unique<RedisConnection>(ex_, fmt::format("{} node {}:{}", label_, host, port));
  n.conn->setRateLimits(nullptr, write_limiter_);
  n.wake = std::make_unique<Notify>(ex_);
  node_index_.push_back(&n);
  return n;
}

net::awaitable<Status> ClusterTarget::connectNode(Node& n) {
  const RedisEndpoint endpoint = cluster_.endpointAt(n.addr.host, n.addr.port);
  if (auto r = co_await n.conn->connect(endpoint, kConnectTimeout); !r) {
    co_return r;
  }
  std::vector<std::string_view> ping{"PING"};
  auto r = co_await n.conn->call(ping, kConnectTimeout);
  if (!r) co_return fail(r.error());
  if (r->has_error) {
    co_return fail(
        Error::auth(fmt::format("{}: PING refused: {}; check the cluster's username and password",
                                n.conn->label(), r->text)));
  }
  std::vector<std::string_view> get{"CONFIG", "GET", "proto-max-bulk-len"};
  auto cfg = co_await n.conn->call(get, kConnectTimeout, true);
  if (!cfg) co_return fail(cfg.error());
  if (!cfg->has_error && cfg->elements.size() == 2) {
    uint64_t v = 0;
    auto [p, ec] = std::from_chars(cfg->elements[1].data(),
                                   cfg->elements[1].data() + cfg->elements[1].size(), v);
    if (ec == std::errc() && v > 0) max_bulk_ = std::min(max_bulk_, v);
  }
  // Which snapshot payloads it takes, whether it stores field TTLs. A user without +info gets
  // an error: unknown, then RESTORE is tried and a refusal counted.
  // And its replicas as it counts them (for the markers' WAIT 1: CLUSTER SLOTS leaves out a
  // replica it does not count healthy yet, right after the cluster formed).
  const std::vector<std::vector<std::string>> info = {{"INFO", "server"}, {"INFO", "replication"}};
  auto inf = co_await n.conn->callMany(info, kConnectTimeout);
  if (!inf) co_return fail(inf.error());
  n.server = (*inf)[0].isError() ? ServerInfo{} : ServerInfo::parse((*inf)[0].str);
  n.connected_replicas = 0;
  if (!(*inf)[1].isError()) {
    const std::string_view v = infoField((*inf)[1].str, "connected_slaves");
    size_t count = 0;
    if (std::from_chars(v.data(), v.data() + v.size(), count).ec == std::errc()) {
      n.connected_replicas = count;
    }
  }
  co_return Status{};
}

net::awaitable<Status> ClusterTarget::connect() {
  auto map = co_await loadSlotMap(cluster_, {}, kMapTimeout);
  if (!map) co_return fail(map.error());
  if (const size_t n = map->uncovered(); n > 0) {
    co_return fail(Error::refused(fmt::format(
        "{}: {} of 16384 slots have no master (CLUSTER SLOTS); the cluster is not ready: "
        "assign every slot",
        label_, n)));
  }
  map_ = std::move(*map);
  master_node_.clear();
  for (size_t i = 0; i < map_.masters().size(); ++i) {
    const ClusterNode& m = map_.masters()[i];
    Node& n = nodeFor(m.host, m.port);
    n.addr.id = m.id;
    if (auto s = co_await connectNode(n); !s) co_return s;
    map_.setReplicas(i, std::max(map_.masters()[i].replicas, n.connected_replicas));
    master_node_.push_back(static_cast<int>(std::find(node_index_.begin(), node_index_.end(), &n) -
                                            node_index_.begin()));
    if (master_node_.size() == 1 || oldest(n.server, server_)) server_ = n.server;
  }
  co_return Status{};
}

bool ClusterTarget::oldest(const ServerInfo& a, const ServerInfo& b) {
  if (!a.known || !b.known) return !a.known;
  return std::tie(a.major, a.minor, a.patch) < std::tie(b.major, b.minor, b.patch);
}

void ClusterTarget::append(Node& n, Part part, std::string_view bytes) {
  pending_bytes_ += bytes.size();
  inflight_commands_ += part.commands;
  // Held: a part of a slot whose multi-key part is out (a TRYAGAIN on that one must not find a
  // later write of its keys applied); a keyless part (FLUSHALL, ...) while anything is held (it
  // must not overtake a held write); and everything after such a keyless part.
  if (holds(part)) {
    hold(Held{&n, std::move(part), std::string(bytes)});
    return;
  }
  if (part.slot >= 0 && part.fence) fenced_[static_cast<size_t>(part.slot)] = 1;
  if (part.asking) resp::appendCommand(n.pending, {"ASKING"});
  part.batch = n.pending_batch;
  part.begin = n.pending.size();
  n.pending.append(bytes);
  part.end = n.pending.size();
  n.parts.push_back(std::move(part));
  n.wake->notify();
}

void ClusterTarget::hold(Held h) {
  if (h.part.slot < 0) {
    barrier_ = true;
    ++held_keyless_;
  } else {
    ++held_in_slot_[static_cast<size_t>(h.part.slot)];
  }
  held_.push_back(std::move(h));
}

void ClusterTarget::releaseFence(int slot) {
  fenced_[static_cast<size_t>(slot)] = 0;
  // Nothing of this slot held and nothing keyless: every held part waits for another slot's
  // fence, which this release does not change. Otherwise the held parts are walked once the
  // reader has taken every reply it has (releaseHeld), not once per reply: walking them on every
  // release made a replay after a crash quadratic (CI's sanitized run spent whole seconds per
  // reply here, the event loop starved, checkpoints stopped, a source reshard's guarded RESTOREs
  // timed out, a restarted link did not even reach its PSYNC in 60 s).
  if (held_in_slot_[static_cast<size_t>(slot)] != 0 || held_keyless_ != 0) release_due_ = true;
}

void ClusterTarget::releaseHeld() {
  if (!release_due_) return;
  release_due_ = false;
  // Every held part in order: what is free now goes out, the rest (another slot's fence, behind
  // a multi-key part of its slot released first, behind a keyless part still held) is held
  // again, in the same order, as it was (counted, its bytes not copied). Only the order within
  // a slot and behind a keyless part matters; one walk for several released fences keeps both.
  std::deque<Held> release;
  release.swap(held_);
  std::fill(held_in_slot_.begin(), held_in_slot_.end(), 0);
  held_keyless_ = 0;
  barrier_ = false;
  for (Held& h : release) {
    if (holds(h.part)) {
      hold(std::move(h));
      continue;
    }
    inflight_commands_ -= std::min<uint64_t>(inflight_commands_, h.part.commands);
    pending_bytes_ -= std::min(pending_bytes_, h.bytes.size());
    append(*h.dest, std::move(h.part), h.bytes);
  }
}

void ClusterTarget::appendToSlot(int slot, std::string_view bytes, size_t commands, bool multi_key,
                                 std::optional<Expect> expect, std::shared_ptr<PartWatch> watch) {
  const int m = map_.ownerOf(slot);
  // connect() refuses a map with a slot unowned; a later map (after MOVED) keeps the previous
  // owner's node for such a slot, which answers MOVED or CLUSTERDOWN.
  Node& n = *node_index_[static_cast<size_t>(master_node_[static_cast<size_t>(std::max(m, 0))])];
  Part p;
  p.unit = next_unit_;
  p.slot = slot;
  p.commands = static_cast<uint32_t>(commands);
  p.fence = multi_key;
  p.expect = std::move(expect);
  p.watch = std::move(watch);
  append(n, std::move(p), bytes);
  ++open_parts_;
}

void ClusterTarget::appendMarkerPart(size_t m, int slot, std::string_view bytes, Expect expect,
                                     RebindFn rebind) {
  Node& n = *node_index_[static_cast<size_t>(master_node_[m])];
  Part p;
  p.unit = next_unit_;
  p.slot = slot;
  p.commands = 1;
  p.expect = std::move(expect);
  p.master_id = map_.masters()[m].id;
  p.rebind = std::move(rebind);
  append(n, std::move(p), bytes);
  ++open_parts_;
}

bool ClusterTarget::ownedBy(int slot, const std::string& master_id) const {
  const int m = map_.ownerOf(slot);
  return m >= 0 && map_.masters()[static_cast<size_t>(m)].id == master_id;
}

int ClusterTarget::rebindSlot(Part& p) const {
  if (p.master_id.empty() || p.rebinds >= kMaxMarkerRebinds) return -1;
  int m = -1;
  for (size_t i = 0; i < map_.masters().size(); ++i) {
    if (map_.masters()[i].id == p.master_id) m = static_cast<int>(i);
  }
  if (m < 0) return -1;
  // From its highest slot down (a reshard usually takes a master's slots from the lowest up),
  // skipping the ones tried: the n-th highest slot it owns other than the redirected one.
  int skip = p.rebinds++;
  for (int s = cluster::kSlots - 1; s >= 0; --s) {
    if (map_.ownerOf(s) != m || s == p.slot) continue;
    if (skip-- == 0) return s;
  }
  return -1;
}

void ClusterTarget::appendToNode(size_t m, std::string_view bytes, size_t commands) {
  Node& n = *node_index_[static_cast<size_t>(master_node_[m])];
  Part p;
  p.unit = next_unit_;
  p.commands = static_cast<uint32_t>(commands);
  append(n, std::move(p), bytes);
  ++open_parts_;
}

void ClusterTarget::commitUnit(uint64_t source_offset) {
  const uint64_t seq = next_unit_++;
  const uint32_t parts = open_parts_;
  open_parts_ = 0;
  if (parts == 0 && units_.empty()) {
    // Nothing in flight: a unit without target commands (ping, filtered keys) is applied now.
    acked_offset_ = source_offset;
    ++answered_units_;
    return;
  }
  units_.push_back(Unit{seq, source_offset, parts, clock_.monotonicNow()});
}

void ClusterTarget::resetOffset(uint64_t source_offset) {
  // Only with nothing in flight (after a handshake): every unit so far counts as answered.
  units_.clear();
  answered_units_ = next_unit_;
  acked_offset_ = source_offset;
}

void ClusterTarget::unitPartAnswered(uint64_t unit) {
  if (units_.empty() || unit < units_.front().seq) return;  // before a resetOffset()
  Unit& u = units_[unit - units_.front().seq];
  if (u.open_parts > 0) --u.open_parts;
  bool progressed = false;
  const auto now = units_.front().open_parts == 0 ? clock_.monotonicNow()
                                                  : std::chrono::steady_clock::time_point{};
  while (!units_.empty() && units_.front().open_parts == 0) {
    acked_offset_ = units_.front().offset;
    stats_.apply_latency.observe(std::chrono::duration<double>(now - units_.front().at).count());
    ++answered_units_;
    units_.pop_front();
    progressed = true;
  }
  if (progressed) {
    reroute_rounds_ = 0;
    progress_.notify();
  }
}

bool ClusterTarget::anySent() const {
  for (const Node* n : node_index_) {
    if (n->sent_parts > 0) return true;
  }
  return false;
}

void ClusterTarget::failSession(Error e) {
  if (!failed_) failed_ = std::move(e);
  control_.notify();
}

void ClusterTarget::startNode(Node& n) {
  if (n.running) return;
  n.running = true;
  auto loops = [](ClusterTarget* self, Node* node) -> net::awaitable<Status> {
    auto r = co_await (self->runWriter(*node) || self->runReader(*node));
    co_return std::visit([](auto& s) { return s; }, r);
  };
  net::co_spawn(ex_, loops(this, &n), [this, &n](std::exception_ptr e, Status s) {
    n.running = false;
    if (!closing_) {
      if (e) s = fail(Error::io(fmt::format("{}: unexpected failure in the writer", label_)));
      failSession(s ? Error::io(fmt::format("{}: connection closed", n.conn->label())) : s.error());
    }
    control_.notify();
  });
}

net::awaitable<Status> ClusterTarget::run() {
  for (Node* n : node_index_) startNode(*n);
  while (!failed_ && !closing_) {
    if (reroute_needed_ && !anySent()) {
      if (auto s = co_await reroute(); !s) {
        failSession(s.error());
        break;
      }
      continue;
    }
    co_await control_.waitFor(std::chrono::seconds(1));
  }
  closing_ = true;
  for (Node* n : node_index_) {
    n->conn->close();
    n->wake->notify();
  }
  while (std::any_of(node_index_.begin(), node_index_.end(),
                     [](const Node* n) { return n->running; })) {
    co_await control_.waitFor(std::chrono::milliseconds(50));
  }
  if (failed_) co_return fail(*failed_);
  co_return Status{};
}

void ClusterTarget::close() {
  closing_ = true;
  for (Node* n : node_index_) {
    n->conn->close();
    n->wake->notify();
  }
  control_.notify();
}

net::awaitable<Status> ClusterTarget::runWriter(Node& n) {
  for (;;) {
    while (n.pending.empty() || holding_) {
      if (closing_) co_return Status{};
      co_await n.wake->wait();
    }
    if (closing_) co_return Status{};
    if (n.sent_parts == 0) n.last_reply = clock_.monotonicNow();  // the stall clock starts
    pending_bytes_ -= std::min(pending_bytes_, n.pending.size());
    n.batches.push_back(std::move(n.pending));
    n.pending = std::string();
    ++n.pending_batch;
    n.sent_parts = n.parts.size();  // every queued part was in pending
    // (the reader releases a batch only once every part in it is answered, and the server
    // cannot answer bytes it has not received: the batch outlives this write)
    auto r = co_await n.conn->writeAll(n.batches.back());
    if (!r) co_return r;
  }
}

net::awaitable<Status> ClusterTarget::runReader(Node& n) {
  resp::ReplyInfo info;
  for (;;) {
    auto& buf = n.conn->buffer();
    bool progressed = false;
    for (;;) {
      info.collect_items =
          n.sent_parts > 0 && n.parts.front().watch && watchesNext(n.parts.front());
      auto pr = resp::parseReply(buf.data(), info);
      if (pr.status == resp::ParseStatus::NeedMore) break;
      if (pr.status == resp::ParseStatus::Error) {
        co_return fail(
            Error::protocol(fmt::format("{}: malformed reply: {}", n.conn->label(), pr.error)));
      }
      buf.consume(pr.consumed);
      if (n.sent_parts == 0) {
        co_return fail(Error::protocol(
            fmt::format("{}: unexpected reply \"{}\"", n.conn->label(), info.text)));
      }
      if (auto s = onReply(n, info); !s) {
        failSession(s.error());
        co_return s;
      }
      progressed = true;
    }
    releaseHeld();  // (before anything else can append: the applier runs only after this)
    if (progressed) {
      n.last_reply = clock_.monotonicNow();
      progress_.notify();
      if (reroute_needed_) control_.notify();
    }
    auto r = co_await n.conn->readSome();
    if (!r) co_return fail(r.error());
  }
}

bool ClusterTarget::watchesNext(const Part& p) {
  // The next reply's command: the first reply of a part sent with ASKING is ASKING's.
  const int64_t command = static_cast<int64_t>(p.replies) - (p.asking ? 1 : 0);
  if (command < 0) return false;
  const auto& r = p.watch->replies;
  return std::binary_search(r.begin(), r.end(), static_cast<uint32_t>(command));
}

Status ClusterTarget::onReply(Node& n, const resp::ReplyInfo& info) {
  Part& p = n.parts.front();
  if (p.watch && watchesNext(p)) p.watch->got.push_back(info);
  ++p.replies;
  const bool last = p.replies == p.commands + (p.asking ? 1 : 0);
  if (info.type == resp::ReplyType::Error) {
    const std::string_view kind = firstWord(info.text);
    if (auto r = parseRedirection(info.text)) {
      if (p.redirect == Part::Redirect::None) {
        p.redirect = r->ask ? Part::Redirect::Ask : Part::Redirect::Moved;
        p.ask_host = r->host;
        p.ask_port = r->port;
        if (p.slot < 0) p.slot = r->slot;
      }
      ++stats_.target_redirects_by_kind[r->ask ? "ask" : "moved"];
    } else if (kind == "EXECABORT" && p.redirect != Part::Redirect::None) {
      // The transaction was discarded because a command in it was redirected: sent again.
    } else if (kind == "TRYAGAIN" && p.fence) {
      // Its keys are on both sides of a migrating slot; nothing later of the slot was sent (the
      // fence): sent again after a back-off.
      if (p.redirect == Part::Redirect::None) p.redirect = Part::Redirect::TryAgain;
      ++stats_.target_redirects_by_kind["tryagain"];
    } else if (kind == "TRYAGAIN" || kind == "CLUSTERDOWN" || isAvailabilityError(kind)) {
      ++stats_.target_errors;
      ++stats_.target_errors_by_kind[std::string(kind)];
      if (kind == "TRYAGAIN" || kind == "CLUSTERDOWN") {
        ++stats_.target_redirects_by_kind[kind == "TRYAGAIN" ? "tryagain" : "clusterdown"];
      }
      return fail(Error::refused(fmt::format(
          "{}: target refused a write: {}; will retry from the last acknowledged offset",
          n.conn->label(), info.text)));
    } else {
      ++stats_.target_errors;
      ++stats_.target_errors_by_kind[std::string(kind)];
      uint64_t suppressed = 0;
      if (error_log_.allow(suppressed)) {
        spdlog::warn("{}: target error: {} (counted in xdcr_target_errors_total{{kind=\"{}\"}}){}",
                     n.conn->label(), info.text, kind,
                     suppressed ? fmt::format("; {} more suppressed", suppressed) : "");
      }
    }
  } else if (info.has_error) {
    // An EXEC whose array holds an error (WRONGTYPE inside a transaction): a data error.
    const std::string kind(firstWord(info.text));
    ++stats_.target_errors;
    ++stats_.target_errors_by_kind[kind];
  }
  if (!last) return Status{};
  if (p.watch) {
    if (p.redirect == Part::Redirect::None && p.watch->done) p.watch->done(p.watch->got);
    p.watch->got.clear();  // (sent again when redirected: read again)
  }
  if (p.redirect == Part::Redirect::None && p.expect) {
    const bool null = info.type == resp::ReplyType::Null;
    if (null != !p.expect->value.has_value() || (!null && info.text != *p.expect->value)) {
      if (auto s =
              p.expect->on_mismatch(null ? std::nullopt : std::optional<std::string>(info.text));
          !s) {
        return s;
      }
    }
  }
  partDone(n);
  return Status{};
}

void ClusterTarget::partDone(Node& n) {
  Part p = std::move(n.parts.front());
  n.parts.pop_front();
  --n.sent_parts;
  inflight_commands_ -= std::min<uint64_t>(inflight_commands_, p.commands);
  if (p.redirect != Part::Redirect::None) {
    const std::string& batch = n.batches[p.batch - n.first_batch];
    Resend r{std::move(p), batch.substr(0, 0)};
    r.bytes.assign(batch, r.part.begin, r.part.end - r.part.begin);
    r.part.replies = 0;
    resends_.push_back(std::move(r));
    reroute_needed_ = true;
    holding_ = true;  // nothing more is sent until the redirected parts are sent again
    control_.notify();
  } else {
    unitPartAnswered(p.unit);
    if (p.fence && p.slot >= 0) releaseFence(p.slot);
  }
  releaseBatches(n);
}

void ClusterTarget::releaseBatches(Node& n) {
  // A batch goes once no part in it is waiting (parts are in batch order); the last written
  // one stays while the writer may still be writing it.
  const uint64_t keep_from = n.parts.empty() || n.sent_parts == 0
                                 ? n.pending_batch - 1
                                 : std::min(n.parts.front().batch, n.pending_batch - 1);
  while (!n.batches.empty() && n.first_batch < keep_from) {
    n.batches.pop_front();
    ++n.first_batch;
  }
}

net::awaitable<Status> ClusterTarget::reroute() {
  if (++reroute_rounds_ > kMaxRerouteRounds) {
    co_return fail(Error::refused(fmt::format(
        "{}: the cluster redirected the same writes {} times in a row; its slot map does not "
        "settle (check CLUSTER SLOTS on every node)",
        label_, kMaxRerouteRounds)));
  }
  const bool tryagain = std::any_of(resends_.begin(), resends_.end(), [](const Resend& r) {
    return r.part.redirect == Part::Redirect::TryAgain;
  });
  if (reroute_rounds_ > 1 || tryagain) {
    // The slot's new owner may not know it yet (SETSLOT reaches the nodes one by one); the keys
    // of a TRYAGAIN are still being migrated.
    net::steady_timer t(ex_);
    t.expires_after(std::chrono::milliseconds(std::min(20 * reroute_rounds_, 500)));
    co_await t.async_wait(net::as_tuple(net::use_awaitable));
    if (closing_ || failed_) co_return Status{};
  }
  // The map first: the sink goes on appending while this waits, into the nodes' queues, and
  // every part queued until the parts are collected below is sent in unit order. (Collected
  // first, an older part would be queued again behind a newer one of the same key that came
  // in meanwhile: a write applied before the one it followed.)
  const bool moved = std::any_of(resends_.begin(), resends_.end(), [](const Resend& r) {
    return r.part.redirect == Part::Redirect::Moved;
  });
  if (moved) {
    std::vector<config::NodeAddress> known;
    for (const Node* n : node_index_) known.push_back({n->addr.host, n->addr.port});
    auto map = co_await loadSlotMap(cluster_, known, kMapTimeout);
    if (!map) co_return fail(map.error());
    // A master that is not one any more failed over: what it acknowledged after its replica
    // last caught up may be gone (a frozen master even acknowledges writes after it was
    // replaced). The session ends; the next one checks every master's marker against the
    // checkpoint and replays from it (or resyncs when the promoted node lacks the checkpoint).
    for (const ClusterNode& old : map_.masters()) {
      if (map->find(old.host, old.port) < 0) {
        co_return fail(Error::io(fmt::format(
            "{}: master {} of the target is no longer a master (a failover); resuming from the "
            "last checkpoint once the markers are checked",
            label_, old.address())));
      }
    }
    map_ = std::move(*map);
    master_node_.clear();
    for (const ClusterNode& m : map_.masters()) {
      Node& n = nodeFor(m.host, m.port);
      n.addr.id = m.id;
      master_node_.push_back(static_cast<int>(
          std::find(node_index_.begin(), node_index_.end(), &n) - node_index_.begin()));
    }
  }
  // Every part to send again: the redirected ones and every one not yet sent, in unit order
  // (stable: within a unit, a node's parts keep their order, redirected before queued).
  struct Item {
    Resend r;
    Node* home;
  };
  std::vector<Item> items;
  for (Resend& r : resends_) {
    items.push_back(Item{std::move(r), nullptr});
  }
  resends_.clear();
  for (Node* n : node_index_) {
    for (Part& p : n->parts) {
      Resend r;
      r.bytes.assign(n->pending, p.begin, p.end - p.begin);
      r.part = std::move(p);
      r.part.redirect = Part::Redirect::None;
      r.part.replies = 0;
      items.push_back(Item{std::move(r), n});
    }
    n->parts.clear();
    n->sent_parts = 0;
    n->pending.clear();
  }
  for (Held& h : held_) {
    Resend r;
    r.bytes = std::move(h.bytes);
    r.part = std::move(h.part);
    items.push_back(Item{std::move(r), h.dest});
  }
  held_.clear();
  std::fill(held_in_slot_.begin(), held_in_slot_.end(), 0);
  held_keyless_ = 0;
  barrier_ = false;
  std::fill(fenced_.begin(), fenced_.end(), 0);  // appended again below, in order
  pending_bytes_ = 0;
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.r.part.unit < b.r.part.unit; });
  for (Item& it : items) {
    Part& p = it.r.part;
    Node* dest = it.home;
    if (p.rebind && (p.redirect == Part::Redirect::Ask || p.redirect == Part::Redirect::Moved ||
                     !ownedBy(p.slot, p.master_id))) {
      // A master's marker whose slot is leaving (ASK) or left (MOVED, or a reloaded map gives it
      // to another master before it was sent) that master: written into another slot of the
      // same master, so the master keeps a marker of this checkpoint. (A key this agent has not
      // read there: no expectation on its old value.)
      if (const int slot = rebindSlot(p); slot >= 0) {
        p.slot = slot;
        it.r.bytes = p.rebind(slot);
        p.expect.reset();
        p.redirect = Part::Redirect::None;
      }
    }
    if (p.redirect == Part::Redirect::Ask) {
      dest = &nodeFor(p.ask_host, p.ask_port);
      p.asking = true;
    } else {
      p.asking = false;
      if (p.slot >= 0) {
        const int m = map_.ownerOf(p.slot);
        if (m >= 0) dest = node_index_[static_cast<size_t>(master_node_[static_cast<size_t>(m)])];
      }
      if (dest == nullptr) {
        dest = &nodeFor(p.ask_host, p.ask_port);  // MOVED named it; the map does not know it yet
      }
    }
    p.redirect = Part::Redirect::None;
    inflight_commands_ -= std::min<uint64_t>(inflight_commands_, it.home ? p.commands : 0);
    append(*dest, std::move(p), it.r.bytes);
  }
  // New nodes (a promoted replica, a node that took slots) are connected before anything is
  // sent to them.
  for (Node* n : node_index_) {
    if (!n->running && !closing_) {
      if (auto s = co_await connectNode(*n); !s) co_return s;
      startNode(*n);
    }
  }
  holding_ = false;
  reroute_needed_ = !resends_.empty();
  for (Node* n : node_index_) n->wake->notify();
  co_return Status{};
}

double ClusterTarget::stalledSeconds() const {
  double worst = 0;
  const auto now = clock_.monotonicNow();
  for (const Node* n : node_index_) {
    if (n->sent_parts == 0) continue;
    worst = std::max(worst, std::chrono::duration<double>(now - n->last_reply).count());
  }
  return worst;
}

}  // namespace xdcr::target
