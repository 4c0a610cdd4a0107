#include "filters/expiry_index.h"

#include <algorithm>
#include <cstring>

#include <xxhash.h>

namespace xdcr::filters {
namespace {

constexpr size_t kMinSlots = 64;
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
  if (t.slots.empty()) {
    if (!create) return nullptr;
    t.slots.assign(kMinSlots, Slot{0, 0});
  }
  return &t;
}

const ExpiryIndex::Table* ExpiryIndex::table(int db) const {
  if (db < 0 || static_cast<size_t>(db) >= dbs_.size() || dbs_[db].slots.empty()) return nullptr;
  return &dbs_[db];
}

void ExpiryIndex::grow(Table& t) {
  std::vector<Slot> old;
  old.swap(t.slots);
  t.slots.assign(old.size() * 2, Slot{0, 0});
  t.used = 0;
  for (const auto& s : old) {
    if (s.hash != 0) put(t, s.hash, s.value);
  }
}

void ExpiryIndex::put(Table& t, uint64_t h, int64_t value) {
  if ((t.used + 1) * 4 > t.slots.size() * 3) grow(t);
  size_t mask = t.slots.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    Slot& s = t.slots[i];
    if (s.hash == h) {
      s.value = value;
      return;
    }
    if (s.hash == 0) {
      s = Slot{h, value};
      ++t.used;
      return;
    }
  }
}

void ExpiryIndex::remove(Table& t, uint64_t h) {
  size_t mask = t.slots.size() - 1;
  size_t i = h & mask;
  for (;; i = (i + 1) & mask) {
    if (t.slots[i].hash == 0) return;
    if (t.slots[i].hash == h) break;
  }
  // Backward-shift deletion keeps linear probing free of deletion markers.
  size_t j = i;
  for (;;) {
    j = (j + 1) & mask;
    if (t.slots[j].hash == 0) break;
    size_t home = t.slots[j].hash & mask;
    bool between = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
    if (!between) {
      t.slots[i] = t.slots[j];
      i = j;
    }
  }
  t.slots[i] = Slot{0, 0};
  --t.used;
}

ExpiryIndex::Entry ExpiryIndex::get(int db, std::string_view key) const {
  const Table* t = table(db);
  if (t == nullptr || t->used == 0) return {};
  uint64_t h = hashKey(key);
  size_t mask = t->slots.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = t->slots[i];
    if (s.hash == 0) return {};
    if (s.hash == h) {
      return s.value > 0 ? Entry{State::Live, s.value} : Entry{State::Tombstone, -s.value};
    }
  }
}

void ExpiryIndex::set(int db, std::string_view key, int64_t deadline_ms) {
  if (deadline_ms <= 0) {
    Table* t = table(db, false);
    if (t != nullptr && t->used > 0) {
      size_t before = t->used;
      remove(*t, hashKey(key));
      if (t->used != before) ++dirty_;
    }
    return;
  }
  put(*table(db, true), hashKey(key), deadline_ms);
  ++dirty_;
}

void ExpiryIndex::tombstone(int db, std::string_view key, int64_t at_ms) {
  put(*table(db, true), hashKey(key), -(at_ms > 0 ? at_ms : 1));
  ++dirty_;
}

void ExpiryIndex::clearDb(int db) {
  if (db >= 0 && static_cast<size_t>(db) < dbs_.size()) {
    dbs_[db] = Table{};
    ++dirty_;
  }
}

void ExpiryIndex::swapDbs(int a, int b) {
  if (a < 0 || b < 0 || a == b) return;
  size_t need = static_cast<size_t>(std::max(a, b)) + 1;
  if (dbs_.size() < need) dbs_.resize(need);
  std::swap(dbs_[a], dbs_[b]);
  ++dirty_;
}

void ExpiryIndex::clearAll() {
  dbs_.clear();
  ++dirty_;
}

size_t ExpiryIndex::purgeTombstones(int64_t before_ms) {
  size_t purged = 0;
  for (auto& t : dbs_) {
    // Collect first: removal shifts slots.
    std::vector<uint64_t> victims;
    for (const auto& s : t.slots) {
      if (s.hash != 0 && s.value < 0 && -s.value < before_ms) victims.push_back(s.hash);
    }
    for (uint64_t h : victims) remove(t, h);
    purged += victims.size();
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
  for (const auto& t : dbs_) n += t.slots.capacity() * sizeof(Slot);
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
    for (const auto& s : t.slots) {
      if (s.hash != 0) {
        putRaw(out, s.hash);
        putRaw(out, s.value);
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
    size_t slots = kMinSlots;
    while (slots * 3 < n * 4 + 4) slots *= 2;
    t.slots.assign(slots, Slot{0, 0});
    for (uint64_t k = 0; k < n; ++k) {
      Slot s{};
      if (!getRaw(in, s.hash) || !getRaw(in, s.value) || s.hash == 0 || s.value == 0) return false;
      put(t, s.hash, s.value);
    }
  }
  if (!in.empty()) return false;
  dbs_.swap(dbs);
  dirty_ = 0;
  return true;
}

}  // namespace xdcr::filters
