#include "source/field_index.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <functional>

namespace xdcr::source {
namespace {

uint64_t hashOf(std::string_view s) {
  return std::hash<std::string_view>()(s);
}

}  // namespace

int64_t FieldDeadlineIndex::get(int db, std::string_view key, std::string_view field) const {
  auto d = dbs_.find(db);
  if (d == dbs_.end()) return 0;
  auto k = d->second.find(hashOf(key));
  if (k == d->second.end()) return 0;
  const uint64_t f = hashOf(field);
  for (const auto& [h, ms] : k->second) {
    if (h == f) return ms;
  }
  return 0;
}

void FieldDeadlineIndex::set(int db, std::string_view key, std::string_view field,
                             int64_t deadline_ms) {
  const uint64_t kh = hashOf(key), fh = hashOf(field);
  Keys& keys = dbs_[db];
  auto k = keys.find(kh);
  if (k != keys.end()) {
    Fields& fs = k->second;
    auto it = std::find_if(fs.begin(), fs.end(), [&](const auto& e) { return e.first == fh; });
    if (it != fs.end()) {
      if (deadline_ms != 0) {
        it->second = deadline_ms;
        return;
      }
      *it = fs.back();
      fs.pop_back();
      --fields_;
      if (fs.empty()) keys.erase(k);
      return;
    }
  }
  if (deadline_ms == 0) return;
  if (fields_ >= kMaxFields) {
    if (!full_) {
      full_ = true;
      spdlog::warn(
          "the hash-field deadline index holds {} fields, its bound: further field expirations "
          "count as deletions (drop_expirations does not hold them back)",
          fields_);
    }
    return;
  }
  keys[kh].emplace_back(fh, deadline_ms);
  ++fields_;
}

void FieldDeadlineIndex::eraseKey(int db, std::string_view key) {
  auto d = dbs_.find(db);
  if (d == dbs_.end()) return;
  auto k = d->second.find(hashOf(key));
  if (k == d->second.end()) return;
  fields_ -= k->second.size();
  d->second.erase(k);
}

void FieldDeadlineIndex::moveKey(int from_db, std::string_view from, int to_db,
                                 std::string_view to) {
  if (from_db == to_db && from == to) return;
  auto d = dbs_.find(from_db);
  if (d == dbs_.end()) {
    eraseKey(to_db, to);
    return;
  }
  auto k = d->second.find(hashOf(from));
  Fields moved;
  if (k != d->second.end()) {
    moved = std::move(k->second);
    d->second.erase(k);
  }
  eraseKey(to_db, to);
  if (!moved.empty()) dbs_[to_db][hashOf(to)] = std::move(moved);
}

void FieldDeadlineIndex::clearDb(int db) {
  auto d = dbs_.find(db);
  if (d == dbs_.end()) return;
  for (const auto& [kh, fs] : d->second) fields_ -= fs.size();
  dbs_.erase(d);
}

void FieldDeadlineIndex::swapDbs(int a, int b) {
  std::swap(dbs_[a], dbs_[b]);
}

void FieldDeadlineIndex::clearAll() {
  dbs_.clear();
  fields_ = 0;
}

}  // namespace xdcr::source
