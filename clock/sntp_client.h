#pragma once
// An SNTP client (RFC 4330 / RFC 5905 client mode) on Boost.Asio UDP: several exchanges with one
// server, each checked (ntp_packet.h), keeping the minimum-delay sample — the one least
// disturbed by queueing, hence the most trustworthy offset (RFC 5905 §10 clock filter idea).
// Errors are values; nothing on this path throws.

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/udp.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
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

/** Adds one valid sample, keeping the minimum-delay one as `best`. */
void addSample(SntpResult& result, const NtpSample& sample);
/** The problems of the failed exchanges as one line ("a; b; c"). */
std::string joinProblems(const std::vector<std::string>& problems);
/** A kiss-o'-death that tells us to stop or slow down (DENY, RSTR, RATE; RFC 5905 §7.4). */
bool isBackOffKiss(const NtpRejection& r);

/** "host", "host:port", "[v6]:port" or a bare IPv6 address; port defaults to 123. */
struct HostPort {
  std::string host;
  uint16_t port = 123;
};
Result<HostPort> parseHostPort(const std::string& spec, uint16_t default_port = 123);
/** "host:port", or "[v6]:port" for an IPv6 address. */
std::string formatHostPort(const std::string& host, uint16_t port);

/**
 * A UDP socket connected to `ep`, so that the kernel drops datagrams from other peers; each
 * call gets a fresh ephemeral port, so a late reply to an earlier request cannot arrive on it.
 */
Result<boost::asio::ip::udp::socket> openConnectedUdp(const boost::asio::any_io_executor& ex,
                                                      const boost::asio::ip::udp::endpoint& ep);
/** One datagram before `deadline`: its size, nullopt on timeout, or the receive error. */
boost::asio::awaitable<Result<std::optional<size_t>>> receiveBefore(
    boost::asio::ip::udp::socket& sock, boost::asio::mutable_buffer buf,
    std::chrono::steady_clock::time_point deadline);

/**
 * Queries one server. Fails when no exchange gave a valid sample (message lists why), and at
 * once on a kiss-o'-death DENY/RSTR/RATE: the server asked us to stop or slow down, so we do not
 * send it the remaining requests (RFC 5905 §7.4).
 */
boost::asio::awaitable<Result<SntpResult>> querySntpServer(std::string server,
                                                           SntpOptions options = {});

}  // namespace xdcr::clock
