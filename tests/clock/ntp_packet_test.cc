// The NTP packet codec, timestamp era arithmetic and every reply check, on fixed packets.

#include "clock/ntp_packet.h"

#include <gtest/gtest.h>

namespace xdcr::clock {
namespace {

constexpr int64_t kMs = 1'000'000;
// 2036-02-07 06:28:16 UTC: NTP era 0 ends, the 32-bit seconds wrap to 0.
constexpr int64_t kRolloverUnixS = (int64_t{1} << 32) - kNtpUnixDeltaS;

TEST(clock_NtpPacket, ClientRequestByteLayout) {
  NtpBytes b = encodePacket(makeClientRequest(0x0123456789abcdefULL));
  EXPECT_EQ(b[0], 0x23);  // LI 0, VN 4, mode 3
  for (size_t i = 1; i < 40; ++i) {
    EXPECT_EQ(b[i], 0) << "byte " << i;
  }
  const uint8_t cookie[8] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(b[40 + i], cookie[i]) << "transmit byte " << i;
  }
}

TEST(clock_NtpPacket, DecodesAFixedServerReply) {
  // LI 1, VN 3, mode 4; stratum 2; poll 6; precision -20; root delay 1.5 s; root dispersion
  // 0.25 s; refid 127.127.1.1; four distinct timestamps.
  const NtpBytes wire = {0x5c, 0x02, 0x06, 0xec, 0x00, 0x01, 0x80, 0x00, 0x00, 0x00, 0x40, 0x00,
                         0x7f, 0x7f, 0x01, 0x01, 0xe9, 0x00, 0x00, 0x01, 0x80, 0x00, 0x00, 0x00,
                         0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0xe9, 0x00, 0x00, 0x02,
                         0x00, 0x00, 0x00, 0x01, 0xe9, 0x00, 0x00, 0x03, 0xff, 0xff, 0xff, 0xff};
  auto p = decodePacket(wire);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->leap, 1);
  EXPECT_EQ(p->version, 3);
  EXPECT_EQ(p->mode, 4);
  EXPECT_EQ(p->stratum, 2);
  EXPECT_EQ(p->poll, 6);
  EXPECT_EQ(p->precision, -20);
  EXPECT_EQ(ntpShortToNs(p->root_delay), 1'500'000'000);
  EXPECT_EQ(ntpShortToNs(p->root_dispersion), 250'000'000);
  EXPECT_EQ(p->reference_id, 0x7f7f0101u);
  EXPECT_EQ(p->reference_ts, 0xe900000180000000ULL);
  EXPECT_EQ(p->origin_ts, 0x1122334455667788ULL);
  EXPECT_EQ(p->receive_ts, 0xe900000200000001ULL);
  EXPECT_EQ(p->transmit_ts, 0xe9000003ffffffffULL);
  EXPECT_EQ(encodePacket(*p), wire);  // and back, byte for byte
}

TEST(clock_NtpPacket, RoundTripsEveryField) {
  NtpPacket p;
  p.leap = 2;
  p.version = 4;
  p.mode = 4;
  p.stratum = 15;
  p.poll = -3;
  p.precision = -29;
  p.root_delay = 0xdeadbeef;
  p.root_dispersion = 0x00000001;
  p.reference_id = 0x52415445;
  p.reference_ts = 1;
  p.origin_ts = ~uint64_t{0};
  p.receive_ts = 0x8000000000000000ULL;
  p.transmit_ts = 0x0123456789abcdefULL;
  auto d = decodePacket(encodePacket(p));
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(*d, p);
}

TEST(clock_NtpPacket, ShortPacketIsAnError) {
  std::array<uint8_t, 47> b{};
  auto p = decodePacket(b);
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().message.find("too short"), std::string::npos);
}

TEST(clock_NtpPacket, UnixNtpConversion) {
  EXPECT_EQ(unixNsToNtp(0), uint64_t{kNtpUnixDeltaS} << 32);
  EXPECT_EQ(unixNsToNtp(1'500'000'000), ((uint64_t{kNtpUnixDeltaS} + 1) << 32) | 0x80000000u);
  // Before 1970: floor, not truncation toward zero.
  EXPECT_EQ(unixNsToNtp(-500'000'000), ((uint64_t{kNtpUnixDeltaS} - 1) << 32) | 0x80000000u);
  const int64_t now = 1'795'000'000'123'456'789;  // 2026
  for (int64_t t : {now, now + 999'999'999, int64_t{0}, int64_t{-1}, int64_t{1}}) {
    EXPECT_NEAR(ntpToUnixNs(unixNsToNtp(t), t), t, 1) << t;
  }
  EXPECT_EQ(ntpShortToNs(nsToNtpShort(250'000'000)), 250'000'000);
  EXPECT_EQ(nsToNtpShort(-5), 0u);
}

TEST(clock_NtpPacket, EraJustAfterRolloverWithPivotBefore) {
  // The server stamps 5 s after the rollover (seconds field 5, era 1); our clock, the pivot, is
  // still 10 s before it. The nearest era is 1, not 1900 + 5 s.
  const uint64_t ts = (uint64_t{5} << 32) | 0x40000000u;  // +0.25 s
  const int64_t pivot = (kRolloverUnixS - 10) * kNsPerS;
  EXPECT_EQ(ntpToUnixNs(ts, pivot), (kRolloverUnixS + 5) * kNsPerS + 250'000'000);
  EXPECT_EQ(unixNsToNtp((kRolloverUnixS + 5) * kNsPerS + 250'000'000), ts);
}

TEST(clock_NtpPacket, EraJustBeforeRolloverWithPivotAfter) {
  const uint64_t ts = uint64_t{0xfffffff6u} << 32;  // 10 s before the rollover, era 0
  const int64_t pivot = (kRolloverUnixS + 5) * kNsPerS;
  EXPECT_EQ(ntpToUnixNs(ts, pivot), (kRolloverUnixS - 10) * kNsPerS);
  EXPECT_EQ(unixNsToNtp((kRolloverUnixS - 10) * kNsPerS), ts);
}

TEST(clock_NtpPacket, EraFarFromTheRollover) {
  // 2026 (era 0) with a 2026 pivot, and 2100 (era 1) with a 2100 pivot.
  const int64_t t2026 = 1'795'000'000 * kNsPerS;
  const int64_t t2100 = 4'102'444'800 * kNsPerS;
  EXPECT_EQ(ntpToUnixNs(unixNsToNtp(t2026), t2026 + 3600 * kNsPerS), t2026);
  EXPECT_EQ(ntpToUnixNs(unixNsToNtp(t2100), t2100 - 3600 * kNsPerS), t2100);
  EXPECT_EQ(unixNsToNtp(t2100) >> 32,
            uint64_t(4'102'444'800 + kNtpUnixDeltaS - (int64_t{1} << 32)));
}

TEST(clock_NtpPacket, RefIdText) {
  EXPECT_EQ(refIdText(0x52415445), "RATE");
  EXPECT_EQ(refIdText(0x47505300), "GPS");
  EXPECT_EQ(refIdText(0x7f7f0101), "????");  // an IPv4 refid is not text
}

// A reply to `cookie` from a server `offset` ahead: T1 at t1, 1 ms each way, 100 µs in the server.
struct Crafted {
  uint64_t cookie = 0x1234567890abcdefULL;
  int64_t t1 = 1'795'000'000 * kNsPerS;
  int64_t t4 = 0;
  NtpPacket reply;
};

Crafted craft(int64_t offset_ns, int64_t t1 = 1'795'000'000 * kNsPerS) {
  Crafted c;
  c.t1 = t1;
  c.reply.leap = 0;
  c.reply.version = 4;
  c.reply.mode = kModeServer;
  c.reply.stratum = 8;
  c.reply.reference_id = 0x7f7f0101;
  c.reply.origin_ts = c.cookie;
  c.reply.receive_ts = unixNsToNtp(t1 + kMs + offset_ns);
  c.reply.transmit_ts = unixNsToNtp(t1 + kMs + 100'000 + offset_ns);
  c.reply.reference_ts = c.reply.receive_ts;
  c.t4 = t1 + 2 * kMs + 100'000;
  return c;
}

tl::expected<NtpSample, NtpRejection> check(const Crafted& c, const NtpCheckLimits& l = {}) {
  NtpBytes b = encodePacket(c.reply);
  return checkReply(b, c.cookie, c.t1, c.t4, l);
}

TEST(clock_NtpPacket, AcceptsAGoodReplyAndComputesOffsetAndDelay) {
  for (int64_t offset : {int64_t{0}, 30 * kNsPerS, -45 * kNsPerS, 250 * kMs, int64_t{-3}}) {
    auto s = check(craft(offset));
    ASSERT_TRUE(s.has_value()) << s.error().message;
    EXPECT_NEAR(s->offset_ns, offset, 2) << offset;
    EXPECT_NEAR(s->delay_ns, 2 * kMs, 2);
    EXPECT_EQ(s->stratum, 8);
  }
}

TEST(clock_NtpPacket, OffsetAcrossTheRollover) {
  // Our clock 1 s before the rollover, the server 30 s ahead, already in era 1.
  auto c = craft(30 * kNsPerS, (kRolloverUnixS - 1) * kNsPerS);
  EXPECT_LT(c.reply.transmit_ts >> 32, 100u);
  auto s = check(c);
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_NEAR(s->offset_ns, 30 * kNsPerS, 2);
  // And the reverse: our clock in era 1, the server 30 s behind in era 0.
  auto c2 = craft(-30 * kNsPerS, (kRolloverUnixS + 1) * kNsPerS);
  EXPECT_GT(c2.reply.transmit_ts >> 32, 0xffff0000u);
  auto s2 = check(c2);
  ASSERT_TRUE(s2.has_value()) << s2.error().message;
  EXPECT_NEAR(s2->offset_ns, -30 * kNsPerS, 2);
}

void expectReject(const tl::expected<NtpSample, NtpRejection>& r, NtpReject reason,
                  const std::string& needle) {
  ASSERT_FALSE(r.has_value()) << "accepted, expected " << toString(reason);
  EXPECT_EQ(r.error().reason, reason) << r.error().message;
  EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().message;
}

TEST(clock_NtpPacket, RejectsShortReply) {
  auto c = craft(0);
  NtpBytes b = encodePacket(c.reply);
  auto r = checkReply(std::span<const uint8_t>(b.data(), 40), c.cookie, c.t1, c.t4);
  expectReject(r, NtpReject::Malformed, "too short");
}

TEST(clock_NtpPacket, RejectsWrongMode) {
  for (uint8_t mode : {1, 2, 3, 5, 6, 7}) {
    auto c = craft(0);
    c.reply.mode = mode;
    expectReject(check(c), NtpReject::BadMode, "mode");
  }
}

TEST(clock_NtpPacket, AcceptsVersion3RejectsOthers) {
  auto c = craft(0);
  c.reply.version = 3;
  EXPECT_TRUE(check(c).has_value());
  for (uint8_t v : {0, 1, 2, 5, 7}) {
    c.reply.version = v;
    expectReject(check(c), NtpReject::BadVersion, "version");
  }
}

TEST(clock_NtpPacket, RejectsOriginMismatch) {
  auto c = craft(0);
  c.reply.origin_ts = c.cookie ^ 1;  // one bit off: a stale or spoofed reply
  expectReject(check(c), NtpReject::BogusOrigin, "does not match");
  c.reply.origin_ts = 0;
  expectReject(check(c), NtpReject::BogusOrigin, "bogus");
}

TEST(clock_NtpPacket, OriginCheckComesBeforeKissOfDeath) {
  // A spoofed DENY must not make us drop a server.
  auto c = craft(0);
  c.reply.stratum = 0;
  c.reply.reference_id = 0x44454e59;  // "DENY"
  c.reply.origin_ts = 42;
  expectReject(check(c), NtpReject::BogusOrigin, "origin");
}

TEST(clock_NtpPacket, KissOfDeathReturnsTheCode) {
  for (auto [id, code] : {std::pair<uint32_t, const char*>{0x52415445, "RATE"},
                          {0x44454e59, "DENY"},
                          {0x52535452, "RSTR"},
                          {0x494e4954, "INIT"}}) {
    auto c = craft(0);
    c.reply.stratum = 0;
    c.reply.reference_id = id;
    auto r = check(c);
    expectReject(r, NtpReject::KissOfDeath, code);
    EXPECT_EQ(r.error().kiss_code, code);
  }
}

TEST(clock_NtpPacket, RejectsUnsynchronisedServer) {
  auto c = craft(0);
  c.reply.leap = 3;
  expectReject(check(c), NtpReject::Unsynchronised, "leap indicator 3");
  c.reply.leap = 0;
  c.reply.stratum = 16;
  expectReject(check(c), NtpReject::Unsynchronised, "stratum 16");
  c.reply.stratum = 15;
  EXPECT_TRUE(check(c).has_value());
  // chronyd before it is synchronised: LI 3, stratum 0, refid 0 -> a kiss code of "", which is
  // still unusable.
  c.reply.leap = 3;
  c.reply.stratum = 0;
  c.reply.reference_id = 0;
  EXPECT_FALSE(check(c).has_value());
}

TEST(clock_NtpPacket, RejectsZeroTransmitTimestamp) {
  auto c = craft(0);
  c.reply.transmit_ts = 0;
  expectReject(check(c), NtpReject::ZeroTransmit, "zero transmit");
}

TEST(clock_NtpPacket, RejectsLargeRootDistance) {
  auto c = craft(0);
  c.reply.root_delay = nsToNtpShort(2 * kNsPerS);     // 1 s of it counts
  c.reply.root_dispersion = nsToNtpShort(400 * kMs);  // 1.4 s: fine
  ASSERT_TRUE(check(c).has_value());
  EXPECT_NEAR(check(c)->root_distance_ns, 1'400 * kMs, 100'000);
  c.reply.root_dispersion = nsToNtpShort(600 * kMs);  // 1.6 s: too far
  expectReject(check(c), NtpReject::RootDistance, "root distance");
  NtpCheckLimits strict;
  strict.max_root_distance_ns = 100 * kMs;
  c.reply.root_delay = 0;
  c.reply.root_dispersion = nsToNtpShort(150 * kMs);
  expectReject(check(c, strict), NtpReject::RootDistance, "exceeds 0.100 s");
}

TEST(clock_NtpPacket, RejectsNegativeDelay) {
  // The faketime'd server of clock-notes §2/§3.1: T2 real, T3 shifted by +0.5 s.
  auto c = craft(0);
  c.reply.transmit_ts = unixNsToNtp(c.t1 + kMs + 500 * kMs);
  expectReject(check(c), NtpReject::NegativeDelay, "negative round-trip delay");
}

}  // namespace
}  // namespace xdcr::clock
