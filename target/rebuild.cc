// A snapshot key written as commands instead of one RESTORE, and the hash-field deadlines of
// stream commands (hash-field-expiry.md). A RESTORE payload is the source's own serialisation:
// a target older than the source refuses it ("DUMP payload version or checksum are wrong"), one
// over the target's proto-max-bulk-len cannot travel, and field TTLs inside it can be neither
// translated (on_skew: compensate) nor removed (strip_ttl). Then the value is decoded
// (source/rdb_value.h) and the key rebuilt: DEL, the value in commands of bounded size (an
// aggregate over the bulk limit goes in batches; a string cannot: the target holds no string
// longer than its proto-max-bulk-len), the field deadlines, the key's clamped deadline — one
// MULTI/EXEC (Applier::endEntry), so no reader sees it half built, and an EXEC error marks the
// whole key failed.

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "common/resp.h"
#include "target/applier.h"

namespace xdcr::target {
namespace {

using source::rdb::HashField;
using source::rdb::Stream;
using source::rdb::StreamId;
using source::rdb::Value;

/** Items per command of a rebuild (RPUSH, SADD, ZADD, HSET): like a client's own batching. */
constexpr size_t kRebuildBatch = 512;
/** Bytes per command of a rebuild, below any sane proto-max-bulk-len. */
constexpr size_t kRebuildBatchBytes = 8u << 20;

std::string formatId(const StreamId& id) {
  return fmt::format("{}-{}", id.ms, id.seq);
}

std::string formatScore(double d) {
  if (std::isinf(d)) return d > 0 ? "+inf" : "-inf";
  return fmt::format("{:.17g}", d);
}

}  // namespace

void logTargetServer(const std::string& label, const ServerInfo& server) {
  if (!server.known) {
    spdlog::info(
        "{}: its version is unknown (INFO refused): snapshot keys are RESTOREd and a "
        "refusal counted as failed",
        label);
    return;
  }
  spdlog::info("{}: {}; {}", label, server.describe(),
               server.fieldTtls() ? "snapshot keys it cannot RESTORE are written as commands"
                                  : "snapshot keys it cannot RESTORE are written as commands; "
                                    "it stores no hash-field TTLs");
}

void Applier::batched(std::string_view name, const Dest& d,
                      const std::vector<std::string_view>& items, size_t per_item) {
  const size_t limit = std::min<uint64_t>(kRebuildBatchBytes, max_bulk_);
  for (size_t at = 0; at < items.size();) {
    // As many whole items (per_item arguments each) as fit the count and byte bounds; at least
    // one, whose arguments are each below the bulk limit (checked by the caller).
    size_t n = 0, bytes = 0;
    while (at + (n + 1) * per_item <= items.size() && n < kRebuildBatch) {
      size_t b = 0;
      for (size_t k = 0; k < per_item; ++k) b += items[at + n * per_item + k].size();
      if (n > 0 && bytes + b > limit) break;
      bytes += b;
      ++n;
    }
    cmd(2 + n * per_item);
    bulk(name);
    bulkKey(d);
    for (size_t k = 0; k < n * per_item; ++k) bulk(items[at + k]);
    at += n * per_item;
  }
}

void Applier::rebuildString(const Dest& d, std::string_view v) {
  cmd(3);
  bulk("SET");
  bulkKey(d);
  bulk(v);
}

void Applier::rebuildHash(const Dest& d, const std::vector<HashField>& fields,
                          const source::Event& ev, int64_t now) {
  items_.clear();
  for (const HashField& f : fields) {
    // A field whose deadline has passed on the target's clock is gone: never written.
    if (f.expire_ms != 0 && !ev.strip_field_ttls && server_.fieldTtls() &&
        f.expire_ms + compensation_ms_ <= now) {
      continue;
    }
    items_.push_back(f.name);
    items_.push_back(f.value);
  }
  batched("HSET", d, items_, 2);
  // Field deadlines, absolute, translated like the key's; one HPEXPIREAT per run of fields
  // that share a deadline.
  for (size_t i = 0; i < fields.size();) {
    const int64_t e = fields[i].expire_ms;
    size_t j = i + 1;
    while (j < fields.size() && fields[j].expire_ms == e) ++j;
    if (e != 0) {
      if (ev.strip_field_ttls) {
        stats_.expiry_stripped += j - i;
      } else if (!server_.fieldTtls()) {
        droppedFieldTtls(j - i);
      } else if (e + compensation_ms_ > now) {
        cmd(5 + (j - i));
        bulk("HPEXPIREAT");
        bulkKey(d);
        bulkInt(e + compensation_ms_);
        bulk("FIELDS");
        bulkInt(static_cast<int64_t>(j - i));
        for (size_t k = i; k < j; ++k) bulk(fields[k].name);
      }
    }
    i = j;
  }
}

void Applier::rebuildStream(const Dest& d, const Stream& s) {
  for (const auto& e : s.entries) {
    cmd(3 + 2 * e.fields.size());
    bulk("XADD");
    bulkKey(d);
    bulk(formatId(e.id));
    for (const auto& [f, v] : e.fields) {
      bulk(f);
      bulk(v);
    }
  }
  if (s.entries.empty()) {
    // XADD cannot create an empty stream: add one entry at the last ID and trim it away.
    const StreamId id = s.last_id == StreamId{} ? StreamId{0, 1} : s.last_id;
    cmd(8);
    bulk("XADD");
    bulkKey(d);
    bulk("MAXLEN");
    bulk("0");
    bulk(formatId(id));
    bulk("_");
    bulk("_");
  }
  // The stream's own counters: last ID, and (RDB 10+) entries added and the max deleted ID.
  if (s.has_v2_meta) {
    cmd(7);
    bulk("XSETID");
    bulkKey(d);
    bulk(formatId(s.last_id));
    bulk("ENTRIESADDED");
    bulkInt(static_cast<int64_t>(std::max<uint64_t>(s.entries_added, s.entries.size())));
    bulk("MAXDELETEDID");
    bulk(formatId(s.max_deleted_id));
  } else {
    cmd(3);
    bulk("XSETID");
    bulkKey(d);
    bulk(formatId(s.last_id));
  }
  for (const auto& g : s.groups) {
    const bool read = g.entries_read >= 0;
    cmd(5 + (read ? 2 : 0));
    bulk("XGROUP");
    bulk("CREATE");
    bulkKey(d);
    bulk(g.name);
    bulk(formatId(g.last_id));
    if (read) {
      bulk("ENTRIESREAD");
      bulkInt(g.entries_read);
    }
    for (const auto& c : g.consumers) {
      cmd(5);
      bulk("XGROUP");
      bulk("CREATECONSUMER");
      bulkKey(d);
      bulk(g.name);
      bulk(c.name);
    }
    // Pending entries, with their owner, delivery time and count. FORCE creates the entry;
    // JUSTID leaves the count to RETRYCOUNT. An entry deleted from the stream while pending
    // cannot be claimed: XCLAIM ignores it (Redis does the same for such IDs).
    for (const auto& p : g.pending) {
      cmd(12);
      bulk("XCLAIM");
      bulkKey(d);
      bulk(g.name);
      bulk(p.consumer);
      bulk("0");
      bulk(formatId(p.id));
      bulk("TIME");
      bulkInt(p.delivery_ms);
      bulk("RETRYCOUNT");
      bulkInt(static_cast<int64_t>(p.delivery_count));
      bulk("FORCE");
      bulk("JUSTID");
    }
  }
}

bool Applier::rebuildSnapshotKey(const source::RdbPayload& rdb, const source::Event& ev,
                                 const Dest& d, int64_t t, int64_t now) {
  if (!source::rdb::decodeValue(rdb.type, rdb.value, rdb.flavor, value_, snapshot_error_)) {
    snapshot_error_ = fmt::format("its value (RDB type {}) cannot be written as commands: {}",
                                  rdb.type, snapshot_error_);
    return false;
  }
  // Every argument must fit the target's bulk limit (a string too: the target refuses to hold a
  // string longer than its proto-max-bulk-len, however it is built).
  auto fits = [&](std::string_view s) { return s.size() + 64 <= max_bulk_; };
  bool ok = true;
  switch (value_.kind) {
    case Value::Kind::String:
      // Not even in pieces: Redis refuses an APPEND whose result would exceed the limit.
      ok = value_.string.size() <= max_bulk_;
      break;
    case Value::Kind::List:
    case Value::Kind::Set:
      for (const auto& e : value_.elements) ok = ok && fits(e);
      break;
    case Value::Kind::ZSet:
      for (const auto& [m, sc] : value_.zset) ok = ok && fits(m);
      break;
    case Value::Kind::Hash:
      for (const auto& f : value_.hash) ok = ok && fits(f.name) && fits(f.value);
      break;
    case Value::Kind::Stream:
      for (const auto& e : value_.stream.entries) {
        for (const auto& [f, v] : e.fields) ok = ok && fits(f) && fits(v);
      }
      break;
  }
  if (!ok) {
    snapshot_error_ = fmt::format(
        "{} over the target's proto-max-bulk-len of {} bytes; raise it on the target and "
        "restart the agent to retry",
        value_.kind == Value::Kind::String ? "the string is" : "one of its elements is", max_bulk_);
    return false;
  }
  if (value_.kind == Value::Kind::Hash && !value_.hash.empty()) {
    // Every field already past its deadline: the key is gone on the source too.
    const bool all_gone =
        !ev.strip_field_ttls && server_.fieldTtls() &&
        std::all_of(value_.hash.begin(), value_.hash.end(), [&](const HashField& f) {
          return f.expire_ms != 0 && f.expire_ms + compensation_ms_ <= now;
        });
    if (all_gone) {
      cmd(2);
      bulk("DEL");
      bulkKey(d);
      stats_.count(WriteOp::Delete);
      snapshot_write_ = SnapshotWrite::Expired;
      return true;
    }
  }
  cmd(2);
  bulk("DEL");  // RESTORE ... REPLACE: whatever the target held under the name goes
  bulkKey(d);
  switch (value_.kind) {
    case Value::Kind::String:
      rebuildString(d, value_.string);
      break;
    case Value::Kind::List:
    case Value::Kind::Set:
      items_.assign(value_.elements.begin(), value_.elements.end());
      batched(value_.kind == Value::Kind::List ? "RPUSH" : "SADD", d, items_, 1);
      break;
    case Value::Kind::ZSet:
      numbers_.clear();
      numbers_.reserve(value_.zset.size());
      items_.clear();
      for (const auto& [m, sc] : value_.zset) {
        numbers_.push_back(formatScore(sc));
        items_.push_back(numbers_.back());
        items_.push_back(m);
      }
      batched("ZADD", d, items_, 2);
      break;
    case Value::Kind::Hash:
      rebuildHash(d, value_.hash, ev, now);
      break;
    case Value::Kind::Stream:
      rebuildStream(d, value_.stream);
      break;
  }
  if (t != 0) {
    cmd(3);
    bulk("PEXPIREAT");
    bulkKey(d);
    bulkInt(t);
  }
  stats_.count(WriteOp::Other);
  return true;
}

void Applier::droppedFieldTtls(uint64_t n) {
  stats_.field_ttls_dropped += n;
  if (!said_field_ttls_dropped_) {
    said_field_ttls_dropped_ = true;
    spdlog::warn(
        "{}: the target ({}) cannot store hash-field TTLs (Redis 7.4+ and Valkey 9 can): fields "
        "are "
        "written without their deadlines and live until their key ends; each dropped deadline "
        "is counted in xdcr_field_ttls_dropped_total (docs/hash-field-expiry.md H7)",
        label_, server_.describe());
  }
}

void Applier::forwardFieldDeadline(const source::Change& c, const source::Event& ev) {
  const auto& args = c.entry->args;
  const bool hsetex = resp::iequals(args[0], "hsetex");
  // Where the deadline is: HPEXPIREAT key ms ...; HSETEX key [FNX|FXX] PXAT ms ... FIELDS.
  // The source always sends absolute milliseconds (server-versions-notes.md §4); EXAT seconds
  // are translated too, relative EX/PX need nothing.
  size_t at = 0;
  bool seconds = false;
  if (!hsetex) {
    at = args.size() > 2 ? 2 : 0;
  } else {
    for (size_t i = 2; i + 1 < args.size(); ++i) {
      if (resp::iequals(args[i], "FIELDS")) break;
      if (resp::iequals(args[i], "PXAT") || resp::iequals(args[i], "EXAT")) {
        at = i + 1;
        seconds = resp::iequals(args[i], "EXAT");
        break;
      }
      if (resp::iequals(args[i], "PX") || resp::iequals(args[i], "EX")) {
        at = i + 1;
        break;
      }
    }
  }
  const bool drop = ev.strip_field_ttls || !server_.fieldTtls();
  auto countDropped = [&] {
    if (ev.strip_field_ttls) {
      ++stats_.expiry_stripped;
    } else {
      droppedFieldTtls(1);
    }
  };
  if (hsetex && !server_.fieldTtls()) {
    // A target without field TTLs has no HSETEX either: the fields are written with HSET.
    size_t fields_at = 0;
    for (size_t i = 2; i < args.size() && fields_at == 0; ++i) {
      if (resp::iequals(args[i], "FIELDS")) fields_at = i;
    }
    if (fields_at == 0 || fields_at + 4 > args.size()) {
      forward(c, true);  // malformed: the target says so
      return;
    }
    if (at != 0) countDropped();
    cmd(2 + (args.size() - fields_at - 2));
    bulk("HSET");
    bulkKey(dest(ev.db, ev.key));
    for (size_t i = fields_at + 2; i < args.size(); ++i) bulk(args[i]);
    return;
  }
  if (at == 0) {
    forward(c, true);  // no deadline in it (HSETEX ... KEEPTTL): as it is
    return;
  }
  if (!hsetex && drop) {
    countDropped();  // HPEXPIREAT: nothing to write; the caller still clamps the key
    return;
  }
  int64_t deadline = 0;
  const bool absolute = !hsetex || resp::iequals(args[at - 1], "PXAT") || seconds;
  const std::string_view text = args[at];
  const bool numeric =
      std::from_chars(text.data(), text.data() + text.size(), deadline).ec == std::errc();
  const bool translate = absolute && numeric && compensation_ms_ != 0;
  const bool strip = hsetex && drop;  // strip_ttl: HSETEX without its deadline option
  if (strip) countDropped();
  cmd(args.size() - (strip ? 2 : 0));
  for (size_t i = 0; i < args.size(); ++i) {
    if (strip && (i == at - 1 || i == at)) continue;
    if (i == 1) {
      bulkKey(dest(ev.db, ev.key));
    } else if (i == at && translate) {
      bulkInt(seconds ? deadline + compensation_ms_ / 1000 : deadline + compensation_ms_);
    } else {
      bulk(args[i]);
    }
  }
}

}  // namespace xdcr::target
