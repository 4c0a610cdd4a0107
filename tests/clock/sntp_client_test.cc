// The SNTP client against in-process fake NTP servers on 127.0.0.1 (a thread with a blocking UDP
// socket): offsets measured, the minimum-delay sample kept, bogus replies skipped, kiss-o'-death
// and silence reported.

#include "clock/sntp_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/udp.hpp>
#include <thread>

#include "tests/support/run_sync.h"

namespace xdcr::clock {
namespace {

namespace net = boost::asio;
constexpr int64_t kMs = 1'000'000;
constexpr int64_t kS = 1'000'000'000;

/** What the fake server does with request number `n` (0-based). */
struct Behaviour {
  int64_t offset_ns = 0;  // served time = host time + offset
  int slow_replies = 0;   // the first N replies wait `slow_by` between T2 and sending
  std::chrono::milliseconds slow_by{0};
  bool kiss_deny = false;
  bool silent = false;
  bool bogus_first = false;  // send a reply with a wrong origin before the real one
};

class FakeNtpServer {
 public:
  explicit FakeNtpServer(Behaviour b)
      : b_(b), sock_(io_, net::ip::udp::endpoint(net::ip::make_address("127.0.0.1"), 0)) {
    thread_ = std::thread([this] { run(); });
  }
  ~FakeNtpServer() {
    stop_ = true;
    boost::system::error_code ec;
    // Wake the blocking receive with a datagram to ourselves.
    net::ip::udp::socket s(io_, net::ip::udp::v4());
    char x = 0;
    s.send_to(net::buffer(&x, 1), sock_.local_endpoint(), 0, ec);
    thread_.join();
  }
  std::string address() const {
    return "127.0.0.1:" + std::to_string(sock_.local_endpoint().port());
  }
  int requests() const { return requests_.load(); }

 private:
  void run() {
    for (;;) {
      std::array<uint8_t, 512> buf{};
      net::ip::udp::endpoint peer;
      boost::system::error_code ec;
      size_t n = sock_.receive_from(net::buffer(buf), peer, 0, ec);
      if (stop_ || ec) {
        return;
      }
      int64_t t2 = systemNowNs() + b_.offset_ns;
      auto req = decodePacket(std::span<const uint8_t>(buf.data(), n));
      if (!req) {
        continue;
      }
      int k = requests_++;
      if (b_.silent) {
        continue;
      }
      NtpPacket r;
      r.version = 4;
      r.mode = kModeServer;
      r.stratum = 8;
      r.precision = -25;
      r.reference_id = 0x7f7f0101;
      r.origin_ts = req->transmit_ts;
      r.receive_ts = unixNsToNtp(t2);
      r.reference_ts = r.receive_ts;
      if (b_.kiss_deny) {
        r.stratum = 0;
        r.reference_id = 0x44454e59;
      }
      bool slow = k < b_.slow_replies;
      if (slow) {
        std::this_thread::sleep_for(b_.slow_by);
      }
      if (b_.bogus_first) {
        NtpPacket bogus = r;
        bogus.origin_ts = req->transmit_ts + 1;
        bogus.transmit_ts = unixNsToNtp(systemNowNs() + 1000 * kS);  // would be a huge offset
        sock_.send_to(net::buffer(encodePacket(bogus)), peer, 0, ec);
      }
      r.transmit_ts = slow ? r.receive_ts : unixNsToNtp(systemNowNs() + b_.offset_ns);
      sock_.send_to(net::buffer(encodePacket(r)), peer, 0, ec);
    }
  }

  Behaviour b_;
  net::io_context io_;
  net::ip::udp::socket sock_;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::thread thread_;
};

Result<SntpResult> runQuery(const std::string& server, SntpOptions opt) {
  return test::runSync(querySntpServer(server, std::move(opt)));
}

SntpOptions fast() {
  SntpOptions o;
  o.spacing = std::chrono::milliseconds(10);
  o.timeout = std::chrono::milliseconds(500);
  return o;
}

TEST(clock_SntpClient, MeasuresAnHonestServer) {
  FakeNtpServer srv({});
  auto r = runQuery(srv.address(), fast());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->valid_samples, 4);
  EXPECT_EQ(srv.requests(), 4);
  EXPECT_LT(std::abs(r->best.offset_ns), 5 * kMs);
  EXPECT_GE(r->best.delay_ns, 0);
  EXPECT_LT(r->best.delay_ns, 50 * kMs);
  EXPECT_EQ(r->best.stratum, 8);
  EXPECT_TRUE(r->problems.empty());
}

TEST(clock_SntpClient, MeasuresASkewedServer) {
  FakeNtpServer ahead({.offset_ns = 30 * kS});
  auto r = runQuery(ahead.address(), fast());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_NEAR(static_cast<double>(r->best.offset_ns), 30.0 * kS, 5.0 * kMs);
  FakeNtpServer behind({.offset_ns = -250 * kMs});
  auto r2 = runQuery(behind.address(), fast());
  ASSERT_TRUE(r2.has_value()) << r2.error().message;
  EXPECT_NEAR(static_cast<double>(r2->best.offset_ns), -250.0 * kMs, 5.0 * kMs);
}

TEST(clock_SntpClient, UsesTheInjectedWallClock) {
  // Our clock 10 s fast: the (honest) server appears 10 s behind.
  FakeNtpServer srv({});
  SntpOptions o = fast();
  o.now_ns = [] { return systemNowNs() + 10 * kS; };
  auto r = runQuery(srv.address(), o);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_NEAR(static_cast<double>(r->best.offset_ns), -10.0 * kS, 5.0 * kMs);
}

TEST(clock_SntpClient, AdaptsAClockInMs) {
  // Only the unit conversion: a ms clock is too coarse for real exchanges (T4 − T1 of 0 ms
  // against a server hold of some µs gives a negative delay, which is rejected).
  SimulatedClock sim(1'795'000'000'123);
  WallClockNs now = wallClockFrom(sim);
  EXPECT_EQ(now(), 1'795'000'000'123 * kMs);
  sim.advance(5);
  EXPECT_EQ(now(), 1'795'000'000'128 * kMs);
}

TEST(clock_SntpClient, KeepsTheMinimumDelaySample) {
  // The first two replies are held 40 ms after T2 but stamped T3 = T2, i.e. the hold looks like
  // path delay (δ ≈ 40 ms) and skews their offset by ≈ 20 ms: exactly the samples to discard.
  Behaviour b;
  b.slow_replies = 2;
  b.slow_by = std::chrono::milliseconds(40);
  FakeNtpServer srv(b);
  auto r = runQuery(srv.address(), fast());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->valid_samples, 4);
  EXPECT_LT(r->best.delay_ns, 20 * kMs);
  EXPECT_LT(std::abs(r->best.offset_ns), 5 * kMs);
}

TEST(clock_SntpClient, SkipsABogusReplyAndTakesTheRealOne) {
  FakeNtpServer srv({.bogus_first = true});
  SntpOptions o = fast();
  o.samples = 2;
  auto r = runQuery(srv.address(), o);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->valid_samples, 2);
  EXPECT_LT(std::abs(r->best.offset_ns), 5 * kMs);  // not the bogus +1000 s
}

TEST(clock_SntpClient, KissOfDeathDenyStopsAtOnce) {
  FakeNtpServer srv({.kiss_deny = true});
  auto r = runQuery(srv.address(), fast());
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().kind, Error::Kind::Refused);
  EXPECT_NE(r.error().message.find("DENY"), std::string::npos) << r.error().message;
  EXPECT_EQ(srv.requests(), 1);
}

TEST(clock_SntpClient, SilentServerTimesOut) {
  FakeNtpServer srv({.silent = true});
  SntpOptions o = fast();
  o.samples = 2;
  o.timeout = std::chrono::milliseconds(100);
  auto start = std::chrono::steady_clock::now();
  auto r = runQuery(srv.address(), o);
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().kind, Error::Kind::Io);
  EXPECT_NE(r.error().message.find("no valid reply within 100 ms"), std::string::npos)
      << r.error().message;
  EXPECT_LT(took, std::chrono::seconds(2));
}

TEST(clock_SntpClient, ParsesHostPort) {
  auto a = parseHostPort("127.0.0.1");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 123);
  auto b = parseHostPort("localhost:11123");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->host, "localhost");
  EXPECT_EQ(b->port, 11123);
  auto c = parseHostPort("[::1]:4460");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->host, "::1");
  EXPECT_EQ(c->port, 4460);
  auto d = parseHostPort("::1");
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->host, "::1");
  EXPECT_EQ(d->port, 123);
  for (const char* bad : {"host:", "host:0", "host:70000", "host:12x", ":123", "[::1", "[::1]x"}) {
    EXPECT_FALSE(parseHostPort(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace xdcr::clock
