#pragma once
// What the agent knows about clocks, and what that means for one pipeline
// (expiry-semantics.md §7). Plain data and pure functions: the skew monitor (skew_monitor.h)
// fills a ClockReport every clock.check_interval; pipelines, /status, /metrics and
// `xdcr-agent clock` read it.
//
// Signs, everywhere: an offset is "that clock minus this host's clock", positive = that clock is
// ahead. So with θ_ntp = NTP consensus − this host and θ_c = cluster c − this host:
//
//   this host against true time:   −θ_ntp
//   cluster c against true time:    θ_c − θ_ntp
//   pipeline skew Δ:                θ_target − θ_source   (independent of this host's clock)

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace xdcr::clock {

struct NtpServerReport {
  std::string server;          // as configured ("host[:port]")
  bool ok = false;             // gave a usable sample
  bool authenticated = false;  // NTS: every sample's authenticator verified
  int64_t offset_ns = 0;       // server − this host, of its minimum-delay sample
  int64_t delay_ns = 0;
  int stratum = 0;
  bool truechimer = false;  // inside the majority's intersection
  std::string error;        // why not ok
};

struct NtpReport {
  bool configured = false;  // clock.ntp_servers is not empty
  bool ok = false;          // a majority of the servers agreed
  int64_t offset_ns = 0;    // θ_ntp: consensus (median of truechimers) − this host
  int64_t low_ns = 0;       // the majority's intersection interval
  int64_t high_ns = 0;
  size_t truechimers = 0;
  std::string error;  // "no majority: …" or why no server answered; empty when ok
  std::vector<NtpServerReport> servers;

  /** This host against true time (−θ_ntp), when ok. */
  std::optional<int64_t> localErrorNs() const {
    return ok ? std::optional<int64_t>(-offset_ns) : std::nullopt;
  }
};

struct ClusterClockReport {
  std::string cluster;
  bool measured = false;  // an offset is known (possibly from an earlier check, see error)
  int64_t offset_ns = 0;  // θ_c: cluster − this host
  int64_t bound_ns = 0;   // |error of offset_ns| ≤ bound (RTT/2 of the kept TIME sample)
  int64_t rtt_ns = 0;
  /** The reading's own grain, within bound_ns (memcached's 1 s `STAT time`; 0 for Redis TIME):
   *  evaluateSkew widens max_skew by it, so a coarse clock alone never raises a skew alarm. */
  int64_t grain_ns = 0;
  int64_t measured_at_ms = 0;  // this host's wall clock when it was measured
  std::string error;           // the latest check's failure; empty when it succeeded
};

struct ClockReport {
  uint64_t check = 0;  // 1 for the first completed check, then 2, 3, …
  int64_t at_ms = 0;   // this host's wall clock when the check completed
  NtpReport ntp;
  std::map<std::string, ClusterClockReport> clusters;

  const ClusterClockReport* cluster(const std::string& name) const {
    auto it = clusters.find(name);
    return it == clusters.end() ? nullptr : &it->second;
  }
  /** Cluster against true time (θ_c − θ_ntp), when both are known. */
  std::optional<int64_t> clusterErrorNs(const std::string& name) const;
};

/** One pipeline's clocks against clock.max_skew. */
struct PipelineSkew {
  bool measured = false;         // both clusters' offsets are known
  int64_t source_offset_ns = 0;  // θ_source
  int64_t target_offset_ns = 0;  // θ_target
  int64_t delta_ns = 0;          // Δ = θ_target − θ_source
  bool exceeded = false;         // |Δ| or a cluster's error against NTP is over max_skew
  /** For logs and status: why exceeded, or why not measured; empty when within bounds. */
  std::string reason;
};

/**
 * Evaluates a pipeline from source to target. The comparison uses the point estimates: the
 * TIME bound is microseconds on a LAN, and the NTP interval is widened by the selection's
 * tolerance floor on purpose (ntp_selection.h), so adding it would flag skews well inside
 * max_skew.
 */
PipelineSkew evaluateSkew(const ClockReport& report, const std::string& source,
                          const std::string& target, int64_t max_skew_ns);

/** "+30.000 s", "-250 ms", "+12 µs": a signed duration for operators. */
std::string formatOffset(int64_t ns);

}  // namespace xdcr::clock
