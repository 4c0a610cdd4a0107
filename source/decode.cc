#include "source/event.h"

#include <charconv>

#include "common/resp.h"

namespace xdcr::source {
namespace {

using resp::iequals;

bool toInt(std::string_view s, int64_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

Event keyEvent(EventKind kind, DeadlineRule rule, int db, const Entry& e, size_t arg,
               int64_t deadline = 0) {
  Event ev;
  ev.kind = kind;
  ev.rule = rule;
  ev.db = db;
  ev.key = e.args[arg];
  ev.key_arg = static_cast<uint16_t>(arg);
  ev.deadline_ms = deadline;
  return ev;
}

Event keyless(EventKind kind, int db) {
  Event ev;
  ev.kind = kind;
  ev.db = db;
  return ev;
}

/** One event per written key: all positions, or only the first for `dest_only` commands. */
void writtenKeys(const Change& c, const Entry& e, int db, EventKind kind, DeadlineRule rule,
                 std::vector<Event>& out) {
  const size_t n = (c.spec->dest_only && !c.key_args.empty()) ? 1 : c.key_args.size();
  for (size_t i = 0; i < n; ++i) out.push_back(keyEvent(kind, rule, db, e, c.key_args[i]));
}

}  // namespace

bool isSentinelHello(const Entry& e) {
  return e.args.size() == 3 && iequals(e.args[0], "publish") && e.args[1] == "__sentinel__:hello";
}

bool decodeEntry(const Entry& e, int db, int64_t source_now_ms, Change& c, std::string* problem) {
  c.entry = &e;
  c.db = db;
  c.events.clear();
  c.key_args.clear();
  c.spec = lookupCommand(e.args[0]);
  c.effect = c.spec ? c.spec->effect : Effect::Unknown;
  const size_t argc = e.args.size();
  if (isSentinelHello(e)) {
    // Every Sentinel publishes its hello to the master every 2 s, and a non-cluster master
    // propagates PUBLISH to its replicas (cluster-notes.md §3.6): Sentinel's own traffic on
    // the source's stream, not data. Framing: not forwarded, not counted.
    c.effect = Effect::Heartbeat;
    return true;
  }
  if (c.spec) keyPositions(*c.spec, e.args.data(), argc, c.key_args);
  auto bad = [&](const char* what) {
    if (problem) *problem = what;
    c.effect = Effect::Unknown;
    c.events.clear();
    c.events.push_back(keyless(EventKind::Other, db));
    return false;
  };
  if (c.spec && c.spec->first_key > 0 && argc <= static_cast<size_t>(c.spec->first_key)) {
    return bad("missing key argument");
  }

  switch (c.effect) {
    case Effect::Set: {
      if (argc < 3) return bad("SET needs a key and a value");
      DeadlineRule rule = DeadlineRule::None;
      int64_t deadline = 0;
      for (size_t i = 3; i < argc; ++i) {
        std::string_view opt = e.args[i];
        if (iequals(opt, "KEEPTTL")) {
          rule = DeadlineRule::Keep;
          continue;
        }
        // Compare-and-set (Valkey 8.1+, Redis 8.4): the value after it is data, not an option.
        // The applier writes the SET unconditionally: the source propagates only a SET that
        // took effect.
        if (iequals(opt, "IFEQ") || iequals(opt, "IFNE") || iequals(opt, "IFDEQ") ||
            iequals(opt, "IFDNE")) {
          if (i + 1 >= argc) return bad("SET comparison without its value");
          ++i;
          continue;
        }
        bool abs_ms = iequals(opt, "PXAT"), abs_s = iequals(opt, "EXAT");
        bool rel_ms = iequals(opt, "PX"), rel_s = iequals(opt, "EX");
        if (abs_ms || abs_s || rel_ms || rel_s) {
          int64_t v = 0;
          if (i + 1 >= argc || !toInt(e.args[i + 1], v)) return bad("bad SET expiry value");
          ++i;
          // Redis 7.0 only propagates PXAT; the others come from older sources.
          deadline = abs_ms   ? v
                     : abs_s  ? v * 1000
                     : rel_ms ? source_now_ms + v
                              : source_now_ms + v * 1000;
          if (deadline <= 0) deadline = 1;  // an absolute time in the past, not "no expiry"
          rule = DeadlineRule::Explicit;
        }
        // NX, XX, GET: the source only propagates a SET that took effect.
      }
      c.events.push_back(keyEvent(EventKind::Mutation, rule, db, e, 1, deadline));
      return true;
    }
    case Effect::SetNoTtl:
    case Effect::Store:
      writtenKeys(c, e, db, EventKind::Mutation, DeadlineRule::None, c.events);
      if (c.events.empty()) c.effect = Effect::Heartbeat;  // SORT without STORE: a read
      return true;
    case Effect::InPlace:
      writtenKeys(c, e, db, EventKind::Mutation, DeadlineRule::Current, c.events);
      return true;
    case Effect::ExpireAt: {
      int64_t v = 0;
      if (argc < 3 || !toInt(e.args[2], v)) return bad("bad PEXPIREAT deadline");
      c.events.push_back(
          keyEvent(EventKind::ExpiryChange, DeadlineRule::Explicit, db, e, 1, v > 0 ? v : 1));
      return true;
    }
    case Effect::Persist:
      c.events.push_back(keyEvent(EventKind::ExpiryChange, DeadlineRule::None, db, e, 1));
      return true;
    case Effect::Delete:
      // Deletion or expiration: classified per key by filters/ (expiry-semantics.md §5).
      writtenKeys(c, e, db, EventKind::Deletion, DeadlineRule::None, c.events);
      return true;
    case Effect::Restore: {
      int64_t ttl = 0;
      if (argc < 4 || !toInt(e.args[2], ttl) || ttl < 0) return bad("bad RESTORE ttl");
      bool abs = false;
      for (size_t i = 4; i < argc; ++i) abs = abs || iequals(e.args[i], "ABSTTL");
      int64_t deadline = ttl == 0 ? 0 : abs ? ttl : source_now_ms + ttl;
      c.events.push_back(keyEvent(EventKind::Mutation, DeadlineRule::Explicit, db, e, 1, deadline));
      return true;
    }
    case Effect::Rename:
    case Effect::Copy: {
      if (argc < 3) return bad("RENAME/COPY needs two keys");
      int to_db = db;
      if (c.effect == Effect::Copy) {
        for (size_t i = 3; i + 1 < argc; ++i) {
          int64_t v = 0;
          if (iequals(e.args[i], "DB") && toInt(e.args[i + 1], v) && v >= 0) to_db = int(v);
        }
      }
      Event ev = keyEvent(EventKind::Mutation, DeadlineRule::FromKey, to_db, e, 2);
      ev.from_key = e.args[1];
      ev.from_db = db;
      c.events.push_back(ev);
      return true;
    }
    case Effect::Move: {
      int64_t to = 0;
      if (argc < 3 || !toInt(e.args[2], to) || to < 0) return bad("bad MOVE db");
      Event ev = keyEvent(EventKind::Mutation, DeadlineRule::FromKey, static_cast<int>(to), e, 1);
      ev.from_key = e.args[1];
      ev.from_db = db;
      c.events.push_back(ev);
      return true;
    }
    case Effect::SwapDb: {
      int64_t a = 0, b = 0;
      if (argc < 3 || !toInt(e.args[1], a) || !toInt(e.args[2], b) || a < 0 || b < 0) {
        return bad("bad SWAPDB dbs");
      }
      Event ev = keyless(EventKind::Other, static_cast<int>(a));
      ev.from_db = static_cast<int>(b);
      c.events.push_back(ev);
      return true;
    }
    case Effect::Flush:
      c.events.push_back(keyless(EventKind::Flush, db));
      return true;
    case Effect::Select:
    case Effect::Multi:
    case Effect::Exec:
    case Effect::Heartbeat:
      return true;  // framing: no event
    case Effect::Unknown:
      c.events.push_back(keyless(EventKind::Other, db));
      return true;
    case Effect::SnapshotKey:
      break;  // never a stream command (lookupCommand does not return it)
  }
  return true;
}

}  // namespace xdcr::source
