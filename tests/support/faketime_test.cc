// The faketime'd redis-server of tests/support/faketime.h: Debian's redis-server under
// libfaketime (with the ftshim preload) really runs with a skewed wall clock, the skew can be
// changed while it runs, Redis' absolute deadlines follow the skewed clock, and it still stops on
// SIGTERM. Skipped when libfaketime is not installed (Debian package faketime).

#include "tests/support/faketime.h"

#include <gtest/gtest.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>

#include "tests/support/wait.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;

int64_t hostNowUs() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000 + ts.tv_nsec / 1000;
}

/** The server's clock minus the host's, in seconds, from the minimum-RTT of `samples` TIME
 * exchanges: offset = T_srv − (T1 + T4)/2 (clock-notes §9). */
double timeOffsetSeconds(RespClient& client, int samples = 10) {
  client.command({"TIME"});  // warm-up
  int64_t best_rtt = std::numeric_limits<int64_t>::max();
  int64_t best_offset = 0;
  for (int i = 0; i < samples; ++i) {
    const int64_t t1 = hostNowUs();
    RespValue r = client.command({"TIME"});
    const int64_t t4 = hostNowUs();
    if (!r.isArray() || r.array().size() != 2) {
      ADD_FAILURE() << "TIME answered " << r.toString();
      return std::nan("");
    }
    const int64_t srv = std::stoll(r.array()[0].str()) * 1'000'000 + std::stoll(r.array()[1].str());
    if (t4 - t1 < best_rtt) {
      best_rtt = t4 - t1;
      best_offset = srv - (t1 + t4) / 2;
    }
  }
  return static_cast<double>(best_offset) / 1e6;
}

TEST(FakeTimeTest, OffsetText) {
  EXPECT_EQ(fakeTimeOffsetText(30), "+30");
  EXPECT_EQ(fakeTimeOffsetText(-0.25), "-0.25");
  EXPECT_EQ(fakeTimeOffsetText(0), "+0");
  EXPECT_EQ(fakeTimeOffsetText(-0.0), "+0");
  EXPECT_EQ(fakeTimeOffsetText(-45), "-45");
  EXPECT_EQ(fakeTimeOffsetText(0.000001), "+0.000001");
  EXPECT_EQ(fakeTimeOffsetText(1.5), "+1.5");
}

TEST(FakeTimeTest, TimestampFileIsReplacedAtomically) {
  TempDir dir("xdcr-faketime-file");
  writeFakeTimeFile(dir.file("ft.rc"), 30);
  EXPECT_EQ(readFileText(dir.file("ft.rc")), "+30\n");
  writeFakeTimeFile(dir.file("ft.rc"), -0.25);
  EXPECT_EQ(readFileText(dir.file("ft.rc")), "-0.25\n");
  EXPECT_FALSE(std::filesystem::exists(dir.file("ft.rc.tmp")));
}

class FakeTimeRedisTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (libfaketimePath().empty()) {
      GTEST_SKIP() << "libfaketime not installed (Debian package faketime; "
                      "scripts/install-deps.sh --test)";
    }
    ASSERT_FALSE(ftshimPath().empty()) << "the xdcr_ftshim preload was not built";
  }
};

TEST_F(FakeTimeRedisTest, SkewedTimeRunTimeChangeExpiryAndCleanStop) {
  FakeTimeRedis redis(30);
  RespClient client = redis->client(5s);

  // TIME runs 30 s ahead of the host.
  const double ahead = timeOffsetSeconds(client);
  std::printf("TIME offset with skew +30: %+.6f s\n", ahead);
  EXPECT_NEAR(ahead, 30.0, 0.050) << "log:\n" << redis->logTail();

  // A deadline 10 s ahead of real time is 20 s in the past for this server: gone at once.
  const int64_t host_ms = hostNowUs() / 1000;
  EXPECT_EQ(client.command({"SET", "k", "v", "PXAT", std::to_string(host_ms + 10'000)}).str(),
            "OK");
  EXPECT_EQ(client.command({"EXISTS", "k"}).integer(), 0);
  // One 40 s ahead has ~10 s left on the skewed clock.
  EXPECT_EQ(client.command({"SET", "k2", "v", "PXAT", std::to_string(host_ms + 40'000)}).str(),
            "OK");
  const int64_t pttl = client.command({"PTTL", "k2"}).integer();
  EXPECT_GT(pttl, 9'000);
  EXPECT_LE(pttl, 10'050);

  // Changing the file changes the clock of the running server (a backward jump of 30.25 s).
  redis.setSkew(-0.25);
  EXPECT_EQ(readFileText(redis.timestampFile()), "-0.25\n");
  double behind = 0;
  EXPECT_TRUE(waitUntil(
      [&] {
        behind = timeOffsetSeconds(client, 5);
        return std::abs(behind + 0.25) < 0.050;
      },
      2s, 20ms))
      << "TIME offset " << behind << " s after setSkew(-0.25)";
  std::printf("TIME offset after setSkew(-0.25): %+.6f s\n", behind);
  EXPECT_NEAR(timeOffsetSeconds(client), -0.25, 0.050);
  // After the backward jump the server's timers (monotonic, not faked) still run: a short key
  // expires by itself (active expiry) and is not kept until the clock catches up.
  EXPECT_EQ(client.command({"SET", "short", "v", "PX", "100"}).str(), "OK");
  EXPECT_TRUE(waitUntil(
      [&] {
        return client.command({"DBSIZE"}).integer() == 1;  // only k2 (PXAT +40 s) is left
      },
      3s, 50ms))
      << "the PX 100 key was not expired; INFO keyspace: "
      << client.command({"INFO", "keyspace"}).str();

  // And back to no skew.
  redis.setSkew(0);
  EXPECT_NEAR(timeOffsetSeconds(client), 0.0, 0.050);

  // SIGTERM stops it (shutdown runs from serverCron, which a faked monotonic clock would stall).
  const auto start = std::chrono::steady_clock::now();
  ExitStatus st = redis->stop(10s);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(st.success()) << st.describe() << "\nlog:\n" << redis->logTail();
  EXPECT_FALSE(st.forced);
  EXPECT_LT(took, 3s);
}

TEST_F(FakeTimeRedisTest, NegativeSkewAndPlainServerSideBySide) {
  // Two skewed servers and a plain one at the same time: the preload reaches only its child.
  FakeTimeRedis behind(-45);
  FakeTimeRedis ahead(0.5);
  RedisServer plain;
  RespClient b = behind->client(5s);
  RespClient a = ahead->client(5s);
  RespClient p = plain.client(5s);
  const double ob = timeOffsetSeconds(b), oa = timeOffsetSeconds(a), op = timeOffsetSeconds(p);
  std::printf("TIME offsets: skew -45 %+.6f s, skew +0.5 %+.6f s, plain %+.6f s\n", ob, oa, op);
  EXPECT_NEAR(ob, -45.0, 0.050);
  EXPECT_NEAR(oa, 0.5, 0.050);
  EXPECT_NEAR(op, 0.0, 0.050);
  // The DB-to-DB skew, measured from here, is the difference of the two offsets.
  EXPECT_NEAR(timeOffsetSeconds(a) - timeOffsetSeconds(b), 45.5, 0.050);
  EXPECT_TRUE(behind->stop().success()) << behind->logTail();
  EXPECT_TRUE(ahead->stop().success()) << ahead->logTail();
}

}  // namespace
}  // namespace xdcr::test
