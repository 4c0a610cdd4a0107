#include "tests/support/log_watcher.h"

#include <algorithm>
#include <fstream>
#include <string_view>
#include <utility>

namespace xdcr::test {
namespace {

// Bytes read per poll at most, so that a huge log cannot stall a polling loop.
constexpr size_t kMaxReadPerPoll = 16 * 1024 * 1024;

}  // namespace

LogWatcher::LogWatcher(std::string path, std::string marker)
    : path_(std::move(path)), marker_(std::move(marker)) {}

size_t LogWatcher::poll() {
  std::ifstream in(path_, std::ios::binary);
  if (!in) {
    return matches_.size();
  }
  in.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(in.tellg());
  if (size < offset_) {
    // Truncated or replaced: start again from the beginning.
    offset_ = 0;
    partial_.clear();
  }
  if (size == offset_) {
    return matches_.size();
  }
  const size_t want = static_cast<size_t>(std::min<uint64_t>(size - offset_, kMaxReadPerPoll));
  std::string chunk(want, '\0');
  in.seekg(static_cast<std::streamoff>(offset_));
  in.read(chunk.data(), static_cast<std::streamsize>(want));
  chunk.resize(static_cast<size_t>(in.gcount()));
  offset_ += chunk.size();
  partial_ += chunk;
  size_t begin = 0;
  while (true) {
    const size_t end = partial_.find('\n', begin);
    if (end == std::string::npos) {
      break;
    }
    const std::string_view line(partial_.data() + begin, end - begin);
    if (line.find(marker_) != std::string_view::npos) {
      matches_.emplace_back(line);
    }
    begin = end + 1;
  }
  partial_.erase(0, begin);
  return matches_.size();
}

}  // namespace xdcr::test
