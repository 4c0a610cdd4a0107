#pragma once
// Selecting across NTP servers (RFC 5905 §11.2.1, after Marzullo): each server's best sample
// gives a correctness interval [θ − λ, θ + λ] that should contain the true offset; the largest
// group of servers whose intervals share a point, if it is a majority, are the truechimers, the
// others falsetickers. The estimate is the median of the truechimers' offsets. Without a
// majority there is no estimate: the caller is told so rather than handed a guess.

#include <cstdint>
#include <span>
#include <string>
#include <tl/expected.hpp>
#include <vector>

#include "common/error.h"

namespace xdcr::clock {

/** One server's best (minimum-delay) sample. */
struct ServerSample {
  std::string name;  // "host:port", for reports
  int64_t offset_ns = 0;
  int64_t delay_ns = 0;
  int64_t root_distance_ns = 0;  // root_delay/2 + root_dispersion
};

struct SelectionParams {
  /**
   * Lower bound of every interval's half-width λ. On a LAN or loopback δ and the root distance
   * are microseconds, so servers a few ms apart (harmless for expiry) would all look like
   * falsetickers (clock-notes §4); the floor makes "agree within the tolerance" count.
   */
  int64_t tolerance_ns = 50'000'000;
  /**
   * Servers asked, including those that gave no usable sample; the majority is of these. 0 =
   * the number of samples. Silent servers thus never help a minority win.
   */
  size_t servers_queried = 0;
};

struct ServerVerdict {
  std::string name;
  int64_t offset_ns = 0;
  int64_t lambda_ns = 0;  // half-width: max(δ/2 + root distance, tolerance)
  bool truechimer = false;
};

struct Selection {
  int64_t offset_ns = 0;  // median of the truechimers' offsets
  int64_t low_ns = 0;     // intersection interval [low, high]
  int64_t high_ns = 0;
  size_t truechimers = 0;
  std::vector<ServerVerdict> servers;  // same order as the input
};

struct SelectionFailure {
  std::string message;                 // "no majority: …", for an operator
  std::vector<ServerVerdict> servers;  // intervals, all marked not truechimer
};

/** λ for one sample: δ/2 + root distance, floored by the tolerance. */
int64_t correctnessHalfWidth(const ServerSample& s, int64_t tolerance_ns);

tl::expected<Selection, SelectionFailure> selectServers(std::span<const ServerSample> samples,
                                                        const SelectionParams& params = {});

}  // namespace xdcr::clock
