#include "source/resolver.h"

#include <charconv>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/resp.h"

namespace xdcr::source {

void Resolver::resolve(const Entry& entry, Change& c) {
  const int64_t source_now = source_clock_.nowMs();
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
  for (auto& ev : c.events) {
    switch (ev.kind) {
      case EventKind::Flush:
        if (resp::iequals(entry.args[0], "flushall")) {
          index_.clearAll();
        } else {
          index_.clearDb(ev.db);
        }
        break;
      case EventKind::Other:
        if (c.effect == Effect::SwapDb) index_.swapDbs(ev.db, ev.from_db);
        break;
      default:
        resolveKeyEvent(c, ev, source_now);
    }
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
