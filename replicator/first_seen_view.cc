#include "replicator/first_seen_view.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

namespace xdcr::replicator {

FirstSeenView FirstSeenView::load(const std::string& state_dir, const std::string& pipeline,
                                  int64_t max_lifetime_ms, int64_t now_ms) {
  namespace fs = std::filesystem;
  FirstSeenView v;
  constexpr std::string_view kExt = ".first-seen";
  std::error_code ec;
  fs::directory_iterator it(state_dir, ec);
  if (ec) {
    v.note_ = fmt::format("cannot read agent.state_dir {}: {}", state_dir, ec.message());
    return v;
  }
  std::vector<std::string> paths;
  for (const fs::directory_entry& e : it) {
    const std::string name = e.path().filename().string();
    if (name.size() <= kExt.size() ||
        name.compare(name.size() - kExt.size(), kExt.size(), kExt) != 0) {
      continue;
    }
    const std::string instance = name.substr(0, name.size() - kExt.size());
    if (instance == pipeline || instance.rfind(pipeline + "@", 0) == 0) {
      paths.push_back(e.path().string());
    }
  }
  std::sort(paths.begin(), paths.end());
  std::string read, skipped;
  for (const std::string& p : paths) {
    auto store = std::make_unique<target::FirstSeenStore>(p, max_lifetime_ms);
    if (auto s = store->loadReadOnly(now_ms); !s) {
      skipped += (skipped.empty() ? "" : "; ") + s.error().message;
      continue;
    }
    read += fmt::format("{}{} ({} keys)", read.empty() ? "" : ", ", p, store->size());
    v.stores_.push_back(std::move(store));
  }
  if (paths.empty()) {
    v.note_ = fmt::format("no first-seen file of pipeline {} in {} ({}/{}.first-seen)", pipeline,
                          state_dir, state_dir, pipeline);
  } else {
    v.note_ = read.empty() ? "none read" : "read " + read;
    if (!skipped.empty()) v.note_ += "; skipped: " + skipped;
  }
  return v;
}

verify::FirstSeenFact FirstSeenView::find(int db, std::string_view key) const {
  verify::FirstSeenFact f;
  for (const auto& s : stores_) {
    const int64_t first = s->find(db, key);
    if (first <= 0) continue;
    f.min_s = f.min_s == 0 ? first : std::min(f.min_s, first);
    f.max_s = std::max(f.max_s, first);
  }
  return f;
}

}  // namespace xdcr::replicator
