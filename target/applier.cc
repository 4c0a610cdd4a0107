#include "target/applier.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/resp.h"
#include "source/rdb.h"

namespace xdcr::target {

using source::DeadlineRule;
using source::Effect;
using source::Event;

namespace {

/** HSETEX … FXX …: it sets its fields only if every one of them exists (before FIELDS). */
bool hsetexOnlyIfFieldsExist(const source::Entry& e) {
  if (e.args.empty() || !resp::iequals(e.args[0], "hsetex")) return false;
  for (size_t i = 2; i < e.args.size(); ++i) {
    if (resp::iequals(e.args[i], "FIELDS")) return false;
    if (resp::iequals(e.args[i], "FXX")) return true;
  }
  return false;
}

}  // namespace

Applier::Applier(const MaxTtlPolicy& policy, const filters::KeySpace& keys,
                 const clock::ClusterClock& target_clock, PipelineStats& stats)
    : policy_(policy), keys_(keys), target_clock_(target_clock), stats_(stats) {}

void Applier::beginUnit(bool transaction, int64_t local_ms) {
  transaction_ = transaction;
  unit_local_ms_ = local_ms;
  unit_unsafe_ = false;
  unit_wrapped_ = false;
  unit_.clear();
  unit_cmds_ = 0;
  unit_watches_.clear();
  done_watches_.clear();
}

void Applier::flushFirstSeen() {
  // Before the sink sends the unit: a target write never used a first-seen second that an
  // agent crash could lose (target/first_seen.h).
  if (first_seen_ == nullptr) return;
  if (auto s = first_seen_->flush(); !s) {
    // Once per unit while the disk is full: said at most a few times a period, not per unit.
    uint64_t suppressed = 0;
    if (first_seen_log_.allow(suppressed)) {
      spdlog::error("{}: {}{}", label_, s.error().message,
                    suppressed ? fmt::format("; {} more suppressed", suppressed) : "");
    }
  }
}

size_t Applier::appendUnitToGroup(std::string& out) {
  flushFirstSeen();
  size_t n = 0;
  if (!group_open_) {
    resp::appendCommand(out, {"MULTI"});
    group_open_ = true;
    group_queued_ = 0;
    n = 1;
  }
  // Each watch's reply is an element of the group's EXEC (its index: what the group queued
  // before this unit, then where it stands in the unit once a MULTI of its own is gone).
  done_watches_.clear();
  for (PendingWatch& pw : unit_watches_) {
    pw.w.in_group = true;
    pw.w.element = static_cast<int>(group_queued_ + (pw.wrapped ? pw.lead + pw.index : pw.index));
    done_watches_.push_back(std::move(pw.w));
  }
  unit_watches_.clear();
  const size_t before = n;
  if (unit_wrapped_) {
    // One entry in a MULTI/EXEC of its own: the group's transaction replaces it (MULTI cannot
    // nest). unit_ = [SELECT ahead] MULTI <entry> EXEC.
    constexpr std::string_view kMulti = "*1\r\n$5\r\nMULTI\r\n";
    constexpr std::string_view kExec = "*1\r\n$4\r\nEXEC\r\n";
    out.append(unit_.data(), unit_multi_at_);
    out.append(unit_.data() + unit_multi_at_ + kMulti.size(),
               unit_.size() - unit_multi_at_ - kMulti.size() - kExec.size());
    n += unit_cmds_ - 2;
  } else {
    // A source transaction is appended without its MULTI/EXEC too (finishUnit would add them).
    out.append(unit_);
    n += unit_cmds_;
  }
  group_queued_ += n - before;
  unit_.clear();
  unit_cmds_ = 0;
  unit_unsafe_ = false;
  unit_wrapped_ = false;
  return n;
}

size_t Applier::closeGroup(std::string& out, std::string_view stamp_key,
                           std::string_view stamp_value) {
  if (!group_open_) return 0;
  size_t n = 2;  // SET, EXEC
  const int db = target_db_;
  if (db != 0) {
    resp::appendCommand(out, {"SELECT", "0"});
    ++n;
  }
  resp::appendCommand(out, {"SET", stamp_key, stamp_value});
  if (db != 0) {
    const std::string back = std::to_string(db);
    resp::appendCommand(out, {"SELECT", back});
    ++n;
  }
  resp::appendCommand(out, {"EXEC"});
  group_open_ = false;
  return n;
}

size_t Applier::finishUnit(std::string& out) {
  flushFirstSeen();
  done_watches_.clear();
  if (unit_cmds_ == 0) return 0;
  size_t n = unit_cmds_;
  for (PendingWatch& pw : unit_watches_) {
    if (transaction_) {
      // [MULTI] unit [EXEC]: every command of the unit is an element of the EXEC.
      pw.w.reply = unit_cmds_ + 1;
      pw.w.element = static_cast<int>(pw.index);
    } else if (pw.wrapped) {
      pw.w.reply = pw.exec_at;
      pw.w.element = static_cast<int>(pw.index);
    } else {
      pw.w.reply = pw.index;
      pw.w.element = -1;
    }
    done_watches_.push_back(std::move(pw.w));
  }
  unit_watches_.clear();
  if (transaction_) {
    // A source MULTI/EXEC stays atomic on the target.
    resp::appendCommand(out, {"MULTI"});
    out.append(unit_);
    resp::appendCommand(out, {"EXEC"});
    n += 2;
  } else {
    out.append(unit_);
  }
  unit_.clear();
  unit_cmds_ = 0;
  return n;
}

Applier::Dest Applier::dest(int source_db, std::string_view key) {
  Dest d;
  d.db = keys_.mapDb(source_db);
  auto [prefix, rest] = keys_.rewrite(key);
  d.prefix = prefix;
  d.rest = rest;
  if (policy_.empty() && !policy_.hasPolicies()) {
    d.max_ttl_ms = 0;
  } else {
    std::string_view key = rest;
    if (!prefix.empty()) {
      key_scratch_.assign(prefix);
      key_scratch_.append(rest);
      key = key_scratch_;
    }
    if (policy_.hasPolicies()) {
      const KeyPolicy kp = policy_.resolve(d.db, key);
      d.max_ttl_ms = kp.max_ttl_ms;
      d.policy = kp.policy;
    } else {
      d.max_ttl_ms = policy_.effectiveMs(d.db, key);
    }
  }
  return d;
}

std::string_view Applier::fullKey(const Dest& d) {
  if (d.prefix.empty()) return d.rest;
  key_scratch_.assign(d.prefix);
  key_scratch_.append(d.rest);
  return key_scratch_;
}

PolicyDecision Applier::decideFor(const Dest& d, WriteKind kind, int64_t e,
                                  std::optional<std::string_view> value, int64_t now) {
  if (d.policy == nullptr) {
    // No policy: §4 alone, exactly as before the policies existed.
    PolicyDecision out;
    if (kind == WriteKind::KeepTtl || (kind == WriteKind::InPlace && d.max_ttl_ms == 0)) {
      out.action = PolicyDecision::Action::Untouched;
      return out;
    }
    out.deadline = clamp(e, d, now);
    return out;
  }
  int64_t first = 0;
  if (d.policy->max_lifetime_ms > 0 && first_seen_ != nullptr) {
    first = first_seen_->touch(d.db, fullKey(d), now, d.policy->max_lifetime_ms);
  }
  KeyPolicy kp{d.max_ttl_ms, d.policy};
  PolicyDecision out = decide(kp, PolicyInput{kind, e, value, now, first});
  const std::string_view rule = out.rule;
  if ((rule == "max_ttl" || rule == "max_lifetime") && out.deadline != e &&
      out.action != PolicyDecision::Action::Untouched) {
    ++stats_.expiry_clamped;
  }
  return out;
}

std::optional<std::string_view> Applier::stringValue(uint8_t type, std::string_view raw,
                                                     source::rdb::Flavor flavor) {
  if (type != 0) return std::nullopt;  // RDB_TYPE_STRING: the only value with a JSON field
  std::string error;
  if (!source::rdb::decodeValue(type, raw, flavor, policy_value_, error)) return std::nullopt;
  return std::string_view(policy_value_.string);
}

void Applier::capDeadline(const Dest& d, int64_t t) {
  // LT: lower only; a key without a deadline counts as infinite, so it gets `t` (Redis 7.0).
  if (watch_copies_ && clamped(d)) {
    const int64_t known = copyDeadline(d, 0);
    noteCopy(d, known != 0 && known < t ? known : t);
  }
  cmd(4);
  bulk("PEXPIREAT");
  bulkKey(d);
  bulkInt(t);
  bulk("LT");
  stats_.count(WriteOp::Expire);
}

void Applier::forgetKey(const Dest& d) {
  if (first_seen_ != nullptr && d.policy != nullptr && d.policy->max_lifetime_ms > 0) {
    first_seen_->forget(d.db, fullKey(d));
  }
}

int64_t Applier::clamp(int64_t e, const Dest& d, int64_t now) {
  int64_t t = clampDeadline(e, d.max_ttl_ms, now);
  if (t != e) ++stats_.expiry_clamped;
  return t;
}

void Applier::ensureDb(int db) {
  if (db == target_db_) return;
  // Before the entry's first command (and outside a source transaction) the SELECT goes ahead
  // of the entry, outside any MULTI this entry may get; later ones stay in order inside it.
  bool ahead = !transaction_ && entry_cmds_ == 0;
  std::string& where = ahead ? select_ : entry_;
  resp::appendArrayHeader(where, 2);
  resp::appendBulk(where, "SELECT");
  resp::appendBulkInt(where, db);
  ++(ahead ? select_cmds_ : entry_cmds_);
  target_db_ = db;
}

void Applier::cmd(size_t argc) {
  resp::appendArrayHeader(entry_, argc);
  ++entry_cmds_;
}

void Applier::bulkKey(const Dest& d) {
  if (d.prefix.empty()) {
    resp::appendBulk(entry_, d.rest);
    return;
  }
  entry_.push_back('$');
  entry_.append(std::to_string(d.prefix.size() + d.rest.size()));
  entry_.append("\r\n");
  entry_.append(d.prefix);
  entry_.append(d.rest);
  entry_.append("\r\n");
}

void Applier::forward(const source::Change& c, bool rewrite_keys) {
  const auto& args = c.entry->args;
  cmd(args.size());
  // Keys are rewritten at the positions the command table gives (key_args); with no rewrite
  // rules every argument goes out as it came.
  const bool rewrite = rewrite_keys && keys_.rewrites() && !c.key_args.empty();
  for (size_t i = 0; i < args.size(); ++i) {
    bool is_key = false;
    if (rewrite) {
      for (auto k : c.key_args) is_key = is_key || k == i;
    }
    if (is_key) {
      auto [prefix, rest] = keys_.rewrite(args[i]);
      bulkKey(Dest{0, prefix, rest, 0});
    } else {
      bulk(args[i]);
    }
  }
}

void Applier::setDeadline(const Dest& d, int64_t t, int64_t now, bool persist_if_none) {
  if (t == 0) {
    if (persist_if_none) {
      cmd(2);
      bulk("PERSIST");
      bulkKey(d);
      stats_.count(WriteOp::Persist);
      noteCopy(d, 0);
    }
    return;
  }
  if (t <= now) {
    cmd(2);
    bulk("DEL");
    bulkKey(d);
    stats_.count(WriteOp::Delete);
    ++stats_.expired_on_arrival;
    forgetKey(d);
    noteCopy(d, -1);
    return;
  }
  cmd(3);
  bulk("PEXPIREAT");
  bulkKey(d);
  bulkInt(t);
  stats_.count(WriteOp::Expire);
  noteCopy(d, t);
}

void Applier::resetEntry() {
  entry_.clear();
  entry_cmds_ = 0;
  entry_watches_.clear();
  select_.clear();
  select_cmds_ = 0;
}

void Applier::appendMarker(std::string_view key, std::string_view token) {
  resetEntry();
  ensureDb(0);
  // GET: the reply is the previous token, which must be the one this pipeline wrote last
  // (RedisSink checks it: a second writer of the marker is a second agent on this pipeline).
  cmd(4);
  bulk("SET");
  bulk(key);
  bulk(token);
  bulk("GET");
  endEntry(false);
}

void Applier::appendDelete(int db, std::string_view key) {
  resetEntry();
  ensureDb(db);
  cmd(2);
  bulk("DEL");
  bulk(key);
  stats_.count(WriteOp::Delete);
  if (first_seen_ != nullptr) first_seen_->forget(db, key);
  endEntry(false);
}

void Applier::apply(const source::Change& c) {
  size_t passing = 0;
  for (const auto& ev : c.events) passing += ev.pass ? 1 : 0;
  if (passing == 0) return;
  // A snapshot key (a RESTORE ... REPLACE) is idempotent; it has no command spec.
  if (!unit_unsafe_ && c.effect != Effect::SnapshotKey && source::isReplayUnsafe(c.spec)) {
    unit_unsafe_ = true;
  }

  resetEntry();
  const int64_t now =
      unit_local_ms_ != 0 ? unit_local_ms_ + target_clock_.offsetMs() : target_clock_.nowMs();
  // Only helper commands (a clamp after an in-place write, a deadline after RENAME) need a
  // MULTI of their own; a single command is atomic already.
  bool needs_atomic = false;

  switch (c.effect) {
    case Effect::Set:
      for (const auto& ev : c.events) {
        if (ev.pass) applySet(c, ev, now);
      }
      needs_atomic = entry_cmds_ > 1;  // SET KEEPTTL + its lifetime cap
      break;
    case Effect::SetNoTtl: {
      // MSET k1 v1 k2 v2 / SETNX k v / GETSET k v: each key written with E = 0.
      for (const auto& ev : c.events) {
        if (!ev.pass) continue;
        Dest d = dest(ev.db, ev.key);
        ensureDb(d.db);
        const std::string_view value = c.arg(ev.key_arg + 1);
        int64_t t = decideFor(d, WriteKind::WholeValue, 0, value, now).deadline;
        if (t != 0 && t <= now) {
          setDeadline(d, t, now, false);  // expired on arrival (a past date, §8.3)
          continue;
        }
        cmd(t ? 5 : 3);
        bulk("SET");
        bulkKey(d);
        bulk(value);
        if (t) {
          bulk("PXAT");
          bulkInt(t);
        }
        stats_.count(WriteOp::Set);
        noteCopy(d, t);
      }
      needs_atomic = entry_cmds_ > 1;
      break;
    }
    case Effect::Store:
    case Effect::InPlace: {
      // Forward the write itself, then give each key its clamped deadline where the target
      // has a maxTTL: in-place writes extend a document's life up to now+M (seed 000).
      const Event& first = c.events.front();
      Dest d0 = dest(first.db, first.key);
      ensureDb(d0.db);
      // A copy that may have ended before the target runs this write gets a guard ahead of
      // it, in the entry's MULTI (§12): EXISTS answers 0 when it is gone.
      const bool watched = watch_copies_ && c.effect == Effect::InPlace;
      if (watch_copies_ && !c.read_deadlines.empty() && c.entry != nullptr) {
        // A key it reads whose copy may have ended (S-13): the target would compute the
        // destination from what is left. EXISTS on it; 0 reads both back.
        for (size_t i = 0; i < c.read_deadlines.size() && i + 1 < c.key_args.size(); ++i) {
          const std::string_view read_key = c.arg(c.key_args[i + 1]);
          if (read_key == first.key) continue;  // (the destination read too: its own copy)
          Dest dr = dest(c.db, read_key);
          if (dr.db != d0.db) continue;  // (a key outside the key space is never written)
          const int64_t e = c.read_deadlines[i] ? toTarget(c.read_deadlines[i]) : 0;
          if (!copyMayBeGone(dr, e, now)) continue;
          Event read_ev;
          read_ev.db = c.db;
          read_ev.key = read_key;
          read_ev.from_db = first.db;
          read_ev.from_key = first.key;  // the destination: read back with it
          watchNext(WatchKind::Guard, reasonFor(dr, e, now), read_ev, copyDeadline(dr, e));
          cmd(2);
          bulk("EXISTS");
          bulkKey(dr);
        }
      }
      if (watched) {
        for (const auto& ev : c.events) {
          if (!ev.pass) continue;
          Dest d = dest(ev.db, ev.key);
          if (d.db == d0.db) guardCopy(d, ev, ev.deadline_ms ? toTarget(ev.deadline_ms) : 0, now);
        }
      }
      // A field changed in place (HINCRBY) whose copy may have expired: `HEXISTS k f` ahead of
      // it (0: gone; the whole hash is read back, S-11).
      if (watched && field_guards_ && first.field_deadline_ms != 0 && server_.fieldTtls() &&
          !first.strip_field_ttls && c.entry != nullptr && c.entry->args.size() > 2) {
        const int64_t field_t = toTarget(first.field_deadline_ms);
        if (field_t <= now + guard_margin_ms_) {
          watchNext(WatchKind::Guard, RepairReason::FieldExpiredBeforeWrite, first, field_t);
          cmd(3);
          bulk("HEXISTS");
          bulkKey(d0);
          bulk(c.entry->args[2]);
        }
      }
      const size_t write_index = entry_cmds_;
      // A hash field's renewal (HPEXPIREAT, HPERSIST), where the target keeps field deadlines:
      // a -2 among its codes says a field's copy is gone (§12: the whole hash is read back).
      if (watched && c.spec != nullptr && c.spec->field_renewal && server_.fieldTtls() &&
          !first.strip_field_ttls && c.entry != nullptr && c.entry->args.size() > 2) {
        watchNext(WatchKind::FieldRenewal, RepairReason::FieldExpiredBeforeWrite, first);
      } else if (watched && c.spec != nullptr && c.spec->field_deadline && server_.fieldTtls() &&
                 hsetexOnlyIfFieldsExist(*c.entry)) {
        // HSETEX FXX sets nothing (0) when a field is missing: its copy expired (S-12).
        watchNext(WatchKind::Renewal, RepairReason::FieldExpiredBeforeWrite, first);
      }
      if (c.spec != nullptr && c.spec->field_deadline) {
        forwardFieldDeadline(c, first);
      } else {
        forward(c, true);
      }
      stats_.count(WriteOp::Other);
      if (watched) {
        for (const auto& ev : c.events) {
          if (!ev.pass) continue;
          Dest d = dest(ev.db, ev.key);
          if (d.db == d0.db) {
            watchLate(d, ev, ev.deadline_ms ? toTarget(ev.deadline_ms) : 0, now, write_index);
          }
        }
      }
      for (const auto& ev : c.events) {
        if (!ev.pass) continue;
        Dest d = dest(ev.db, ev.key);
        // M == 0 and no policy: the target deadline is untouched (decideFor says so). Under a
        // policy an overwriting *STORE is what §4 says it is, a create (E = 0): a whole value
        // the stream does not carry (§8.1), so the fill applies and no field is read.
        const WriteKind kind = c.effect == Effect::Store && d.policy != nullptr
                                   ? WriteKind::WholeValue
                                   : WriteKind::InPlace;
        const PolicyDecision p =
            decideFor(d, kind, ev.deadline_ms ? toTarget(ev.deadline_ms) : 0, {}, now);
        if (p.action == PolicyDecision::Action::Set) setDeadline(d, p.deadline, now, false);
        if (p.action == PolicyDecision::Action::Cap) capDeadline(d, p.deadline);
      }
      needs_atomic = entry_cmds_ > 1;
      break;
    }
    case Effect::ExpireAt:
    case Effect::Persist:
      for (const auto& ev : c.events) {
        if (!ev.pass) continue;
        Dest d = dest(ev.db, ev.key);
        ensureDb(d.db);
        // PERSIST into a maxTTL collection becomes now+M: never a bare PERSIST there.
        const int64_t t =
            decideFor(d, WriteKind::DeadlineOnly, toTarget(ev.deadline_ms), {}, now).deadline;
        if (ev.stripped && t == 0) continue;  // strip_ttl: nothing to do
        if (watch_copies_ && t > now) {
          // A renewal: PEXPIREAT answers 0 when the copy is gone (§12).
          watchNext(WatchKind::Renewal, reasonFor(d, toTarget(ev.deadline_ms), now), ev);
        } else if (watch_copies_ && t == 0) {
          // PERSIST answers 0 for a gone copy and for one without a deadline alike: a guard.
          // (The source sends PERSIST only for a key that had a deadline: it may have passed.)
          watchNext(WatchKind::Guard, reasonFor(d, 0, now), ev);
          cmd(2);
          bulk("EXISTS");
          bulkKey(d);
        }
        setDeadline(d, t, now, true);
      }
      needs_atomic = entry_cmds_ > 1;  // a guard and its PERSIST
      break;
    case Effect::Delete: {
      size_t n = 0;
      for (const auto& ev : c.events) n += ev.pass ? 1 : 0;
      int db = -1;
      for (const auto& ev : c.events) {
        if (!ev.pass) continue;
        Dest d = dest(ev.db, ev.key);
        if (db < 0) {
          db = d.db;
          ensureDb(db);
          cmd(n + 1);
          bulk(c.arg(0));  // DEL or UNLINK, as the source sent it
        }
        bulkKey(d);
        forgetKey(d);
        noteCopy(d, -1);
      }
      stats_.count(WriteOp::Delete);
      break;
    }
    case Effect::Restore:
      applyRestore(c, c.events.front(), now);
      break;
    case Effect::Rename:
    case Effect::Copy:
    case Effect::Move:
      applyMoveOrCopy(c, c.events.front(), now);
      needs_atomic = entry_cmds_ > 1;
      break;
    case Effect::SwapDb: {
      const Event& ev = c.events.front();
      cmd(3);
      bulk("SWAPDB");
      bulkInt(keys_.mapDb(ev.db));
      bulkInt(keys_.mapDb(ev.from_db));
      stats_.count(WriteOp::Other);
      break;
    }
    case Effect::Flush:
      applyFlush(c);
      needs_atomic = entry_cmds_ > 1;
      break;
    case Effect::Unknown: {
      // Not in the command table: forwarded verbatim in the mapped db, and counted.
      ensureDb(keys_.mapDb(c.db));
      forward(c, false);
      stats_.count(WriteOp::Other);
      break;
    }
    case Effect::SnapshotKey:
      applySnapshotKey(c, c.events.front(), now);
      needs_atomic = entry_cmds_ > 1;  // a rebuild: no reader sees the key half built
      break;
    case Effect::Select:
    case Effect::Multi:
    case Effect::Exec:
    case Effect::Heartbeat:
      break;
  }

  endEntry(needs_atomic);
}

void Applier::endEntry(bool needs_atomic) {
  unit_.append(select_);
  unit_cmds_ += select_cmds_;
  if (needs_atomic && !transaction_) {
    unit_multi_at_ = unit_.size();
    resp::appendCommand(unit_, {"MULTI"});
    unit_.append(entry_);
    resp::appendCommand(unit_, {"EXEC"});
    unit_cmds_ += entry_cmds_ + 2;
    unit_wrapped_ = true;  // (a unit outside a transaction is this one entry)
    for (PendingWatch& pw : entry_watches_) {
      pw.wrapped = true;
      pw.lead = select_cmds_;
      pw.exec_at = unit_cmds_ - 1;
      unit_watches_.push_back(std::move(pw));
    }
  } else {
    const size_t base = unit_cmds_;
    unit_.append(entry_);
    unit_cmds_ += entry_cmds_;
    for (PendingWatch& pw : entry_watches_) {
      pw.index += base;
      unit_watches_.push_back(std::move(pw));
    }
  }
  entry_watches_.clear();
}

uint64_t Applier::copyHash(const Dest& d) {
  return FirstSeenStore::hashOf(d.db, fullKey(d));
}

int64_t Applier::copyDeadline(const Dest& d, int64_t e_target) {
  if (!clamped(d)) return e_target;  // the copy has the source's deadline
  // The target's clamp or a collection policy chose it (now+M at its last write, a default, a
  // lifetime): what this applier last gave it. A copy it never wrote in this process is
  // unknown (0: not guarded; §12.4).
  return copies_.find(copyHash(d)).value_or(0);
}

void Applier::watchableKeys(const source::Change& c, std::vector<source::DocumentKey>& out) {
  if (!watch_copies_ || c.entry == nullptr) return;
  // Whether a write in place to (db, key), source deadline `e`, may have been guarded or watched
  // late: its copy can end (the source's deadline, or max_ttl's), and no collection policy
  // decides it — as copyMayBeGone, which guards nothing there: a document read back under a
  // policy gets a create's deadline (§8.1), which an in-place write would not have given.
  auto mayEnd = [&](int db, std::string_view key, int64_t e) {
    const Dest d = dest(db, key);
    return d.policy == nullptr && (e != 0 || d.max_ttl_ms > 0);
  };
  const bool field_renewal = c.spec != nullptr && (c.spec->field_renewal || c.spec->field_deadline);
  bool any = false;
  switch (c.effect) {
    case Effect::ExpireAt:
    case Effect::Persist:
    case Effect::Rename:
    case Effect::Copy:
    case Effect::Move:
      any = true;  // a renewal, PERSIST's guard, "no such key": whatever the deadlines
      break;
    case Effect::Set:
      for (const auto& ev : c.events) {
        any = any ||
              (ev.pass && ev.rule == DeadlineRule::Keep && mayEnd(ev.db, ev.key, ev.deadline_ms));
      }
      break;
    case Effect::InPlace:
      for (const auto& ev : c.events) {
        if (!ev.pass) continue;
        any = any || field_renewal || ev.field_deadline_ms != 0 ||
              mayEnd(ev.db, ev.key, ev.deadline_ms);
      }
      break;
    case Effect::Store:
      // S-13: a read key whose copy can end (and the destination computed from it).
      for (size_t i = 0; i < c.read_deadlines.size() && i + 1 < c.key_args.size(); ++i) {
        any = any || mayEnd(c.db, c.arg(c.key_args[i + 1]), c.read_deadlines[i]);
      }
      break;
    default:
      break;
  }
  if (!any) return;
  auto add = [&](int db, std::string_view key) {
    if (key.empty()) return;
    source::DocumentKey k{db, std::string(key)};
    if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(std::move(k));
  };
  for (const auto& ev : c.events) {
    if (!ev.pass) continue;
    add(ev.db, ev.key);
    if (!ev.from_key.empty()) add(ev.from_db, ev.from_key);
  }
  if (c.effect == Effect::Store) {
    for (size_t i = 1; i < c.key_args.size(); ++i) add(c.db, c.arg(c.key_args[i]));
  }
}

bool Applier::copyMayBeGone(const Dest& d, int64_t e_target, int64_t now) {
  // Under a collection policy a write that creates a key (after an earlier write emptied it)
  // and one that finds an ended copy are written differently (§8.1: in-place writes do not
  // fill, a restored document does); the agent cannot tell them apart from the target's reply.
  // Not guarded there: a renewal still restores (its PEXPIREAT answers 0).
  if (d.policy != nullptr) return false;
  const int64_t t = copyDeadline(d, e_target);
  return t != 0 && t <= now + guard_margin_ms_;
}

RepairReason Applier::reasonFor(const Dest& d, int64_t e_target, int64_t now) {
  const int64_t t = copyDeadline(d, e_target);
  if (clamped(d) && t != 0 && (e_target == 0 || t < e_target) && t <= now + guard_margin_ms_) {
    return RepairReason::ClampedBeforeWrite;  // the clamp ended it before the source's deadline
  }
  return RepairReason::ExpiredBeforeWrite;
}

void Applier::noteCopy(const Dest& d, int64_t t) {
  if (!watch_copies_ || !clamped(d)) return;
  if (t < 0) {
    copies_.erase(copyHash(d));
  } else {
    copies_.set(copyHash(d), t);
  }
}

void Applier::watchNext(WatchKind kind, RepairReason reason, const Event& ev, int64_t deadline_ms) {
  PendingWatch pw;
  pw.w.kind = kind;
  pw.w.reason = reason;
  pw.w.db = ev.db;
  pw.w.key.assign(ev.key);
  if (!ev.from_key.empty()) {
    pw.w.from_db = ev.from_db;
    pw.w.from_key.assign(ev.from_key);
  }
  pw.w.deadline_ms = deadline_ms;
  pw.index = entry_cmds_;
  entry_watches_.push_back(std::move(pw));
}

bool Applier::guardCopy(const Dest& d, const Event& ev, int64_t e_target, int64_t now) {
  if (!watch_copies_ || !copyMayBeGone(d, e_target, now)) return false;
  // With the copy's deadline: a copy found gone before it was due did not expire — an earlier
  // write of the stream emptied it (LPOP of the last element, SREM, …) and this one creates it.
  watchNext(WatchKind::Guard, reasonFor(d, e_target, now), ev, copyDeadline(d, e_target));
  cmd(2);
  bulk("EXISTS");
  bulkKey(d);
  return true;
}

void Applier::watchLate(const Dest& d, const Event& ev, int64_t e_target, int64_t now,
                        size_t write_index) {
  if (!watch_copies_) return;
  const int64_t t = copyDeadline(d, e_target);
  if (t == 0 || t <= now + guard_margin_ms_ || t > now + late_horizon_ms_) return;
  watchNext(WatchKind::Late, reasonFor(d, e_target, now), ev, t);
  entry_watches_.back().index = write_index;
}

bool Applier::appendRestoredCopy(const source::Change& judged, bool exists,
                                 std::string_view record_key, uint64_t x) {
  const Event& ev = judged.events.front();
  if (exists) {
    const size_t at = unit_.size(), cmds = unit_cmds_;
    const int db = target_db_;
    apply(judged);  // a snapshot key: RESTORE … REPLACE, a rebuild, or DEL when it has passed
    if (snapshot_write_ == SnapshotWrite::Failed) {
      unit_.resize(at);  // (a SELECT it began with too)
      unit_cmds_ = cmds;
      target_db_ = db;
      return false;
    }
  } else {
    resetEntry();
    Dest d = dest(ev.db, ev.key);
    ensureDb(d.db);
    cmd(2);
    bulk("DEL");
    bulkKey(d);
    stats_.count(WriteOp::Delete);
    forgetKey(d);
    noteCopy(d, -1);
    endEntry(false);
  }
  resetEntry();
  ensureDb(0);
  cmd(4);
  bulk("HSET");
  bulk(record_key);
  bulk(RepairSkips::field(ev.db, ev.key));
  bulkInt(static_cast<int64_t>(x));
  endEntry(false);
  return true;
}

void Applier::appendRecordPrune(std::string_view record_key,
                                const std::vector<std::string>& fields) {
  resetEntry();
  ensureDb(0);
  cmd(2 + fields.size());
  bulk(fields.empty() ? "DEL" : "HDEL");
  bulk(record_key);
  for (const std::string& f : fields) bulk(f);
  endEntry(false);
}

void Applier::applySet(const source::Change& c, const Event& ev, int64_t now) {
  Dest d = dest(ev.db, ev.key);
  ensureDb(d.db);
  if (ev.rule == DeadlineRule::Keep) {
    // Preserve expiry: the target keeps its own deadline, no clamp (§4). A copy that ended
    // first would come back without one: a guard ahead of it (§12).
    const int64_t e_target = ev.deadline_ms ? toTarget(ev.deadline_ms) : 0;
    guardCopy(d, ev, e_target, now);
    watchLate(d, ev, e_target, now, entry_cmds_);
    cmd(4);
    bulk("SET");
    bulkKey(d);
    bulk(c.arg(2));
    bulk("KEEPTTL");
    stats_.count(WriteOp::Set);
    // max_lifetime still caps it (§8.4): PEXPIREAT ... LT, in this entry's MULTI.
    const PolicyDecision p = decideFor(d, WriteKind::KeepTtl, 0, {}, now);
    if (p.action == PolicyDecision::Action::Cap) capDeadline(d, p.deadline);
    return;
  }
  int64_t t = decideFor(d, WriteKind::WholeValue, toTarget(ev.deadline_ms), c.arg(2), now).deadline;
  if (t != 0 && t <= now) {
    // Expired on arrival: the source's key is gone, so the target's must be too.
    setDeadline(d, t, now, false);
    return;
  }
  cmd(t ? 5 : 3);
  bulk("SET");
  bulkKey(d);
  bulk(c.arg(2));
  if (t) {
    bulk("PXAT");
    bulkInt(t);
  }
  stats_.count(WriteOp::Set);
  noteCopy(d, t);
}

void Applier::applyRestore(const source::Change& c, const Event& ev, int64_t now) {
  Dest d = dest(ev.db, ev.key);
  ensureDb(d.db);
  std::optional<std::string_view> value;
  if (d.policy != nullptr && d.policy->reads_value()) {
    // A DUMP payload: type, value, 2-byte RDB version, 8-byte CRC64.
    const std::string_view payload = c.arg(3);
    if (payload.size() > 11) {
      value = stringValue(static_cast<uint8_t>(payload[0]), payload.substr(1, payload.size() - 11),
                          source::rdb::Flavor::Redis);
    }
  }
  int64_t t = decideFor(d, WriteKind::WholeValue, toTarget(ev.deadline_ms), value, now).deadline;
  if (t != 0 && t <= now) {
    setDeadline(d, t, now, false);
    return;
  }
  // RESTORE key T payload REPLACE [ABSTTL] [IDLETIME n] [FREQ n]: REPLACE because the target
  // mirrors the source, whatever it held before.
  size_t extra = 0;
  const auto& args = c.entry->args;
  for (size_t i = 4; i + 1 < args.size(); ++i) {
    if (resp::iequals(args[i], "IDLETIME") || resp::iequals(args[i], "FREQ")) extra += 2;
  }
  noteCopy(d, t);
  cmd(5 + extra + (t ? 1 : 0));
  bulk("RESTORE");
  bulkKey(d);
  bulkInt(t);
  bulk(c.arg(3));
  bulk("REPLACE");
  if (t) bulk("ABSTTL");
  for (size_t i = 4; i + 1 < args.size(); ++i) {
    if (resp::iequals(args[i], "IDLETIME") || resp::iequals(args[i], "FREQ")) {
      bulk(args[i]);
      bulk(args[i + 1]);
      ++i;
    }
  }
  stats_.count(WriteOp::Restore);
}

void Applier::applyMoveOrCopy(const source::Change& c, const Event& ev, int64_t now) {
  if (ev.kind == EventKind::Deletion) {
    // RENAME out of the replicated key set (filters/): the key is gone from the target's view.
    Dest d = dest(ev.db, ev.key);
    ensureDb(d.db);
    cmd(2);
    bulk("DEL");
    bulkKey(d);
    stats_.count(WriteOp::Delete);
    forgetKey(d);
    return;
  }
  Dest from = dest(ev.from_db, ev.from_key);
  Dest to = dest(ev.db, ev.key);
  ensureDb(from.db);
  if (watch_copies_) {
    // The copy of `from` may have ended first: RENAME answers "no such key", COPY and MOVE 0.
    // Both keys are then read back (§12).
    watchNext(c.effect == Effect::Rename ? WatchKind::Rename : WatchKind::CopyMove,
              reasonFor(from, ev.deadline_ms ? toTarget(ev.deadline_ms) : 0, now), ev);
  }
  if (c.effect == Effect::Rename) {
    cmd(3);
    bulk("RENAME");
    bulkKey(from);
    bulkKey(to);
  } else if (c.effect == Effect::Move) {
    cmd(3);
    bulk("MOVE");
    bulkKey(from);
    bulkInt(to.db);
  } else {
    bool other_db = to.db != from.db;
    cmd(other_db ? 6 : 4);
    bulk("COPY");
    bulkKey(from);
    bulkKey(to);
    if (other_db) {
      bulk("DB");
      bulkInt(to.db);
    }
    bulk("REPLACE");
  }
  stats_.count(WriteOp::Other);
  // `to` gets clamp(source deadline of `from`) under its own collection (§4), whatever
  // deadline the target's copy of `from` carried.
  if (c.effect != Effect::Copy) {  // RENAME and MOVE delete `from`
    forgetKey(from);
    noteCopy(from, -1);
  }
  // `to` is a first write of its own (§8.1): its lifetime starts now, its value is not carried.
  int64_t t = decideFor(to, WriteKind::DeadlineOnly, toTarget(ev.deadline_ms), {}, now).deadline;
  if (to.db != from.db) {
    // Inside this entry's MULTI: switch, set the deadline, switch back.
    cmd(2);
    bulk("SELECT");
    bulkInt(to.db);
    setDeadline(to, t, now, true);
    cmd(2);
    bulk("SELECT");
    bulkInt(from.db);
  } else {
    setDeadline(to, t, now, true);
  }
}

void Applier::applyFlush(const source::Change& c) {
  const Event& ev = c.events.front();
  copies_.clear();  // (of every db: a later write to a flushed key is a create anyway)
  bool all = resp::iequals(c.arg(0), "flushall");
  if (all && keys_.dbMap().empty()) {
    cmd(1);
    bulk("FLUSHALL");
    if (first_seen_ != nullptr) first_seen_->forgetAll();
  } else if (all) {
    // Only the target dbs this pipeline replicates into.
    for (const auto& [src, dst] : keys_.dbMap()) {
      ensureDb(dst);
      cmd(1);
      bulk("FLUSHDB");
      if (first_seen_ != nullptr) first_seen_->forgetDb(dst);
    }
  } else {
    ensureDb(keys_.mapDb(ev.db));
    cmd(1);
    bulk("FLUSHDB");
    if (first_seen_ != nullptr) first_seen_->forgetDb(keys_.mapDb(ev.db));
  }
  stats_.count(WriteOp::Other);
}

bool Applier::needsRebuild(const source::RdbPayload& rdb, const Event& ev) const {
  const bool valkey = rdb.flavor == source::rdb::Flavor::Valkey;
  if (!server_.acceptsPayload(rdb.rdb_version, valkey)) return true;
  if (restorePayloadSize(rdb.value.size()) > max_bulk_) return true;
  // A hash that may hold field TTLs: Redis 7.4+'s HASH_METADATA / HASH_LISTPACK_EX, Valkey 9's
  // HASH_2. Inside a payload they cannot be translated or removed.
  const bool field_ttls = valkey ? rdb.type == 22 : rdb.type == 24 || rdb.type == 25;
  return field_ttls && (ev.strip_field_ttls || compensation_ms_ != 0 || !server_.fieldTtls());
}

void Applier::applySnapshotKey(const source::Change& c, const Event& ev, int64_t now) {
  const source::RdbPayload& rdb = *c.rdb;
  Dest d = dest(ev.db, ev.key);
  ensureDb(d.db);
  std::optional<std::string_view> value;
  if (d.policy != nullptr && d.policy->reads_value()) {
    value = stringValue(rdb.type, rdb.value, rdb.flavor);
  }
  int64_t t = decideFor(d, WriteKind::WholeValue, toTarget(ev.deadline_ms), value, now).deadline;
  if (t != 0 && t <= now) {
    // Already expired (on the source, or by the target's maxTTL): never a live copy here.
    setDeadline(d, t, now, false);
    snapshot_write_ = SnapshotWrite::Expired;
    return;
  }
  if (needsRebuild(rdb, ev)) {
    snapshot_error_.clear();
    snapshot_write_ = SnapshotWrite::Rebuilt;
    if (!rebuildSnapshotKey(rdb, ev, d, t, now)) snapshot_write_ = SnapshotWrite::Failed;
    return;
  }
  snapshot_write_ = SnapshotWrite::Restored;
  noteCopy(d, t);
  const bool lru = rdb.idle_s >= 0, lfu = rdb.freq >= 0;
  cmd(5 + (t ? 1 : 0) + (lru ? 2 : 0) + (lfu ? 2 : 0));
  bulk("RESTORE");
  bulkKey(d);
  bulkInt(t);
  // The DUMP payload, built in place: type, raw value, RDB version (LE), CRC64 (LE).
  const char type_byte = static_cast<char>(rdb.type);
  const char version[2] = {static_cast<char>(rdb.rdb_version & 0xff),
                           static_cast<char>((rdb.rdb_version >> 8) & 0xff)};
  uint64_t crc = source::rdb::crc64(0, &type_byte, 1);
  crc = source::rdb::crc64(crc, rdb.value.data(), rdb.value.size());
  crc = source::rdb::crc64(crc, version, 2);
  entry_.push_back('$');
  entry_.append(std::to_string(restorePayloadSize(rdb.value.size())));
  entry_.append("\r\n");
  entry_.push_back(type_byte);
  entry_.append(rdb.value);
  entry_.append(version, 2);
  entry_.append(reinterpret_cast<const char*>(&crc), 8);  // little-endian host
  entry_.append("\r\n");
  bulk("REPLACE");
  if (t) bulk("ABSTTL");
  if (lru) {
    bulk("IDLETIME");
    bulkInt(rdb.idle_s);
  }
  if (lfu) {
    bulk("FREQ");
    bulkInt(rdb.freq);
  }
  stats_.count(WriteOp::Restore);
}

}  // namespace xdcr::target
