#include "target/memcached_sink.h"

#include <boost/asio/experimental/awaitable_operators.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "target/marker.h"

namespace xdcr::target {

using namespace net::experimental::awaitable_operators;
using source::Effect;
using Op = MemcachedWriter::Op;

namespace {

constexpr uint8_t kRdbTypeString = 0;

}  // namespace

std::string memcachedJson(const source::rdb::Value& v) {
  using Json = nlohmann::json;
  using K = source::rdb::Value::Kind;
  Json j;
  switch (v.kind) {
    case K::String:
      j = v.string;
      break;
    case K::List:
    case K::Set:
      j = Json::array();
      for (const auto& e : v.elements) j.push_back(e);
      break;
    case K::ZSet:
      j = Json::array();
      for (const auto& [member, score] : v.zset) j.push_back(Json::array({member, score}));
      break;
    case K::Hash:
      j = Json::object();
      for (const auto& f : v.hash) j[f.name] = f.value;
      break;
    case K::Stream:
      j = Json::array();
      for (const auto& e : v.stream.entries) {
        Json fields = Json::array();
        for (const auto& [f, val] : e.fields) fields.push_back(Json::array({f, val}));
        j.push_back(Json::array({fmt::format("{}-{}", e.id.ms, e.id.seq), fields}));
      }
      break;
  }
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

MemcachedSink::MemcachedSink(net::any_io_executor ex, const config::PipelineConfig& pipeline,
                             const std::string& instance,
                             const config::ClusterConfig& target_cluster,
                             filters::KeySpaceConstSharedPtr keys, const MaxTtlPolicy& policy,
                             const clock::ClusterClock& target_clock, const clock::Clock& clock,
                             const Limits& limits, PipelineStats& stats)
    : label_(fmt::format("pipeline {}: target {} (memcached {})", instance, target_cluster.name,
                         target_cluster.address())),
      pipeline_(pipeline),
      target_cluster_(target_cluster),
      limits_(limits),
      stats_(stats),
      filter_(pipeline, std::move(keys), stats),
      policy_(policy),
      target_clock_(target_clock),
      writer_(ex, target_cluster, label_, stats, clock),
      marker_key_(markerKey(instance)),
      book_(label_, stats) {}

net::awaitable<Status> MemcachedSink::connect() {
  if (auto s = co_await writer_.connect(); !s) co_return s;
  spdlog::info("{}: memcached {}, item_size_max {} bytes", label_, writer_.version(),
               writer_.itemSizeMax());
  co_return Status{};
}

net::awaitable<Status> MemcachedSink::run() {
  auto r = co_await (writer_.runWriter() || writer_.runReader());
  co_return std::visit([](auto& s) { return s; }, r);
}

bool MemcachedSink::overLimits(bool snapshot) const {
  const uint64_t max_cmds =
      snapshot ? limits_.snapshot_max_unanswered_commands : limits_.max_unanswered_commands;
  return writer_.inflightCommands() > max_cmds ||
         writer_.pendingBytes() > limits_.max_unanswered_bytes;
}

net::awaitable<Result<MarkerState>> MemcachedSink::readMarkers(
    const std::vector<std::string>& /*accepted*/) {
  RedisConnection conn(co_await net::this_coro::executor, label_ + " marker check");
  constexpr auto kTimeout = std::chrono::seconds(10);
  if (Status s = co_await conn.connect(target_cluster_.endpoint(), kTimeout); !s) {
    co_return fail(s.error());
  }
  const auto key = mc::wireKey(marker_key_);
  if (!key) {
    co_return fail(Error::refused(fmt::format(
        "{}: the marker key {} is longer than memcached takes (250 bytes); use a shorter "
        "pipeline name",
        label_, marker_key_)));
  }
  std::string request;
  mc::appendGet(request, *key);
  auto r = co_await MemcachedWriter::call(conn, request, 1, kTimeout);
  conn.close();
  if (!r) co_return fail(r.error());
  const mc::Reply& v = r->front();
  if (v.isError()) {
    co_return fail(Error::refused(
        fmt::format("{}: cannot read the marker key {}: {}", label_, marker_key_, v.text)));
  }
  MarkerState m;  // no replay stamp: every memcached write is idempotent
  m.present = v.kind == mc::Reply::Kind::Value;
  if (m.present) m.marker = v.value;
  last_marker_ = m.present ? std::optional<std::string>(m.marker) : std::nullopt;
  co_return m;
}

void MemcachedSink::appendMarker(std::string_view token, uint64_t offset) {
  const auto key = mc::wireKey(marker_key_);
  if (!key) return;  // readMarkers() refused it already
  // The previous value first: another token there is a second agent writing this pipeline's
  // marker. (A miss is not: memcached may have evicted it; the next session then finds no
  // marker and makes a full sync, which is safe.)
  mc::appendGet(writer_.pending(), *key);
  writer_.add(Op::Get);
  mc::appendSet(writer_.pending(), *key, token, 0);
  writer_.add(Op::Marker);
  writer_.commit(offset);
  const uint64_t get_seq = writer_.committedCommands() - 1;
  writer_.onReply(
      get_seq,
      [this, expected = last_marker_, ours = std::string(token)](const mc::Reply& reply) -> Status {
        if (reply.kind != mc::Reply::Kind::Value || (expected && reply.value == *expected)) {
          return Status{};
        }
        const std::string what = fmt::format(
            "pipeline {}: another writer replaced this pipeline's marker {} on target {} since "
            "this "
            "agent last wrote it (found \"{}\"): two agents (or two pipelines of this name) "
            "replicate into the same target",
            pipeline_.name, marker_key_, target_cluster_.name, reply.value);
        if (markerWriterIsNewer(reply.value, ours)) {
          spdlog::error("{}; the one that started later stops, this one goes on", what);
          return Status{};
        }
        return fail(Error::conflict(what + "; this agent started later, so this pipeline stops — "
                                           "stop the other writer first, then restart this agent"));
      });
  last_marker_ = std::string(token);
}

Status MemcachedSink::beginSnapshot(bool /*record_keys*/) {
  counts_ = SnapshotCounts{};
  if (first_seen_ != nullptr) first_seen_->beginSweep();
  return Status{};
}

mc::FinalDeadline MemcachedSink::finalDeadline(int64_t e_ms, int db, std::string_view key,
                                               int64_t now_ms, WriteKind kind,
                                               std::optional<std::string_view> value) {
  if (!policy_.hasPolicies()) {
    const int64_t m = policy_.empty() ? 0 : policy_.effectiveMs(db, key);
    return mc::finalDeadline(e_ms, compensation_ms_, m, now_ms);
  }
  const KeyPolicy kp = policy_.resolve(db, key);
  if (!kp.any()) return mc::finalDeadline(e_ms, compensation_ms_, kp.max_ttl_ms, now_ms);
  const int64_t e = e_ms == 0 ? 0 : e_ms + compensation_ms_;
  int64_t first = 0;
  if (kp.maxLifetimeMs() > 0 && first_seen_ != nullptr) {
    first = first_seen_->touch(db, key, now_ms, kp.maxLifetimeMs());
    // On disk before the write that uses it is queued (target/first_seen.h).
    if (auto s = first_seen_->flush(); !s) spdlog::error("{}: {}", label_, s.error().message);
  }
  const PolicyDecision d = decide(kp, PolicyInput{kind, e, value, now_ms, first});
  mc::FinalDeadline f = mc::finalDeadline(d.deadline, 0, 0, now_ms);
  const std::string_view rule = d.rule;
  f.clamped = (rule == "max_ttl" || rule == "max_lifetime") && d.deadline != e;
  if (f.kind == mc::FinalDeadline::Kind::Expired && first_seen_ != nullptr) {
    first_seen_->forget(db, key);  // md: gone from the target, its next write starts anew
  }
  return f;
}

bool MemcachedSink::targetKey(int source_db, std::string_view key) {
  const filters::KeySpace& keys = filter_.keySpace();
  auto [prefix, rest] = keys.rewrite(key);
  key_.assign(prefix);
  key_.append(rest);
  if (keys.mapDb(source_db) != 0) {
    ++stats_.target_write_failures["db"];
    uint64_t suppressed = 0;
    if (fail_log_.allow(suppressed)) {
      spdlog::error(
          "{}: key \"{}\" of source db {} NOT written: it maps to db {}, and memcached has only "
          "db 0; map every source db to 0 (dbs: {{N: 0}}) with key_rewrite to keep them apart "
          "(counted in xdcr_target_write_failures_total{{reason=\"db\"}}){}",
          label_, key, source_db, keys.mapDb(source_db),
          suppressed ? fmt::format(" ({} more suppressed)", suppressed) : "");
    }
    return false;
  }
  return true;
}

void MemcachedSink::refuse(std::string_view reason, std::string_view key, const std::string& why) {
  ++stats_.target_write_failures[std::string(reason)];
  uint64_t suppressed = 0;
  if (fail_log_.allow(suppressed)) {
    spdlog::error(
        "{}: key \"{}\" NOT written: {} (counted in "
        "xdcr_target_write_failures_total{{reason=\"{}\"}}){}",
        label_, key, why, reason,
        suppressed ? fmt::format(" ({} more suppressed)", suppressed) : "");
  }
}

void MemcachedSink::remove(int db, std::string_view key) {
  if (!targetKey(db, key)) return;
  if (first_seen_ != nullptr) first_seen_->forget(0, key_);
  const auto wk = mc::wireKey(key_);
  if (!wk) return;  // never written there
  mc::appendDelete(writer_.pending(), *wk);
  writer_.add(Op::Delete);
}

void MemcachedSink::invalidate(int db, std::string_view key, const source::Change& c) {
  if (!targetKey(db, key)) return;
  if (first_seen_ != nullptr) first_seen_->forget(0, key_);  // deleted: starts anew
  const auto wk = mc::wireKey(key_);
  if (!wk) return;
  mc::appendDelete(writer_.pending(), *wk);
  writer_.add(Op::Delete);
  ++stats_.target_invalidations;
  uint64_t suppressed = 0;
  if (invalidate_log_.allow(suppressed)) {
    spdlog::info(
        "{}: {} on key \"{}\" cannot be expressed in memcached: the key is deleted there "
        "instead (counted in xdcr_target_invalidations_total){}",
        label_, c.entry != nullptr ? c.arg(0) : std::string_view("a non-string value"), key,
        suppressed ? fmt::format(" ({} more suppressed)", suppressed) : "");
  }
}

MemcachedSink::Outcome MemcachedSink::writeValue(const source::Event& ev, std::string_view value,
                                                 int64_t e_ms, uint32_t flags, int64_t now) {
  if (!targetKey(ev.db, ev.key)) return Outcome::Failed;
  const auto wk = mc::wireKey(key_);
  if (!wk) {
    refuse("key_too_long", key_,
           fmt::format("its key is {} bytes; memcached takes at most 250 bytes of key (186 of a "
                       "key with bytes other than printable ASCII, sent in base64)",
                       key_.size()));
    return Outcome::Failed;
  }
  const mc::FinalDeadline f = finalDeadline(
      e_ms, 0, key_, now, WriteKind::WholeValue,
      flags == mc::kFlagString ? std::optional<std::string_view>(value) : std::nullopt);
  if (f.clamped) ++stats_.expiry_clamped;
  using K = mc::FinalDeadline::Kind;
  if (f.kind == K::Expired) {
    // Expired on arrival: the source's key is gone, so the target's must be too.
    mc::appendDelete(writer_.pending(), *wk);
    writer_.add(Op::Delete);
    ++stats_.expired_on_arrival;
    return Outcome::Expired;
  }
  const size_t max_value = mc::maxValueSize(writer_.itemSizeMax(), key_.size());
  if (f.kind == K::TooFar || value.size() > max_value) {
    // Not written; and the old value goes, so that no key is left half-applied (the source's
    // value is not the one memcached holds any more).
    if (f.kind == K::TooFar) {
      refuse("deadline_2038", key_,
             fmt::format("its deadline {} ms is after 2038-01-19T03:14:07Z, which memcached "
                         "cannot store (its exptime is a signed 32-bit number of seconds and "
                         "would wrap); its old value is deleted",
                         f.ms));
    } else {
      refuse("value_too_large", key_,
             fmt::format("its value is {} bytes; memcached's item_size_max {} leaves at most {} "
                         "for this key (raise memcached's -I); its old value is deleted",
                         value.size(), writer_.itemSizeMax(), max_value));
    }
    mc::appendDelete(writer_.pending(), *wk);
    writer_.add(Op::Delete);
    return Outcome::Failed;
  }
  mc::appendSet(writer_.pending(), *wk, value, f.kind == K::At ? f.exptime_s : 0, flags);
  writer_.add(Op::Set);
  return Outcome::Written;
}

void MemcachedSink::touch(const source::Event& ev, int64_t e_ms, int64_t now) {
  if (!targetKey(ev.db, ev.key)) return;
  const auto wk = mc::wireKey(key_);
  if (!wk) return;  // never written there
  const mc::FinalDeadline f = finalDeadline(e_ms, 0, key_, now);
  if (f.clamped) ++stats_.expiry_clamped;
  using K = mc::FinalDeadline::Kind;
  switch (f.kind) {
    case K::Expired:
      mc::appendDelete(writer_.pending(), *wk);
      writer_.add(Op::Delete);
      ++stats_.expired_on_arrival;
      return;
    case K::TooFar:
      // The key keeps a deadline memcached cannot replace: remove it rather than keep a wrong
      // (earlier) one.
      refuse("deadline_2038", key_,
             fmt::format("its new deadline {} ms is after 2038-01-19T03:14:07Z, which memcached "
                         "cannot store; the key is deleted there",
                         f.ms));
      mc::appendDelete(writer_.pending(), *wk);
      writer_.add(Op::Delete);
      return;
    case K::None:
      mc::appendTouch(writer_.pending(), *wk, 0);
      writer_.add(Op::Persist);
      watchTouch(ev.db, ev.key);
      return;
    case K::At:
      mc::appendTouch(writer_.pending(), *wk, f.exptime_s);
      writer_.add(Op::Expire);
      watchTouch(ev.db, ev.key);
      return;
  }
}

void MemcachedSink::watchTouch(int db, std::string_view key) {
  writer_.onReply(writer_.lastAddedSeq(), [this, db, key = std::string(key),
                                           offset = unit_offset_](const mc::Reply& reply) {
    if (reply.kind == mc::Reply::Kind::Miss) {
      book_.request(db, key, RepairReason::ExpiredBeforeWrite, offset);
    }
    return Status{};
  });
}

std::vector<source::DocumentKey> MemcachedSink::takeRepairs() {
  return book_.take();
}

void MemcachedSink::restoreCopies(const source::DocumentRead& read) {
  for (const auto& [key, why] : read.unreadable) {
    if (book_.claim(key)) book_.unrecoverable(key, why);
  }
  const int64_t now = target_clock_.nowMs();
  for (const source::SourceDocument& doc : read.docs) {
    const source::DocumentKey key{doc.db, doc.key};
    const std::optional<CopyRepairBook::Asked> asked = book_.claim(key);
    if (!asked) continue;  // another pipeline's
    documentAsSnapshotKey(doc, restored_payload_, judged_);
    const source::Event& ev = judged_.events.front();
    filter_.judge(judged_);
    if (!ev.pass) continue;  // outside the key space now (a reload changed it)
    // Idempotent writes: no record.
    book_.restored(doc.db, doc.key, read.offset, "", *asked, now, doc.exists);
    if (!doc.exists) {
      // Gone on the source too (deleted or expired by the time of the read): so on the target.
      remove(doc.db, doc.key);
      writer_.commit(last_offset_);
      continue;
    }
    std::string why;
    const Outcome outcome = writeDocument(ev, restored_payload_, now, why);
    writer_.commit(last_offset_);
    // Expired by now: deleted. Not writable here (not_a_string, value_too_large, …): refused,
    // counted in xdcr_target_write_failures_total and deleted, as any write of it is.
    if (outcome != Outcome::Written) continue;
    ++stats_.copies_restored_expired;
    // (A copy deleted or refused instead was gone already: nothing of it to wait for.)
    book_.sent(asked->write_offset);
    writer_.onReply(writer_.committedCommands(),
                    [this, key, at = asked->write_offset](const mc::Reply& reply) -> Status {
                      book_.landed(at);
                      if (!reply.isError()) return Status{};
                      --stats_.copies_restored_expired;
                      book_.unrecoverable(key, "the target refused it: " + reply.text);
                      return Status{};
                    });
  }
}

bool MemcachedSink::encodeValue(uint8_t type, std::string_view raw, std::string& out,
                                uint32_t& flags, std::string& why) {
  // RDB type numbers are the Redis flavour's here (a RESTORE payload, a Redis snapshot).
  if (type == kRdbTypeString) {
    std::string error;
    if (!source::rdb::decodeValue(type, raw, source::rdb::Flavor::Redis, decoded_, error)) {
      why = "its value cannot be decoded: " + error;
      return false;
    }
    out = std::move(decoded_.string);
    flags = mc::kFlagString;
    return true;
  }
  switch (target_cluster_.non_strings) {
    case config::NonStrings::Refuse:
      why =
          "it is not a string, and non_strings is refuse (set non_strings: dump or json to "
          "write such values)";
      return false;
    case config::NonStrings::Dump:
      why.clear();
      return false;  // the caller has the payload
    case config::NonStrings::Json: {
      std::string error;
      if (!source::rdb::decodeValue(type, raw, source::rdb::Flavor::Redis, decoded_, error)) {
        why = "its value cannot be decoded: " + error;
        return false;
      }
      out = memcachedJson(decoded_);
      flags = mc::kFlagJson;
      return true;
    }
  }
  return false;
}

void MemcachedSink::apply(const source::ResolvedUnit& unit, bool /*write*/) {
  // (`write` is false only for a unit a replay stamp covers; this sink writes none.)
  const int64_t now =
      unit.local_ms != 0 ? unit.local_ms + target_clock_.offsetMs() : target_clock_.nowMs();
  if (unit.snapshot) {
    for (const auto& c : unit.view()) applySnapshotKey(c, now);
    return;
  }
  unit_offset_ = unit.offset_end;
  book_.passed(unit.offset_end, writer_.ackedOffset());
  for (const auto& c : unit.view()) {
    judged_ = c;
    filter_.judge(judged_);
    // A key restored from a read at or past this unit holds its change already.
    book_.dropRestored(judged_, unit.offset_end);
    applyChange(judged_, now);
  }
  last_offset_ = unit.offset_end;
  writer_.commit(unit.offset_end);
}

void MemcachedSink::applyChange(const source::Change& c, int64_t now) {
  for (const auto& ev : c.events) {
    if (!ev.pass) continue;
    switch (c.effect) {
      case Effect::Set:
        // KEEPTTL: the resolver gave the key's current source deadline (the one it keeps).
        writeValue(ev, c.arg(2), ev.deadline_ms, mc::kFlagString, now);
        break;
      case Effect::SetNoTtl:
        writeValue(ev, c.arg(ev.key_arg + 1), 0, mc::kFlagString, now);
        break;
      case Effect::ExpireAt:
      case Effect::Persist:
        // strip_ttl: nothing to do, unless a max_ttl or a collection policy gives a deadline
        if (ev.stripped && policy_.empty() && !policy_.hasPolicies()) break;
        touch(ev, ev.deadline_ms, now);
        break;
      case Effect::Delete:
        remove(ev.db, ev.key);
        break;
      case Effect::Restore: {
        const std::string_view payload = c.arg(3);
        if (payload.size() < 11) {
          invalidate(ev.db, ev.key, c);
          break;
        }
        const auto type = static_cast<uint8_t>(payload[0]);
        const std::string_view raw = payload.substr(1, payload.size() - 11);
        uint32_t flags = 0;
        std::string why;
        if (encodeValue(type, raw, value_, flags, why)) {
          writeValue(ev, value_, ev.deadline_ms, flags, now);
        } else if (why.empty()) {
          writeValue(ev, payload, ev.deadline_ms, mc::kFlagDump, now);  // non_strings: dump
        } else {
          refuse("not_a_string", ev.key, why);
          remove(ev.db, ev.key);
        }
        break;
      }
      case Effect::Rename:
      case Effect::Move:
        // Both keys change; neither can be moved in memcached.
        if (ev.kind != EventKind::Deletion && !ev.from_key.empty()) {
          invalidate(ev.from_db, ev.from_key, c);
        }
        invalidate(ev.db, ev.key, c);
        break;
      case Effect::Store:
      case Effect::InPlace:
      case Effect::Copy:
        invalidate(ev.db, ev.key, c);
        break;
      case Effect::Flush:
      case Effect::SwapDb:
      case Effect::Unknown:
        // Validation refuses replicate_flush; SWAPDB and unknown commands name no key to
        // delete.
        refuse("unwritable", c.entry != nullptr ? c.arg(0) : "",
               fmt::format("{} cannot be applied to memcached", c.arg(0)));
        break;
      case Effect::SnapshotKey:
      case Effect::Select:
      case Effect::Multi:
      case Effect::Exec:
      case Effect::Heartbeat:
        break;
    }
  }
}

void MemcachedSink::applySnapshotKey(const source::Change& c, int64_t now) {
  judged_ = c;
  filter_.judge(judged_);
  const source::Event& ev = judged_.events.front();
  if (!ev.pass) {
    ++counts_.filtered;
    return;
  }
  std::string why;
  const Outcome outcome = writeDocument(ev, *c.rdb, now, why);
  writer_.commit(writer_.ackedOffset());
  if (outcome == Outcome::Expired) {
    ++counts_.expired;
    return;
  }
  if (outcome == Outcome::Failed) {
    ++counts_.failed;
    ++stats_.snapshot_keys_failed;
    return;
  }
  // Copied once memcached said so.
  ++counts_.restored;
  writer_.onReply(writer_.committedCommands(), [this](const mc::Reply& reply) -> Status {
    if (reply.isError()) {
      --counts_.restored;
      ++counts_.failed;
      ++stats_.snapshot_keys_failed;
    }
    return Status{};
  });
}

MemcachedSink::Outcome MemcachedSink::writeDocument(const source::Event& ev,
                                                    const source::RdbPayload& rdb, int64_t now,
                                                    std::string& why) {
  uint32_t flags = 0;
  Outcome outcome = Outcome::Failed;
  if (rdb.flavor == source::rdb::Flavor::Valkey && rdb.type != kRdbTypeString &&
      target_cluster_.non_strings != config::NonStrings::Refuse) {
    why = "a Valkey value of RDB type " + std::to_string(rdb.type) + " is not written to memcached";
  } else if (encodeValue(rdb.type, rdb.value, value_, flags, why)) {
    outcome = writeValue(ev, value_, ev.deadline_ms, flags, now);
  } else if (why.empty()) {
    // non_strings: dump: the DUMP payload RESTORE takes (type, value, RDB version, CRC64).
    const char type_byte = static_cast<char>(rdb.type);
    const char version[2] = {static_cast<char>(rdb.rdb_version & 0xff),
                             static_cast<char>((rdb.rdb_version >> 8) & 0xff)};
    uint64_t crc = source::rdb::crc64(0, &type_byte, 1);
    crc = source::rdb::crc64(crc, rdb.value.data(), rdb.value.size());
    crc = source::rdb::crc64(crc, version, 2);
    value_.clear();
    value_.push_back(type_byte);
    value_.append(rdb.value);
    value_.append(version, 2);
    value_.append(reinterpret_cast<const char*>(&crc), 8);  // little-endian host
    outcome = writeValue(ev, value_, ev.deadline_ms, mc::kFlagDump, now);
  }
  if (!why.empty()) {
    refuse("not_a_string", ev.key, why);
    remove(ev.db, ev.key);  // the target must not keep an older value of it
  }
  return outcome;
}

}  // namespace xdcr::target
