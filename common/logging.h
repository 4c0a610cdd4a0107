#pragma once
// Logging: spdlog to stderr, as text for a terminal or JSON lines for machines (interface.md §5).
// Every module logs through spdlog's default logger; `setupLogging()` is called once by main.

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace xdcr {

enum class LogFormat { Text, Json };

/** Installs the default logger. `level` is trace|debug|info|warn|error. */
void setupLogging(std::string_view level, LogFormat format);

/**
 * What a log line is about, read from the prefixes every message of the agent starts with
 * ("pipeline NAME: ", "pipelines A, B: ", "source|target CLUSTER (ADDRESS)", "node HOST:PORT",
 * `key "…"`; a Redis Cluster source's instance NAME@SHARD). JSON lines carry them as fields
 * (interface.md §5), so a log system can select one pipeline, cluster, shard or key.
 */
struct LogFields {
  std::vector<std::string> pipelines;  // one, or the pipelines of a shared link
  std::string shard;                   // the source shard (NAME@SHARD)
  std::string cluster;                 // the cluster named after "source " or "target "
  std::string cluster_role;            // "source" or "target"
  std::string node;                    // host:port of the node
  std::string key;                     // a key the line is about (escapes kept as logged)
};
LogFields parseLogFields(std::string_view msg);

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
