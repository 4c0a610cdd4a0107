#include "target/copy_repair_book.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>

namespace xdcr::target {

namespace {

// A guard answered 0 this close before its copy's deadline counts as due: the target's clock
// and the agent's reading of it differ by a few ms (the reply's way back).
constexpr int64_t kDueToleranceMs = 100;

}  // namespace

void documentAsSnapshotKey(const source::SourceDocument& doc, source::RdbPayload& payload,
                           source::Change& c) {
  c.entry = nullptr;
  c.spec = nullptr;
  c.effect = source::Effect::SnapshotKey;
  c.db = doc.db;
  c.key_args.clear();
  c.events.resize(1);
  source::Event& ev = c.events.front();
  ev = source::Event{};
  ev.kind = EventKind::Mutation;
  ev.rule = source::DeadlineRule::Explicit;
  ev.db = doc.db;
  ev.key = doc.key;
  ev.deadline_ms = doc.deadline_ms;
  c.rdb = nullptr;
  if (!doc.exists) return;
  payload.type = doc.type();
  payload.value = doc.value();
  payload.rdb_version = doc.rdbVersion();
  payload.flavor =
      payload.rdb_version >= 80 ? source::rdb::Flavor::Valkey : source::rdb::Flavor::Redis;
  c.rdb = &payload;
}

bool CopyRepairBook::gone(const Applier::Watch& w, resp::ReplyType type, int64_t integer,
                          std::string_view error, int64_t now_ms) {
  switch (w.kind) {
    case Applier::WatchKind::Guard:
      // Gone before its deadline (answered before it was due): not expired but emptied by an
      // earlier write of the stream (LPOP of the last element, …); this write creates it.
      return type == resp::ReplyType::Integer && integer == 0 &&
             (w.deadline_ms == 0 || now_ms >= w.deadline_ms - kDueToleranceMs);
    case Applier::WatchKind::Renewal:
    case Applier::WatchKind::CopyMove:
      return type == resp::ReplyType::Integer && integer == 0;
    case Applier::WatchKind::FieldRenewal:
      // HPEXPIREAT's and HPERSIST's codes, one a field; `integer` is the least of them (the
      // sinks pass an array's least integer): -2, no such field on the target.
      return type == resp::ReplyType::Array && integer == -2;
    case Applier::WatchKind::Rename:
      return type == resp::ReplyType::Error && error.find("no such key") != std::string_view::npos;
    case Applier::WatchKind::Late:
      // Answered before the deadline: the write ran before it, on the copy. At or after it (the
      // target may have run it late): read the document back, which is always right.
      return now_ms >= w.deadline_ms;
  }
  return false;
}

void CopyRepairBook::onWatched(const Applier::Watch& w, uint64_t offset, resp::ReplyType type,
                               int64_t integer, std::string_view error, int64_t now_ms) {
  if (!gone(w, type, integer, error, now_ms)) return;
  request(w.db, w.key, w.reason, offset, w.deadline_ms, now_ms);
  if (!w.from_key.empty()) request(w.from_db, w.from_key, w.reason, offset, 0, now_ms);
}

void CopyRepairBook::request(int db, const std::string& key, RepairReason reason, uint64_t offset,
                             int64_t copy_deadline_ms, int64_t found_at_ms) {
  // A copy restored from a read at or past this write holds it already.
  if (auto x = skips_.until(db, key); x && *x >= offset) return;
  // Keys a later multi-key change linked to this one may hold its fragment: read them too.
  for (const MultiKeyLog::Key& k : multi_keys_.closure({db, key}, offset)) {
    const bool self = k.first == db && k.second == key;
    const Asked asked{reason, offset, self ? copy_deadline_ms : 0, found_at_ms};
    if (requested_.emplace(k, asked).second) {
      repairs_.push_back(k);
      asked_offsets_.insert(asked.write_offset);
    }
  }
  release();
}

void CopyRepairBook::requestUnconfirmed(const std::vector<source::DocumentKey>& keys,
                                        uint64_t offset_end) {
  for (const source::DocumentKey& key : keys) {
    if (auto x = skips_.until(key.first, key.second); x && *x >= offset_end) continue;
    for (const MultiKeyLog::Key& k : multi_keys_.closure(key, offset_end)) {
      const Asked asked{RepairReason::UnconfirmedBeforeRestart, offset_end, 0, 0};
      if (requested_.emplace(k, asked).second) {
        repairs_.push_back(k);
        asked_offsets_.insert(asked.write_offset);
      }
    }
  }
}

std::vector<source::DocumentKey> CopyRepairBook::take() {
  std::vector<source::DocumentKey> out;
  out.swap(repairs_);
  signalled_ = false;
  return out;
}

void CopyRepairBook::dropRestored(source::Change& c, uint64_t offset_end) {
  if (skips_.empty()) return;
  auto covered = [&](int db, std::string_view key) {
    return !key.empty() && skips_.covers(db, key, offset_end);
  };
  bool touches = false;
  for (const auto& ev : c.events) {
    if (ev.pass && (covered(ev.db, ev.key) || covered(ev.from_db, ev.from_key))) touches = true;
  }
  if (c.entry != nullptr) {
    for (uint16_t pos : c.key_args) touches = touches || covered(c.db, c.arg(pos));
  }
  if (!touches) return;
  using source::Effect;
  const bool per_key = c.effect == Effect::Set || c.effect == Effect::SetNoTtl ||
                       c.effect == Effect::ExpireAt || c.effect == Effect::Persist ||
                       c.effect == Effect::Delete || c.effect == Effect::Restore;
  const bool one_key =
      c.events.size() == 1 && c.events.front().from_key.empty() && c.key_args.size() <= 1;
  if (per_key || one_key) {
    for (auto& ev : c.events) {
      if (ev.pass && covered(ev.db, ev.key)) ev.pass = false;
    }
    return;
  }
  // It reads a restored key or links it to others (RENAME, LMOVE, SUNIONSTORE, …): its effect
  // on the others depends on the restored key as it was then, which the target no longer has.
  // Not written; every key it names is read back now, at or past this unit.
  for (auto& ev : c.events) {
    if (!ev.pass) continue;
    ev.pass = false;
    // (A key restored at or past this unit holds the change already: request() skips it.)
    request(ev.db, std::string(ev.key), RepairReason::ExpiredBeforeWrite, offset_end);
    if (!ev.from_key.empty()) {
      request(ev.from_db, std::string(ev.from_key), RepairReason::ExpiredBeforeWrite, offset_end);
    }
  }
}

void CopyRepairBook::logMultiKey(const source::Change& c, uint64_t offset_end) {
  size_t keys = 0;
  for (const auto& ev : c.events) keys += ev.from_key.empty() ? 1 : 2;
  if (c.entry != nullptr) keys = std::max(keys, c.key_args.size());
  if (keys < 2) return;
  std::vector<MultiKeyLog::Key> all;
  auto add = [&](int db, std::string_view key) {
    if (key.empty()) return;
    MultiKeyLog::Key k{db, std::string(key)};
    if (std::find(all.begin(), all.end(), k) == all.end()) all.push_back(std::move(k));
  };
  for (const auto& ev : c.events) {
    add(ev.db, ev.key);
    add(ev.from_db, ev.from_key);
  }
  if (c.entry != nullptr) {
    for (uint16_t pos : c.key_args) add(c.db, c.arg(pos));
  }
  if (all.size() >= 2) multi_keys_.add(offset_end, std::move(all));
}

std::optional<CopyRepairBook::Asked> CopyRepairBook::claim(const source::DocumentKey& key) {
  auto it = requested_.find(key);
  if (it == requested_.end()) return std::nullopt;
  const Asked asked = it->second;
  requested_.erase(it);
  asked_offsets_.erase(asked_offsets_.find(asked.write_offset));
  return asked;
}

void CopyRepairBook::fieldGuardRefused(std::string_view error, bool field_ttls) {
  if (!field_ttls || field_guard_refused_said_) return;
  field_guard_refused_said_ = true;
  spdlog::warn(
      "{}: the target refused HEXISTS ({}): an HINCRBY of a hash field whose copy may have "
      "expired on the target is not guarded, and can restart the field from nothing "
      "(expiry-semantics.md §12, S-11); grant the target's user +hexists",
      label_, error);
}

void CopyRepairBook::unrecoverable(const source::DocumentKey& key, const std::string& why) {
  ++stats_.copies_unrecoverable;
  uint64_t suppressed = 0;
  if (log_.allow(suppressed)) {
    spdlog::error(
        "{}: the target's copy of \"{}\" (db {}) ended before a later write reached it and "
        "could not be restored: {} (counted in xdcr_target_copies_unrecoverable_total){}",
        label_, key.second, key.first, why,
        suppressed ? fmt::format(" ({} more suppressed)", suppressed) : "");
  }
}

uint64_t& CopyRepairBook::restoredCounter(RepairReason reason) {
  switch (reason) {
    case RepairReason::ClampedBeforeWrite:
      return stats_.copies_restored_clamped;
    case RepairReason::FieldExpiredBeforeWrite:
      return stats_.copies_restored_field;
    case RepairReason::UnconfirmedBeforeRestart:
      return stats_.copies_restored_unconfirmed;
    case RepairReason::ExpiredBeforeWrite:
      break;
  }
  return stats_.copies_restored_expired;
}

void CopyRepairBook::restored(int db, std::string_view key, uint64_t x, std::string record_key,
                              const Asked& asked, int64_t now_ms, bool source_had_it) {
  RestoredCopyNote note;
  note.db = db;
  note.key.assign(key);
  note.reason = repairReasonName(asked.reason);
  note.copy_deadline_ms = asked.copy_deadline_ms;
  note.write_offset = asked.write_offset;
  note.found_at_ms = asked.found_at_ms;
  note.read_offset = x;
  note.restored_at_ms = now_ms;
  note.source_had_it = source_had_it;
  stats_.restores.add(std::move(note));
  skips_.add(db, key, x);
  if (!record_key.empty())
    records_.push_back({std::move(record_key), RepairSkips::field(db, key), x});
}

bool CopyRepairBook::loadRecord(const std::string& record_key, const std::string& field,
                                uint64_t until) {
  const size_t colon = field.find(':');
  if (colon == std::string::npos || colon == 0) return false;
  int db = 0;
  const auto [p, ec] = std::from_chars(field.data(), field.data() + colon, db);
  if (ec != std::errc() || p != field.data() + colon) return false;
  skips_.add(db, std::string_view(field).substr(colon + 1), until);
  records_.push_back({record_key, field, until});
  return true;
}

std::vector<std::pair<std::string, std::vector<std::string>>> CopyRepairBook::prunable(
    uint64_t marker_offset) {
  // Records of restored copies that a durable checkpoint has passed: no replay can reach their
  // writes any more. The checkpoint before this one is durable now (a new one waits for that);
  // the one before it surely is.
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  if (!records_.empty()) {
    std::vector<Record> keep;
    for (Record& r : records_) {
      if (r.until > prune_upto_) {
        keep.push_back(std::move(r));
        continue;
      }
      auto it = std::find_if(out.begin(), out.end(),
                             [&](const auto& e) { return e.first == r.record_key; });
      if (it == out.end()) {
        out.emplace_back(r.record_key, std::vector<std::string>{});
        it = out.end() - 1;
      }
      it->second.push_back(std::move(r.field));
    }
    records_.swap(keep);
  }
  prune_upto_ = previous_marker_offset_;
  previous_marker_offset_ = marker_offset;
  return out;
}

void CopyRepairBook::clear() {
  skips_.clear();
  multi_keys_.clear();
  requested_.clear();
  asked_offsets_.clear();
  repairs_.clear();
  in_flight_.clear();
  signalled_ = false;
  records_.clear();
  prune_upto_ = previous_marker_offset_ = 0;
}

}  // namespace xdcr::target
