#include "clock/ntp_packet.h"

#include <fmt/format.h>

namespace xdcr::clock {
namespace {

constexpr int64_t kTwo32 = int64_t{1} << 32;

void put32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}

void put64(uint8_t* p, uint64_t v) {
  put32(p, static_cast<uint32_t>(v >> 32));
  put32(p + 4, static_cast<uint32_t>(v));
}

uint32_t get32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

uint64_t get64(const uint8_t* p) {
  return (uint64_t{get32(p)} << 32) | get32(p + 4);
}

// Floor division: pre-1970 times must map to the previous second, not toward zero.
int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) {
    --q;
  }
  return q;
}

double seconds(int64_t ns) {
  return static_cast<double>(ns) / 1e9;
}

tl::unexpected<NtpRejection> reject(NtpReject r, std::string message, std::string kiss = {}) {
  return tl::unexpected<NtpRejection>(NtpRejection{r, std::move(kiss), std::move(message)});
}

}  // namespace

NtpBytes encodePacket(const NtpPacket& p) {
  NtpBytes b{};
  b[0] = static_cast<uint8_t>(((p.leap & 3) << 6) | ((p.version & 7) << 3) | (p.mode & 7));
  b[1] = p.stratum;
  b[2] = static_cast<uint8_t>(p.poll);
  b[3] = static_cast<uint8_t>(p.precision);
  put32(&b[4], p.root_delay);
  put32(&b[8], p.root_dispersion);
  put32(&b[12], p.reference_id);
  put64(&b[16], p.reference_ts);
  put64(&b[24], p.origin_ts);
  put64(&b[32], p.receive_ts);
  put64(&b[40], p.transmit_ts);
  return b;
}

Result<NtpPacket> decodePacket(std::span<const uint8_t> data) {
  if (data.size() < kNtpPacketSize) {
    return fail(Error::protocol(
        fmt::format("NTP packet too short: {} bytes, need {}", data.size(), kNtpPacketSize)));
  }
  const uint8_t* b = data.data();
  NtpPacket p;
  p.leap = b[0] >> 6;
  p.version = (b[0] >> 3) & 7;
  p.mode = b[0] & 7;
  p.stratum = b[1];
  p.poll = static_cast<int8_t>(b[2]);
  p.precision = static_cast<int8_t>(b[3]);
  p.root_delay = get32(b + 4);
  p.root_dispersion = get32(b + 8);
  p.reference_id = get32(b + 12);
  p.reference_ts = get64(b + 16);
  p.origin_ts = get64(b + 24);
  p.receive_ts = get64(b + 32);
  p.transmit_ts = get64(b + 40);
  return p;
}

NtpPacket makeClientRequest(uint64_t cookie) {
  NtpPacket p;
  p.leap = 0;
  p.version = 4;
  p.mode = kModeClient;
  p.transmit_ts = cookie;
  return p;
}

uint64_t unixNsToNtp(int64_t unix_ns) {
  int64_t s = floorDiv(unix_ns, kNsPerS);
  int64_t rem_ns = unix_ns - s * kNsPerS;  // [0, 1e9)
  // Round to the nearest 2^-32 s; rem_ns < 2^30, so the shift cannot overflow.
  uint64_t frac = (static_cast<uint64_t>(rem_ns) * (uint64_t{1} << 32) + kNsPerS / 2) / kNsPerS;
  if (frac == (uint64_t{1} << 32)) {
    frac = 0;
    ++s;
  }
  auto secs = static_cast<uint32_t>(static_cast<uint64_t>(s + kNtpUnixDeltaS));  // mod 2^32
  return (uint64_t{secs} << 32) | frac;
}

int64_t ntpToUnixNs(uint64_t ntp, int64_t pivot_unix_ns) {
  auto secs = static_cast<uint32_t>(ntp >> 32);
  uint64_t frac = ntp & 0xffffffffu;
  int64_t pivot_ntp_s = floorDiv(pivot_unix_ns, kNsPerS) + kNtpUnixDeltaS;  // not wrapped
  // The signed 32-bit difference picks the era nearest to the pivot (within ±2^31 s).
  auto diff = static_cast<int32_t>(secs - static_cast<uint32_t>(pivot_ntp_s));
  int64_t ntp_s = pivot_ntp_s + diff;
  auto frac_ns = static_cast<int64_t>((frac * kNsPerS + (uint64_t{1} << 31)) >> 32);
  return (ntp_s - kNtpUnixDeltaS) * kNsPerS + frac_ns;
}

int64_t ntpShortToNs(uint32_t v) {
  return static_cast<int64_t>((uint64_t{v} * kNsPerS + (1u << 15)) >> 16);
}

uint32_t nsToNtpShort(int64_t ns) {
  if (ns <= 0) {
    return 0;
  }
  uint64_t v = (static_cast<uint64_t>(ns) * 65536 + kNsPerS / 2) / kNsPerS;
  return v > 0xffffffffu ? 0xffffffffu : static_cast<uint32_t>(v);
}

const char* toString(NtpReject r) {
  switch (r) {
    case NtpReject::Malformed:
      return "malformed";
    case NtpReject::BadMode:
      return "bad mode";
    case NtpReject::BadVersion:
      return "bad version";
    case NtpReject::BogusOrigin:
      return "bogus origin";
    case NtpReject::KissOfDeath:
      return "kiss-o'-death";
    case NtpReject::Unsynchronised:
      return "unsynchronised";
    case NtpReject::ZeroTransmit:
      return "zero transmit timestamp";
    case NtpReject::RootDistance:
      return "root distance";
    case NtpReject::NegativeDelay:
      return "negative delay";
  }
  return "?";
}

std::string refIdText(uint32_t reference_id) {
  std::string s;
  for (int shift = 24; shift >= 0; shift -= 8) {
    auto c = static_cast<char>((reference_id >> shift) & 0xff);
    if (c == '\0') {
      continue;  // kiss codes and refclock names are NUL-padded
    }
    s.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  }
  return s;
}

tl::expected<NtpSample, NtpRejection> checkReply(std::span<const uint8_t> reply, uint64_t cookie,
                                                 int64_t t1_ns, int64_t t4_ns,
                                                 const NtpCheckLimits& limits) {
  auto decoded = decodePacket(reply);
  if (!decoded) {
    return reject(NtpReject::Malformed, decoded.error().message);
  }
  const NtpPacket& p = *decoded;
  if (p.mode != kModeServer) {
    return reject(NtpReject::BadMode,
                  fmt::format("not a server reply: mode {} (expected 4)", p.mode));
  }
  if (p.version != 3 && p.version != 4) {
    return reject(NtpReject::BadVersion,
                  fmt::format("unsupported NTP version {} (expected 3 or 4)", p.version));
  }
  // Before anything else is believed: a reply that does not echo our cookie was not sent in
  // answer to this request (spoofed, a duplicate, or a late answer to an earlier one).
  if (p.origin_ts != cookie) {
    return reject(NtpReject::BogusOrigin,
                  fmt::format("origin timestamp {:#018x} does not match our transmit timestamp "
                              "{:#018x}: bogus, stale or replayed reply",
                              p.origin_ts, cookie));
  }
  if (p.stratum == 0) {
    std::string code = refIdText(p.reference_id);
    return reject(NtpReject::KissOfDeath,
                  fmt::format("kiss-o'-death \"{}\" from the server{}", code,
                              code == "DENY" || code == "RSTR"
                                  ? ": access denied, stop querying it"
                                  : (code == "RATE" ? ": rate exceeded, query less often" : "")),
                  code);
  }
  if (p.leap == kLeapAlarm || p.stratum > kMaxStratum) {
    return reject(
        NtpReject::Unsynchronised,
        fmt::format("server not synchronised (leap indicator {}, stratum {})", p.leap, p.stratum));
  }
  if (p.transmit_ts == 0) {
    return reject(NtpReject::ZeroTransmit, "server sent a zero transmit timestamp");
  }
  NtpSample s;
  s.leap = p.leap;
  s.version = p.version;
  s.stratum = p.stratum;
  s.reference_id = p.reference_id;
  s.root_delay_ns = ntpShortToNs(p.root_delay);
  s.root_dispersion_ns = ntpShortToNs(p.root_dispersion);
  s.root_distance_ns = s.root_delay_ns / 2 + s.root_dispersion_ns;
  if (s.root_distance_ns > limits.max_root_distance_ns) {
    return reject(NtpReject::RootDistance,
                  fmt::format("server root distance {:.6f} s (root delay {:.6f} s / 2 + root "
                              "dispersion {:.6f} s) exceeds {:.3f} s: its own time is too poor",
                              seconds(s.root_distance_ns), seconds(s.root_delay_ns),
                              seconds(s.root_dispersion_ns), seconds(limits.max_root_distance_ns)));
  }
  // Our send time is the pivot: the server's era is the one nearest our clock.
  s.t1_ns = t1_ns;
  s.t4_ns = t4_ns;
  s.t2_ns = ntpToUnixNs(p.receive_ts, t1_ns);
  s.t3_ns = ntpToUnixNs(p.transmit_ts, t1_ns);
  s.offset_ns = ((s.t2_ns - s.t1_ns) + (s.t3_ns - s.t4_ns)) / 2;
  s.delay_ns = (s.t4_ns - s.t1_ns) - (s.t3_ns - s.t2_ns);
  if (s.delay_ns < 0) {
    return reject(NtpReject::NegativeDelay,
                  fmt::format("negative round-trip delay {:.6f} s: the server's receive and "
                              "transmit timestamps are inconsistent",
                              seconds(s.delay_ns)));
  }
  return s;
}

}  // namespace xdcr::clock
