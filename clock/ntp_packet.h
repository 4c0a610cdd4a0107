#pragma once
// The NTPv4 packet (RFC 5905 §7.3, RFC 4330 §4): the 48-byte header without extension fields or
// MAC, the 64-bit timestamp format with era arithmetic (RFC 5905 §6), and the checks a client
// applies to a server's reply before trusting its timestamps (RFC 5905 §7.4, §8; RFC 4330 §5).
// Pure functions, no I/O: the SNTP client (sntp_client.h) and the unit tests share them.

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <tl/expected.hpp>

#include "common/error.h"

namespace xdcr::clock {

inline constexpr size_t kNtpPacketSize = 48;
/** Seconds from 1900-01-01 (NTP era 0) to 1970-01-01 (Unix epoch). */
inline constexpr int64_t kNtpUnixDeltaS = 2'208'988'800;
inline constexpr int64_t kNsPerS = 1'000'000'000;

inline constexpr uint8_t kModeClient = 3;
inline constexpr uint8_t kModeServer = 4;
inline constexpr uint8_t kLeapAlarm = 3;    // "clock unsynchronised"
inline constexpr uint8_t kMaxStratum = 15;  // 16 = unsynchronised

/** The 48-byte NTP header, fields as on the wire (timestamps raw 32.32, root values raw 16.16). */
struct NtpPacket {
  uint8_t leap = 0;
  uint8_t version = 4;
  uint8_t mode = kModeClient;
  uint8_t stratum = 0;
  int8_t poll = 0;
  int8_t precision = 0;
  uint32_t root_delay = 0;       // NTP short format, 16.16 seconds
  uint32_t root_dispersion = 0;  // NTP short format, 16.16 seconds
  uint32_t reference_id = 0;
  uint64_t reference_ts = 0;
  uint64_t origin_ts = 0;
  uint64_t receive_ts = 0;
  uint64_t transmit_ts = 0;

  bool operator==(const NtpPacket&) const = default;
};

using NtpBytes = std::array<uint8_t, kNtpPacketSize>;

NtpBytes encodePacket(const NtpPacket& p);
/** Decodes the header; extension fields / MAC after byte 48 are ignored. */
Result<NtpPacket> decodePacket(std::span<const uint8_t> data);

/**
 * A client request: LI 0, VN 4, mode 3, every field zero except the transmit timestamp, which
 * carries `cookie`. Like chrony we send a random value there instead of our clock: the server
 * echoes it as the origin timestamp, so it authenticates the reply against blind spoofing and
 * stale replies, and leaks nothing about our clock. T1 is kept locally instead.
 */
NtpPacket makeClientRequest(uint64_t cookie);

/** Unix time in ns → 64-bit NTP timestamp. The seconds wrap modulo 2^32 (the era is implicit). */
uint64_t unixNsToNtp(int64_t unix_ns);
/**
 * 64-bit NTP timestamp → Unix time in ns, in the era that puts it nearest to `pivot_unix_ns`
 * (RFC 5905 §6). With the local clock as pivot this is right across the 2036 rollover as long as
 * the two clocks differ by less than 68 years.
 */
int64_t ntpToUnixNs(uint64_t ntp, int64_t pivot_unix_ns);
/** NTP short format (16.16 seconds) → ns. */
int64_t ntpShortToNs(uint32_t v);
/** ns → NTP short format (saturating at 65535.99998 s; negative → 0). */
uint32_t nsToNtpShort(int64_t ns);

/** Why a reply was not used. */
enum class NtpReject {
  Malformed,       // shorter than 48 bytes
  BadMode,         // not mode 4 (server)
  BadVersion,      // not version 3 or 4
  BogusOrigin,     // origin timestamp != our transmit cookie: spoofed, stale or duplicated
  KissOfDeath,     // stratum 0: the server tells us to back off / go away (kiss_code)
  Unsynchronised,  // leap indicator 3 or stratum > 15
  ZeroTransmit,    // transmit timestamp 0: the server sent no time
  RootDistance,    // root_delay/2 + root_dispersion over the bound: the server's own time is poor
  NegativeDelay,   // inconsistent server timestamps (e.g. T2 and T3 from different clocks)
};

const char* toString(NtpReject r);

struct NtpRejection {
  NtpReject reason = NtpReject::Malformed;
  std::string kiss_code;  // "RATE", "DENY", "RSTR", … for KissOfDeath; empty otherwise
  std::string message;    // for an operator: what was wrong with the reply
};

/** One accepted exchange. Times are ns; offset positive = the server is ahead of us. */
struct NtpSample {
  int64_t t1_ns = 0;      // client transmit (our clock, Unix ns)
  int64_t t2_ns = 0;      // server receive (server clock, Unix ns)
  int64_t t3_ns = 0;      // server transmit (server clock, Unix ns)
  int64_t t4_ns = 0;      // client receive (our clock, Unix ns)
  int64_t offset_ns = 0;  // θ = ((T2 − T1) + (T3 − T4)) / 2
  int64_t delay_ns = 0;   // δ = (T4 − T1) − (T3 − T2)
  int64_t root_delay_ns = 0;
  int64_t root_dispersion_ns = 0;
  int64_t root_distance_ns = 0;  // root_delay/2 + root_dispersion (the server's own error)
  uint8_t leap = 0;
  uint8_t version = 0;
  uint8_t stratum = 0;
  uint32_t reference_id = 0;
};

struct NtpCheckLimits {
  /** RFC 5905 MAXDIST is 1 s; a little slack for the server's own root distance. */
  int64_t max_root_distance_ns = 1'500'000'000;
};

/**
 * Checks a reply to a request whose transmit field was `cookie`, sent at `t1_ns` and received
 * at `t4_ns` (both our wall clock, Unix ns), and computes offset and delay. The checks run in an
 * order that never lets an unauthenticated packet (wrong origin) influence us, e.g. a spoofed
 * kiss-o'-death.
 */
tl::expected<NtpSample, NtpRejection> checkReply(std::span<const uint8_t> reply, uint64_t cookie,
                                                 int64_t t1_ns, int64_t t4_ns,
                                                 const NtpCheckLimits& limits = {});

/** The 4 reference-ID bytes as text (kiss codes, refclock names); non-printables as '?'. */
std::string refIdText(uint32_t reference_id);

}  // namespace xdcr::clock
