#include "filters/stream_filter.h"

#include <charconv>

#include <re2/re2.h>
#include <spdlog/spdlog.h>

namespace xdcr::filters {

using source::DeadlineRule;
using source::Effect;

StreamFilter::StreamFilter(const config::PipelineConfig& pipeline, ExpiryIndex& index,
                           const clock::ClusterClock& source_clock, PipelineStats& stats)
    : pipeline_(pipeline), index_(index), source_clock_(source_clock), stats_(stats) {
  RE2::Options opts;
  opts.set_log_errors(false);
  for (const auto& p : pipeline.filters.include_keys) {
    include_.push_back(std::make_unique<re2::RE2>(p.value, opts));
  }
  for (const auto& p : pipeline.filters.exclude_keys) {
    exclude_.push_back(std::make_unique<re2::RE2>(p.value, opts));
  }
}

StreamFilter::~StreamFilter() = default;

int StreamFilter::mapDb(int source_db) const {
  if (pipeline_.dbs.empty()) return source_db;
  auto it = pipeline_.dbs.find(source_db);
  return it == pipeline_.dbs.end() ? -1 : it->second;
}

bool StreamFilter::keyPasses(std::string_view key) const {
  if (!include_.empty()) {
    bool any = false;
    for (const auto& re : include_) {
      if (RE2::PartialMatch(key, *re)) {
        any = true;
        break;
      }
    }
    if (!any) return false;
  }
  for (const auto& re : exclude_) {
    if (RE2::PartialMatch(key, *re)) return false;
  }
  return true;
}

void StreamFilter::process(const source::Entry& entry, source::Change& c) {
  const int64_t source_now = source_clock_.nowMs();
  std::string problem;
  if (!source::decodeEntry(entry, db_, source_now, c, &problem)) {
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
      case EventKind::Flush: {
        stats_.count(EventKind::Flush);
        bool all = resp::iequals(entry.args[0], "flushall");
        if (all) {
          index_.clearAll();
        } else {
          index_.clearDb(ev.db);
        }
        ev.pass = pipeline_.filters.replicate_flush && (all || mapDb(ev.db) >= 0);
        if (!ev.pass) {
          stats_.count(FilterReason::Flush);
          uint64_t suppressed = 0;
          if (flush_log_.allow(suppressed)) {
            spdlog::info("pipeline {}: {} at offset {} not replicated (replicate_flush: false)",
                         pipeline_.name, entry.args[0], entry.offset_end);
          }
        }
        break;
      }
      case EventKind::Other:
        stats_.count(EventKind::Other);
        if (c.effect == Effect::SwapDb) {
          index_.swapDbs(ev.db, ev.from_db);
          const bool a = mapDb(ev.db) >= 0, b = mapDb(ev.from_db) >= 0;
          ev.pass = a && b;
          if (a != b) reportSplit(c, "one of the two dbs is not replicated");
          if (!ev.pass) stats_.count(FilterReason::Key);
          break;
        }
        ++stats_.unknown_commands;
        ev.pass = mapDb(ev.db) >= 0;
        if (!ev.pass) stats_.count(FilterReason::Key);
        break;
      default:
        filterKeyEvent(c, ev, source_now);
    }
  }
}

void StreamFilter::filterKeyEvent(source::Change& c, source::Event& ev, int64_t source_now) {
  const auto& f = pipeline_.filters;
  const bool key_ok = mapDb(ev.db) >= 0 && keyPasses(ev.key);

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
    stats_.count(ev.kind);
    if (!key_ok) {
      ev.pass = false;
      stats_.count(FilterReason::Key);
    } else if (ev.kind == EventKind::Expiration && f.drop_expirations) {
      ev.pass = false;
      stats_.count(FilterReason::Expiration);
    } else if (ev.kind == EventKind::Deletion && f.drop_deletions) {
      ev.pass = false;
      stats_.count(FilterReason::Deletion);
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
  stats_.count(ev.kind);

  if (ev.rule == DeadlineRule::FromKey) {
    const bool from_ok = mapDb(ev.from_db) >= 0 && keyPasses(ev.from_key);
    if (!key_ok && from_ok && c.effect != Effect::Copy) {
      // The key leaves the replicated set: on the target it is simply gone.
      ev.kind = EventKind::Deletion;
      ev.rule = DeadlineRule::None;
      ev.key = ev.from_key;
      ev.key_arg = 1;
      ev.db = ev.from_db;
      stats_.count(FilterReason::Key);
      return;
    }
    if (!key_ok || !from_ok) {
      // Either the destination is filtered out, or its content comes from a key the target
      // never received: it cannot be reproduced there.
      if (key_ok) reportSplit(c, "it reads a key the filters exclude");
      ev.pass = false;
      stats_.count(FilterReason::Key);
      return;
    }
  } else if (!key_ok) {
    ev.pass = false;
    stats_.count(FilterReason::Key);
    return;
  } else if (c.spec != nullptr && c.spec->dest_only) {
    // *STORE, PFMERGE: the result depends on the keys read; the target must have them all.
    for (size_t i = 1; i < c.key_args.size(); ++i) {
      if (!keyPasses(c.arg(c.key_args[i]))) {
        reportSplit(c, "it reads a key the filters exclude");
        ev.pass = false;
        stats_.count(FilterReason::Key);
        return;
      }
    }
  }

  if (f.strip_ttl) {
    // strip_ttl sets E = 0 (§6). SET ... KEEPTTL has no E — it keeps the target's own deadline
    // (§4) — so it stays as it is.
    if (ev.deadline_ms != 0 || ev.kind == EventKind::ExpiryChange) {
      ev.stripped = true;
      ++stats_.expiry_stripped;
    }
    ev.deadline_ms = 0;
  }
}

void StreamFilter::reportSplit(const source::Change& c, std::string_view why) {
  ++stats_.filter_splits;
  uint64_t suppressed = 0;
  if (split_log_.allow(suppressed)) {
    spdlog::warn("pipeline {}: {} at offset {} not replicated: {}; the target's copy of its "
                 "destination may now differ from the source (counted as a key filter){}",
                 pipeline_.name, c.arg(0), c.entry->offset_end, why,
                 suppressed ? fmt::format(" ({} similar suppressed)", suppressed) : "");
  }
}

}  // namespace xdcr::filters
