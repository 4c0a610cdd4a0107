#pragma once
// Logging: spdlog to stderr, as text for a terminal or JSON lines for machines (interface.md §5).
// Every module logs through spdlog's default logger; `setupLogging()` is called once by main.

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <string_view>

namespace xdcr {

enum class LogFormat { Text, Json };

/** Installs the default logger. `level` is trace|debug|info|warn|error. */
void setupLogging(std::string_view level, LogFormat format);

/**
 * Lets at most `burst` messages through per `period`; counts the rest so the next message that
 * passes can say how many were suppressed. For warnings on hot paths. Not thread-safe: one per
 * strand.
 */
class LogRateLimiter {
 public:
  explicit LogRateLimiter(std::chrono::steady_clock::duration period = std::chrono::seconds(10),
                          uint32_t burst = 5)
      : period_(period), burst_(burst) {}

  /** true if a message may be logged now; `suppressed` receives how many were dropped since. */
  bool allow(uint64_t& suppressed) {
    auto now = std::chrono::steady_clock::now();
    if (now - window_start_ >= period_) {
      window_start_ = now;
      used_ = 0;
    }
    if (used_ < burst_) {
      ++used_;
      suppressed = dropped_;
      dropped_ = 0;
      return true;
    }
    ++dropped_;
    return false;
  }

 private:
  std::chrono::steady_clock::duration period_;
  uint32_t burst_;
  uint32_t used_ = 0;
  uint64_t dropped_ = 0;
  std::chrono::steady_clock::time_point window_start_{};
};

}  // namespace xdcr
