#pragma once
// The skew monitor: every clock.check_interval it measures this host against the NTP (or NTS)
// servers and every cluster against this host (Redis TIME), all concurrently, and publishes one
// ClockReport (skew.h). Pipelines apply clock.on_skew to it; /status, /metrics and
// `xdcr-agent clock` show it.
//
// Connections are kept between checks (one per cluster for TIME; NTS keys and cookies per
// server), so a check costs a few round trips, not handshakes. A cluster that cannot be reached
// keeps its last measured offset (clocks drift by ppm, not seconds) with the error attached; NTP
// without a majority is reported as such, never guessed.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "clock/skew.h"
#include "clock/sntp_client.h"
#include "common/notify.h"
#include "common/redis_conn.h"
#include "config/config.h"

namespace xdcr::clock {

class NtsClient;

struct SkewMonitorOptions {
  int ntp_samples = 4;
  std::chrono::milliseconds ntp_spacing{100};
  std::chrono::milliseconds ntp_timeout{1000};
  int time_samples = 8;
  std::chrono::milliseconds redis_timeout{2000};
  WallClockNs now_ns = systemNowNs;
};

class SkewMonitor {
 public:
  SkewMonitor(boost::asio::any_io_executor ex, config::ConfigConstSharedPtr config,
              SkewMonitorOptions options = {});
  ~SkewMonitor();

  /** Takes effect at the next check (SIGHUP). The run loop's interval changes after it. */
  void setConfig(config::ConfigConstSharedPtr config);
  /** Called on the executor after every check, with the new report. */
  void onReport(std::function<void(const ClockReport&)> listener) {
    listener_ = std::move(listener);
  }

  /** Checks at once, then every check_interval, until stop(). Never throws. */
  boost::asio::awaitable<void> run();
  void stop();
  /** Starts the next check now instead of at the end of the interval (after a reload). */
  void checkSoon() { wake_.notify(); }

  /** One complete check (NTP and all clusters, concurrently); updates latest(). */
  boost::asio::awaitable<ClockReport> checkOnce();
  const std::optional<ClockReport>& latest() const { return latest_; }

 private:
  void logChanges(const ClockReport& now) const;
  boost::asio::awaitable<NtpReport> checkNtp(const config::ClockConfig& clock);
  boost::asio::awaitable<void> checkCluster(const config::ClusterConfig& cluster,
                                            ClusterClockReport& out);

  boost::asio::any_io_executor ex_;
  config::ConfigConstSharedPtr config_;
  config::ConfigConstSharedPtr pending_config_;  // from setConfig(), applied by the next check
  SkewMonitorOptions options_;
  std::function<void(const ClockReport&)> listener_;
  std::optional<ClockReport> latest_;
  std::map<std::string, ClusterClockReport> clusters_;  // last known, kept across failures
  std::map<std::string, std::unique_ptr<RedisConnection>> connections_;
  std::map<std::string, std::unique_ptr<NtsClient>> nts_clients_;  // by server spec and CA
  uint64_t checks_ = 0;
  bool stopping_ = false;
  Notify wake_;
};

}  // namespace xdcr::clock
