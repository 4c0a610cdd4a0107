#include "source/expiry_index.h"

#include <algorithm>
#include <cstring>

#include <xxhash.h>

namespace xdcr::source {
namespace {

constexpr size_t kMinSlots = 8;               // a shard's first table
constexpr uint32_t kImageMagic = 0x58494458;  // "XIDX"
constexpr uint32_t kImageVersion = 1;

template <class T>
void putRaw(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <class T>
bool getRaw(std::string_view& in, T& v) {
  if (in.size() < sizeof v) return false;
  std::memcpy(&v, in.data(), sizeof v);
  in.remove_prefix(sizeof v);
  return true;
}

}  // namespace

uint64_t ExpiryIndex::hashKey(std::string_view key) {
  uint64_t h = XXH3_64bits(key.data(), key.size());
  return h == 0 ? 1 : h;  // 0 marks an empty slot
}

ExpiryIndex::Table* ExpiryIndex::table(int db, bool create) {
  if (db < 0) return nullptr;
  if (static_cast<size_t>(db) >= dbs_.size()) {
    if (!create) return nullptr;
    dbs_.resize(db + 1);
  }
  Table& t = dbs_[db];
  if (t.shards.empty()) {
    if (!create) return nullptr;
    t.shards.resize(kShards);
  }
  return &t;
}

const ExpiryIndex::Table* ExpiryIndex::table(int db) const {
  if (db < 0 || static_cast<size_t>(db) >= dbs_.size() || dbs_[db].shards.empty()) return nullptr;
  return &dbs_[db];
}

void ExpiryIndex::grow(Shard& t) {
  // By 7/16, not doubled: right after growing the shard is still 52 % full (3/4 / 1.4375),
  // so a deadline never costs more than ~31 bytes (16-byte slots), under issue 8's 32. A shard
  // holds 1/1024 of a db: growing one moves a few thousand entries even at millions of keys.
  std::vector<Slot> old;
  old.swap(t.slots);
  t.slots.assign(old.empty() ? kMinSlots : old.size() + old.size() * 7 / 16, Slot{0, 0});
  t.used = 0;
  for (const auto& s : old) {
    if (s.hash != 0) putShard(t, s.hash, s.value);
  }
}

bool ExpiryIndex::putShard(Shard& t, uint64_t h, int64_t value) {
  if ((t.used + 1) * 4 > t.slots.size() * 3) grow(t);
  const size_t n = t.slots.size();
  for (size_t i = home(h, n);; i = (i + 1 == n) ? 0 : i + 1) {
    Slot& s = t.slots[i];
    if (s.hash == h) {
      s.value = value;
      return false;
    }
    if (s.hash == 0) {
      s = Slot{h, value};
      ++t.used;
      return true;
    }
  }
}

bool ExpiryIndex::removeShard(Shard& t, uint64_t h) {
  const size_t n = t.slots.size();
  if (n == 0 || t.used == 0) return false;
  auto next = [n](size_t i) { return (i + 1 == n) ? 0 : i + 1; };
  size_t i = home(h, n);
  for (;; i = next(i)) {
    if (t.slots[i].hash == 0) return false;
    if (t.slots[i].hash == h) break;
  }
  // Backward-shift deletion keeps linear probing free of deletion markers.
  size_t j = i;
  for (;;) {
    j = next(j);
    if (t.slots[j].hash == 0) break;
    size_t h_j = home(t.slots[j].hash, n);
    bool between = (i <= j) ? (i < h_j && h_j <= j) : (i < h_j || h_j <= j);
    if (!between) {
      t.slots[i] = t.slots[j];
      i = j;
    }
  }
  t.slots[i] = Slot{0, 0};
  --t.used;
  return true;
}

void ExpiryIndex::put(Table& t, uint64_t h, int64_t value) {
  if (putShard(t.shards[shardOf(h)], h, value)) ++t.used;
}

bool ExpiryIndex::remove(Table& t, uint64_t h) {
  if (!removeShard(t.shards[shardOf(h)], h)) return false;
  --t.used;
  return true;
}

void ExpiryIndex::record(uint32_t kind, uint32_t db, uint64_t hash, int64_t value) {
  if (!journaling_ || journal_lost_) return;
  if (journal_.size() >= kMaxJournalOps) {
    // Nobody took the journal for a long time (a long pause, a slow target): stop recording
    // and let the next checkpoint be a whole image.
    journal_lost_ = true;
    std::vector<Op>().swap(journal_);
    return;
  }
  journal_.push_back(Op{kind, db, hash, value});
}

ExpiryIndex::Entry ExpiryIndex::get(int db, std::string_view key) const {
  const Table* t = table(db);
  if (t == nullptr || t->used == 0) return {};
  uint64_t h = hashKey(key);
  const Shard& sh = t->shards[shardOf(h)];
  const size_t n = sh.slots.size();
  if (n == 0) return {};
  for (size_t i = home(h, n);; i = (i + 1 == n) ? 0 : i + 1) {
    const Slot& s = sh.slots[i];
    if (s.hash == 0) return {};
    if (s.hash == h) {
      return s.value > 0 ? Entry{State::Live, s.value} : Entry{State::Tombstone, -s.value};
    }
  }
}

void ExpiryIndex::set(int db, std::string_view key, int64_t deadline_ms) {
  const uint64_t h = hashKey(key);
  if (deadline_ms <= 0) {
    Table* t = table(db, false);
    if (t != nullptr && t->used > 0 && remove(*t, h)) {
      ++dirty_;
      record(Op::Remove, static_cast<uint32_t>(db), h, 0);
    }
    return;
  }
  put(*table(db, true), h, deadline_ms);
  ++dirty_;
  record(Op::Put, static_cast<uint32_t>(db), h, deadline_ms);
}

void ExpiryIndex::tombstone(int db, std::string_view key, int64_t at_ms) {
  const uint64_t h = hashKey(key);
  const int64_t v = -(at_ms > 0 ? at_ms : 1);
  put(*table(db, true), h, v);
  ++dirty_;
  record(Op::Put, static_cast<uint32_t>(db), h, v);
}

void ExpiryIndex::clearDb(int db) {
  if (db >= 0 && static_cast<size_t>(db) < dbs_.size()) {
    dbs_[db] = Table{};
    ++dirty_;
    record(Op::ClearDb, static_cast<uint32_t>(db), 0, 0);
  }
}

void ExpiryIndex::swapDbs(int a, int b) {
  if (a < 0 || b < 0 || a == b) return;
  size_t need = static_cast<size_t>(std::max(a, b)) + 1;
  if (dbs_.size() < need) dbs_.resize(need);
  std::swap(dbs_[a], dbs_[b]);
  ++dirty_;
  record(Op::SwapDbs, static_cast<uint32_t>(a), static_cast<uint64_t>(b), 0);
}

void ExpiryIndex::clearAll() {
  dbs_.clear();
  ++dirty_;
  record(Op::ClearAll, 0, 0, 0);
}

size_t ExpiryIndex::purgeTombstones(int64_t before_ms) {
  size_t slots = 0;
  for (const auto& t : dbs_) {
    for (const auto& sh : t.shards) slots += sh.slots.size();
  }
  purge_db_ = purge_shard_ = purge_slot_ = 0;
  return purgeTombstonesStep(before_ms, slots);
}

size_t ExpiryIndex::purgeTombstonesStep(int64_t before_ms, size_t max_slots) {
  size_t purged = 0;
  size_t examined = 0;
  // Every (db, shard) position is visited at most once per call, empty ones included.
  size_t positions = 0;
  const size_t max_positions = (dbs_.size() + 1) * (kShards + 1);
  std::vector<uint64_t> victims;
  while (examined < max_slots && !dbs_.empty() && positions++ <= max_positions) {
    if (purge_db_ >= dbs_.size()) purge_db_ = 0;
    Table& t = dbs_[purge_db_];
    if (purge_shard_ >= t.shards.size()) {
      purge_shard_ = purge_slot_ = 0;
      ++purge_db_;
      continue;
    }
    Shard& sh = t.shards[purge_shard_];
    if (purge_slot_ >= sh.slots.size()) {
      purge_slot_ = 0;
      ++purge_shard_;
      continue;
    }
    const size_t end = std::min(sh.slots.size(), purge_slot_ + (max_slots - examined));
    // Collect first: removal shifts slots.
    victims.clear();
    for (size_t i = purge_slot_; i < end; ++i) {
      const Slot& s = sh.slots[i];
      if (s.hash != 0 && s.value < 0 && -s.value < before_ms) victims.push_back(s.hash);
    }
    examined += end - purge_slot_;
    purge_slot_ = end;
    for (uint64_t h : victims) {
      if (remove(t, h)) {
        ++purged;
        record(Op::Remove, static_cast<uint32_t>(purge_db_), h, 0);
      }
    }
  }
  if (purged > 0) ++dirty_;
  return purged;
}

size_t ExpiryIndex::size() const {
  size_t n = 0;
  for (const auto& t : dbs_) n += t.used;
  return n;
}

size_t ExpiryIndex::memoryBytes() const {
  size_t n = dbs_.capacity() * sizeof(Table);
  for (const auto& t : dbs_) {
    n += t.shards.capacity() * sizeof(Shard);
    for (const auto& sh : t.shards) n += sh.slots.capacity() * sizeof(Slot);
  }
  return n;
}

void ExpiryIndex::serialize(std::string& out) const {
  putRaw(out, kImageMagic);
  putRaw(out, kImageVersion);
  uint32_t ndbs = 0;
  for (const auto& t : dbs_) ndbs += t.used > 0 ? 1 : 0;
  putRaw(out, ndbs);
  for (size_t db = 0; db < dbs_.size(); ++db) {
    const Table& t = dbs_[db];
    if (t.used == 0) continue;
    putRaw(out, static_cast<uint32_t>(db));
    putRaw(out, static_cast<uint64_t>(t.used));
    for (const auto& sh : t.shards) {
      for (const auto& s : sh.slots) {
        if (s.hash != 0) {
          putRaw(out, s.hash);
          putRaw(out, s.value);
        }
      }
    }
  }
}

bool ExpiryIndex::deserialize(std::string_view in) {
  uint32_t magic = 0, version = 0, ndbs = 0;
  if (!getRaw(in, magic) || magic != kImageMagic || !getRaw(in, version) ||
      version != kImageVersion || !getRaw(in, ndbs)) {
    return false;
  }
  std::vector<Table> dbs;
  for (uint32_t i = 0; i < ndbs; ++i) {
    uint32_t db = 0;
    uint64_t n = 0;
    if (!getRaw(in, db) || !getRaw(in, n) || db > 1'000'000 || n > in.size() / 16) return false;
    if (db >= dbs.size()) dbs.resize(db + 1);
    Table& t = dbs[db];
    if (t.shards.empty()) t.shards.resize(kShards);
    for (uint64_t k = 0; k < n; ++k) {
      Slot s{};
      if (!getRaw(in, s.hash) || !getRaw(in, s.value) || s.hash == 0 || s.value == 0) return false;
      put(t, s.hash, s.value);
    }
  }
  if (!in.empty()) return false;
  dbs_.swap(dbs);
  dirty_ = 0;
  journal_.clear();
  journal_lost_ = false;
  purge_db_ = purge_shard_ = purge_slot_ = 0;
  return true;
}

void ExpiryIndex::setJournaling(bool on) {
  journaling_ = on;
  journal_lost_ = false;
  std::vector<Op>().swap(journal_);
}

void ExpiryIndex::takeJournal(std::vector<Op>& out) {
  out.clear();
  out.swap(journal_);
  journal_lost_ = false;
}

void ExpiryIndex::serializeOps(const std::vector<Op>& ops, std::string& out) {
  out.reserve(out.size() + ops.size() * kOpBytes);
  for (const Op& op : ops) {
    putRaw(out, op.kind);
    putRaw(out, op.db);
    putRaw(out, op.hash);
    putRaw(out, op.value);
  }
}

void ExpiryIndex::applyOp(const Op& op) {
  const int db = static_cast<int>(op.db);
  switch (op.kind) {
    case Op::Put:
      put(*table(db, true), op.hash, op.value);
      break;
    case Op::Remove:
      if (Table* t = table(db, false); t != nullptr) remove(*t, op.hash);
      break;
    case Op::ClearDb:
      if (static_cast<size_t>(db) < dbs_.size()) dbs_[db] = Table{};
      break;
    case Op::SwapDbs: {
      const size_t need = std::max<size_t>(op.db, op.hash) + 1;
      if (dbs_.size() < need) dbs_.resize(need);
      std::swap(dbs_[op.db], dbs_[op.hash]);
      break;
    }
    case Op::ClearAll:
      dbs_.clear();
      break;
  }
}

bool ExpiryIndex::replayOps(std::string_view in) {
  if (in.size() % kOpBytes != 0) return false;
  // Validate everything first: a malformed journal leaves the index as it was.
  std::vector<Op> ops;
  ops.reserve(in.size() / kOpBytes);
  while (!in.empty()) {
    Op op;
    getRaw(in, op.kind);
    getRaw(in, op.db);
    getRaw(in, op.hash);
    getRaw(in, op.value);
    const bool ok = op.db <= 1'000'000 &&
                    ((op.kind == Op::Put && op.hash != 0 && op.value != 0) ||
                     (op.kind == Op::Remove && op.hash != 0) || op.kind == Op::ClearDb ||
                     (op.kind == Op::SwapDbs && op.hash <= 1'000'000) || op.kind == Op::ClearAll);
    if (!ok) return false;
    ops.push_back(op);
  }
  for (const Op& op : ops) applyOp(op);
  if (!ops.empty()) ++dirty_;
  return true;
}

}  // namespace xdcr::source
