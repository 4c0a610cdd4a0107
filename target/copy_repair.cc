#include "target/copy_repair.h"

#include <algorithm>

namespace xdcr::target {

std::string_view repairReasonName(RepairReason r) {
  switch (r) {
    case RepairReason::ExpiredBeforeWrite:
      return "expired_before_write";
    case RepairReason::ClampedBeforeWrite:
      return "clamped_before_write";
    case RepairReason::FieldExpiredBeforeWrite:
      return "field_expired_before_write";
    case RepairReason::UnconfirmedBeforeRestart:
      return "unconfirmed_before_restart";
  }
  return "expired_before_write";
}

std::string RepairSkips::field(int db, std::string_view key) {
  std::string f = std::to_string(db);
  f.push_back(':');
  f.append(key);
  return f;
}

void RepairSkips::add(int db, std::string_view key, uint64_t until) {
  uint64_t& x = skips_[field(db, key)];
  x = std::max(x, until);
  max_until_ = std::max(max_until_, until);
}

std::optional<uint64_t> RepairSkips::until(int db, std::string_view key) const {
  scratch_ = std::to_string(db);
  scratch_.push_back(':');
  scratch_.append(key);
  auto it = skips_.find(scratch_);
  if (it == skips_.end()) return std::nullopt;
  return it->second;
}

bool RepairSkips::covers(int db, std::string_view key, uint64_t offset_end) const {
  if (skips_.empty() || offset_end > max_until_) return false;
  const auto x = until(db, key);
  return x && offset_end <= *x;
}

void RepairSkips::passed(uint64_t offset_end) {
  if (skips_.empty() || offset_end <= max_until_) return;
  // Every entry's X is at or below max_until_: the stream is past all of them.
  skips_.clear();
  max_until_ = 0;
}

size_t CopyDeadlines::slotOf(uint64_t h) const {
  const size_t mask = hashes_.size() - 1;
  size_t i = static_cast<size_t>(h * 0x9E3779B97F4A7C15ULL >> 17) & mask;
  while (hashes_[i] != 0 && hashes_[i] != h) i = (i + 1) & mask;
  return i;
}

void CopyDeadlines::grow() {
  std::vector<uint64_t> hashes(std::max<size_t>(hashes_.size() * 2, 1024), 0);
  std::vector<uint32_t> seconds(hashes.size(), 0);
  hashes.swap(hashes_);
  seconds.swap(seconds_);
  for (size_t i = 0; i < hashes.size(); ++i) {
    if (hashes[i] == 0) continue;
    const size_t j = slotOf(hashes[i]);
    hashes_[j] = hashes[i];
    seconds_[j] = seconds[i];
  }
}

void CopyDeadlines::set(uint64_t hash, int64_t deadline_ms) {
  if ((live_ + 1) * 4 > hashes_.size() * 3) grow();
  const uint64_t h = stored(hash);
  const size_t i = slotOf(h);
  if (hashes_[i] == 0) {
    hashes_[i] = h;
    ++live_;
  }
  // Rounded up to the second: the copy is never taken for ended before it has.
  seconds_[i] = deadline_ms <= 0 ? 0 : static_cast<uint32_t>((deadline_ms + 999) / 1000);
}

std::optional<int64_t> CopyDeadlines::find(uint64_t hash) const {
  if (hashes_.empty()) return std::nullopt;
  const size_t i = slotOf(stored(hash));
  if (hashes_[i] == 0) return std::nullopt;
  return int64_t{seconds_[i]} * 1000;
}

void CopyDeadlines::erase(uint64_t hash) {
  if (hashes_.empty()) return;
  const size_t mask = hashes_.size() - 1;
  size_t i = slotOf(stored(hash));
  if (hashes_[i] == 0) return;
  // Backward-shift deletion: every later entry of the probe run stays reachable.
  hashes_[i] = 0;
  --live_;
  for (size_t j = (i + 1) & mask; hashes_[j] != 0; j = (j + 1) & mask) {
    const size_t home = static_cast<size_t>(hashes_[j] * 0x9E3779B97F4A7C15ULL >> 17) & mask;
    // Move j back to i when its home is not in (i, j] (cyclically).
    const bool between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (between) continue;
    hashes_[i] = hashes_[j];
    seconds_[i] = seconds_[j];
    hashes_[j] = 0;
    i = j;
  }
}

void CopyDeadlines::clear() {
  hashes_.clear();
  seconds_.clear();
  live_ = 0;
}

void MultiKeyLog::add(uint64_t offset_end, std::vector<Key> keys) {
  entries_.push_back(Entry{offset_end, std::move(keys)});
}

void MultiKeyLog::prune(uint64_t acked) {
  while (!entries_.empty() && entries_.front().offset_end <= acked) entries_.pop_front();
}

std::vector<MultiKeyLog::Key> MultiKeyLog::closure(const Key& start, uint64_t after) const {
  std::vector<Key> keys{start};
  auto known = [&](const Key& k) { return std::find(keys.begin(), keys.end(), k) != keys.end(); };
  // In stream order: a change links its keys from its offset on, so one pass suffices.
  for (const Entry& e : entries_) {
    if (e.offset_end <= after) continue;
    if (!std::any_of(e.keys.begin(), e.keys.end(), known)) continue;
    for (const Key& k : e.keys) {
      if (!known(k)) keys.push_back(k);
    }
  }
  return keys;
}

}  // namespace xdcr::target
