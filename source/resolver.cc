#include "source/resolver.h"

#include <charconv>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/resp.h"

namespace xdcr::source {

void Resolver::resolve(const Entry& entry, Change& c, int64_t local_ms) {
  const int64_t source_now = local_ms + source_clock_.offsetMs();
  c.rdb = nullptr;
  std::string problem;
  if (!decodeEntry(entry, db_, source_now, c, &problem)) {
    uint64_t suppressed = 0;
    if (problem_log_.allow(suppressed)) {
      spdlog::warn("stream entry at offset {} ({}): {}; forwarded verbatim{}", entry.offset_end,
                   entry.args[0], problem,
                   suppressed ? fmt::format(" ({} similar suppressed)", suppressed) : "");
    }
  }
  if (c.effect == Effect::Select) {
    int db = 0;
    auto arg = entry.args.size() > 1 ? entry.args[1] : std::string_view();
    auto [p, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), db);
    if (ec == std::errc() && db >= 0) db_ = db;
    return;
  }
  // The read keys' deadlines before the command changes any of them.
  c.read_deadlines.clear();
  if (c.spec != nullptr && c.spec->dest_only) {
    for (size_t i = 1; i < c.key_args.size(); ++i) {
      const ExpiryIndex::Entry st = index_.get(c.db, c.arg(c.key_args[i]));
      c.read_deadlines.push_back(st.state == ExpiryIndex::State::Live ? st.ms : 0);
    }
  }
  for (auto& ev : c.events) {
    switch (ev.kind) {
      case EventKind::Flush:
        if (resp::iequals(entry.args[0], "flushall")) {
          index_.clearAll();
          fields_.clearAll();
        } else {
          index_.clearDb(ev.db);
          fields_.clearDb(ev.db);
        }
        break;
      case EventKind::Other:
        if (c.effect == Effect::SwapDb) {
          index_.swapDbs(ev.db, ev.from_db);
          fields_.swapDbs(ev.db, ev.from_db);
        }
        break;
      default:
        resolveKeyEvent(c, ev, source_now);
    }
  }
  trackFields(entry, c, source_now);
}

namespace {

/** Position of the FIELDS keyword at or after `from` (0: none). */
size_t fieldsAt(const Entry& e, size_t from) {
  for (size_t i = from; i < e.args.size(); ++i) {
    if (resp::iequals(e.args[i], "FIELDS")) return i;
  }
  return 0;
}

bool toMs(std::string_view s, int64_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

void Resolver::trackFields(const Entry& entry, Change& c, int64_t source_now) {
  const int emptied_db = emptied_db_;
  emptied_db_ = -1;
  if (c.events.empty() || c.events.front().key.empty()) return;
  Event& ev = c.events.front();
  const std::string_view cmd = entry.args[0];
  const size_t argc = entry.args.size();
  // The fields a FIELDS n f... (or f v ... with `step` 2) list names, each passed to `fn`.
  auto eachField = [&](size_t fields, size_t step, auto fn) {
    if (fields == 0 || fields + 1 >= argc) return;
    int64_t n = 0;
    if (!toMs(entry.args[fields + 1], n) || n <= 0) return;
    for (size_t i = fields + 2, k = 0; k < static_cast<size_t>(n) && i < argc; i += step, ++k) {
      fn(entry.args[i]);
    }
  };
  switch (c.effect) {
    case Effect::InPlace:
      break;
    case Effect::Delete:
      // Valkey's UNLINK of the hash whose last field just expired (same MULTI): an expiration.
      if (c.events.size() == 1 && ev.pass && ev.kind == EventKind::Deletion &&
          emptied_db == ev.db && ev.key == emptied_key_) {
        ev.kind = EventKind::Expiration;
        index_.tombstone(ev.db, ev.key, source_now);
      }
      for (const auto& e : c.events) fields_.eraseKey(e.db, e.key);
      return;
    case Effect::Rename:
    case Effect::Move:
      fields_.moveKey(ev.from_db, ev.from_key, ev.db, ev.key);
      return;
    case Effect::Set:
    case Effect::SetNoTtl:
    case Effect::Store:
    case Effect::Restore:
    case Effect::Copy:  // the copy's fields are not indexed: their expiries count as deletions
      for (const auto& e : c.events) fields_.eraseKey(e.db, e.key);
      return;
    default:
      return;
  }
  // Hash commands (server-versions-notes.md §4: the forms a source propagates).
  if (cmd.empty() || (cmd[0] != 'h' && cmd[0] != 'H')) return;
  if (resp::iequals(cmd, "hpexpireat")) {
    int64_t ms = 0;
    if (argc < 3 || !toMs(entry.args[2], ms)) return;
    eachField(fieldsAt(entry, 3), 1,
              [&](std::string_view f) { fields_.set(ev.db, ev.key, f, ms); });
  } else if (resp::iequals(cmd, "hsetex")) {
    const size_t fields = fieldsAt(entry, 2);
    int64_t ms = 0;
    bool keep = false, has = false;
    for (size_t i = 2; i < fields; ++i) {
      if (resp::iequals(entry.args[i], "KEEPTTL")) keep = true;
      if (resp::iequals(entry.args[i], "PXAT") && i + 1 < fields) {
        has = toMs(entry.args[i + 1], ms);
      } else if (resp::iequals(entry.args[i], "EXAT") && i + 1 < fields) {
        has = toMs(entry.args[i + 1], ms);
        ms *= 1000;
      }
    }
    if (keep) return;
    eachField(fields, 2, [&](std::string_view f) { fields_.set(ev.db, ev.key, f, has ? ms : 0); });
  } else if (resp::iequals(cmd, "hpersist") || resp::iequals(cmd, "hgetdel")) {
    eachField(fieldsAt(entry, 2), 1, [&](std::string_view f) { fields_.erase(ev.db, ev.key, f); });
  } else if (resp::iequals(cmd, "hset") || resp::iequals(cmd, "hmset") ||
             resp::iequals(cmd, "hsetnx")) {
    // Writing a field clears its TTL (HINCRBY* alter it in place and keep it).
    for (size_t i = 2; i < argc; i += 2) fields_.erase(ev.db, ev.key, entry.args[i]);
  } else if (resp::iequals(cmd, "hincrby") || resp::iequals(cmd, "hincrbyfloat")) {
    // They change the field in place and keep its deadline: the applier guards the write when
    // that deadline is near (the target's copy of the field may be gone).
    if (argc > 2) ev.field_deadline_ms = fields_.get(ev.db, ev.key, entry.args[2]);
  } else if (resp::iequals(cmd, "hdel")) {
    // A source sends a field's expiry as HDEL of that one field; a user's HDEL of a field past
    // its deadline is the same command, and the same on the source: the field was gone.
    if (argc == 3 && ev.pass) {
      const int64_t d = fields_.get(ev.db, ev.key, entry.args[2]);
      if (d != 0 && d <= source_now) {
        ev.kind = EventKind::Expiration;
        emptied_db_ = ev.db;
        emptied_key_.assign(ev.key);
      }
    }
    for (size_t i = 2; i < argc; ++i) fields_.erase(ev.db, ev.key, entry.args[i]);
  }
}

void Resolver::resolveSnapshotKey(int db, std::string_view key, int64_t expire_ms,
                                  const RdbPayload& payload, Change& c) {
  c.entry = nullptr;
  c.rdb = &payload;
  c.spec = nullptr;
  c.effect = Effect::SnapshotKey;
  c.db = db;
  c.key_args.clear();
  c.events.clear();
  Event ev;
  ev.kind = EventKind::Mutation;
  ev.rule = DeadlineRule::Explicit;
  ev.db = db;
  ev.key = key;
  ev.deadline_ms = expire_ms;
  c.events.push_back(ev);
  if (expire_ms != 0) index_.set(db, key, expire_ms);
  fields_.eraseKey(db, key);
  // A hash that may hold field TTLs: Redis 7.4+'s types 24/25, Valkey 9's 22.
  const bool valkey = payload.flavor == rdb::Flavor::Valkey;
  if (valkey ? payload.type == 22 : payload.type == 24 || payload.type == 25) {
    std::string error;
    if (rdb::decodeValue(payload.type, payload.value, payload.flavor, value_, error)) {
      for (const auto& f : value_.hash) {
        if (f.expire_ms != 0) fields_.set(db, key, f.name, f.expire_ms);
      }
    }  // (undecodable: the sink says so when it must decode it; here its fields stay unknown)
  }
}

void Resolver::resolveKeyEvent(Change& c, Event& ev, int64_t source_now) {
  if (c.effect == Effect::Delete) {
    auto st = index_.get(ev.db, ev.key);
    if (st.state == ExpiryIndex::State::Tombstone) {
      // The key already expired at the source; this DEL was a no-op there for this key
      // (e.g. MULTI, DEL a (expiry), DEL a b (user), EXEC). Nothing to replicate or count.
      ev.pass = false;
      return;
    }
    if (st.state == ExpiryIndex::State::Live && st.ms <= source_now) {
      ev.kind = EventKind::Expiration;
      index_.tombstone(ev.db, ev.key, source_now);
    } else {
      ev.kind = EventKind::Deletion;
      index_.erase(ev.db, ev.key);
    }
    return;
  }

  // Mutations and expiry changes: resolve E, then keep the index equal to the source.
  auto live = [&](int db, std::string_view key) {
    auto st = index_.get(db, key);
    return st.state == ExpiryIndex::State::Live ? st.ms : 0;
  };
  switch (ev.rule) {
    case DeadlineRule::Explicit:
      index_.set(ev.db, ev.key, ev.deadline_ms);
      break;
    case DeadlineRule::None:
      ev.deadline_ms = 0;
      index_.erase(ev.db, ev.key);
      break;
    case DeadlineRule::Keep:
      // KEEPTTL on a key that had expired re-creates it without a deadline.
      if (index_.get(ev.db, ev.key).state == ExpiryIndex::State::Tombstone) {
        index_.erase(ev.db, ev.key);
      }
      // The deadline the key keeps, for a target that cannot keep its own (memcached rewrites
      // the whole item); a Redis target sends KEEPTTL and ignores it.
      ev.deadline_ms = live(ev.db, ev.key);
      break;
    case DeadlineRule::Current:
      ev.deadline_ms = live(ev.db, ev.key);
      if (ev.deadline_ms == 0) index_.erase(ev.db, ev.key);  // clears a tombstone
      break;
    case DeadlineRule::FromKey:
      ev.deadline_ms = live(ev.from_db, ev.from_key);
      index_.set(ev.db, ev.key, ev.deadline_ms);
      if (c.effect != Effect::Copy) index_.erase(ev.from_db, ev.from_key);  // RENAME, MOVE
      break;
  }
}

}  // namespace xdcr::source
