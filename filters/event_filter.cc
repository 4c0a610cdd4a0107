#include "filters/event_filter.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/resp.h"

namespace xdcr::filters {

using source::DeadlineRule;
using source::Effect;

void EventFilter::judge(source::Change& c) {
  for (auto& ev : c.events) {
    if (!ev.pass) continue;  // a no-op at the source (the resolver said so)
    switch (ev.kind) {
      case EventKind::Flush: {
        stats_.count(EventKind::Flush);
        const bool all = resp::iequals(c.arg(0), "flushall");
        ev.pass = filters_.replicate_flush && (all || keys_->mapDb(ev.db) >= 0);
        if (!ev.pass) {
          stats_.count(FilterReason::Flush);
          uint64_t suppressed = 0;
          if (flush_log_.allow(suppressed)) {
            spdlog::info("pipeline {}: {} at offset {} not replicated (replicate_flush: false)",
                         name_, c.arg(0), c.entry->offset_end);
          }
        }
        break;
      }
      case EventKind::Other:
        stats_.count(EventKind::Other);
        if (c.effect == Effect::SwapDb) {
          const bool a = keys_->mapDb(ev.db) >= 0, b = keys_->mapDb(ev.from_db) >= 0;
          ev.pass = a && b;
          if (a != b) reportSplit(c, "one of the two dbs is not replicated");
          if (!ev.pass) stats_.count(FilterReason::Key);
          break;
        }
        ++stats_.unknown_commands;
        ev.pass = keys_->mapDb(ev.db) >= 0;
        if (!ev.pass) stats_.count(FilterReason::Key);
        break;
      default:
        judgeKeyEvent(c, ev);
    }
  }
}

void EventFilter::judgeKeyEvent(source::Change& c, source::Event& ev) {
  const bool key_ok = keys_->contains(ev.db, ev.key);
  if (c.effect == Effect::SnapshotKey) {
    // A snapshot key is a replicated create (§4, §6): key space and strip_ttl as for SET.
    if (!key_ok) {
      ev.pass = false;
      stats_.count(FilterReason::Key);
      return;
    }
    if (filters_.strip_ttl && ev.deadline_ms != 0) {
      ev.stripped = true;
      ev.deadline_ms = 0;
      ++stats_.expiry_stripped;
    }
    ev.strip_field_ttls = filters_.strip_ttl;
    return;
  }
  if (c.effect == Effect::Delete) {
    stats_.count(ev.kind);
    if (!key_ok) {
      ev.pass = false;
      stats_.count(FilterReason::Key);
    } else if (ev.kind == EventKind::Expiration && filters_.drop_expirations) {
      ev.pass = false;
      stats_.count(FilterReason::Expiration);
    } else if (ev.kind == EventKind::Deletion && filters_.drop_deletions) {
      ev.pass = false;
      stats_.count(FilterReason::Deletion);
    }
    return;
  }
  stats_.count(ev.kind);
  if (ev.kind == EventKind::Expiration) {
    // A hash field's expiry: the HDEL its source sends (docs/hash-field-expiry.md H6).
    if (!key_ok) {
      ev.pass = false;
      stats_.count(FilterReason::Key);
      return;
    }
    if (filters_.drop_expirations) {
      ev.pass = false;
      stats_.count(FilterReason::Expiration);
      return;
    }
  }

  if (ev.rule == DeadlineRule::FromKey) {
    const bool from_ok = keys_->contains(ev.from_db, ev.from_key);
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
      if (!keys_->keyPasses(c.arg(c.key_args[i]))) {
        reportSplit(c, "it reads a key the filters exclude");
        ev.pass = false;
        stats_.count(FilterReason::Key);
        return;
      }
    }
  }

  ev.strip_field_ttls = filters_.strip_ttl;
  if (filters_.strip_ttl) {
    // strip_ttl sets E = 0 (§6). SET ... KEEPTTL has no E — it keeps the target's own deadline
    // (§4) — so it stays as it is.
    if ((ev.deadline_ms != 0 && ev.rule != DeadlineRule::Keep) ||
        ev.kind == EventKind::ExpiryChange) {
      ev.stripped = true;
      ++stats_.expiry_stripped;
    }
    ev.deadline_ms = 0;
  }
}

void EventFilter::reportSplit(const source::Change& c, std::string_view why) {
  ++stats_.filter_splits;
  uint64_t suppressed = 0;
  if (split_log_.allow(suppressed)) {
    spdlog::warn(
        "pipeline {}: {} at offset {} not replicated: {}; the target's copy of its "
        "destination may now differ from the source (counted as a key filter){}",
        name_, c.arg(0), c.entry->offset_end, why,
        suppressed ? fmt::format(" ({} similar suppressed)", suppressed) : "");
  }
}

}  // namespace xdcr::filters
