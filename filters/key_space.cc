#include "filters/key_space.h"

#include <re2/re2.h>

#include <algorithm>

#include "common/cluster_slot.h"

namespace xdcr::filters {

KeySpace::KeySpace(const config::PipelineConfig& pipeline)
    : dbs_(pipeline.dbs), rewrites_(pipeline.key_rewrite) {
  RE2::Options opts;
  opts.set_log_errors(false);
  for (const auto& p : pipeline.filters.include_keys) {
    include_.push_back(std::make_unique<re2::RE2>(p.value, opts));
  }
  for (const auto& p : pipeline.filters.exclude_keys) {
    exclude_.push_back(std::make_unique<re2::RE2>(p.value, opts));
  }
}

KeySpace::KeySpace(const config::PipelineConfig& pipeline,
                   const std::vector<std::pair<int, int>>& source_slots)
    : KeySpace(pipeline) {
  if (source_slots.empty()) return;
  all_slots_ = false;
  for (const auto& [lo, hi] : source_slots) {
    for (int s = std::max(lo, 0); s <= std::min(hi, cluster::kSlots - 1); ++s) {
      slots_.set(static_cast<size_t>(s));
    }
  }
}

KeySpace::~KeySpace() = default;

KeySpace::KeyVerdict KeySpace::judgeKey(std::string_view key) const {
  using Rule = KeyVerdict::Rule;
  KeyVerdict v;
  if (!all_slots_) {
    v.slot = cluster::keySlot(key);
    if (!slots_.test(static_cast<size_t>(v.slot))) {
      v.rule = Rule::Slot;
      return v;
    }
  }
  if (!include_.empty()) {
    bool any = false;
    for (const auto& re : include_) {
      if (RE2::PartialMatch(key, *re)) {
        any = true;
        break;
      }
    }
    if (!any) {
      v.rule = Rule::Include;
      return v;
    }
  }
  for (size_t i = 0; i < exclude_.size(); ++i) {
    if (RE2::PartialMatch(key, *exclude_[i])) {
      v.rule = Rule::Exclude;
      v.pattern = static_cast<int>(i);
      return v;
    }
  }
  return v;
}

std::map<int, int> KeySpace::sourceDbsByTarget() const {
  std::map<int, int> out;
  if (dbs_.empty()) {
    for (int db = 0; db < 16; ++db) out[db] = db;
  } else {
    for (auto [src, dst] : dbs_) out.emplace(dst, src);
  }
  return out;
}

std::string KeySpace::unrewrite(std::string_view target_key) const {
  for (const auto& r : rewrites_) {
    if (target_key.substr(0, r.to.size()) == r.to) {
      return r.from + std::string(target_key.substr(r.to.size()));
    }
  }
  return std::string(target_key);
}

}  // namespace xdcr::filters
