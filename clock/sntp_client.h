#pragma once
// An SNTP client (RFC 4330 / RFC 5905 client mode) on Boost.Asio UDP: several exchanges with one
// server, each checked (ntp_packet.h), keeping the minimum-delay sample — the one least
// disturbed by queueing, hence the most trustworthy offset (RFC 5905 §10 clock filter idea).
// Errors are values; nothing on this path throws.

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "clock/clock.h"
#include "clock/ntp_packet.h"
#include "common/error.h"

namespace xdcr::clock {

/** A wall clock in Unix ns. NTP needs sub-ms resolution, which Clock::nowMs() does not give. */
using WallClockNs = std::function<int64_t()>;

/** The host's CLOCK_REALTIME in ns. */
int64_t systemNowNs();
/**
 * Adapts an injected Clock. Its ms resolution is too coarse for loopback/LAN exchanges (a
 * sub-ms round trip can come out as a negative delay and be rejected): for tests that shift
 * time, not for measuring.
 */
WallClockNs wallClockFrom(const Clock& clock);

struct SntpOptions {
  int samples = 4;                          // exchanges per server
  std::chrono::milliseconds spacing{100};   // pause between exchanges (our own servers only)
  std::chrono::milliseconds timeout{1000};  // per exchange
  NtpCheckLimits limits;
  WallClockNs now_ns = systemNowNs;  // T1 and T4
};

struct SntpResult {
  std::string server;  // "host:port" as queried
  NtpSample best;      // minimum-delay valid sample
  int valid_samples = 0;
  std::vector<std::string> problems;  // one line per failed exchange (timeouts, rejections)
};

/** "host", "host:port", "[v6]:port" or a bare IPv6 address; port defaults to 123. */
struct HostPort {
  std::string host;
  uint16_t port = 123;
};
Result<HostPort> parseHostPort(const std::string& spec, uint16_t default_port = 123);

/**
 * Queries one server. Fails when no exchange gave a valid sample (message lists why), and at
 * once on a kiss-o'-death DENY/RSTR/RATE: the server asked us to stop or slow down, so we do not
 * send it the remaining requests (RFC 5905 §7.4).
 */
boost::asio::awaitable<Result<SntpResult>> querySntpServer(std::string server,
                                                           SntpOptions options = {});

}  // namespace xdcr::clock
