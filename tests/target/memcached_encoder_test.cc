// The memcached meta-protocol encoding (target/memcached_encoder.h): keys (plain, base64, the
// 250-byte wire limit), the deadline decision (absolute T = ceil(E/1000), expired on arrival,
// the 2038 limit, the clamp), the size limit, and reply parsing.

#include "target/memcached_encoder.h"

#include <gtest/gtest.h>

#include "clock/memcached_time.h"
#include "clock/skew.h"

namespace xdcr::target::mc {
namespace {

constexpr int64_t kNow = 1'795'480'300'000;  // ms

TEST(MemcachedEncoder, PrintableKeysGoAsTheyAreOthersInBase64) {
  auto plain = wireKey("sess:1");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->text, "sess:1");
  EXPECT_FALSE(plain->base64);
  // 21 bytes: the literal's own terminating NUL is not part of the key.
  const std::string_view raw("bin\0key with spaces\r\n", 21);
  auto bin = wireKey(raw);
  ASSERT_TRUE(bin);
  EXPECT_TRUE(bin->base64);
  EXPECT_EQ(bin->text, "YmluAGtleSB3aXRoIHNwYWNlcw0K");  // seed-systems notes §1, measured
  EXPECT_EQ(decodeBase64(bin->text), std::string(raw));
  // A length that is not a multiple of 3 is padded (memcached 1.6.18 takes the padding).
  auto padded = wireKey(std::string_view("bin\0key with spaces\r\n", 22));
  ASSERT_TRUE(padded);
  EXPECT_EQ(padded->text, "YmluAGtleSB3aXRoIHNwYWNlcw0KAA==");
  EXPECT_EQ(decodeBase64(padded->text), std::string("bin\0key with spaces\r\n", 22));
}

TEST(MemcachedEncoder, KeyLimitIs250OnTheWire) {
  EXPECT_TRUE(wireKey(std::string(250, 'k')));
  EXPECT_FALSE(wireKey(std::string(251, 'k')));
  EXPECT_TRUE(wireKey(std::string(186, '\x01')));   // 248 base64 characters
  EXPECT_FALSE(wireKey(std::string(187, '\x01')));  // 252
  EXPECT_FALSE(wireKey(""));
}

TEST(MemcachedEncoder, DeadlinesAreAbsoluteSecondsRoundedUp) {
  auto f = finalDeadline(kNow + 1'500, 0, 0, kNow);
  EXPECT_EQ(f.kind, FinalDeadline::Kind::At);
  EXPECT_EQ(f.exptime_s, 1'795'480'302);  // ceil: never early
  f = finalDeadline(kNow + 2'000, 0, 0, kNow);
  EXPECT_EQ(f.exptime_s, 1'795'480'302);  // exact seconds stay
  // 29 and 31 days ahead: both absolute Unix seconds, far above the 30-day relative limit.
  f = finalDeadline(kNow + 29LL * 86'400'000, 0, 0, kNow);
  EXPECT_EQ(f.exptime_s, kNow / 1000 + 29 * 86'400);
  EXPECT_GT(f.exptime_s, 2'592'000);
  EXPECT_EQ(finalDeadline(0, 0, 0, kNow).kind, FinalDeadline::Kind::None);
}

TEST(MemcachedEncoder, PastDeadlinesAreExpiredOnArrival) {
  EXPECT_EQ(finalDeadline(kNow, 0, 0, kNow).kind, FinalDeadline::Kind::Expired);
  EXPECT_EQ(finalDeadline(kNow - 1, 0, 0, kNow).kind, FinalDeadline::Kind::Expired);
  EXPECT_EQ(finalDeadline(kNow + 1, 0, 0, kNow).kind, FinalDeadline::Kind::At);
}

TEST(MemcachedEncoder, DeadlinesPast2038AreRefusedNeverWrapped) {
  EXPECT_EQ(finalDeadline(2'147'483'647'000, 0, 0, kNow).kind, FinalDeadline::Kind::At);
  EXPECT_EQ(finalDeadline(2'147'483'647'000, 0, 0, kNow).exptime_s, 2'147'483'647);
  // 1 ms later rounds up to 2^31 s: memcached would wrap it.
  EXPECT_EQ(finalDeadline(2'147'483'647'001, 0, 0, kNow).kind, FinalDeadline::Kind::TooFar);
  EXPECT_EQ(finalDeadline(4'102'444'800'000, 0, 0, kNow).kind, FinalDeadline::Kind::TooFar);
  // The clamp brings it back into range: written.
  auto f = finalDeadline(4'102'444'800'000, 0, 600'000, kNow);
  EXPECT_EQ(f.kind, FinalDeadline::Kind::At);
  EXPECT_TRUE(f.clamped);
  EXPECT_EQ(f.exptime_s, (kNow + 600'000) / 1000);
}

TEST(MemcachedEncoder, ClampAndCompensation) {
  auto f = finalDeadline(0, 0, 60'000, kNow);  // no deadline + maxTTL: now + M
  EXPECT_EQ(f.ms, kNow + 60'000);
  EXPECT_TRUE(f.clamped);
  f = finalDeadline(kNow + 10'000, 30'000, 0, kNow);  // target 30 s ahead
  EXPECT_EQ(f.ms, kNow + 40'000);
  EXPECT_FALSE(f.clamped);
}

TEST(MemcachedEncoder, ValueLimitLeavesRoomForTheItemHeader) {
  // 1.6.18 with -I 1m stores 1048514 bytes under a 3-byte key, not one more.
  EXPECT_LE(maxValueSize(1 << 20, 3), 1'048'514u);
  EXPECT_GT(maxValueSize(1 << 20, 3), 1'048'400u);
  EXPECT_EQ(maxValueSize(10, 3), 0u);
}

TEST(MemcachedEncoder, Commands) {
  std::string out;
  appendSet(out, *wireKey("k"), "abc", 1'795'480'302);
  EXPECT_EQ(out, "ms k 3 T1795480302\r\nabc\r\n");
  out.clear();
  appendSet(out, *wireKey(std::string_view("\0", 1)), "", 0, kFlagDump);
  EXPECT_EQ(out, "ms AA== 0 T0 F1 b\r\n\r\n");
  out.clear();
  appendTouch(out, *wireKey("k"), 0);
  appendDelete(out, *wireKey("k"));
  appendGet(out, *wireKey("k"));
  EXPECT_EQ(out, "mg k T0\r\nmd k\r\nmg k v\r\n");
}

TEST(MemcachedEncoder, Replies) {
  Reply r;
  std::string error;
  EXPECT_EQ(parseReply("HD\r\nEN\r\n", r, error), 4u);
  EXPECT_EQ(r.kind, Reply::Kind::Ok);
  EXPECT_EQ(parseReply("VA 3 t100\r\nab", r, error), 0u);  // incomplete
  EXPECT_EQ(parseReply("VA 3 t100\r\nabc\r\n", r, error), 16u);
  EXPECT_EQ(r.kind, Reply::Kind::Value);
  EXPECT_EQ(r.value, "abc");
  EXPECT_EQ(flagValue(r.text, 't'), 100);
  EXPECT_EQ(parseReply("SERVER_ERROR out of memory\r\n", r, error), 28u);
  EXPECT_TRUE(r.isError());
  EXPECT_EQ(r.text, "out of memory");
  EXPECT_FALSE(parseReply("+OK\r\n", r, error));
  EXPECT_EQ(flagValue("t-1 s5", 't'), -1);
  EXPECT_EQ(flagValue("s5", 't'), std::nullopt);
}

TEST(MemcachedClock, StatTimeIsAOneSecondGrain) {
  EXPECT_EQ(clock::parseStatTime("STAT time 1795480840"), 1'795'480'840);
  EXPECT_EQ(clock::parseStatTime("STAT uptime 12"), std::nullopt);
  const int64_t t1 = 1'795'480'841'200'000'000;
  auto s = clock::memcachedSampleFrom(t1, 1'795'480'840, t1 + 1'000'000);
  // STAT time stands for t − 3 s .. t + 1 s: its middle (+1 s) against the exchange's midpoint,
  // the half-range (2 s) in the bound.
  EXPECT_EQ(s.offset_ns, 1'795'480'841'000'000'000 - (t1 + 500'000));
  EXPECT_EQ(s.bound_ns, 2'000'500'000);
}

TEST(MemcachedClock, TheGrainAloneRaisesNoSkewAlarm) {
  clock::ClockReport report;
  report.clusters["src"].cluster = "src";
  report.clusters["src"].measured = true;
  clock::ClusterClockReport mc;
  mc.cluster = "mc";
  mc.measured = true;
  mc.grain_ns = clock::kMemcachedGrainNs;
  mc.offset_ns = 1'200'000'000;  // within the 2 s grain + max_skew 500 ms
  report.clusters["mc"] = mc;
  EXPECT_FALSE(clock::evaluateSkew(report, "src", "mc", 500'000'000).exceeded);
  // Measured on a fresh machine's memcached, started at an unlucky sub-second phase, with its
  // clock right: +1.885 s (it failed the 1 s grain of before).
  report.clusters["mc"].offset_ns = 1'885'000'000;
  EXPECT_FALSE(clock::evaluateSkew(report, "src", "mc", 500'000'000).exceeded);
  report.clusters["mc"].offset_ns = 2'600'000'000;  // past the grain + max_skew
  EXPECT_TRUE(clock::evaluateSkew(report, "src", "mc", 500'000'000).exceeded);
  report.clusters["mc"].offset_ns = 30'000'000'000;
  auto skew = clock::evaluateSkew(report, "src", "mc", 500'000'000);
  EXPECT_TRUE(skew.exceeded);
  EXPECT_EQ(skew.delta_ns, 30'000'000'000);
  // Without the grain (a Redis TIME reading) 1.2 s is over max_skew.
  report.clusters["mc"].grain_ns = 0;
  report.clusters["mc"].offset_ns = 1'200'000'000;
  EXPECT_TRUE(clock::evaluateSkew(report, "src", "mc", 500'000'000).exceeded);
}

}  // namespace
}  // namespace xdcr::target::mc
