#include "replicator/source_head.h"

#include <cstdlib>
#include <limits>

namespace xdcr::replicator {

std::optional<SourceHead::Reading> SourceHead::parse(std::string_view info) {
  Reading r;
  bool has_offset = false;
  while (!info.empty()) {
    const size_t eol = info.find('\n');
    std::string_view line = info.substr(0, eol);
    info.remove_prefix(eol == std::string_view::npos ? info.size() : eol + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = line.substr(0, colon);
    const std::string value(line.substr(colon + 1));
    if (key == "master_replid") {
      r.replid = value;
    } else if (key == "master_replid2") {
      r.replid2 = value;
    } else if (key == "second_repl_offset") {
      r.second_offset = std::strtoll(value.c_str(), nullptr, 10);
    } else if (key == "master_repl_offset") {
      r.offset = std::strtoull(value.c_str(), nullptr, 10);
      has_offset = true;
    }
  }
  if (r.replid.empty() || !has_offset) return std::nullopt;
  return r;
}

void SourceHead::record(Reading r, TimePoint now) {
  // Offsets of another history (a source restarted without its data, another node): the old
  // samples say nothing about the new offsets.
  if (last_ && r.replid != last_->replid && !(r.replid2 == last_->replid && r.second_offset >= 0)) {
    samples_.clear();
  }
  if (!samples_.empty() && r.offset < samples_.back().offset) samples_.clear();
  if (samples_.empty() || r.offset > samples_.back().offset) {
    samples_.push_back({r.offset, now});
    if (samples_.size() > kMaxSamples) samples_.pop_front();  // the lag is then a lower bound
  }
  last_ = std::move(r);
}

bool SourceHead::sameHistory(std::string_view replid, uint64_t applied) const {
  if (!last_ || replid.empty()) return false;
  if (replid == last_->replid) return true;
  return replid == last_->replid2 && last_->second_offset >= 0 &&
         applied <= static_cast<uint64_t>(last_->second_offset);
}

std::optional<uint64_t> SourceHead::backlog(std::string_view replid, uint64_t applied) const {
  if (!sameHistory(replid, applied)) return std::nullopt;
  return last_->offset > applied ? last_->offset - applied : 0;
}

double SourceHead::lagSeconds(std::string_view replid, uint64_t applied, TimePoint now) const {
  if (!sameHistory(replid, applied)) return 0;
  for (const Sample& s : samples_) {
    if (s.offset > applied) return std::chrono::duration<double>(now - s.at).count();
  }
  return 0;
}

uint64_t ApplyRate::record(std::string_view replid, uint64_t applied, TimePoint now) {
  uint64_t delta = 0;
  if (replid != replid_ || (!samples_.empty() && applied < samples_.back().applied)) {
    samples_.clear();
    replid_ = std::string(replid);
  } else if (!samples_.empty()) {
    delta = applied - samples_.back().applied;
  }
  samples_.push_back({applied, now});
  while (samples_.size() > 2 && now - samples_[1].at >= kWindow) samples_.pop_front();
  return delta;
}

double ApplyRate::bytesPerSecond() const {
  if (samples_.size() < 2) return 0;
  const double secs =
      std::chrono::duration<double>(samples_.back().at - samples_.front().at).count();
  if (secs <= 0) return 0;
  return double(samples_.back().applied - samples_.front().applied) / secs;
}

double catchUpSeconds(uint64_t backlog, double rate) {
  if (backlog == 0) return 0;
  if (rate <= 0) return std::numeric_limits<double>::infinity();
  return double(backlog) / rate;
}

}  // namespace xdcr::replicator
