#pragma once
// Follows a log file that another process appends to (the agent's), looking for lines that
// contain a marker such as "snapshot applied:". Reads only what was added since the last poll.

#include <cstdint>
#include <string>
#include <vector>

namespace xdcr::test {

class LogWatcher {
 public:
  /** Watches `path` (it may not exist yet) for lines containing `marker`, from its beginning. */
  LogWatcher(std::string path, std::string marker);

  /** Reads the complete lines appended since the last call; returns the number of matching
   * lines seen so far. */
  size_t poll();
  /** The matching lines seen so far, in order (without the newline). */
  const std::vector<std::string>& matches() const { return matches_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string marker_;
  uint64_t offset_ = 0;
  std::string partial_;  // an incomplete last line, kept until its newline arrives
  std::vector<std::string> matches_;
};

}  // namespace xdcr::test
